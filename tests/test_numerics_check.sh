#!/usr/bin/env bash
# test_numerics_check.sh - `v4fleet numerics-check`, the fast mode's validation contract
# (docs/numerics.md#the-validation-contract), as assertions:
#   - the golden tiny model, its first 128 token ids, 2 threads: every counted row holds
#     (kernels: calc_diff <= 1e-6 and equal NaN/Inf patterns per weight type and mode;
#     teacher-forced attention / MoE outputs and mHC streams <= 1e-5; routing >= 99.9%
#     identical with no difference outside a near-tie; hash routing identical; indexer
#     Jaccard >= 0.995; teacher-forced logits: argmax at margins > 0.1, >= 99.5%,
#     mean KL <= 1e-4, p99.9 <= 1e-2), exit 0; the tiny model's free-running logits (exact
#     tokens in, no forcing) are reported, not counted, because its chaos baseline (exact
#     against exact with +-1 ulp on the streams once, at position 0) fails the bounds;
#   - the same with --free-logits check counts those rows: on this chaotic model they
#     fail, the table says FAIL and the exit status is 1 (the check can fail);
#   - a second tiny model (mkmodel --seed 11) and `small` cut to 4 layers (one window,
#     one CSA, one HCA layer at dim 4096, 32 heads x 512, 64 experts): the contract holds;
#   - the table is the same at another chunk size and thread count (both modes are
#     batch-invariant and deterministic);
#   - usage errors exit 2: no --model, --numerics (the check runs both), a bad count,
#     paged-expert flags; a missing model exits 1 with the path.
# Env: V4_BIN, V4_TEST_DATA, V4_TMP (ctest).
set -uo pipefail
: "${V4_BIN:?}" "${V4_TEST_DATA:?}"
G="$V4_TEST_DATA/golden/tiny"
work="$(mktemp -d "${V4_TMP:-/tmp}/numerics_check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset V4_NUMERICS
nc() { "$V4_BIN" numerics-check "$@" 2> "$work/err.txt"; }
rows() { grep -cE ' (ok|FAIL)$' "$1"; }

python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['sequence'][:128], open(sys.argv[2], 'w'))" \
    "$G/tokens.json" "$work/seq.json" || { echo "FAIL: cannot read $G/tokens.json"; exit 1; }

# 1. golden tiny (default --free-logits auto: the chaos baseline decides)
nc --model "$G/model" --tokens "$work/seq.json" --threads 2 > "$work/tiny.txt"; rc=$?
cat "$work/tiny.txt"
[ "$rc" -eq 0 ] && grep -q "^numerics-check: the contract holds ($(rows "$work/tiny.txt") rows)" "$work/tiny.txt" &&
    ok "tiny: the contract holds" || bad "tiny: rc $rc: $(grep -E 'FAIL$' "$work/tiny.txt"; cat "$work/err.txt")"
for r in "kernel FP8 quant" "kernel FP8 bf16" "kernel FP4 quant" "kernel BF16 exact" "kernel BF16 bf16" "kernel F32 exact" \
         "sub-layer attention output" "sub-layer MoE output" "mHC streams after attention" "mHC streams after MoE" \
         "routing (score layers)" "routing (hash layers)" "indexer selections" "logits (teacher-forced)"; do
    grep -q "^$r.* ok$" "$work/tiny.txt" || bad "tiny: no passing row '$r'"
done
[ "$(grep -c '^logits (exact tokens in).*(report)$' "$work/tiny.txt")" -eq 4 ] &&
    grep -q "^numerics-check: the model is chaotic" "$work/tiny.txt" &&
    ok "tiny: chaotic (the +-1 ulp baseline fails its bounds): free-running rows reported, not counted" ||
    bad "tiny: free-running rows not marked (report) or no chaos line"
[ "$(grep -c '^chaos: exact +-1 ulp at pos 0 .*differs (report)$' "$work/tiny.txt")" -ge 2 ] &&
    ok "tiny: the chaos baseline rows differ" || bad "tiny: the chaos baseline does not show the model's chaos"
grep -q "^routing (score layers) .*100.000% (256/256)" "$work/tiny.txt" &&
    ok "tiny: 128 positions x 2 score-routed layers counted" || bad "tiny: routing pairs not 256"
grep -q "^numerics-check: 128/128 positions" "$work/err.txt" && ok "tiny: progress on stderr" || bad "tiny: no progress line"

# 2. the check can fail: counted free-running rows on the chaotic model
nc --model "$G/model" --tokens "$work/seq.json" --threads 2 --free-logits check > "$work/tiny_check.txt"; rc=$?
[ "$rc" -eq 1 ] && grep -q "^numerics-check: the contract FAILS: [1-4] of" "$work/tiny_check.txt" &&
    grep -qE "^logits \(exact tokens in\).* FAIL$" "$work/tiny_check.txt" &&
    ok "tiny --free-logits check: FAIL rows and exit 1" || bad "tiny --free-logits check: rc $rc"

# 3. batch invariance / determinism: another chunk and thread count give the same table
nc --model "$G/model" --tokens "$work/seq.json" --threads 1 --chunk 5 > "$work/tiny_c5.txt"
cmp -s "$work/tiny.txt" "$work/tiny_c5.txt" && ok "tiny: same table at --chunk 5 --threads 1" ||
    bad "tiny: the table depends on chunk/threads: $(diff "$work/tiny.txt" "$work/tiny_c5.txt" | head -5)"

# 4. other models
"$V4_BIN" mkmodel --out "$work/t11" --preset tiny --seed 11 --no-sync > /dev/null 2>&1 || bad "mkmodel tiny failed"
nc --model "$work/t11" --positions 96 --threads 2 > "$work/t11.txt"; rc=$?
[ "$rc" -eq 0 ] && ok "tiny seed 11: the contract holds" || bad "tiny seed 11: rc $rc: $(grep -E 'FAIL$' "$work/t11.txt")"
"$V4_BIN" mkmodel --out "$work/s4" --preset small --layers 4 --seed 3 --no-sync > /dev/null 2>&1 || bad "mkmodel small failed"
nc --model "$work/s4" --positions 48 --threads 2 > "$work/s4.txt"; rc=$?
cat "$work/s4.txt"
[ "$rc" -eq 0 ] && ok "small (4 layers): the contract holds" || bad "small 4 layers: rc $rc: $(grep -E 'FAIL$' "$work/s4.txt"; cat "$work/err.txt")"
rm -rf "$work/s4"

# 5. usage
use() { # use WANT_RC PATTERN ARGS...
    local want=$1 pat=$2; shift 2
    out="$("$V4_BIN" numerics-check "$@" 2>&1)"; rc=$?
    [ "$rc" -eq "$want" ] && grep -q -- "$pat" <<< "$out" && ok "numerics-check $*: rc $want" ||
        bad "numerics-check $*: rc $rc, output: $out"
}
use 2 "usage:"
use 2 "does not apply" --model "$G/model" --numerics fast
use 2 "wants a count" --model "$G/model" --positions 0
use 2 "paged experts" --model "$G/model" --host-cache-bytes 1M
use 2 "unexpected argument" --model "$G/model" --free-logits maybe
use 1 "$work/none" --model "$work/none"

[ "$fails" -eq 0 ] && echo "all ok" || echo "$fails failed"
exit $((fails > 0))
