#!/usr/bin/env bash
# test_mkmodel_flash.sh - `v4fleet mkmodel --preset flash` (the real V4-Flash config)
# and bench_flash, the parts that fit a 2-vCPU CI box (~2 s):
#   - the plan (--dry-run) against numbers computed here by hand from the spec's
#     tensor inventory (v4-decode.md §3.2) and totals (§3.4): full 43 layers =
#     67,612 tensors, 156,015,698,140 bytes, 2/21/20 window/CSA/HCA layers, 258 routed
#     experts per token = 3,449,290,752 bytes; 1 layer = 1571 tensors and the byte sum
#     of its shapes; 4 layers = one layer of each kind;
#   - --layers / --preset errors (exit 2), output independent of --threads;
#   - bench_flash (next to the binary: build/bench/bench_flash) on the golden tiny model,
#     --device cpu: the table row, and the divergence report against the golden greedy
#     ids ("none in 32", and position 5 when the expected id 5 is altered).
# Writing a real 1-layer flash checkpoint (~5.7 GB, ~10 s here) and benchmarking it on
# the CPU for 2 tokens runs only with V4_TEST_FLASH_L1=1 (disk and time).
# Env: V4_BIN, V4_TMP, V4_TEST_DATA (ctest).  Exit 77 = skipped.
set -u
BIN=${V4_BIN:-}
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "SKIP: V4_BIN not set"; exit 77; }
TMPROOT=${V4_TMP:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$TMPROOT/mkmodel_flash.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
DATA=${V4_TEST_DATA:-$(dirname "$0")/data}
BENCH=${V4_BENCH_FLASH:-$(dirname "$BIN")/bench/bench_flash}

fail=0
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
val() { grep "^plan\.$1 " "$2" | cut -d' ' -f2; }
eq() { # eq DESCRIPTION GOT WANT
    if [ "$2" = "$3" ]; then echo "ok   $1 = $3"; else echo "FAIL $1: got '$2', want '$3'"; fail=1; fi
}

# ---- hand-computed sizes (spec §3.2: shapes [out, in], FP8 scale grid ceil/128,
# FP4 = packed bytes [out, in/2] + scales [out, in/32]; F32 4 B, BF16 2 B, I64 8 B).
D=4096 V=129280 E=256
fp8() { echo $(( $1 * $2 + (($1 + 127) / 128) * (($2 + 127) / 128) )); }
fp4() { echo $(( $1 * $2 / 2 + $1 * $2 / 32 )); }
EXPERT=$(( $(fp4 2048 $D) * 2 + $(fp4 $D 2048) ))
eq "one routed expert (spec: 13,369,344)" $EXPERT 13369344
HC=$(( 2 * 24 * 16384 * 4 + 2 * 24 * 4 + 2 * 3 * 4 ))      # hc_{attn,ffn}_{fn,base,scale}
ATTN=$(( 64 * 4 + $(fp8 1024 $D) + $(fp8 32768 1024) + 1024 * 2 + $(fp8 8192 4096) \
         + $(fp8 512 $D) + 512 * 2 + $(fp8 $D 8192) ))      # sink, wq_a, wq_b, q_norm, wo_a, wkv, kv_norm, wo_b
NORMS=$(( 2 * D * 2 ))                                        # attn_norm, ffn_norm
SHARED=$(( $(fp8 2048 $D) * 2 + $(fp8 $D 2048) ))
GATE=$(( E * D * 2 ))
TID2EID=$(( V * 6 * 8 ))
LAYER0=$(( HC + ATTN + NORMS + SHARED + E * EXPERT + TID2EID + GATE ))
GLOBAL=$(( V * D * 2 * 2 + D * 2 + 4 * 16384 * 4 + 4 * 4 + 4 ))  # embed, head, norm, hc_head_{fn,base,scale}

"$BIN" mkmodel --dry-run --preset flash > "$WORK/full.txt"
check "dry-run flash (43 layers)" test $? -eq 0
eq "flash layers" "$(val layers "$WORK/full.txt")" 43
eq "flash window-only / CSA / HCA layers" \
    "$(val window_only "$WORK/full.txt")/$(val csa "$WORK/full.txt")/$(val hca "$WORK/full.txt")" 2/21/20
eq "flash hash layers" "$(val hash_layers "$WORK/full.txt")" 3
eq "flash shards (embed + 43 + head)" "$(val shards "$WORK/full.txt")" 45
eq "flash tensors (spec: 67,612)" "$(val tensors "$WORK/full.txt")" 67612
eq "flash tensor bytes (spec: 156,015,698,140)" "$(val tensor_bytes "$WORK/full.txt")" 156015698140
eq "flash routed-expert bytes per token (258 experts)" "$(val token_expert_bytes "$WORK/full.txt")" \
    $(( 43 * 6 * EXPERT ))
check "flash summary line" grep -q "preset flash: 43 layers, dim 4096, 256 experts (top 6), vocab 129280, 45 shards" \
    "$WORK/full.txt"

"$BIN" mkmodel --dry-run --preset flash --layers 1 > "$WORK/l1.txt"
check "dry-run flash --layers 1" test $? -eq 0
eq "1 layer: tensors (1565 + 6 global)" "$(val tensors "$WORK/l1.txt")" 1571
eq "1 layer: tensor bytes (layer 0 + globals, by hand)" "$(val tensor_bytes "$WORK/l1.txt")" $(( LAYER0 + GLOBAL ))
eq "1 layer: hash layers" "$(val hash_layers "$WORK/l1.txt")" 1
# Bytes per token, by hand: the whole layer except the 250 unrouted experts and all
# but 6 rows of tid2eid, + hc_head/norm/head + one embedding row.
eq "1 layer: bytes per token" "$(val token_bytes "$WORK/l1.txt")" \
    $(( LAYER0 - (E - 6) * EXPERT - TID2EID + 6 * 8 + GLOBAL - V * D * 2 + D * 2 ))

"$BIN" mkmodel --dry-run --preset flash --layers 4 > "$WORK/l4.txt"
eq "4 layers: window-only / CSA / HCA" \
    "$(val window_only "$WORK/l4.txt")/$(val csa "$WORK/l4.txt")/$(val hca "$WORK/l4.txt")" 2/1/1
eq "4 layers: tensors (4 x 1565 + 11 CSA + 4 HCA + 6)" "$(val tensors "$WORK/l4.txt")" $(( 4 * 1565 + 11 + 4 + 6 ))
eq "4 layers: hash layers" "$(val hash_layers "$WORK/l4.txt")" 3

"$BIN" mkmodel --dry-run --preset flash --layers 44 >/dev/null 2>&1
check "--layers 44 on flash is a usage error (2)" test $? -eq 2
"$BIN" mkmodel --dry-run --preset flash --layers 0 >/dev/null 2>&1
check "--layers 0 is a usage error (2)" test $? -eq 2
"$BIN" mkmodel --dry-run --preset large >/dev/null 2>&1
check "unknown preset is a usage error (2)" test $? -eq 2
"$BIN" mkmodel --dry-run --preset tiny > "$WORK/tiny.txt"
check "tiny plan unchanged (11482004 tensor bytes, 6 shards)" \
    test "$(val tensor_bytes "$WORK/tiny.txt")/$(val shards "$WORK/tiny.txt")" = 11482004/6

# Output independent of --threads (tiny, 2 layers: also --layers on another preset).
"$BIN" mkmodel --out "$WORK/t1" --preset tiny --layers 2 --threads 1 --no-sync >/dev/null
"$BIN" mkmodel --out "$WORK/t3" --preset tiny --layers 2 --threads 3 --no-sync >/dev/null
check "tiny --layers 2: 4 shards" test -f "$WORK/t1/model-00004-of-00004.safetensors"
check "--threads 1 and 3 write identical files" \
    test "$(cd "$WORK/t1" && sha256sum *)" = "$(cd "$WORK/t3" && sha256sum *)"

# ---- bench_flash on the golden tiny model (CPU).
if [ -x "$BENCH" ]; then
    GOLD=$DATA/golden/tiny
    "$BENCH" --model "$GOLD/model" --device cpu --tokens 4 --runs 2 --bw 10 > "$WORK/bench.txt" 2>&1
    check "bench_flash --device cpu" test $? -eq 0
    check "bench row: 4 layers, cpu, all resident, 2 x 4" \
        grep -q '^| .* | 4 layers, dim 256, 16 experts top-4, cpu, experts all resident | 2 x 4 | ' "$WORK/bench.txt"
    "$BENCH" --model "$GOLD/model" --device cpu --diverge 32 --golden "$GOLD/tokens.json" > "$WORK/div.txt" 2>&1
    check "diverge cpu vs golden: none in 32" grep -q "cpu vs golden *none in 32" "$WORK/div.txt"
    check "diverge cpu vs cpu: none in 32" grep -q "cpu vs cpu *none in 32" "$WORK/div.txt"
    # An altered golden id at generated position 5 must be reported there.
    /usr/bin/python3 - "$GOLD/tokens.json" "$WORK/bad.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1])); t['generated'][5] = (t['generated'][5] + 1) % 4096
json.dump(t, open(sys.argv[2], 'w'))
EOF
    "$BENCH" --model "$GOLD/model" --device cpu --diverge 32 --golden "$WORK/bad.json" > "$WORK/div2.txt" 2>&1
    check "an altered golden id is found at position 5" \
        grep -q "cpu vs golden *first difference at generated position 5 " "$WORK/div2.txt"
    "$BENCH" --model "$GOLD/model" --diverge 4 > "$WORK/div3.txt" 2>&1
    rc=$?
    if grep -q "no GPU: skipped" "$WORK/div3.txt"; then
        check "cpu vs cuda without a GPU: skipped, exit 0" test $rc -eq 0
    else
        check "cpu vs cuda on the golden model: none in 4" grep -q "cpu vs cuda *none in 4" "$WORK/div3.txt"
    fi
else
    echo "note: $BENCH not built, bench_flash checks skipped"
fi

# ---- opt-in: a real 1-layer flash checkpoint, written and benchmarked on the CPU.
if [ "${V4_TEST_FLASH_L1:-0}" = 1 ]; then
    "$BIN" mkmodel --out "$WORK/f1" --preset flash --layers 1 --no-sync
    check "mkmodel flash --layers 1" test $? -eq 0
    sz=$(cat "$WORK"/f1/model-*.safetensors | wc -c)
    eq "flash L1 shard bytes = plan.file_bytes" "$sz" "$(val file_bytes "$WORK/l1.txt")"
    if [ -x "$BENCH" ]; then
        "$BENCH" --model "$WORK/f1" --device cpu --tokens 2 --runs 1 | tee "$WORK/f1bench.txt"
        check "bench_flash on flash L1, 2 tokens" grep -q "| 1 layers, dim 4096, 256 experts top-6, cpu" "$WORK/f1bench.txt"
    fi
fi

[ $fail -eq 0 ] && echo "test_mkmodel_flash: all checks passed" || echo "test_mkmodel_flash: FAILED"
exit $fail
