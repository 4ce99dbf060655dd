#!/usr/bin/env bash
# test_numerics_cli.sh - the --numerics flag and V4_NUMERICS on an engine command
# (`v4fleet logits` on the golden tiny model, its 320 tokens): exact (the default, the
# flag, or the environment) reproduces the golden logits byte for byte; fast runs, is
# deterministic (two runs, the same bytes) and gives finite logits of the same shape; an
# explicit --numerics wins over the environment; a bad value is a usage error (exit 2)
# from the flag and an error naming V4_NUMERICS (exit 1) from the environment.
set -uo pipefail
: "${V4_BIN:?}" "${V4_TEST_DATA:?}"
G="$V4_TEST_DATA/golden/tiny"
work="$(mktemp -d "${V4_TMP:-/tmp}/numerics_cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset V4_NUMERICS
python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['sequence'], open(sys.argv[2], 'w'))" \
    "$G/tokens.json" "$work/seq.json" || { echo "FAIL: cannot read $G/tokens.json"; exit 1; }
logits() { "$V4_BIN" logits --model "$G/model" --tokens "$work/seq.json" --threads 2 "$@"; }

logits --out "$work/default.bin" && cmp -s "$work/default.bin" "$G/logits.bin" &&
    ok "default = exact = golden" || bad "the default run does not reproduce the golden logits"
logits --out "$work/exact.bin" --numerics exact && cmp -s "$work/exact.bin" "$G/logits.bin" &&
    ok "--numerics exact = golden" || bad "--numerics exact does not reproduce the golden logits"
V4_NUMERICS=exact logits --out "$work/env_exact.bin" && cmp -s "$work/env_exact.bin" "$G/logits.bin" &&
    ok "V4_NUMERICS=exact = golden" || bad "V4_NUMERICS=exact does not reproduce the golden logits"
V4_NUMERICS=fast logits --out "$work/over.bin" --numerics exact && cmp -s "$work/over.bin" "$G/logits.bin" &&
    ok "--numerics exact wins over V4_NUMERICS=fast" || bad "--numerics exact did not win over the environment"

logits --out "$work/fast1.bin" --numerics fast || bad "--numerics fast failed"
V4_NUMERICS=fast logits --out "$work/fast2.bin" --threads 1 || bad "V4_NUMERICS=fast failed"
cmp -s "$work/fast1.bin" "$work/fast2.bin" && ok "fast is deterministic (2 threads / 1 thread, flag / env)" ||
    bad "two fast runs differ"
python3 - "$work/fast1.bin" "$G/logits.bin" <<'PY' && ok "fast logits: same shape, finite" || bad "fast logits malformed"
import math, os, struct, sys
a, b = sys.argv[1], sys.argv[2]
assert os.path.getsize(a) == os.path.getsize(b), "size"
v = struct.unpack("%df" % (os.path.getsize(a) // 4), open(a, "rb").read())
assert all(math.isfinite(x) for x in v), "non-finite"
PY

out="$(logits --out "$work/x.bin" --numerics fastest 2>&1)"; rc=$?
[ "$rc" -eq 2 ] && grep -q "numerics wants exact or fast, got 'fastest'" <<< "$out" &&
    ok "--numerics fastest: usage error" || bad "--numerics fastest: rc $rc: $out"
out="$(V4_NUMERICS=fastest logits --out "$work/x.bin" 2>&1)"; rc=$?
[ "$rc" -eq 1 ] && grep -q "V4_NUMERICS: unknown numerics mode 'fastest'" <<< "$out" &&
    ok "V4_NUMERICS=fastest: error naming it" || bad "V4_NUMERICS=fastest: rc $rc: $out"

[ "$fails" -eq 0 ] || { echo "test_numerics_cli: $fails failure(s)"; exit 1; }
echo "test_numerics_cli: all checks passed"
