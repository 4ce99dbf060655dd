#!/usr/bin/env bash
# test_device_check.sh - scripts/device-check.sh keeps working where no GPU is: it is the one
# call a borrowed GPU machine gets, so it must not rot between loans.
#   1. --help prints the modes; a bad flag exits 2.
#   2. Without a GPU (and without V4_DEVICE_CHECK_FORCE) it prints the facts and exits 0
#      with "no GPU: skipped", summary.txt and 01-facts.log in $OUT.
#   3. V4_DEVICE_CHECK_FORCE=1, default mode, in a build tree of its own: configure and build
#      the full tree, then every step; every GPU step reads SKIPPED, nothing FAIL, exit 0,
#      one log per step in $OUT, the binaries find libcublasLt through their RUNPATH.
#   4. A budget too small for the build: the steps after it read NO TIME or are not reached,
#      and the run still writes its summary (a cut-off run keeps what it learned).
# The whole bare-machine rehearsal (no libraries, no network, carried packages) is
# scripts/device-rehearse.sh (root, a debootstrap rootfs): docs/cuda.md.
# SKIPPED (77) without nvcc, or on a machine that has a GPU (device-check is then run
# for real, by hand), and in a build without the CUDA backend (V4_BIN's CMakeCache.txt:
# the ASan build).  Needs V4_TMP.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DC=$ROOT/scripts/device-check.sh
TMP="$(mktemp -d "${V4_TMP:-/tmp}/devcheck.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then echo "SKIPPED: no nvcc (device-check builds the CUDA tree)"; exit 77; fi
# Once per suite: in the build that has the CUDA backend (the ASan build has none).
CACHE=$(dirname "${V4_BIN:-/nonexistent/x}")/CMakeCache.txt
if [ -f "$CACHE" ] && ! grep -q '^V4_CUDA:BOOL=ON' "$CACHE"; then
    echo "SKIPPED: the build under test has no CUDA backend (the release build runs this test)"; exit 77
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIPPED: this machine has a GPU: run scripts/device-check.sh itself"; exit 77
fi

# 1. usage
bash "$DC" --help | grep -q -- '--sanitize' || fail "--help does not list the modes"
bash "$DC" --bogus >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "a bad flag exits $rc, not 2"

# 2. no GPU, not forced: facts, then "no GPU: skipped", exit 0
OUT=$TMP/out-plain V4_DEVICE_CHECK_BUILD=$TMP/build bash "$DC" >"$TMP/plain.txt" 2>&1; rc=$?
[ $rc -eq 0 ] || { cat "$TMP/plain.txt"; fail "no GPU, not forced: exit $rc"; }
grep -q 'no GPU: skipped' "$TMP/plain.txt" || fail "no GPU, not forced: no 'no GPU: skipped' line"
grep -qE '^facts +SKIPPED' "$TMP/out-plain/summary.txt" || fail "summary.txt lacks 'facts SKIPPED'"
grep -q 'gpu_facts: cuBLASLt' "$TMP/out-plain/01-facts.log" || fail "01-facts.log lacks the cuBLASLt version"
[ -f "$TMP/build/CMakeCache.txt" ] && fail "not forced, yet it configured a build"

# 3. forced: the full build and every step
t0=$(date +%s)
OUT=$TMP/out V4_DEVICE_CHECK_FORCE=1 V4_DEVICE_CHECK_SCALE=8 V4_DEVICE_CHECK_BUILD=$TMP/build \
    bash "$DC" >"$TMP/forced.txt" 2>&1
rc=$?
echo "forced run: exit $rc in $(($(date +%s) - t0)) s"
sed -n '/summary (/,$p' "$TMP/forced.txt" | head -40
[ $rc -eq 0 ] || { tail -40 "$TMP/forced.txt"; fail "forced run exited $rc"; }
S=$TMP/out/summary.txt
for st in facts libs configure build runpath fast-selftest gpu-exact diverge mkmodel-flash bench-linear bench-flash; do
    grep -qE "^$st " "$S" || fail "summary has no '$st' row"
done
for st in configure build runpath; do
    grep -qE "^$st +ok " "$S" || fail "'$st' is not ok: $(grep -E "^$st " "$S")"
done
for st in facts fast-selftest gpu-exact diverge mkmodel-flash bench-linear bench-flash; do
    grep -qE "^$st +SKIPPED " "$S" || fail "GPU step '$st' does not read SKIPPED: $(grep -E "^$st " "$S")"
done
grep -qE 'FAIL|TIMEOUT|NO TIME|NOT RUN' "$S" && fail "a row reads FAIL/TIMEOUT/NO TIME/NOT RUN: $(grep -E 'FAIL|TIMEOUT|NO TIME|NOT RUN' "$S")"
for t in test_cuda_linear test_cuda_golden test_cuda_tier test_cuda_step; do
    grep -qE "^  $t +SKIPPED" "$S" || fail "no SKIPPED row for $t"
done
n=$(find "$TMP/out" -name '[0-9][0-9]-*.log' | wc -l)
[ "$n" -ge 8 ] || fail "only $n step logs in \$OUT (want one per step run, >= 8)"
grep -q "^  Test #.*test_cuda_plan" "$TMP/out"/*gpu-exact.log && fail "ctest -L gpu ran test_cuda_plan (a CPU test)"
if ldd "$TMP/build/tests/test_cuda_fast" | grep -q 'not found'; then fail "test_cuda_fast: a library is not found"; fi
readelf -d "$TMP/build/tests/test_cuda_fast" | grep -qE 'R(UN)?PATH.*cuda' ||
    fail "test_cuda_fast has no run path to the CUDA libraries: $(readelf -d "$TMP/build/tests/test_cuda_fast" | grep -E 'R(UN)?PATH')"

# 4. a budget that ends inside the run: NO TIME rows, the summary still written, exit 0
OUT=$TMP/out-short V4_DEVICE_CHECK_FORCE=1 V4_DEVICE_CHECK_BUDGET=0 V4_DEVICE_CHECK_BUILD=$TMP/build \
    bash "$DC" >"$TMP/short.txt" 2>&1; rc=$?
grep -q 'NO TIME' "$TMP/out-short/summary.txt" || { cat "$TMP/short.txt"; fail "budget 0: no NO TIME row"; }
[ -f "$TMP/out-short/device-check.log" ] || fail "budget 0: no device-check.log"

if [ $fails -gt 0 ]; then echo "test_device_check: $fails failures"; exit 1; fi
echo "test_device_check: ok"
