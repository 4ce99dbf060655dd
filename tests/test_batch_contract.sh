#!/usr/bin/env bash
# test_batch_contract.sh - how a `v4fleet batch` run says how it ended (issue 36 item 7):
#  - every line fails (the lines name a model the worker does not serve): exit 3, not 0,
#    a line on stderr, and OUTPUT.summary.json in the shape of OpenAI's batch object with
#    request_counts {total, completed 0, failed N}; a re-run without --retry-failed skips
#    them and still exits 3;
#  - --retry-failed with the right model name: the error lines leave OUTPUT (atomic
#    rewrite), their inputs run again, every custom_id is answered exactly once, exit 0,
#    summary failed 0;
#  - INPUT "-" and -o -: standard input in, standard output out, the same answers as files;
#    --retry-failed with -o - is a usage error;
#  - "stop": "" is invalid_field naming stop; --help names --device and --numerics.
set -u
bin=${V4_BIN:?V4_BIN not set}
py=/usr/bin/python3
work=$(mktemp -d "${V4_TMP:-/tmp}/batchcontract.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

"$bin" mkmodel --out "$work/m" --preset tiny --seed 6 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
$py - "$work" <<'P'
import json, sys
w = sys.argv[1]
with open(w + "/in.jsonl", "w") as f:
    for i in range(5):
        f.write(json.dumps({"custom_id": "r%d" % i, "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "deepseek-v4", "max_tokens": 4, "temperature": 0,
                                     "messages": [{"role": "user", "content": "line %d" % i}]}}) + "\n")
with open(w + "/stop.jsonl", "w") as f:
    f.write(json.dumps({"id": "s1", "prompt": "x", "stop": ""}) + "\n")
    f.write(json.dumps({"id": "s2", "prompt": "x", "max_tokens": 3, "temperature": 0}) + "\n")
P

# 1. every line fails: exit 3 and a summary that says so
"$bin" batch "$work/in.jsonl" -o "$work/out.jsonl" --model "$work/m" --model-name tiny 2>"$work/e1"; rc=$?
[ "$rc" -eq 3 ] && grep -q "5 of 5 lines answered with an error (exit 3)" "$work/e1" && ok "all lines failed: exit 3" \
    || bad "all lines failed: exit $rc: $(cat "$work/e1")"
$py - "$work/out.jsonl.summary.json" 5 0 5 completed <<'P' && ok "summary: OpenAI batch object, 0 completed, 5 failed" || bad "summary 1: $(cat "$work/out.jsonl.summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
total, completed, failed, status = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
assert s["object"] == "batch" and s["endpoint"] == "/v1/chat/completions" and s["status"] == status, s
assert s["request_counts"] == {"total": total, "completed": completed, "failed": failed}, s
assert s["created_at"] <= s["completed_at"] and s["output_file"].endswith("out.jsonl"), s
P
"$bin" batch "$work/in.jsonl" -o "$work/out.jsonl" --model "$work/m" --model-name tiny 2>"$work/e2"; rc=$?
[ "$rc" -eq 3 ] && grep -q "5 of 5 input lines skipped" "$work/e2" && ok "re-run without --retry-failed: skipped, exit 3" \
    || bad "re-run: exit $rc: $(cat "$work/e2")"

# 2. --retry-failed with the model's right name: every line again, once each
"$bin" batch "$work/in.jsonl" -o "$work/out.jsonl" --model "$work/m" --model-name tiny,deepseek-v4 --retry-failed \
    2>"$work/e3"; rc=$?
[ "$rc" -eq 0 ] && grep -q "5 error lines removed" "$work/e3" && ok "--retry-failed: 5 lines run again, exit 0" \
    || bad "--retry-failed: exit $rc: $(cat "$work/e3")"
$py - "$work/out.jsonl" <<'P' && ok "--retry-failed: each custom_id once, all succeeded" || bad "retry output: $(cat "$work/out.jsonl")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert sorted(l["custom_id"] for l in lines) == ["r%d" % i for i in range(5)], lines
assert all(l["error"] is None and l["response"]["status_code"] == 200 for l in lines), lines
P
$py - "$work/out.jsonl.summary.json" 5 5 0 completed <<'P' && ok "summary after the retry: 5 completed, 0 failed" || bad "summary 2: $(cat "$work/out.jsonl.summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["request_counts"] == {"total": 5, "completed": 5, "failed": 0} and s["status"] == "completed", s
P
[ ! -e "$work/out.jsonl.retry.tmp" ] && ok "no temporary file left" || bad "out.jsonl.retry.tmp left behind"

# 3. standard input and output
"$bin" batch - -o - --model "$work/m" --model-name tiny,deepseek-v4 <"$work/in.jsonl" >"$work/stdout.jsonl" 2>"$work/e4"; rc=$?
$py - "$work/stdout.jsonl" "$work/out.jsonl" <<'P' && [ "$rc" -eq 0 ] && ok "- and -o -: the same answers as the files" \
    || bad "stdin/stdout: exit $rc: $(cat "$work/e4")"
import json, sys
a = {l["custom_id"]: l["response"]["body"]["choices"] for l in map(json.loads, open(sys.argv[1]))}
b = {l["custom_id"]: l["response"]["body"]["choices"] for l in map(json.loads, open(sys.argv[2]))}
assert a == b and len(a) == 5, (a, b)
P
"$bin" batch - -o - --retry-failed --model "$work/m" </dev/null >/dev/null 2>"$work/e5"; rc=$?
[ "$rc" -eq 2 ] && grep -q "retry-failed needs an OUTPUT file" "$work/e5" && ok "--retry-failed with -o -: usage error" \
    || bad "--retry-failed -o -: exit $rc: $(cat "$work/e5")"

# 4. stop "" and --help
"$bin" batch "$work/stop.jsonl" -o "$work/stop.out" --model "$work/m" --model-name tiny 2>"$work/e6"; rc=$?
$py - "$work/stop.out" <<'P' && [ "$rc" -eq 3 ] && ok "stop \"\": invalid_field naming stop; the other line runs" \
    || bad "stop: exit $rc: $(cat "$work/stop.out") $(cat "$work/e6")"
import json, sys
r = {l["id"]: l for l in map(json.loads, open(sys.argv[1]))}
assert r["s1"]["error"]["code"] == "invalid_field" and r["s1"]["error"]["where"] == "stop", r["s1"]
assert r["s2"]["status"] == "succeeded", r["s2"]
P
"$bin" batch --help >"$work/help" 2>&1
grep -q -- "--device" "$work/help" && grep -q -- "--numerics" "$work/help" && grep -q -- "--retry-failed" "$work/help" \
    && ok "--help names --device, --numerics, --retry-failed" || bad "--help: $(cat "$work/help")"
exit $fail
