#!/usr/bin/env bash
# test_bad_checkpoints.sh - a damaged checkpoint gives one clear error line and a
# non-zero exit from the engine commands (logits, generate), never a crash.
#
# Each case copies the golden tiny checkpoint to a scratch dir and damages it one way:
# truncated shard, wrong dtype (BF16 -> F16, same size), corrupt header JSON,
# missing tensor (renamed in the shard and the index), missing shard file,
# config with a bad compress_ratios length.  perl does the byte-exact edits (it is
# part of every Debian base system).
set -u

bin=${V4_BIN:?V4_BIN not set}
src=${V4_TEST_DATA:?V4_TEST_DATA not set}/golden/tiny/model
work=$(mktemp -d "${V4_TMP:-/tmp}/badckpt.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo '[1, 2, 3]' >"$work/tokens.json"
fail=0
passed=0

fresh() {  # fresh NAME -> path of a writable copy of the golden model
    rm -rf "$work/$1"
    cp -r "$src" "$work/$1"
    chmod -R u+w "$work/$1"
    echo "$work/$1"
}

expect_error() {  # expect_error NAME PATTERN: both commands fail with one line matching PATTERN
    local name=$1 pattern=$2 dir=$work/$1 out rc
    for cmd in logits generate; do
        if [ "$cmd" = logits ]; then
            out=$("$bin" logits --model "$dir" --tokens "$work/tokens.json" --out "$work/o.bin" 2>&1)
        else
            out=$("$bin" generate --model "$dir" --prompt-ids "$work/tokens.json" --max-tokens 2 --greedy 2>&1)
        fi
        rc=$?
        lines=$(printf '%s\n' "$out" | wc -l)
        if [ "$rc" -ne 1 ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$out"; then
            echo "FAIL: $name ($cmd): exit $rc, $lines line(s): $out"
            fail=1
        else
            echo "ok: $name ($cmd): $out"
            passed=$((passed + 1))
        fi
    done
}

d=$(fresh truncated)
truncate -s -1000 "$d/model-00003-of-00006.safetensors"
expect_error truncated 'model-00003-of-00006.safetensors'

d=$(fresh wrong_dtype)
perl -0777 -pi -e 's/("layers\.1\.attn\.q_norm\.weight":\{"dtype":)"BF16"/$1"F16" /' "$d/model-00003-of-00006.safetensors"
expect_error wrong_dtype 'layers\.1\.attn\.q_norm\.weight.*F16.*BF16'

d=$(fresh corrupt_header)
perl -0777 -pi -e 's/"data_offsets"/"data_offsetz"/' "$d/model-00004-of-00006.safetensors"
expect_error corrupt_header 'model-00004-of-00006.safetensors'

d=$(fresh missing_tensor)
perl -0777 -pi -e 's/layers\.2\.attn\.attn_sink/layers.2.attn.attn_sinq/' \
    "$d/model-00004-of-00006.safetensors" "$d/model.safetensors.index.json"
expect_error missing_tensor 'layers\.2\.attn\.attn_sink'

d=$(fresh bad_config)
perl -0777 -pi -e 's/"compress_ratios": \[\s*0,/"compress_ratios": [0, 0,/' "$d/config.json"
expect_error bad_config 'compress_ratios'

d=$(fresh missing_shard)
rm "$d/model-00005-of-00006.safetensors"
expect_error missing_shard 'model-00005-of-00006.safetensors'

# sanity: the untouched copy still works (the damage, not the copy, caused the errors)
d=$(fresh intact)
if ! "$bin" logits --model "$d" --tokens "$work/tokens.json" --out "$work/o.bin" >/dev/null 2>&1; then
    echo "FAIL: the intact copy does not load"
    fail=1
fi
echo "$passed checks passed"
exit $fail
