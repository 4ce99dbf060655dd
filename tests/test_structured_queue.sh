#!/usr/bin/env bash
# test_structured_queue.sh - output constraints through RabbitMQ (tests/lib/brokers.sh) and
# a real `v4fleet worker` on the tiny model (docs/structured-outputs.md):
#  - task packets with response_format json_schema (twice: the second compiles from the
#    worker's cache), guided_regex and guided_choice: every result succeeds, ends with
#    "stop" (the constraints are bounded), and its text validates against its schema
#    (python3-jsonschema), fullmatches its regex or is one of the choices; the results
#    validate against config/result.schema.json; the schema task's answer equals
#    `v4fleet batch` on the same packet;
#  - a schema that does not compile: that task's result fails with invalid_field, where
#    "response_format", the keyword and its JSON pointer in the message; a task with
#    tools: an invalid-queue record with unsupported_field, where "tools"; the worker keeps
#    serving (a free task after them succeeds) and exits 0 on SIGTERM;
#  - sampling fields through the queue: logprobs / top_logprobs 3 (one entry per token,
#    sorted, the chosen token's among them or below them, bytes spell the text), penalties
#    and a logit_bias that bans a token; n = 3 under a choice constraint (three choices,
#    each valid with its logprobs, usage summed);
#  - /metrics: the second schema task was a hit of the compile cache
#    (v4fleet:grammar_cache_hits_total), the other constraints misses.
# No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin structured_queue
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }
py=/usr/bin/python3
$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)" >&2; exit 1; }

"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 3 --no-sync > /dev/null
$py - "$WORK" <<'EOF'
import json, sys
w = sys.argv[1]
PERSON = {"type": "object",
          "properties": {"kind": {"enum": ["cat", "dog", "bird"]},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "name": {"type": "string", "maxLength": 8}},
          "required": ["kind", "age", "name"], "additionalProperties": False}
rf = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
tasks = [
    {"id": "q-schema", "prompt": "A pet, please.", "max_tokens": 400, "temperature": 1, "seed": 3, "response_format": rf},
    {"id": "q-schema2", "prompt": "Another pet.", "max_tokens": 400, "temperature": 1, "seed": 8, "response_format": rf},
    {"id": "q-regex", "prompt": "An address.", "max_tokens": 60, "temperature": 1, "seed": 5,
     "guided_regex": r"[a-z]{1,6}@[a-z]{2,5}\.(com|org)"},
    {"id": "q-choice", "prompt": "Yes or no?", "max_tokens": 20, "temperature": 1, "seed": 6,
     "guided_choice": ["yes", "no", "maybe later"]},
    {"id": "q-bad-schema", "prompt": "x", "max_tokens": 20, "response_format": {"type": "json_schema", "json_schema": {
        "name": "b", "schema": {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}},
    {"id": "q-tools", "prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]},
    {"id": "q-free", "prompt": "after them", "max_tokens": 6, "temperature": 0},
    {"id": "q-logprobs", "prompt": "Tell me more.", "max_tokens": 10, "temperature": 0.8, "seed": 4, "logprobs": True,
     "top_logprobs": 3, "presence_penalty": 0.5, "frequency_penalty": 0.2, "logit_bias": {"5": -100}},
    {"id": "q-n3", "prompt": "Yes or no?", "max_tokens": 20, "temperature": 1, "seed": 7, "n": 3, "logprobs": True,
     "guided_choice": ["yes", "no", "maybe later"]},
]
json.dump(PERSON, open(w + "/person.json", "w"))
with open(w + "/tasks.jsonl", "w") as f:
    for t in tasks:
        f.write(json.dumps(t) + "\n")
EOF

P="so$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_PREFETCH=2 V4_CONCURRENCY=2 V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_MODEL_NAME=tiny V4_REDIS_URL=off \
    V4_HTTP_ADDR=127.0.0.1 V4_HTTP_PORT="$(_brokers_free_port)" V4_GRAMMAR_CACHE_BYTES=16M
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do
    rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && break
    sleep 0.1
done
while IFS= read -r t; do
    qclient task "$P.tasks" "$t" || fail "publish $t"
done < "$WORK/tasks.jsonl"
qclient dump "$P.results" 8 120 > "$WORK/results.jsonl" || fail "fewer than 8 results"
qclient result "$P.invalid" 30 > "$WORK/invalid.json" || fail "no invalid record"

# the same schema task through `v4fleet batch`
grep '"q-schema"' "$WORK/tasks.jsonl" > "$WORK/one.jsonl"
"$V4_BIN" batch "$WORK/one.jsonl" -o "$WORK/one.out" --model "$WORK/m" --model-name tiny 2> "$WORK/batch.err" ||
    fail "batch: $(tail -3 "$WORK/batch.err")"

$py - "$WORK" "$HERE/../config/result.schema.json" <<'EOF' || fail "results"
import json, re, sys
import jsonschema
w = sys.argv[1]
person = json.load(open(w + "/person.json"))
rv = jsonschema.Draft202012Validator(json.load(open(sys.argv[2])))
recs = {}
for l in open(w + "/results.jsonl", encoding="utf-8"):
    r = json.loads(l)
    rv.validate(r)
    recs[r["id"]] = r
assert set(recs) == {"q-schema", "q-schema2", "q-regex", "q-choice", "q-bad-schema", "q-free", "q-logprobs", "q-n3"}, sorted(recs)
for k in ("q-schema", "q-schema2", "q-regex", "q-choice", "q-free", "q-logprobs", "q-n3"):
    assert recs[k]["status"] == "succeeded", recs[k]
for k in ("q-schema", "q-schema2", "q-regex", "q-choice"):
    assert recs[k]["output"]["finish_reason"] == "stop", recs[k]["output"]
for k in ("q-schema", "q-schema2"):
    jsonschema.Draft202012Validator(person).validate(json.loads(recs[k]["output"]["text"]))
assert re.fullmatch(r"[a-z]{1,6}@[a-z]{2,5}\.(com|org)", recs["q-regex"]["output"]["text"]), recs["q-regex"]["output"]
assert recs["q-choice"]["output"]["text"] in ("yes", "no", "maybe later"), recs["q-choice"]["output"]
e = recs["q-bad-schema"]["error"]
assert recs["q-bad-schema"]["status"] == "failed" and e["code"] == "invalid_field" and e["where"] == "response_format" \
    and "uniqueItems" in e["message"] and "/properties/tags/uniqueItems" in e["message"], e
inv = json.load(open(w + "/invalid.json"))
assert inv["id"] == "q-tools" and inv["error"]["code"] == "unsupported_field" and inv["error"]["where"] == "tools", inv
o = recs["q-logprobs"]["output"]
lp = o["logprobs"]
assert isinstance(lp, list) and len(lp) == len([t for t in o["token_ids"] if t != 1]) and len(lp) >= 1, o
assert 5 not in o["token_ids"], o["token_ids"]   # logit_bias -100 bans it
assert "".join(bytes(e["bytes"]).decode("utf-8", "replace") for e in lp) == o["text"] or \
    b"".join(bytes(e["bytes"]) for e in lp).decode("utf-8", "replace") == o["text"], (lp, o["text"])
for e in lp:
    tl = e["top_logprobs"]
    assert len(tl) == 3 and all(a["logprob"] >= b["logprob"] for a, b in zip(tl, tl[1:])), e
    assert e["logprob"] <= 0 and all(t["logprob"] <= 0 for t in tl), e
    assert any(t["token"] == e["token"] and abs(t["logprob"] - e["logprob"]) < 1e-9 for t in tl) or \
        e["logprob"] <= tl[-1]["logprob"] + 1e-9, e
o = recs["q-n3"]["output"]
ch = o["choices"]
assert [c["index"] for c in ch] == [0, 1, 2] and all(c["text"] in ("yes", "no", "maybe later") and
                                                    c["finish_reason"] == "stop" and c["logprobs"] for c in ch), ch
assert (o["text"], o["token_ids"]) == (ch[0]["text"], ch[0]["token_ids"]), o
assert recs["q-n3"]["usage"]["completion_tokens"] == sum(c["completion_tokens"] for c in ch), recs["q-n3"]["usage"]
b = json.loads(open(w + "/one.out").readline())
assert b["output"]["text"] == recs["q-schema"]["output"]["text"] and \
    b["output"]["token_ids"] == recs["q-schema"]["output"]["token_ids"], (b["output"], recs["q-schema"]["output"])
print("queue: %r validates; %r; %r" % (recs["q-schema"]["output"]["text"], recs["q-regex"]["output"]["text"],
                                      recs["q-choice"]["output"]["text"]))
EOF
# the compile cache: the second schema task found the first one's constraint
metrics="$(curl -sf "http://127.0.0.1:$V4_HTTP_PORT/metrics")" || fail "no /metrics"
hits="$(sed -n 's/^v4fleet:grammar_cache_hits_total \([0-9]*\).*/\1/p' <<< "$metrics")"
misses="$(sed -n 's/^v4fleet:grammar_cache_misses_total \([0-9]*\).*/\1/p' <<< "$metrics")"
[ "${hits:-0}" -ge 1 ] && [ "${misses:-0}" -ge 4 ] || fail "grammar cache figures: hits '$hits' misses '$misses'"
kill -TERM "$WPID"
wrc=0
wait "$WPID" || wrc=$?
WPID=""
[ "$wrc" -eq 0 ] || fail "worker exit status $wrc after SIGTERM"
[ "$status" -eq 0 ] || { tail -n 30 "$WORK/worker.log" >&2; }
exit "$status"
