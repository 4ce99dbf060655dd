#!/usr/bin/env bash
# test_batch_n.sh - several answers per request (n > 1: one prefill, the sequence forked,
# worker/serve/choices.h; docs/batch-files.md, docs/queue-worker.md "Several answers (n)")
# end to end through `v4fleet batch` on the tiny synthetic model (random weights):
#  - OpenAI lines with n = 3 at temperature 1: body.choices has 3 entries with index
#    0, 1, 2, each a message {role, content} and a finish_reason; usage.prompt_tokens
#    equals the n = 1 line's (the prompt counted once) and completion_tokens is the sum
#    of the choices' (checked on task packets, whose choices carry their token ids; their
#    result records validate against config/result.schema.json);
#  - choice 0 equals the n = 1 answer with the same seed (text, finish reason, tokens);
#    choice i > 0 equals the n = 1 answer with the seed v4_choice_seed(seed, i)
#    (splitmix64 of seed + i * 0x9E3779B97F4A7C15, top bit cleared, computed here);
#  - the choices of one request differ (3 seeds x 3 choices of 16 tokens: all distinct),
#    and another seed gives other choices;
#  - a stop string ends each choice by itself (finish_reason per choice);
#  - n with a json_schema constraint (2 lines x n = 4): every choice that ends with
#    "stop" validates against the schema (python3-jsonschema), at least half do;
#  - the same output from the serial executor, --concurrency 2, and with
#    V4_N_PREFILL_EACH=1 at --concurrency 3 (every choice prefills the prompt itself: the CUDA engine's way,
#    which cannot fork; same answers, only slower);
#  - errors: n = 0 / 17 / "2" are invalid_field naming body.n; V4_MAX_N=2 refuses n = 3
#    with invalid_field naming n, and still serves n = 2.
set -u
bin=${V4_BIN:?V4_BIN not set}
py=/usr/bin/python3
work=$(mktemp -d "${V4_TMP:-/tmp}/batch_n.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)"; exit 1; }
"$bin" mkmodel --out "$work/m" --preset tiny --seed 5 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
M=(--model "$work/m" --model-name tiny)

$py - "$work/in.jsonl" <<'EOF'
import json, sys
M64 = (1 << 64) - 1
def choice_seed(seed, i):
    if i == 0:
        return seed
    z = (seed + i * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return (z ^ (z >> 31)) & ((1 << 63) - 1)
PERSON = {"type": "object",
          "properties": {"kind": {"enum": ["cat", "dog", "bird"]},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["kind", "age"], "additionalProperties": False}
lines = []
def openai(cid, body):
    body = dict({"model": "tiny", "messages": [{"role": "user", "content": "Tell me a story, %s." % cid.split("-")[0]}]},
                **body)
    lines.append({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})
def task(tid, fields):
    lines.append(dict({"id": tid, "prompt": "Answer for %s." % tid.split("-")[0]}, **fields))
for seed in (1, 2, 3):
    s = {"temperature": 1, "seed": seed, "max_tokens": 16}
    openai("free%d-n3" % seed, dict(s, n=3))
    openai("free%d-n1" % seed, dict(s))
    task("task%d-n3" % seed, dict(s, n=3))
    for i in range(3):   # choice i alone: n = 1 with the derived seed
        task("task%d-alone%d" % (seed, i), dict(s, seed=choice_seed(seed, i)))
openai("stop-n4", {"temperature": 1, "seed": 9, "max_tokens": 30, "n": 4, "stop": ["e"]})
for seed in (1, 2):
    openai("schema%d-n4" % seed, {"temperature": 1, "seed": seed, "max_tokens": 200, "n": 4, "response_format": {
        "type": "json_schema", "json_schema": {"name": "p", "strict": True, "schema": PERSON}}})
openai("lp-n3", {"temperature": 1, "seed": 5, "max_tokens": 8, "n": 3, "logprobs": True, "top_logprobs": 2})
openai("lp-n1", {"temperature": 1, "seed": 5, "max_tokens": 8, "logprobs": True, "top_logprobs": 2})
openai("bad0-n0", {"n": 0, "max_tokens": 4})
openai("bad1-n17", {"n": 17, "max_tokens": 4})
openai("bad2-nstr", {"n": "2", "max_tokens": 4})
with open(sys.argv[1], "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
json.dump(PERSON, open(sys.argv[1] + ".schema", "w"))
EOF

"$bin" batch "$work/in.jsonl" -o "$work/out1.jsonl" "${M[@]}" 2>"$work/err1"; rc=$?
[ "$rc" -eq 3 ] && ok "batch: exit 3 (its three bad lines)" || bad "batch: exit $rc: $(tail -5 "$work/err1")"
if grep -q "ignored" "$work/err1"; then bad "a field was ignored: $(grep ignored "$work/err1")"; else ok "n is not ignored"; fi

cat > "$work/check.py" <<'EOF'
import json, sys
import jsonschema
recs = {}
for l in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(l)
    recs[r.get("custom_id") or r.get("id")] = r
schema = json.load(open(sys.argv[2]))
result_schema = json.load(open(sys.argv[3]))
fails = []
def body(k):
    r = recs[k]
    assert r["error"] is None and r["response"]["status_code"] == 200, (k, r)
    return r["response"]["body"]
for seed in (1, 2, 3):
    b3, b1 = body("free%d-n3" % seed), body("free%d-n1" % seed)
    ch = b3["choices"]
    if [c["index"] for c in ch] != [0, 1, 2] or any(c["message"]["role"] != "assistant" or
                                                    c["finish_reason"] not in ("stop", "length") for c in ch):
        fails.append("seed %d: choices %s" % (seed, ch))
    if ch[0] != b1["choices"][0]:
        fails.append("seed %d: choice 0 %r differs from the n=1 answer %r" % (seed, ch[0], b1["choices"][0]))
    if b3["usage"]["prompt_tokens"] != b1["usage"]["prompt_tokens"]:
        fails.append("seed %d: prompt counted %d times" % (seed, b3["usage"]["prompt_tokens"] / b1["usage"]["prompt_tokens"]))
    if b3["usage"]["total_tokens"] != b3["usage"]["prompt_tokens"] + b3["usage"]["completion_tokens"]:
        fails.append("seed %d: total_tokens" % seed)
    t = recs["task%d-n3" % seed]
    try:
        jsonschema.Draft202012Validator(result_schema).validate(t)
    except jsonschema.ValidationError as e:
        fails.append("task%d-n3 breaks config/result.schema.json: %s" % (seed, str(e).splitlines()[0]))
    tc = t["output"]["choices"]
    if t["usage"]["completion_tokens"] != sum(c["completion_tokens"] for c in tc) or \
       any(c["completion_tokens"] != len(c["token_ids"]) for c in tc):
        fails.append("seed %d: completion_tokens %s is not the sum over the choices" % (seed, t["usage"]))
    if (t["output"]["text"], t["output"]["token_ids"]) != (tc[0]["text"], tc[0]["token_ids"]):
        fails.append("seed %d: the single-answer fields are not choice 0's" % seed)
    for i in range(3):
        a = recs["task%d-alone%d" % (seed, i)]["output"]
        if (a["text"], a["token_ids"], a["finish_reason"]) != (tc[i]["text"], tc[i]["token_ids"], tc[i]["finish_reason"]):
            fails.append("seed %d: choice %d differs from n=1 with its derived seed" % (seed, i))
        if a.get("choices") is not None:
            fails.append("an n=1 result has choices")
texts = [c["message"]["content"] for s in (1, 2, 3) for c in body("free%d-n3" % s)["choices"]]
if len(set(texts)) != len(texts):
    fails.append("choices repeat: %s" % texts)
st = body("stop-n4")["choices"]
if len(st) != 4 or any("e" in c["message"]["content"] for c in st) or not any(c["finish_reason"] == "stop" for c in st):
    fails.append("stop per choice: %s" % st)
n = stops = 0
for seed in (1, 2):
    for c in body("schema%d-n4" % seed)["choices"]:
        n += 1
        if c["finish_reason"] != "stop":
            continue
        stops += 1
        try:
            jsonschema.Draft202012Validator(schema).validate(json.loads(c["message"]["content"]))
        except (ValueError, jsonschema.ValidationError) as e:
            fails.append("schema%d choice %d: %r: %s" % (seed, c["index"], c["message"]["content"], str(e).splitlines()[0]))
print("constrained choices: %d, ended with stop: %d" % (n, stops))
if n != 8 or stops * 2 < n:
    fails.append("only %d of %d constrained choices ended with stop" % (stops, n))
lc, l1 = body("lp-n3")["choices"], body("lp-n1")["choices"]
if lc[0] != l1[0]:
    fails.append("logprobs: choice 0 %r differs from n=1 %r" % (lc[0], l1[0]))
for c in lc:
    lp = (c.get("logprobs") or {}).get("content")
    if not lp or any(len(e["top_logprobs"]) != 2 for e in lp) or \
       b"".join(bytes(e["bytes"]) for e in lp).decode("utf-8", "replace") != c["message"]["content"]:
        fails.append("logprobs of choice %d: %r" % (c["index"], c))
if len({json.dumps(c["logprobs"]) for c in lc}) != 3:
    fails.append("the three choices have the same logprobs")
def norm_err(r):   # a failed line's error: task records' "error", OpenAI's response.body.error
    if r.get("custom_id") is not None or "custom_id" in r:
        if r.get("error"):
            return r["error"]
        resp = r.get("response") or {}
        if resp.get("status_code", 200) >= 400:
            e = resp["body"]["error"]
            return {"code": e["code"], "where": e["param"], "message": e["message"]}
        return None
    return r.get("error")
for k in ("bad0-n0", "bad1-n17", "bad2-nstr"):
    e = norm_err(recs[k])
    if not (e and e["code"] == "invalid_field" and e["where"] == "body.n"):
        fails.append("%s: %s" % (k, e))
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
EOF
$py "$work/check.py" "$work/out1.jsonl" "$work/in.jsonl.schema" "$(dirname "$0")/../config/result.schema.json" \
    && ok "choices: shape, choice 0 = n=1, choice i = n=1 with its seed, usage, stop, schema, errors" \
    || bad "choices (see above)"

# ---- the continuous executor and the prefill-each path: the same output --------------
same() {   # the lines without their timings / created stamps
    $py - "$1" "$2" <<'EOF'
import json, sys
def load(p):
    d = {}
    for l in open(p, encoding="utf-8"):
        r = json.loads(l)
        for k in ("timing", "experts"):
            r.pop(k, None)
        if r.get("response"):
            r["response"]["body"].pop("created", None)
        d[r.get("custom_id") or r.get("id")] = r
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
diff = [k for k in a if a[k] != b.get(k)]
print("differ:", diff[:5]) if diff else None
sys.exit(1 if diff or a.keys() != b.keys() else 0)
EOF
}
"$bin" batch "$work/in.jsonl" -o "$work/out2.jsonl" "${M[@]}" --concurrency 2 2>"$work/err2"; rc=$?
[ "$rc" -eq 3 ] && ok "--concurrency 2: exit 3" || bad "--concurrency 2: exit $rc: $(tail -5 "$work/err2")"
same "$work/out1.jsonl" "$work/out2.jsonl" && ok "--concurrency 2 equals serial" || bad "--concurrency 2 differs"
V4_N_PREFILL_EACH=1 "$bin" batch "$work/in.jsonl" -o "$work/out3.jsonl" "${M[@]}" --concurrency 3 2>"$work/err3"; rc=$?
[ "$rc" -eq 3 ] && ok "prefill each: exit 3" || bad "prefill each: exit $rc: $(tail -5 "$work/err3")"
same "$work/out1.jsonl" "$work/out3.jsonl" && ok "every choice prefilled again (the device path) equals the fork" \
    || bad "prefill each differs from the fork"

# ---- the worker's limit ---------------------------------------------------------------
printf '%s\n' '{"id":"l3","prompt":"x","n":3,"max_tokens":4}' '{"id":"l2","prompt":"x","n":2,"max_tokens":4}' >"$work/lim.jsonl"
V4_MAX_N=2 "$bin" batch "$work/lim.jsonl" -o "$work/lim.out" "${M[@]}" 2>"$work/errl"
$py - "$work/lim.out" <<'EOF' && ok "V4_MAX_N=2: n=3 refused naming n, n=2 served" || bad "V4_MAX_N: $(cat "$work/lim.out")"
import json, sys
r = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[1])}
e = r["l3"].get("error") or {}
sys.exit(0 if e.get("code") == "invalid_field" and e.get("where") == "n" and "2" in e.get("message", "")
         and r["l2"]["status"] == "succeeded" and len(r["l2"]["output"]["choices"]) == 2 else 1)
EOF
exit $fail
