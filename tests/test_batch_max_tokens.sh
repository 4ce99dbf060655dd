#!/usr/bin/env bash
# test_batch_max_tokens.sh - a missing max_tokens, and progress counted as tokens are
# generated (issue 36 item 7), on a tiny random-weight model through `v4fleet batch`:
#  - no max_tokens (task packet, OpenAI line without max_tokens / max_completion_tokens)
#    = the rest of the context bounded by V4_DEFAULT_MAX_TOKENS (20 here) and by
#    --default-max-tokens (which wins over the variable); ignore_eos makes the bound exact;
#  - bound 0 = the rest of the context: --max-context 40 -> prompt + completion = 40;
#  - an explicit max_tokens is kept, also above the bound; over the context it still fails
#    (context_length_exceeded, max_tokens); a prompt that fills the context with no
#    max_tokens fails with context_length_exceeded naming the prompt;
#  - n = 2 without max_tokens: each choice runs to the bound; a summarize task keeps
#    max_summary_tokens;
#  - bad settings: V4_DEFAULT_MAX_TOKENS=abc -> exit 1 naming it, --default-max-tokens -1
#    -> exit 2;
#  - --progress lines: the token count grows while a task runs (lines before the first
#    task ends show tokens > 0; counts never go down nor pass the summary's), with
#    the serial and the continuous executor.
# docs/batch-files.md "max_tokens", docs/queue-worker.md.
set -u
bin=${V4_BIN:?V4_BIN not set}
py=/usr/bin/python3
work=$(mktemp -d "${V4_TMP:-/tmp}/batchmt.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

"$bin" mkmodel --out "$work/m" --preset tiny --seed 5 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
M=(--model "$work/m" --model-name tiny)
IDS='"input_ids": [0, 2, 10, 3, 5], "temperature": 0, "ignore_eos": true'
CHAT='"url": "/v1/chat/completions", "method": "POST"'

cat > "$work/in.jsonl" <<EOF
{"id": "absent", $IDS}
{"id": "explicit", $IDS, "max_tokens": 7}
{"id": "above-bound", $IDS, "max_tokens": 30}
{"custom_id": "oa-absent", $CHAT, "body": {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "ignore_eos": true}}
{"custom_id": "oa-mct", $CHAT, "body": {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "ignore_eos": true, "max_completion_tokens": 5}}
{"id": "n2", "input_ids": [0, 2, 10, 3, 5], "ignore_eos": true, "n": 2, "temperature": 1, "seed": 3}
{"id": "summ", "type": "summarize", "document": "One line of text. Another line.", "max_summary_tokens": 6, "temperature": 0, "ignore_eos": true}
EOF
# usage: check OUT 'id=completion_tokens ...' ; "n2" is checked per choice
check() {
    $py - "$@" <<'EOF'
import json, sys
recs = {}
for l in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(l)
    recs[r.get("custom_id") or r["id"]] = r
for want in sys.argv[2:]:
    k, v = want.split("=")
    r = recs[k]
    if "custom_id" in r:
        b = r["response"]["body"]
        assert r["error"] is None, r
        u, fins = b["usage"], [c["finish_reason"] for c in b["choices"]]
    else:
        assert r["status"] == "succeeded", r
        u = r["usage"]
        fins = [c["finish_reason"] for c in r["choices"]] if "choices" in r else [r["output"]["finish_reason"]]
    if v.startswith("ctx"):   # prompt + completion = the context
        assert u["prompt_tokens"] + u["completion_tokens"] == int(v[3:]), (k, u)
    elif v.startswith("le"):
        assert 1 <= u["completion_tokens"] <= int(v[2:]), (k, u)
    else:
        assert u["completion_tokens"] == int(v), (k, u, int(v))
    if not v.startswith("le"):
        assert all(f == "length" for f in fins), (k, fins)
print("ok")
EOF
}

V4_DEFAULT_MAX_TOKENS=20 "$bin" batch "$work/in.jsonl" -o "$work/o1.jsonl" "${M[@]}" 2>"$work/e1"; rc=$?
[ "$rc" -eq 0 ] || bad "bound 20: exit $rc: $(tail -3 "$work/e1")"
check "$work/o1.jsonl" absent=20 explicit=7 above-bound=30 oa-absent=20 oa-mct=5 n2=40 summ=le6 \
    && ok "V4_DEFAULT_MAX_TOKENS=20: absent -> 20 tokens (task, OpenAI line, each of n=2), explicit kept, summary 6" \
    || bad "bound 20: $(head -c 600 "$work/o1.jsonl")"

V4_DEFAULT_MAX_TOKENS=20 "$bin" batch "$work/in.jsonl" -o "$work/o2.jsonl" "${M[@]}" --default-max-tokens 12 \
    2>"$work/e2"; rc=$?
[ "$rc" -eq 0 ] && check "$work/o2.jsonl" absent=12 explicit=7 oa-absent=12 n2=24 \
    && ok "--default-max-tokens 12 wins over V4_DEFAULT_MAX_TOKENS" || bad "flag: exit $rc: $(tail -3 "$work/e2")"

# bound 0: the rest of the context (--max-context 40)
grep -v '"summ"\|above-bound' "$work/in.jsonl" > "$work/in0.jsonl"
V4_DEFAULT_MAX_TOKENS=0 "$bin" batch "$work/in0.jsonl" -o "$work/o3.jsonl" "${M[@]}" --max-context 40 2>"$work/e3"; rc=$?
[ "$rc" -eq 0 ] && check "$work/o3.jsonl" absent=35 explicit=7 oa-absent=ctx40 n2=70 \
    && ok "V4_DEFAULT_MAX_TOKENS=0: absent -> the rest of --max-context 40 (35 after a 5-token prompt)" \
    || bad "bound 0: exit $rc: $(tail -3 "$work/e3") $(head -c 600 "$work/o3.jsonl")"
"$bin" batch "$work/in0.jsonl" -o "$work/o4.jsonl" "${M[@]}" --max-context 40 --default-max-tokens 0 2>"$work/e4"; rc=$?
[ "$rc" -eq 0 ] && check "$work/o4.jsonl" absent=35 && ok "--default-max-tokens 0: the rest of the context" \
    || bad "flag 0: exit $rc: $(tail -3 "$work/e4")"

# the context: a full prompt without max_tokens, an explicit max_tokens over it
cat > "$work/full.jsonl" <<EOF
{"id": "full", $IDS}
{"id": "over", $IDS, "max_tokens": 4}
{"id": "fits", $IDS, "max_tokens": 3}
EOF
"$bin" batch "$work/full.jsonl" -o "$work/o5.jsonl" "${M[@]}" --max-context 8 --default-max-tokens 0 2>"$work/e5"; rc=$?
$py - "$work/o5.jsonl" <<'EOF' && [ "$rc" -eq 3 ] && ok "context: absent fills it (3 of 8), explicit over it fails on max_tokens" || bad "context: exit $rc: $(cat "$work/o5.jsonl")"
import json, sys
recs = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[1])}
assert recs["full"]["usage"]["completion_tokens"] == 3, recs["full"]
assert recs["over"]["error"]["code"] == "context_length_exceeded" and recs["over"]["error"]["where"] == "max_tokens", recs["over"]
assert recs["fits"]["usage"]["completion_tokens"] == 3, recs["fits"]
EOF
"$bin" batch "$work/full.jsonl" -o "$work/o6.jsonl" "${M[@]}" --max-context 5 2>"$work/e6"; rc=$?
$py - "$work/o6.jsonl" <<'EOF' && [ "$rc" -eq 3 ] && ok "a prompt that fills the context, no max_tokens: context_length_exceeded (prompt)" || bad "full prompt: exit $rc: $(cat "$work/o6.jsonl")"
import json, sys
e = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[1])}["full"]["error"]
assert e["code"] == "context_length_exceeded" and e["where"] == "prompt" and "no room" in e["message"], e
EOF

# bad settings
V4_DEFAULT_MAX_TOKENS=abc "$bin" batch "$work/in.jsonl" -o "$work/o7.jsonl" "${M[@]}" 2>"$work/e7"; rc=$?
[ "$rc" -eq 1 ] && grep -q "V4_DEFAULT_MAX_TOKENS" "$work/e7" && ok "V4_DEFAULT_MAX_TOKENS=abc: exit 1 naming it" \
    || bad "bad variable: exit $rc: $(cat "$work/e7")"
"$bin" batch "$work/in.jsonl" -o "$work/o8.jsonl" "${M[@]}" --default-max-tokens -1 2>"$work/e8"; rc=$?
[ "$rc" -eq 2 ] && grep -q -- "--default-max-tokens" "$work/e8" && ok "--default-max-tokens -1: usage error" \
    || bad "bad flag: exit $rc: $(cat "$work/e8")"

# progress: tokens counted as generated (3 tasks of 300 tokens; lines every 10 ms)
$py - "$work/long.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(3):
        f.write(json.dumps({"id": "long-%d" % i, "input_ids": [0, 3 + i, 9], "max_tokens": 300, "temperature": 0,
                            "ignore_eos": True}) + "\n")
EOF
for conc in 1 2; do
    "$bin" batch "$work/long.jsonl" -o "$work/long$conc.out" "${M[@]}" --concurrency $conc --progress lines \
        --progress-interval-ms 10 2>"$work/el$conc"; rc=$?
    $py - "$work/el$conc" <<'EOF' && [ "$rc" -eq 0 ] && ok "--concurrency $conc: progress tokens grow during tasks" \
        || bad "progress, --concurrency $conc: exit $rc: $(grep -c done "$work/el$conc") lines: $(head -5 "$work/el$conc")"
import re, sys
lines = [l for l in open(sys.argv[1]) if re.match(r"v4fleet batch: \d+/3 done", l)]
pts = [(int(m.group(1)), int(m.group(2))) for m in (re.search(r"(\d+)/3 done.* (\d+) tokens, ", l) for l in lines)]
final = int(re.search(r"done: 3 tasks, 0 failed, 0 skipped, (\d+) tokens", open(sys.argv[1]).read()).group(1))
assert final == 900, final
toks = [t for _, t in pts]
assert toks == sorted(toks), "the count went down: %s" % toks
# before any task ended the count already moved, and counts that are not whole tasks show up
assert any(d == 0 and t > 0 for d, t in pts), pts[:10]
assert sum(1 for t in toks if t % 300) >= 3, toks
assert toks[-1] <= final, (toks[-1], final)
print("%d progress lines, first %s, last %s" % (len(pts), pts[0], pts[-1]))
EOF
done

[ "$fail" -eq 0 ] && echo "test_batch_max_tokens: all ok"
exit "$fail"
