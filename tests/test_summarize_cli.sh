#!/usr/bin/env bash
# test_summarize_cli.sh - "type": "summarize" tasks through both front ends on the tiny
# model with a 256-token context:
#  - batch: `v4fleet batch --max-context 256` on a JSONL with a document ~4x the
#    context, a short document, a generation, a summarize line with instructions, and two
#    invalid summarize lines -> one output line each: the long one succeeded with
#    summary.chunks > 1 and summary.levels >= 2, the short one chunks 1 / levels 1, the
#    generation has no summary object, the invalid ones fail with invalid_field on the
#    right field; every record validates against config/result.schema.json;
#  - queue: a real `v4fleet worker` (V4_MAX_CONTEXT=256) with RabbitMQ
#    (tests/lib/brokers.sh) summarizes the same long document: same chunks, levels and
#    greedy text as the batch run; an invalid summarize packet lands in the invalid queue.
# No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin summarize_cli
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }
py=/usr/bin/python3

"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 7 --no-sync >/dev/null 2>&1 || { fail "mkmodel"; exit 1; }

# ---- the input: deterministic prose, paragraphs of three sentences ------------------
$py - "$WORK" <<'EOF'
import json, sys
words = "river mountain engine quiet market signal winter garden copper lantern harbor ledger".split()
x, sents = 777, []
for s in range(50):
    x = (x * 1103515245 + 12345) % 2**32
    n = 5 + (x >> 16) % 6
    ws = []
    for w in range(n):
        x = (x * 1103515245 + 12345) % 2**32
        ws.append(words[(x >> 16) % len(words)])
    sents.append(" ".join(ws).capitalize() + (".\n\n" if s % 3 == 2 else ". "))
doc = "".join(sents)
open(sys.argv[1] + "/doc.txt", "w").write(doc)
common = {"type": "summarize", "temperature": 0, "max_summary_tokens": 12}
lines = [
    dict(common, id="s-long", document=doc, metadata={"k": 1}),
    dict(common, id="s-short", document="The harbor was quiet. Boats came home."),
    {"id": "g-plain", "prompt": "Hello there.", "max_tokens": 4, "temperature": 0},
    dict(common, id="s-instr", document=doc[:1400], instructions="List the three main points."),
    {"id": "s-bad-prompt", "type": "summarize", "document": "x", "prompt": "y"},
    {"id": "s-bad-empty", "type": "summarize", "document": ""},
]
with open(sys.argv[1] + "/in.jsonl", "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
json.dump(lines[0], open(sys.argv[1] + "/long_task.json", "w"))
EOF
DOC_TOKENS=$("$V4_BIN" tokenize --tokenizer "$WORK/m" < "$WORK/doc.txt" | $py -c 'import json,sys; print(len(json.load(sys.stdin)))')
echo "document: $(wc -c < "$WORK/doc.txt") bytes, $DOC_TOKENS tokens"
[ "$DOC_TOKENS" -gt $((3 * 256)) ] || fail "the document ($DOC_TOKENS tokens) must be > 3 contexts"

# ---- batch ---------------------------------------------------------------------------
rc=0
"$V4_BIN" batch "$WORK/in.jsonl" -o "$WORK/out.jsonl" --model "$WORK/m" --model-name tiny --max-context 256 \
    2>"$WORK/batch.err" || rc=$?
[ "$rc" -eq 3 ] || fail "batch exit $rc (3: its failing lines): $(tail -5 "$WORK/batch.err")"
$py - "$WORK/out.jsonl" "$HERE/../config/result.schema.json" <<'EOF' || fail "batch output"
import json, sys
recs = {}
for l in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(l)
    recs[r["id"]] = r
assert len(recs) == 6, f"{len(recs)} lines: {sorted(recs)}"
try:
    import jsonschema
    v = jsonschema.Draft202012Validator(json.load(open(sys.argv[2])))
    for k, r in recs.items():
        if "line" not in r:
            v.validate(r)
except ImportError:
    print("note: no jsonschema; schema not checked")
L = recs["s-long"]
assert L["status"] == "succeeded", L
s = L["summary"]
assert s["chunks"] > 1 and s["levels"] >= 2, s
assert 1 <= L["usage"]["completion_tokens"] <= 12 and len(L["output"]["token_ids"]) == L["usage"]["completion_tokens"], L["usage"]
assert L["usage"]["prompt_tokens"] > 3 * 256, L["usage"]    # every chunk's prompt counted
assert L["metadata"] == {"k": 1} and L["experts"]["hits"] > 0, L
S = recs["s-short"]
assert S["status"] == "succeeded" and S["summary"] == {"chunks": 1, "levels": 1}, S
assert S["usage"]["prompt_tokens"] < 256, S["usage"]
G = recs["g-plain"]
assert G["status"] == "succeeded" and "summary" not in G, G
I = recs["s-instr"]
assert I["status"] == "succeeded" and I["summary"]["chunks"] >= 2, I
for k, where in (("s-bad-prompt", "prompt"), ("s-bad-empty", "document")):
    e = recs[k]["error"]
    assert recs[k]["status"] == "failed" and e["code"] == "invalid_field" and e["where"] == where, recs[k]
print("batch: long chunks %d levels %d, prompt_tokens %d; instr chunks %d levels %d" % (
    s["chunks"], s["levels"], L["usage"]["prompt_tokens"], I["summary"]["chunks"], I["summary"]["levels"]))
EOF

# ---- queue ---------------------------------------------------------------------------
P="summ$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_PREFETCH=1 V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_MODEL_NAME=tiny V4_MAX_CONTEXT=256
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do
    rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && break
    sleep 0.1
done
qclient task "$P.tasks" "$(cat "$WORK/long_task.json")" || fail "publish"
qclient task "$P.tasks" '{"id":"q-bad","type":"summarize","document":"x","max_tokens":3}' || fail "publish bad"
qclient result "$P.results" 120 > "$WORK/q_result.json" || fail "no result for the long summary"
qclient result "$P.invalid" 30 > "$WORK/q_invalid.json" || fail "no invalid record"
$py - "$WORK/q_result.json" "$WORK/out.jsonl" "$WORK/q_invalid.json" <<'EOF' || fail "queue result"
import json, sys
q = json.load(open(sys.argv[1]))
b = [json.loads(l) for l in open(sys.argv[2]) if '"s-long"' in l][0]
assert q["id"] == "s-long" and q["status"] == "succeeded", q
assert q["summary"] == b["summary"], (q["summary"], b["summary"])
assert q["output"]["text"] == b["output"]["text"] and q["usage"] == b["usage"], "queue and batch summaries differ"
inv = json.load(open(sys.argv[3]))
assert inv["id"] == "q-bad" and inv["error"]["code"] == "invalid_field" and inv["error"]["where"] == "max_tokens", inv
print("queue: same summary as batch: chunks %d levels %d" % (q["summary"]["chunks"], q["summary"]["levels"]))
EOF
kill -TERM "$WPID"
wrc=0
wait "$WPID" || wrc=$?
WPID=""
[ "$wrc" -eq 0 ] || fail "worker exit status $wrc after SIGTERM"
[ "$status" -eq 0 ] || { tail -n 30 "$WORK/worker.log" >&2; tail -n 5 "$WORK/batch.err" >&2; }
exit "$status"
