#!/usr/bin/env bash
# test_mkmodel.sh - CLI contract of `v4fleet mkmodel` (tiny preset only; ~1 s).
#
# Env (set by ctest): V4_BIN = the v4fleet binary, V4_TMP = scratch dir,
# V4_TEST_DATA = tests/data (for the golden tiny checkpoint layout).
# Checks: same seed -> byte-identical files; other seed -> different weights but the
# same headers; refusal to overwrite a non-empty dir, --force; and (with python3) a
# structural check of every shard: header format, contiguous offsets, index <-> shard
# agreement, total_size, headers/index identical to the golden tiny model's, config
# equal to the golden config, no NaN codes, finite floats, distinct tid2eid ids;
# the tokenizer files load and round-trip text (tokenize/detokenize), with BOS 0 /
# EOS 1 and ids that fit the vocabulary; and, when the logits command is built in,
# usable logits from the decode engine.
# Exit 77 = skipped.
set -u
BIN=${V4_BIN:-}
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "SKIP: V4_BIN not set"; exit 77; }
TMPROOT=${V4_TMP:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$TMPROOT/mkmodel_test.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
GOLDEN=${V4_TEST_DATA:-$(dirname "$0")/data}/golden/tiny/model

fail=0
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
sums() { (cd "$1" && sha256sum config.json model.safetensors.index.json model-*.safetensors \
                              tokenizer.json tokenizer_config.json); }

check "mkmodel tiny seed 7 (a)" "$BIN" mkmodel --out "$WORK/a" --preset tiny --seed 7
check "mkmodel tiny seed 7 (b)" "$BIN" mkmodel --out "$WORK/b" --preset tiny --seed 7 --no-sync
check "mkmodel tiny seed 8" "$BIN" mkmodel --out "$WORK/c" --preset tiny --seed 8 --no-sync
check "6 shards + config + index + 2 tokenizer files" test "$(ls "$WORK/a" | wc -l)" -eq 10
for f in config.json model.safetensors.index.json model-00001-of-00006.safetensors \
         model-00006-of-00006.safetensors tokenizer.json tokenizer_config.json; do
    check "exists $f" test -s "$WORK/a/$f"
done
check "no temporary files left" test -z "$(ls -A "$WORK/a" | grep '\.tmp$')"
check "same seed -> identical files" test "$(sums "$WORK/a")" = "$(sums "$WORK/b")"
shard_sums() { sums "$1" | grep ' model-' | cut -c1-64 | sort; }
check "other seed -> same tokenizer" cmp -s "$WORK/a/tokenizer.json" "$WORK/c/tokenizer.json"
check "other seed -> every shard differs" \
    test -z "$(comm -12 <(shard_sums "$WORK/a") <(shard_sums "$WORK/c"))"
check "other seed -> same index" cmp -s "$WORK/a/model.safetensors.index.json" \
    "$WORK/c/model.safetensors.index.json"

# Overwrite protection.
"$BIN" mkmodel --out "$WORK/a" --seed 9 >/dev/null 2>&1
check "refuses a non-empty dir" test $? -ne 0
check "refusal left the files alone" test "$(sums "$WORK/a")" = "$(sums "$WORK/b")"
check "--force overwrites" "$BIN" mkmodel --out "$WORK/a" --seed 8 --force --no-sync
check "--force result = seed 8" test "$(sums "$WORK/a")" = "$(sums "$WORK/c")"
"$BIN" mkmodel --out "$WORK/x" --preset nope >/dev/null 2>&1
check "unknown preset is an error" test $? -eq 2
"$BIN" mkmodel >/dev/null 2>&1
check "missing --out is an error" test $? -eq 2

if command -v python3 >/dev/null 2>&1; then
    check "python structural check" python3 - "$WORK/b" "$GOLDEN" <<'EOF'
import json, os, struct, sys
d, golden = sys.argv[1], sys.argv[2]
SIZE = {'BF16': 2, 'F32': 4, 'I64': 8, 'I8': 1, 'F8_E4M3': 1, 'F8_E8M0': 1}
errors = []
def err(m): errors.append(m)
idx = json.load(open(os.path.join(d, 'model.safetensors.index.json')))
cfg = json.load(open(os.path.join(d, 'config.json')))
wm = idx['weight_map']
files = sorted(set(wm.values()))
total = 0
headers = {}
for f in files:
    b = open(os.path.join(d, f), 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    if n % 8: err(f + ': header length not a multiple of 8')
    h = json.loads(b[8:8 + n]); headers[f] = b[:8 + n]
    if h.pop('__metadata__', None) != {'format': 'pt'}: err(f + ': bad __metadata__')
    data = b[8 + n:]; pos = 0
    for name, t in h.items():
        s, e = t['data_offsets']
        numel = 1
        for x in t['shape']: numel *= x
        if s != pos or e - s != numel * SIZE[t['dtype']]: err(f + ': ' + name + ': bad offsets')
        pos = e; total += e - s
        if wm.get(name) != f: err(name + ': not in the index under ' + f)
        raw = data[s:e]
        if t['dtype'] == 'F8_E4M3' and (raw.count(b'\x7f') or raw.count(b'\xff')):
            err(name + ': FP8 NaN code')
        if t['dtype'] == 'F8_E8M0' and raw.count(b'\xff'): err(name + ': E8M0 NaN')
        if t['dtype'] == 'F32':
            if any(v != v or abs(v) == float('inf') for v in struct.unpack('<%df' % (len(raw) // 4), raw)):
                err(name + ': non-finite F32')
        if t['dtype'] == 'BF16':
            if any((v & 0x7f80) == 0x7f80 for v in memoryview(raw).cast('H')): err(name + ': non-finite BF16')
        if name.endswith('tid2eid'):
            k = t['shape'][1]; ids = struct.unpack('<%dq' % (len(raw) // 8), raw)
            for r in range(t['shape'][0]):
                row = ids[r * k:(r + 1) * k]
                if len(set(row)) != k or min(row) < 0 or max(row) >= cfg['n_routed_experts']:
                    err(name + ': bad row %d' % r); break
    if pos != len(data): err(f + ': data area has %d extra bytes' % (len(data) - pos))
    if len(h) != sum(1 for v in wm.values() if v == f): err(f + ': index lists other tensors')
if idx['metadata']['total_size'] != total: err('total_size mismatch')
if len(cfg['compress_ratios']) != cfg['num_hidden_layers']: err('compress_ratios length')
if os.path.isdir(golden):
    gcfg = json.load(open(os.path.join(golden, 'config.json')))
    if gcfg != cfg or list(gcfg) != list(cfg): err('config.json differs from the golden tiny config')
    if open(os.path.join(golden, 'model.safetensors.index.json'), 'rb').read() != \
       open(os.path.join(d, 'model.safetensors.index.json'), 'rb').read():
        err('index differs from the golden tiny index')
    for f in files:
        g = open(os.path.join(golden, f), 'rb').read(len(headers[f]))
        if g != headers[f]: err(f + ': header differs from the golden tiny shard')
else:
    print('note: golden model not found, layout comparison skipped')
for e in errors[:20]: print('  ' + e)
print('  %d tensors in %d shards, %d bytes' % (len(wm), len(files), total))
sys.exit(1 if errors else 0)
EOF
else
    # Minimal check without python: header length (u64 LE) is a multiple of 8.
    for f in "$WORK"/b/model-*.safetensors; do
        n=$(od -An -tu8 -N8 "$f" | tr -d ' ')
        check "$(basename "$f") header length $n % 8 == 0" test $((n % 8)) -eq 0
    done
fi

# The tokenizer: loads with the engine's loader and round-trips text exactly.
if "$BIN" tokenize --help >/dev/null 2>&1; then
    printf 'The model reads text.\n<｜User｜>héllo 世界 42<｜Assistant｜></think>' > "$WORK/text.txt"
    "$BIN" tokenize --tokenizer "$WORK/b" < "$WORK/text.txt" > "$WORK/text.ids"
    check "tokenize with the generated tokenizer" test $? -eq 0
    check "User, Assistant and </think> are single tokens (2, 3, 5)" \
        grep -q '^\[[0-9,]*,2,[0-9,]*,3,5\]$' "$WORK/text.ids"
    "$BIN" detokenize --tokenizer "$WORK/b" < "$WORK/text.ids" > "$WORK/text.out"
    check "detokenize round trip" cmp -s "$WORK/text.txt" "$WORK/text.out"
    check "BOS 0 and EOS 1 decode to DeepSeek's markers" \
        test "$(printf '[0,1]' | "$BIN" detokenize --tokenizer "$WORK/b")" = "<｜begin▁of▁sentence｜><｜end▁of▁sentence｜>"
    check "the last vocabulary id (4095) decodes" test -n "$(printf '[4095]' | "$BIN" detokenize --tokenizer "$WORK/b")"
    out4096="$(printf '[4096]' | "$BIN" detokenize --tokenizer "$WORK/b" 2>"$WORK/d.err")"
    check "id 4096 (outside the vocabulary) decodes to nothing, as Hugging Face tokenizers" \
        test $? -eq 0 -a -z "$out4096"
    check "... and says so" grep -q "1 id with no token in the vocabulary" "$WORK/d.err"
else
    echo "note: tokenize command not built in, tokenizer check skipped"
fi

# The weights must give usable logits: run the decode engine (when it is built in)
# over 24 positions and check finite logits, a sane spread and a varying argmax.
if command -v python3 >/dev/null 2>&1 && "$BIN" logits --help >/dev/null 2>&1; then
    python3 -c 'import json, random; r = random.Random(3); print(json.dumps([r.randrange(4096) for _ in range(24)]))' \
        > "$WORK/tokens.json"
    check "logits on the tiny model" "$BIN" logits --model "$WORK/b" --tokens "$WORK/tokens.json" \
        --out "$WORK/logits.bin"
    check "logits finite, spread, varied argmax" python3 - "$WORK/logits.bin" <<'EOF'
import math, struct, sys
b = open(sys.argv[1], 'rb').read(); V = 4096; n = len(b) // (4 * V)
am = []; ok = n == 24
for p in range(n):
    l = struct.unpack('<%df' % V, b[p * V * 4:(p + 1) * V * 4])
    if not all(math.isfinite(x) for x in l): ok = False; print('  non-finite logits at', p)
    m = sum(l) / V; sd = math.sqrt(sum((x - m) ** 2 for x in l) / V)
    if not 0.1 < sd < 100: ok = False; print('  logit std %g at %d' % (sd, p))
    am.append(l.index(max(l)))
print('  %d positions, %d distinct argmax' % (n, len(set(am))))
sys.exit(0 if ok and len(set(am)) >= n // 2 else 1)
EOF
else
    echo "note: logits command or python3 not available, engine check skipped"
fi

[ $fail -eq 0 ] && echo "test_mkmodel: all checks passed" || echo "test_mkmodel: FAILED"
exit $fail
