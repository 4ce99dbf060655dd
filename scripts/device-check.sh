#!/usr/bin/env bash
# device-check.sh - the GPU check of the CUDA backend, in one call of a borrowed GPU machine
# (16 cores, the CUDA toolkit, a compiler, cmake and ninja, no network, maybe none of the
# project's libraries).  Most informative first; each step's log lands in $OUT as it ends, so
# a run cut off still brings back what it learned.  docs/cuda.md says how to run it.
#
#   scripts/device-check.sh [--bench | --paged | --sanitize | --help]
#
# Default mode (bounds in seconds; they sum to 470, build included):
#   facts 15          GPU name, SMs, memory, driver, CUDA runtime and cuBLASLt versions
#                     (tests/cuda/gpu_facts.c compiled alone with nvcc, before any build)
#   libs 10           pkg-config finds the libraries, or the carried Debian packages
#                     (scripts/device-debs.sh -> device-debs/, or V4_DEVICE_DEBS=DIR) are
#                     unpacked into build-gpu/debroot and the build is pointed at them
#   configure 30      the full CMake tree, release, V4_CUDA=ON, into build-gpu/
#   build 170         only the targets the steps below run
#   fast-selftest 30  test_cuda_fast: the backend must come up in the fast mode (cuBLASLt's
#                     block-scaled FP8 self-test passed) and match the exact products;
#                     CUBLASLT_LOG_LEVEL=2 captured (cublaslt.log)
#   gpu-exact 90      test_cuda_linear, test_cuda_golden, test_cuda_tier, test_cuda_step:
#                     the exact GPU paths bit for bit against the CPU engine (ctest -L gpu)
#   diverge 15        greedy ids, cpu vs cuda, on the golden tiny sequence (and vs golden)
#   mkmodel-flash 35  a 4-layer V4-Flash-shaped trunk, routed experts from the synthetic
#                     source (mkmodel --no-experts: ~2.7 GB, not 16 GB), reused next time
#   bench-linear 25   bench_cuda_linear: V4-Flash product shapes, GB/s against 4.8 TB/s
#   bench-flash 50    bench_flash on that model: decode tokens/s, every expert resident and
#                     85% of them
# --bench (after the same libs/configure/build, a no-op when built): bench_batching at
#   N = 1, 4, 8, 16 (120), numerics-check GPU fast vs CPU exact on the golden tiny model (60)
#   and on the flash model (150): 225 + 330 = 555.
# --paged: the 43-layer V4-Flash trunk (80) and bench_batching with paged experts at 85% and
#   60% of the routed experts (2 x 100), then two long documents at once (90): 225 + 370.
# --sanitize: the GPU tests under V4_CUDA_SYNC_DEBUG=1 (150), then under compute-sanitizer
#   memcheck (220): 225 + 370.
# A step whose bound would pass V4_DEVICE_CHECK_BUDGET (default 560 s from the start) gets
# what is left, and reads NO TIME when under 5 s are left: a run never passes the device
# tool's 10 minutes.  V4_DEVICE_CHECK_SCALE=N multiplies every bound and the budget (the
# rehearsal on a 2-core VM, scripts/device-rehearse.sh, uses it).
#
# Results: ok / PASS, SKIPPED (no GPU, said by the program itself), NO TIME, FAIL, TIMEOUT.
# Without a GPU it prints the facts and exits 0; V4_DEVICE_CHECK_FORCE=1 runs every step
# anyway (each GPU step then reads SKIPPED): that is how the script is checked here.
# Output: $OUT (the device tool's folder; else build-gpu/out/): NN-step.log per step,
# summary.txt (rewritten after each step), cublaslt.log, the benchmark tables, and
# device-check.log (everything).  Exit 0 when no step read FAIL or TIMEOUT.
# The build tree is build-gpu/ (V4_DEVICE_CHECK_BUILD=DIR for another; the suite's
# tests/test_device_check.sh uses its own).
set -u
RUN=default
case ${1:-} in
    "") ;;
    --bench) RUN=bench ;;
    --paged) RUN=paged ;;
    --sanitize) RUN=sanitize ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--bench | --paged | --sanitize | --help]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${V4_DEVICE_CHECK_BUILD:-$ROOT/build-gpu}
OUTDIR=${OUT:-$BUILD/out}
mkdir -p "$BUILD" "$OUTDIR" || exit 1
BUILD=$(cd "$BUILD" && pwd)
TABLES=(bench.txt bench_flash.txt bench_batching.txt numerics.txt diverge.txt paged.txt sanitize.txt)
for f in "${TABLES[@]}"; do rm -f "${BUILD:?}/$f"; done   # a table is this run's or none
LOG=$OUTDIR/device-check.log
: >"$LOG"
T_START=$(date +%s)
JOBS=$(nproc 2>/dev/null || echo 4)
SCALE=${V4_DEVICE_CHECK_SCALE:-1}
BUDGET=$(( ${V4_DEVICE_CHECK_BUDGET:-560} * SCALE ))
FORCE=${V4_DEVICE_CHECK_FORCE:-0}
SUMMARY=()
FAILED=0
NSTEP=0
HAVE_GPU=0
GPU_DESC="no GPU"

say() { echo "$*" | tee -a "$LOG"; }
elapsed() { echo $(($(date +%s) - T_START)); }
write_summary() {   # summary.txt, rewritten after every step (a cut-off run keeps it)
    {
        echo "device-check --$RUN summary ($(elapsed) s so far; bounds x$SCALE, budget $BUDGET s)"
        echo "machine: $(hostname), $JOBS cores, $GPU_DESC"
        printf '%-22s %-10s %6s  %s\n' step result time detail
        local l
        for l in "${SUMMARY[@]}"; do echo "$l"; done
    } >"$OUTDIR/summary.txt"
}
result() {        # name result seconds detail
    SUMMARY+=("$(printf '%-22s %-10s %5ss  %s' "$1" "$2" "$3" "${4:0:200}")")
    case $2 in FAIL*|TIMEOUT*) FAILED=1 ;; esac
    write_summary
}
row() {           # label text: an indented line under the last step
    SUMMARY+=("$(printf '  %-20s %-10s %6s  %s' "$1" "" "" "${2:0:200}")")
    write_summary
}
# step NAME BOUND CMD...: runs CMD (a program, or a function of this script) under timeout (BOUND x SCALE, cut to the budget left),
# its output live into $OUTDIR/NN-NAME.log and the log.  Sets STEP_RC (124 = timed out,
# 125 = no time left: not run), STEP_S, STEP_LOG.
step() {
    local name=$1 bound=$(($2 * SCALE))
    shift 2
    NSTEP=$((NSTEP + 1))
    STEP_LOG=$OUTDIR/$(printf '%02d' $NSTEP)-$name.log
    local left=$((BUDGET - $(elapsed)))
    [ $bound -gt $left ] && bound=$left
    if [ $bound -lt 5 ]; then
        echo "not run: $left s of the $BUDGET s budget left" >"$STEP_LOG"
        STEP_RC=125; STEP_S=0
        return
    fi
    local t0
    t0=$(date +%s)
    say "=== $name (bound $bound s): $*" | cut -c1-300
    set -o pipefail
    if declare -F "$1" >/dev/null; then   # a function of this script: its commands carry their own bounds
        "$@" 2>&1 | tee "$STEP_LOG" >>"$LOG"
    else
        timeout -k 5 "$bound" "$@" 2>&1 | tee "$STEP_LOG" >>"$LOG"
    fi
    STEP_RC=$?
    set +o pipefail
    STEP_S=$(($(date +%s) - t0))
}
word() {          # the result word of the last step: SKIPPED when the program said so
    case $STEP_RC in
        0) if grep -qiE 'no GPU: skipped|^SKIPPED' "$STEP_LOG"; then echo SKIPPED; else echo "${1:-ok}"; fi ;;
        77) echo SKIPPED ;;
        124|137) echo TIMEOUT ;;
        125) echo "NO TIME" ;;
        *) echo FAIL ;;
    esac
}
last_error() {    # the last error-looking line of the step's log
    local l
    l=$(grep -iE 'error|fail|out of memory|cannot|refused|undefined|not found|killed' "$STEP_LOG" | tail -1)
    [ -z "$l" ] && l=$(tail -1 "$STEP_LOG")
    echo "${l:0:180}"
}
trim() { echo "$*" | sed -e 's/^ *//' -e 's/ *$//'; }
# ctest_word TEST...: the step's word from ctest's lines: SKIPPED when every test skipped.
ctest_word() {
    local w t n=0
    w=$(word PASS)
    [ "$w" = PASS ] || { echo "$w"; return; }
    for t in "$@"; do grep -qE "Test +#[0-9]+: $t .*Skipped" "$STEP_LOG" && n=$((n + 1)); done
    [ $n -eq $# ] && w=SKIPPED
    echo "$w"
}
# ctest_rows: a row per test of the step's ctest output; FAIL/TIMEOUT rows fail the run.
ctest_rows() {
    local t line r
    for t in "$@"; do
        line=$(grep -E "Test +#[0-9]+: $t " "$STEP_LOG" | tail -1)
        case $line in
            *Passed*) r=PASS ;;
            *Skipped*) r=SKIPPED ;;
            *Timeout*) r=TIMEOUT ;;
            "") r="NOT RUN"; [ "$STEP_RC" = 124 ] && r=TIMEOUT ;;
            *) r=FAIL ;;
        esac
        [ "$r" = "NOT RUN" ] && FAILED=1
        case $r in FAIL|TIMEOUT) FAILED=1 ;; esac
        row "$t" "$r $(echo "$line" | sed -e 's/.*\.\.\.* *//' -e 's/[*]//g')"
    done
}
finish() {
    say ""
    say "================ device-check --$RUN summary ($(elapsed) s) ================"
    write_summary
    tee -a "$LOG" <"$OUTDIR/summary.txt"
    local f
    for f in "${TABLES[@]}"; do
        if [ -s "$BUILD/$f" ]; then
            cp "$BUILD/$f" "$OUTDIR/$f"
            say ""; say "$f:"; tee -a "$LOG" <"$BUILD/$f"
        fi
    done
    [ "$FAILED" = 0 ] && [ "$HAVE_GPU" = 0 ] && [ "$FORCE" != 1 ] && say "no GPU: skipped (set V4_DEVICE_CHECK_FORCE=1 to run every step anyway)"
    exit "$FAILED"
}

# ------------------------------------------------------------------- tools --
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
CUDA_HOME=""
[ -n "$NVCC" ] && CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd -P)
CUDA_LIB=$CUDA_HOME/lib64
[ -d "$CUDA_LIB" ] || CUDA_LIB=$CUDA_HOME/lib
MISSING=()
[ -z "$NVCC" ] && MISSING+=(nvcc)
for t in cmake gcc g++; do command -v $t >/dev/null || MISSING+=("$t"); done
GEN=""
if command -v ninja >/dev/null; then GEN=Ninja; elif command -v make >/dev/null; then GEN="Unix Makefiles"; else MISSING+=("ninja or make"); fi
say "device-check --$RUN: $(hostname), $JOBS cores, $(uname -r); nvcc=${NVCC:-MISSING} cmake=$(command -v cmake || echo MISSING) generator=${GEN:-MISSING}"
if [ ${#MISSING[@]} -gt 0 ]; then
    result tools FAIL 0 "missing: ${MISSING[*]}"
    finish
fi

# ------------------------------------------------------------------- facts --
facts() {
    if command -v nvidia-smi >/dev/null; then
        timeout 15 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,power.limit --format=csv,noheader 2>&1 |
            sed 's/^/nvidia-smi: /'
    else
        echo "nvidia-smi: not found"
    fi
    "$NVCC" --version | tail -2 | sed 's/^/nvcc: /'
    timeout 60 "$NVCC" -O2 -o "$BUILD/gpu_facts" "$ROOT/tests/cuda/gpu_facts.c" -lcublasLt \
        -Xlinker -rpath -Xlinker "$CUDA_LIB" || return 1
    timeout 20 "$BUILD/gpu_facts"
}
step facts 15 facts
if [ $STEP_RC -eq 0 ]; then
    HAVE_GPU=1
    GPU_DESC=$(sed -n 's/^gpu_facts: device 0 of [0-9]*: //p' "$STEP_LOG" | cut -d, -f1-4)
    DRV=$(sed -n 's/^nvidia-smi: [^,]*, *\([^,]*\),.*/\1/p' "$STEP_LOG" | head -1)
    result facts ok $STEP_S "$GPU_DESC; driver ${DRV:-?}; $(sed -n 's/^gpu_facts: \(cuBLASLt [0-9.]*\).*/\1/p' "$STEP_LOG")"
elif [ $STEP_RC -eq 77 ]; then
    result facts SKIPPED $STEP_S "no GPU: $(sed -n 's/^gpu_facts: no GPU: skipped (\(.*\))/\1/p' "$STEP_LOG"); $(sed -n 's/^gpu_facts: \(cuBLASLt [0-9.]*\).*/\1/p' "$STEP_LOG")"
    [ "$FORCE" = 1 ] || finish
    GPU_DESC="no GPU (V4_DEVICE_CHECK_FORCE=1)"
else
    result facts "$(word)" $STEP_S "$(last_error)"
    [ "$FORCE" = 1 ] || finish
fi

# -------------------------------------------------------------------- libs --
PC_MODULES=(jansson libpcre2-8 librabbitmq hiredis libpng libxxhash libuv)
CMAKE_EXTRA=()
DEBS=${V4_DEVICE_DEBS:-$ROOT/device-debs}
DEBROOT=$BUILD/debroot
unpack_debs() {   # every DEBS/*.deb into DEBROOT (dpkg-deb, or ar + tar where no dpkg)
    local f n=0
    rm -rf "$DEBROOT"
    mkdir -p "$DEBROOT"
    for f in "$DEBS"/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$f" "$DEBROOT" || return 1
        else
            local m
            m=$(ar t "$f" | grep '^data\.tar') || return 1
            ar p "$f" "$m" | tar -x -a -f - -C "$DEBROOT" 2>/dev/null ||
                { ar p "$f" "$m" | case $m in *.xz) xz -dc ;; *.zst) zstd -dc ;; *.gz) gzip -dc ;; *) cat ;; esac |
                  tar -x -f - -C "$DEBROOT"; } || return 1
        fi
        n=$((n + 1))
    done
    # pkg-config for the prefix: the carried pkgconf, its paths moved under DEBROOT.
    local ml=usr/lib/x86_64-linux-gnu
    cat >"$DEBROOT/pkg-config" <<EOF
#!/bin/sh
# pkg-config over the unpacked packages (written by scripts/device-check.sh)
export LD_LIBRARY_PATH="$DEBROOT/$ml\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_SYSROOT_DIR="$DEBROOT"
export PKG_CONFIG_LIBDIR="$DEBROOT/$ml/pkgconfig:$DEBROOT/usr/share/pkgconfig"
exec "$DEBROOT/usr/bin/pkgconf" "\$@"
EOF
    chmod +x "$DEBROOT/pkg-config"
    local mo
    for mo in "${PC_MODULES[@]}"; do
        "$DEBROOT/pkg-config" --exists "$mo" || { echo "after unpacking: pkg-config still lacks $mo"; return 1; }
    done
    md5sum "$DEBS/MANIFEST" 2>/dev/null | cut -d' ' -f1 >"$DEBROOT/.stamp"
    echo "unpacked $n packages into $DEBROOT"
}
libs() {
    local lack=() mo
    if command -v pkg-config >/dev/null; then
        for mo in "${PC_MODULES[@]}"; do pkg-config --exists "$mo" 2>/dev/null || lack+=("$mo"); done
    else
        lack=(pkg-config)
    fi
    if [ ${#lack[@]} -eq 0 ] && [ "${V4_DEVICE_CHECK_DEBS:-0}" != 1 ]; then
        echo "libs: system (pkg-config finds ${PC_MODULES[*]})"
        return 0
    fi
    echo "libs: missing on this machine: ${lack[*]:-(forced: V4_DEVICE_CHECK_DEBS=1)}"
    if ! ls "$DEBS"/*.deb >/dev/null 2>&1; then
        echo "libs: no carried packages in $DEBS: run scripts/device-debs.sh on a Debian 12 machine and carry device-debs/ (docs/cuda.md)"
        return 1
    fi
    if [ -x "$DEBROOT/pkg-config" ] && [ "$(cat "$DEBROOT/.stamp" 2>/dev/null)" = "$(md5sum "$DEBS/MANIFEST" 2>/dev/null | cut -d' ' -f1)" ]; then
        echo "libs: reusing $DEBROOT"
    else
        unpack_debs || return 1
    fi
    echo "libs: carried ($(wc -l <"$DEBS/MANIFEST" 2>/dev/null || echo '?') packages of $DEBS)"
}
step libs 10 libs
if [ $STEP_RC -ne 0 ]; then result libs "$(word)" $STEP_S "$(last_error)"; finish; fi
if grep -q '^libs: carried' "$STEP_LOG"; then
    # SYSROOT moves the .pc files' /usr paths under DEBROOT; CMAKE_PREFIX_PATH lets
    # find_library see DEBROOT/usr/lib/<arch>; the binaries get that directory in RUNPATH.
    CMAKE_EXTRA=(-DPKG_CONFIG_EXECUTABLE="$DEBROOT/pkg-config" -DCMAKE_PREFIX_PATH="$DEBROOT/usr")
    export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
    result libs ok $STEP_S "$(grep '^libs: carried' "$STEP_LOG" | sed 's/^libs: //') -> ${DEBROOT#"$ROOT"/}"
else
    result libs ok $STEP_S "system"
fi

# ---------------------------------------------------------- configure, build --
TARGETS=(v4fleet gpu_facts test_cuda_linear test_cuda_fast test_cuda_golden test_cuda_tier cuda_step_check
         bench_cuda_linear bench_flash bench_batching)
step configure 30 cmake -S "$ROOT" -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DV4_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" "${CMAKE_EXTRA[@]}"
if [ $STEP_RC -ne 0 ] || ! grep -q "CUDA backend: ON" "$STEP_LOG"; then
    result configure "$(word FAIL)" $STEP_S "cmake failed or the CUDA backend is not ON: $(last_error)"
    finish
fi
result configure ok $STEP_S "release, V4_CUDA=ON, ${BUILD#"$ROOT"/}/"
step build 170 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"
if [ $STEP_RC -ne 0 ]; then result build "$(word)" $STEP_S "$(last_error)"; finish; fi
result build ok $STEP_S "${#TARGETS[@]} targets"
# Every GPU binary must find libcublasLt through its RUNPATH (no LD_LIBRARY_PATH here).
if ldd "$BUILD/tests/test_cuda_fast" | grep -q 'not found'; then
    result runpath FAIL 0 "$(ldd "$BUILD/tests/test_cuda_fast" | grep 'not found' | paste -sd' ')"
    finish
fi
result runpath ok 0 "$(ldd "$BUILD/tests/test_cuda_fast" | sed -n 's/.*libcublasLt[^ ]* => \([^ ]*\).*/libcublasLt: \1/p')"
TO=$((120 * SCALE))   # ctest's per-test timeout

# ---------------------------------------------------------------- --bench --
if [ "$RUN" = bench ]; then
    FLASH=$BUILD/flash-L4s
    step bench-batching 120 "$BUILD/bench/bench_batching" --model "$ROOT/tests/data/golden/tiny/model" --device cuda \
        --ns 1,4,8,16 --tokens 16 --tasks-per-slot 1 --runs 1 --prefill 128
    [ -f "$FLASH/config.json" ] && step bench-batching 120 "$BUILD/bench/bench_batching" --model "$FLASH" --device cuda \
        --ns 1,4,8,16 --tokens 16 --tasks-per-slot 1 --runs 1 --prefill 512
    grep -E '^(\||summary:)' "$STEP_LOG" >"$BUILD/bench_batching.txt"
    result bench_batching "$(word)" $STEP_S "$([ -f "$FLASH/config.json" ] && echo flash-L4s || echo 'golden tiny (no flash-L4s: run the default mode first)')"
    while IFS='|' read -r _ _ _ _ n tps _ _ sp _; do
        row "batch N = $(trim "$n")" "tokens/s $(trim "$tps"), speed-up $(trim "$sp")"
    done < <(grep -E '^\| GPU' "$BUILD/bench_batching.txt")
    numerics() {   # name bound model positions
        if [ $HAVE_GPU = 0 ]; then result "$1" SKIPPED 0 "no GPU: skipped (numerics-check --device cuda needs one)"; return; fi
        step "$1" "$2" "$BUILD/v4fleet" numerics-check --model "$3" --positions "$4" --free-logits report --device cuda
        grep -E ' (ok|FAIL|\(report\))$|^numerics-check: the contract' "$STEP_LOG" >>"$BUILD/numerics.txt"
        local r=FAIL
        grep -qE '^numerics-check: the contract holds' "$STEP_LOG" && r=PASS
        [ $STEP_RC -ge 124 ] && r=$(word)
        result "$1" "$r" $STEP_S "GPU fast vs CPU exact, $4 positions"
    }
    : >"$BUILD/numerics.txt"
    numerics numerics-tiny 60 "$ROOT/tests/data/golden/tiny/model" 64
    [ -f "$FLASH/config.json" ] && numerics numerics-flash 150 "$FLASH" 32
    finish
fi

# ---------------------------------------------------------------- --paged --
if [ "$RUN" = paged ]; then
    TRUNK=$BUILD/flash-L43-trunk
    : >"$BUILD/paged.txt"
    if [ -f "$TRUNK/synthetic_experts.json" ] && [ -f "$TRUNK/model.safetensors.index.json" ]; then
        result mkmodel-L43-trunk ok 0 "reused build-gpu/flash-L43-trunk"
    elif [ $HAVE_GPU = 0 ]; then
        result mkmodel-L43-trunk SKIPPED 0 "no GPU: skipped (8.85 GB for GPU benchmarks only)"
    else
        step mkmodel-L43-trunk 80 "$BUILD/v4fleet" mkmodel --preset flash --layers 43 --no-experts --out "$TRUNK" \
            --force --no-sync --threads "$JOBS"
        result mkmodel-L43-trunk "$(word)" $STEP_S "$(grep -E '^mkmodel: wrote' "$STEP_LOG" | cut -c1-120)"
    fi
    P_ARGS=(--model "$TRUNK" --device cuda --tasks-per-slot 1 --runs 1 --prefill 0 --prompt 16
            --numerics "${V4_PAGED_NUMERICS:-fast}" --host-cache-bytes "${V4_PAGED_HOST_CACHE:-96G}"
            --io-threads "${V4_PAGED_IO_THREADS:-12}" --threads "$JOBS")
    IFS=',' read -r -a BUDGETS <<<"${V4_PAGED_BUDGETS:-85%,60%}"
    LONG=${V4_LONG_TOKENS:-8192}
    if [ -f "$TRUNK/synthetic_experts.json" ]; then
        for b in "${BUDGETS[@]}"; do
            step "paged-$b" 100 "$BUILD/bench/bench_batching" "${P_ARGS[@]}" --gpu-expert-mem "$b" --ns 1,16,64 \
                --tokens "${V4_PAGED_TOKENS:-4}"
            { echo "GPU expert budget $b:"; grep -E '^(\||experts )' "$STEP_LOG"; echo; } >>"$BUILD/paged.txt"
            result "paged-$b" "$(word)" $STEP_S "$([ $STEP_RC = 0 ] && echo "tokens/s at N = 1, 16, 64: paged.txt" || last_error)"
        done
        step "long-2x$LONG" 90 "$BUILD/bench/bench_batching" "${P_ARGS[@]}" --gpu-expert-mem "${BUDGETS[0]}" --ns none \
            --tokens "${V4_PAGED_TOKENS:-4}" --long "$LONG" --long-n 2
        { echo "two documents of $LONG tokens at once, GPU expert budget ${BUDGETS[0]}:"; grep -E '^(\||experts )' "$STEP_LOG"; echo; } >>"$BUILD/paged.txt"
        result "long-2x$LONG" "$(word)" $STEP_S "$([ $STEP_RC = 0 ] && echo "2 x $LONG prompt tokens: paged.txt" || last_error)"
    fi
    finish
fi

# ------------------------------------------------------------- --sanitize --
GPU_TESTS=(test_cuda_linear test_cuda_fast test_cuda_golden test_cuda_tier test_cuda_step)
if [ "$RUN" = sanitize ]; then
    : >"$BUILD/sanitize.txt"
    step gpu-tests-syncdebug 150 env V4_CUDA_SYNC_DEBUG=1 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout "$TO"
    result gpu-tests-syncdebug "$(ctest_word "${GPU_TESTS[@]}")" $STEP_S "V4_CUDA_SYNC_DEBUG=1: $(grep -E 'tests passed|tests failed' "$STEP_LOG" | tail -1)"
    ctest_rows "${GPU_TESTS[@]}"
    { echo "V4_CUDA_SYNC_DEBUG=1 ctest:"; grep -E 'Test +#|tests passed|tests failed|kernel v4cu_|cuda (step|backend)' "$STEP_LOG"; echo; } >>"$BUILD/sanitize.txt"
    SANI=$(command -v compute-sanitizer || true)
    [ -z "$SANI" ] && [ -x "$CUDA_HOME/bin/compute-sanitizer" ] && SANI=$CUDA_HOME/bin/compute-sanitizer
    if [ -z "$SANI" ]; then
        result memcheck SKIPPED 0 "compute-sanitizer not found (PATH, $CUDA_HOME/bin)"
    else
        rm -rf "$BUILD/memcheck"; mkdir -p "$BUILD/memcheck"
        step memcheck 220 "$SANI" --tool memcheck --target-processes all --log-file "$BUILD/memcheck/%p.log" \
            ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout $((200 * SCALE))
        NERR=$(cat "$BUILD"/memcheck/*.log 2>/dev/null | sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' | awk '{s += $1} END {print s + 0}')
        r=$(ctest_word "${GPU_TESTS[@]}"); [ "$NERR" -gt 0 ] && r=FAIL
        result memcheck "$r" $STEP_S "$NERR memcheck errors; $(grep -E 'tests passed|tests failed' "$STEP_LOG" | tail -1)"
        ctest_rows "${GPU_TESTS[@]}"
        { echo "compute-sanitizer memcheck: $NERR errors"; grep -E 'Test +#|tests passed|tests failed' "$STEP_LOG"
          grep -h -B2 -A8 -E '^========= (Invalid|Program hit|Uninitialized|Leaked)' "$BUILD"/memcheck/*.log 2>/dev/null | head -60
        } >>"$BUILD/sanitize.txt"
    fi
    finish
fi

# ------------------------------------------------------------ default mode --
# The fast path's self-tests first: cuBLASLt's block-scaled FP8 products must come up.
rm -f "$BUILD"/cublaslt.*.log
step fast-selftest 30 env CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE="$BUILD/cublaslt.%i.log" \
    ctest --test-dir "$BUILD" -R '^test_cuda_fast$' --output-on-failure -V --timeout "$TO"
for f in "$BUILD"/cublaslt.*.log; do
    [ -f "$f" ] && { echo "== $(basename "$f"): $(wc -l <"$f") lines"; head -c 2000000 "$f"; }
done >"$OUTDIR/cublaslt.log" 2>/dev/null
r=$(ctest_word test_cuda_fast)
result fast-selftest "$r" $STEP_S "$(grep -iE 'SKIPPED:|fast mode|self-test|numerics' "$STEP_LOG" | sed 's/^[0-9]*: //' | tail -1 | cut -c1-160)"
row "cuBLASLt log" "$(cat "$BUILD"/cublaslt.*.log 2>/dev/null | wc -l) lines (CUBLASLT_LOG_LEVEL=2): cublaslt.log; errors: $(cat "$BUILD"/cublaslt.*.log 2>/dev/null | grep -ciE 'error|fail')"

# The exact GPU paths bit for bit against the CPU engine.
step gpu-exact 90 ctest --test-dir "$BUILD" -L gpu -E '^test_cuda_fast$' --output-on-failure --timeout "$TO"
result gpu-exact "$(ctest_word test_cuda_linear test_cuda_golden test_cuda_tier test_cuda_step)" $STEP_S "$(grep -E 'tests passed|tests failed' "$STEP_LOG" | tail -1)"
ctest_rows test_cuda_linear test_cuda_golden test_cuda_tier test_cuda_step
[ $STEP_RC -ne 0 ] && [ $STEP_RC -ne 125 ] && row "rerun" "scripts/device-check.sh --sanitize: the GPU tests with V4_CUDA_SYNC_DEBUG=1 + memcheck"

# A short divergence run on the golden sequence (a difference there is a failure).
GOLD=$ROOT/tests/data/golden/tiny
step diverge 15 "$BUILD/bench/bench_flash" --model "$GOLD/model" --diverge 32 --golden "$GOLD/tokens.json" --device cuda
grep '^diverge:' "$STEP_LOG" >"$BUILD/diverge.txt"
line=$(grep -E 'diverge: cpu vs cuda' "$STEP_LOG" | tail -1)
r=$(word)
if [ "$r" = ok ]; then
    case $line in
        *"no GPU: skipped"*) r=SKIPPED ;;
        *"none in"*) r=PASS ;;
        *) r=FAIL ;;
    esac
    grep -qE 'vs golden +first difference' "$STEP_LOG" && r=FAIL
fi
result diverge "$r" $STEP_S "$(echo "$line" | sed 's/^diverge: //')"
[ "$r" = ok ] || [ "$r" = PASS ] || [ "$r" = SKIPPED ] || FAILED=1

# Benchmarks on a 4-layer V4-Flash shape whose routed experts are synthetic.
FLASH=$BUILD/flash-L4s
if [ -f "$FLASH/synthetic_experts.json" ] && [ -f "$FLASH/model.safetensors.index.json" ]; then
    result mkmodel-flash ok 0 "reused build-gpu/flash-L4s"
elif [ $HAVE_GPU = 0 ]; then
    result mkmodel-flash SKIPPED 0 "no GPU: skipped (the model is for GPU benchmarks only)"
else
    step mkmodel-flash 35 "$BUILD/v4fleet" mkmodel --preset flash --layers 4 --no-experts --out "$FLASH" \
        --force --no-sync --threads "$JOBS"
    result mkmodel-flash "$(word)" $STEP_S "$(grep -E '^mkmodel: wrote' "$STEP_LOG" | cut -c1-120)"
fi
step bench-linear 25 "$BUILD/bench/bench_cuda_linear" 30
grep -A40 "^machine:" "$STEP_LOG" >"$BUILD/bench.txt" 2>/dev/null
r=$(word)
case $r in
    ok) d=bench.txt ;;
    SKIPPED) d=$(grep -m1 'no GPU: skipped' "$STEP_LOG" | sed 's/^[a-z_]*: //') ;;
    *) d=$(last_error) ;;
esac
result bench-linear "$r" $STEP_S "$d"
if [ -f "$FLASH/synthetic_experts.json" ]; then
    step bench-flash 50 "$BUILD/bench/bench_flash" --model "$FLASH" --device cuda --tokens 32 --runs 3 --budgets "all,85%"
    grep -vE '^(mkmodel|===)' "$STEP_LOG" >"$BUILD/bench_flash.txt"
    result bench-flash "$(word)" $STEP_S "$([ $STEP_RC = 0 ] && echo "bench_flash.txt (4 layers, 32 tokens x 3 runs)" || last_error)"
    while IFS='|' read -r _ _ cfg _ ms tps _ gbs pct _; do
        row "experts $(trim "${cfg##*experts }")" "ms/token $(trim "$ms"), tokens/s $(trim "$tps"), $(trim "$gbs") GB/s = $(trim "$pct")"
    done < <(grep -E '^\| .*experts (all resident|[0-9])' "$BUILD/bench_flash.txt")
else
    result bench-flash SKIPPED 0 "no flash-L4s model$([ $HAVE_GPU = 0 ] && echo ' (no GPU)')"
fi
finish
