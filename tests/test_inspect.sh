#!/usr/bin/env bash
# test_inspect.sh - CLI contract of `v4fleet inspect` on the golden tiny checkpoint.
#
# Checks the summary numbers (tensor count, bytes per dtype, routed-expert vs trunk
# bytes, bytes per routed expert), --help, usage errors (exit 2), and that load
# errors (missing directory, truncated shard, missing config) exit 1 with one line
# "v4fleet inspect: <where>: <message>".  Scratch files go to a temp dir under
# V4_TMP (removed at exit).
set -u

bin=${V4_BIN:?V4_BIN not set}
model=${V4_TEST_DATA:?V4_TEST_DATA not set}/golden/tiny/model
fail=0

check() {  # check DESCRIPTION COMMAND...
    local what=$1; shift
    if ! "$@"; then echo "FAIL: $what"; fail=1; fi
}
has() { grep -qE -- "$2" <<<"$1"; }

# ---------------------------------------------------------------- summary numbers
out=$("$bin" inspect --model "$model" 2>&1)
rc=$?
echo "$out"
check "exit 0 on the golden model (got $rc)" test "$rc" -eq 0

# One routed expert of the tiny model, from its shapes (I8 packed FP4 + E8M0 scales):
#   w1, w3: weight [128,128] I8 = 16384 B + scale [128,8] = 1024 B
#   w2:     weight [256,64]  I8 = 16384 B + scale [256,4] = 1024 B
per_expert=$(( 2 * (128*128 + 128*8) + (256*64 + 256*4) ))
n_experts=$(( 4 * 16 ))                    # 4 layers x 16 routed experts
expert_bytes=$(( n_experts * per_expert ))
total=11482004                             # = index metadata.total_size
check "per-expert bytes is 52224" test "$per_expert" -eq 52224

check "tensor count / shards / total" has "$out" "^checkpoint: 532 tensors in 6 shards, $total bytes"
check "routed expert bytes" has "$out" "^routed experts: 384 tensors, $expert_bytes bytes .*, $n_experts experts"
check "trunk bytes" has "$out" "^trunk: 148 tensors, $(( total - expert_bytes )) bytes"
check "bytes per routed expert" has "$out" "^bytes per routed expert: $per_expert \(layers\.0\.ffn\.experts\.0: w1 16384\+1024, w3 16384\+1024, w2 16384\+1024"
check "all experts equal" has "$out" "all $n_experts routed experts have the same size"
# One sequence's decode state: 61440 more tokens add 15360 entries to each CSA layer
# (layers 1, 3: 128 + 128 dims) and 480 to the HCA layer (layer 2: 128 dims), 2 bytes a
# value (bf16 caches; f32 would double it).
seq=$(grep -E '^bytes per sequence \(bf16 KV caches\): 4096 tokens [0-9]+ .*, 65536 tokens [0-9]+ ' <<<"$out")
check "bytes per sequence line" test -n "$seq"
b4k=$(sed -E 's/.*4096 tokens ([0-9]+) .*/\1/' <<<"$seq"); b64k=$(sed -E 's/.*65536 tokens ([0-9]+) .*/\1/' <<<"$seq")
check "bytes per sequence grow by bf16 entries ($b4k -> $b64k)" test "$(( b64k - b4k ))" -eq $(( (2 * 15360 * 256 + 480 * 128) * 2 ))
check "dtype BF16" has "$out" "^  BF16 +40 tensors +5418752 bytes"
check "dtype F32" has "$out" "^  F32 +38 tensors +885812 bytes"
check "dtype I64" has "$out" "^  I64 +2 tensors +262144 bytes"
check "dtype I8" has "$out" "^  I8 +192 tensors +3145728 bytes"
check "dtype F8_E4M3" has "$out" "^  F8_E4M3 +34 tensors +1572864 bytes"
check "dtype F8_E8M0" has "$out" "^  F8_E8M0 +226 tensors +196704 bytes"
check "config layers/dim" has "$out" "^config: 4 layers \(\+0 MTP\), dim 256, vocab 4096"
check "config moe" has "$out" "16 routed experts, top-4, 1 shared"
check "hash layers" has "$out" "hash-routed layers: 2 \[0\.\.1\]"
check "window-only layers" has "$out" "window-only \(0\): +1 \[0\]"
check "CSA layers" has "$out" "CSA \(4\): +2 \[1,3\]"
check "HCA layers" has "$out" "HCA \(other\): +1 \[2\]"

# ---------------------------------------------------------------- CUDA plan (--gpu-mem)
# The plan the worker would follow, computed without a device (CUDA builds; a CPU-only
# build answers with a precise error, exit 1).
out=$("$bin" inspect --model "$model" --gpu-mem 1100M --concurrency 2 --context 4096 2>&1); rc=$?
if grep -q "a CUDA plan in a build without CUDA" <<<"$out"; then
    check "CPU-only build: the plan is refused with exit 1 (got $rc)" test "$rc" -eq 1
else
    echo "$out" | sed -n '/CUDA plan/,$p'
    check "plan exits 0 (got $rc)" test "$rc" -eq 0
    check "plan line: resident, every expert fits, sequences get the rest" has "$out" \
        "^CUDA plan \(fast numerics, 2 tasks of 4096 positions, [0-9]+ rows a step\): resident mode \(every expert fits the device\): trunk .* MiB, experts 3\.[0-9] MiB \(all resident\), sequences [0-9.]+ MiB \(the rest after the experts; 2 x 4096 positions claim 2\.[0-9] MiB\)"
    # one task of 4096 positions: the bytes of its claim (bf16 pages of 64 entries)
    check "claim line" has "$out" "^  a task of 4096 positions claims [0-9.]+ MiB of device cache pages; all tasks fit at once"
    # an explicit expert budget (half the experts) leaves the rest to the sequences
    out=$(V4_GPU_EXPERT_MEM=50% "$bin" inspect --model "$model" --gpu-mem 1100M --concurrency 4 --context 4096 2>&1)
    check "V4_GPU_EXPERT_MEM=50%: paged, 50% of the experts, the rest to the sequences" has "$out" \
        "resident mode \(paged experts within V4_GPU_EXPERT_MEM\): .*\(paged, 50\.0% of the routed experts\), sequences [0-9.]+ MiB \(the rest after the expert budget"
    out=$(V4_GPU_SEQ_MEM=10M "$bin" inspect --model "$model" --gpu-mem 1100M --concurrency 4 --context 4096 2>&1)
    check "V4_GPU_SEQ_MEM=10M: as asked" has "$out" "sequences 10\.0 MiB \(V4_GPU_SEQ_MEM;"
    # the model's whole context (1M positions) does not fit one task: said, with the longest that does
    out=$("$bin" inspect --model "$model" --gpu-mem 1100M --concurrency 4 2>&1)
    check "paged with a shrunk reserve" has "$out" "resident mode \(the experts do not fit the device: paged within its free memory\).*what one step's experts leave"
    check "the longest task is named" has "$out" "^  WARNING: a task of 1048576 positions cannot finish on this device: one task alone reaches [0-9]+ "
    out=$("$bin" inspect --model "$model" --gpu-mem 1G 2>&1)
    check "1 GiB (all headroom): hybrid" has "$out" "^CUDA plan .*: hybrid mode \(no room for the resident step with paged experts\)"
    out=$(V4_GPU_SEQ_MEM=bad "$bin" inspect --model "$model" --gpu-mem 1100M 2>&1); rc=$?
    check "a bad V4_GPU_SEQ_MEM exits 1 (got $rc)" test "$rc" -eq 1
    check "a bad V4_GPU_SEQ_MEM is named" has "$out" "^v4fleet inspect: V4_GPU_SEQ_MEM: 'bad' is not a byte count"
fi
"$bin" inspect --model "$model" --gpu-mem 85% >/dev/null 2>&1; rc=$?
check "--gpu-mem as a percentage exits 2 (got $rc)" test "$rc" -eq 2
"$bin" inspect --model "$model" --concurrency 4 >/dev/null 2>&1; rc=$?
check "--concurrency without --gpu-mem exits 2 (got $rc)" test "$rc" -eq 2
"$bin" inspect --model "$model" --gpu-mem 2G --context 0 >/dev/null 2>&1; rc=$?
check "--context 0 exits 2 (got $rc)" test "$rc" -eq 2

# ---------------------------------------------------------------- help and usage
out=$("$bin" inspect --help 2>/dev/null); rc=$?
check "--help exits 0 (got $rc)" test "$rc" -eq 0
check "--help prints usage on stdout" has "$out" "^usage: v4fleet inspect --model DIR"

"$bin" inspect >/dev/null 2>&1; rc=$?
check "missing --model exits 2 (got $rc)" test "$rc" -eq 2
"$bin" inspect --model "$model" --bogus >/dev/null 2>&1; rc=$?
check "unknown option exits 2 (got $rc)" test "$rc" -eq 2

# ---------------------------------------------------------------- load errors
tmp=$(mktemp -d "${V4_TMP:-/tmp}/test_inspect.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

expect_error() {  # expect_error DESCRIPTION REGEX ARGS...
    local what=$1 re=$2; shift 2
    local err rc
    err=$("$bin" inspect "$@" 2>&1 >/dev/null); rc=$?
    echo "  $what -> $err"
    check "$what exits 1 (got $rc)" test "$rc" -eq 1
    check "$what prints exactly one line" test "$(printf '%s\n' "$err" | wc -l)" -eq 1
    check "$what: '$err' matches '$re'" has "$err" "^v4fleet inspect: .*$re"
}

expect_error "missing directory" "does_not_exist: No such file or directory" --model "$tmp/does_not_exist"

expect_error "file instead of directory" "config.json: not a directory" --model "$model/config.json"

mkdir "$tmp/truncated"
cp "$model/config.json" "$model/model.safetensors.index.json" "$tmp/truncated/"
for f in "$model"/model-*.safetensors; do ln -s "$f" "$tmp/truncated/"; done
rm "$tmp/truncated/model-00003-of-00006.safetensors"
head -c 100000 "$model/model-00003-of-00006.safetensors" > "$tmp/truncated/model-00003-of-00006.safetensors"
expect_error "truncated shard" "model-00003-of-00006\.safetensors: tensor '.*': data_offsets end .* beyond the data area" \
    --model "$tmp/truncated"

mkdir "$tmp/noconfig"
for f in "$model"/model*; do ln -s "$f" "$tmp/noconfig/"; done
expect_error "missing config.json" "config" --model "$tmp/noconfig"

exit $fail
