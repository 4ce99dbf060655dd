#!/usr/bin/env bash
# test_generate_cli.sh - `v4fleet generate --prompt TEXT`: streams text to stdout and a
# summary line to stderr; the same seed gives the same text; impossible parameters
# are rejected with one error line naming the parameter; --logit-bias forces a token.
set -u
bin=${V4_BIN:?V4_BIN not set}
work=$(mktemp -d "${V4_TMP:-/tmp}/gencli.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

"$bin" mkmodel --out "$work/m" --preset tiny --seed 3 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
run() { "$bin" generate --model "$work/m" --prompt "Tell me about message queues." "$@"; }

out1=$(run --max-tokens 24 --seed 11 --temperature 0.9 2>"$work/err1"); rc=$?
out2=$(run --max-tokens 24 --seed 11 --temperature 0.9 2>/dev/null)
[ "$rc" -eq 0 ] && ok "exit 0" || bad "exit $rc: $(cat "$work/err1")"
grep -qE 'generated 24 tokens.*finish_reason length' "$work/err1" && ok "summary line" || bad "summary: $(cat "$work/err1")"
[ -n "$out1" ] && [ "$out1" = "$out2" ] && ok "same seed, same text" || bad "texts differ or empty"
# the streamed answer ends with a line break, so that on a terminal the summary line
# (stderr) does not run into it (issue 19)
run --max-tokens 8 --seed 11 >"$work/out.txt" 2>/dev/null
[ "$(tail -c 1 "$work/out.txt" | od -An -c | tr -d ' ')" = '\n' ] && ok "answer ends with a newline" \
    || bad "answer's last byte: $(tail -c 1 "$work/out.txt" | od -An -c)"

expect() {  # expect DESCRIPTION EXIT PATTERN ARGS...
    local what=$1 code=$2 pat=$3; shift 3
    local out rc
    out=$(run "$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" -eq "$code" ] && grep -qE -- "$pat" <<<"$out" && [ "$(printf '%s\n' "$out" | wc -l)" -le 16 ]; then
        ok "$what"
    else
        bad "$what: exit $rc: $out"
    fi
}
expect "negative temperature" 1 'temperature' --temperature -1
expect "top_p out of range" 1 'top_p' --top-p 1.5
expect "top_k negative" 1 'top_k' --top-k -2
expect "context too small" 1 'exceed' --context 8 --max-tokens 4
expect "presence penalty out of range" 1 'presence_penalty.*\[-2, 2\]' --presence-penalty 3
expect "min_p out of range" 1 'min_p' --min-p 1.5
expect "logit bias syntax" 2 'logit-bias wants ID=BIAS' --logit-bias 5:3
expect "logit bias out of range" 2 'logit-bias wants ID=BIAS' --logit-bias 5=101
# a +100 bias forces the token at every position (the sampling fields of task packets)
forced=$("$bin" generate --model "$work/m" --prompt-ids <(echo '[0, 10, 11]') --max-tokens 6 --seed 2 \
         --logit-bias 300=100 --presence-penalty 1 --frequency-penalty 0.5 2>/dev/null)
[ "$forced" = "[300, 300, 300, 300, 300, 300]" ] && ok "--logit-bias 300=100 forces token 300" || bad "forced: $forced"
# --logprobs K: OpenAI's content array on stderr, one entry per token, K alternatives each
"$bin" generate --model "$work/m" --prompt-ids <(echo '[0, 10, 11]') --max-tokens 5 --seed 3 --logprobs 3 \
    >"$work/lp.ids" 2>"$work/lp.err"
/usr/bin/python3 - "$work/lp.ids" "$work/lp.err" <<'P' && ok "--logprobs 3: one entry per token, 3 alternatives, sorted" \
    || bad "--logprobs: $(cat "$work/lp.err")"
import json, sys
ids = json.load(open(sys.argv[1]))
lp = [json.loads(l)["logprobs"] for l in open(sys.argv[2]) if l.startswith('{"logprobs"')][0]
assert len(lp) == len([i for i in ids if i != 1]) == 5, (ids, lp)
for e in lp:
    t = e["top_logprobs"]
    assert len(t) == 3 and all(a["logprob"] >= b["logprob"] for a, b in zip(t, t[1:])) and e["logprob"] <= 0, e
P
expect "logprobs out of range" 2 'bad argument' --logprobs 21
expect "two prompt forms" 2 'exactly one' --prompt-ids "$work/x.json"
expect "bad number" 2 'bad argument' --max-tokens lots
V4_CUDA_MODE=fastest expect "bad V4_CUDA_MODE" 1 'V4_CUDA_MODE.*auto, resident or hybrid' --max-tokens 2
V4_CUDA_MODE=resident run --max-tokens 2 >/dev/null 2>"$work/err_mode" && ok "V4_CUDA_MODE on the CPU device: no effect" \
    || bad "V4_CUDA_MODE=resident with the CPU device: $(cat "$work/err_mode")"
exit $fail
