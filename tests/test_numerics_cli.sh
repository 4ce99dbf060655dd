#!/usr/bin/env bash
# test_numerics_cli.sh - the --numerics flag and V4_NUMERICS on an engine command
# (`v4fleet logits` on the golden tiny model, the first 96 of its tokens): exact (the default, the
# flag, or the environment) reproduces the golden logits byte for byte; fast runs, is
# deterministic (two runs, the same bytes) and gives finite logits of the same shape; an
# explicit --numerics wins over the environment; a bad value is a usage error (exit 2)
# from the flag and an error naming V4_NUMERICS (exit 1) from the environment.  `batch`
# results say which mode produced them (timing.numerics).
set -uo pipefail
: "${V4_BIN:?}" "${V4_TEST_DATA:?}"
G="$V4_TEST_DATA/golden/tiny"
work="$(mktemp -d "${V4_TMP:-/tmp}/numerics_cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset V4_NUMERICS
NPOS=96   # positions checked (a prefix of the golden sequence: the golden logits' first rows)
python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['sequence'][:int(sys.argv[3])], open(sys.argv[2], 'w'))" \
    "$G/tokens.json" "$work/seq.json" "$NPOS" || { echo "FAIL: cannot read $G/tokens.json"; exit 1; }
VOCAB="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$G/model/config.json")"
golden() { [ "$(stat -c %s "$1")" -eq $((NPOS * VOCAB * 4)) ] && cmp -s -n $((NPOS * VOCAB * 4)) "$1" "$G/logits.bin"; }
logits() { "$V4_BIN" logits --model "$G/model" --tokens "$work/seq.json" --threads 2 "$@"; }

logits --out "$work/default.bin" && golden "$work/default.bin" &&
    ok "default = exact = golden" || bad "the default run does not reproduce the golden logits"
logits --out "$work/exact.bin" --numerics exact && golden "$work/exact.bin" &&
    ok "--numerics exact = golden" || bad "--numerics exact does not reproduce the golden logits"
V4_NUMERICS=exact logits --out "$work/env_exact.bin" && golden "$work/env_exact.bin" &&
    ok "V4_NUMERICS=exact = golden" || bad "V4_NUMERICS=exact does not reproduce the golden logits"
V4_NUMERICS=fast logits --out "$work/over.bin" --numerics exact && golden "$work/over.bin" &&
    ok "--numerics exact wins over V4_NUMERICS=fast" || bad "--numerics exact did not win over the environment"

logits --out "$work/fast1.bin" --numerics fast || bad "--numerics fast failed"
V4_NUMERICS=fast logits --out "$work/fast2.bin" --threads 1 || bad "V4_NUMERICS=fast failed"
cmp -s "$work/fast1.bin" "$work/fast2.bin" && ok "fast is deterministic (2 threads / 1 thread, flag / env)" ||
    bad "two fast runs differ"
python3 - "$work/fast1.bin" $((NPOS * VOCAB * 4)) <<'PY' && ok "fast logits: same shape, finite" || bad "fast logits malformed"
import math, os, struct, sys
a = sys.argv[1]
assert os.path.getsize(a) == int(sys.argv[2]), "size"
v = struct.unpack("%df" % (os.path.getsize(a) // 4), open(a, "rb").read())
assert all(math.isfinite(x) for x in v), "non-finite"
PY

out="$(logits --out "$work/x.bin" --numerics fastest 2>&1)"; rc=$?
[ "$rc" -eq 2 ] && grep -q "numerics wants exact or fast, got 'fastest'" <<< "$out" &&
    ok "--numerics fastest: usage error" || bad "--numerics fastest: rc $rc: $out"
out="$(V4_NUMERICS=fastest logits --out "$work/x.bin" 2>&1)"; rc=$?
[ "$rc" -eq 1 ] && grep -q "V4_NUMERICS: unknown numerics mode 'fastest'" <<< "$out" &&
    ok "V4_NUMERICS=fastest: error naming it" || bad "V4_NUMERICS=fastest: rc $rc: $out"

# batch: every result names its mode
"$V4_BIN" mkmodel --out "$work/m" --preset tiny --seed 5 --no-sync > /dev/null 2>&1 || bad "mkmodel failed"
printf '%s\n' '{"id":"a","input_ids":[5,6,7],"max_tokens":4}' '{"id":"b","prompt":"hi","max_tokens":3}' > "$work/in.jsonl"
for mode in exact fast; do
    "$V4_BIN" batch "$work/in.jsonl" -o "$work/out_$mode.jsonl" --model "$work/m" --model-name tiny --numerics "$mode" \
        > /dev/null 2>&1 || bad "batch --numerics $mode failed"
    python3 - "$work/out_$mode.jsonl" "$mode" <<'PY' && ok "batch --numerics $mode: timing.numerics" || bad "batch --numerics $mode: timing.numerics missing or wrong"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2 and all(r["status"] == "succeeded" and r["timing"]["numerics"] == sys.argv[2] for r in rows), rows
PY
done

[ "$fails" -eq 0 ] || { echo "test_numerics_cli: $fails failure(s)"; exit 1; }
echo "test_numerics_cli: all checks passed"
