#!/usr/bin/env bash
# device-check.sh - the one GPU check of the CUDA backend (issue 6), for a GPU machine
# (an H200 box: 16 cores, no network, maybe no apt).  Run from anywhere; it works in
# the repository root.
#
#   1. tools: cmake, ninja (or make), gcc, nvcc (PATH or /usr/local/cuda/bin) and the
#      libraries of the full build (pkg-config: jansson, libpcre2-8, librabbitmq,
#      hiredis, libpng, libxxhash); says what is missing.
#   2. build (release, V4_CUDA=ON) into build-gpu/: the full CMake build of the GPU
#      tests and benchmarks when every library is there; otherwise a MINIMAL build
#      (nvcc + gcc straight, into build-gpu/mini/) of what needs no library: the
#      CUDA backend, the CPU reference, test_cuda_linear and bench_cuda_linear
#      (test_cuda_golden, mkmodel and bench_flash need the model loader, so they are
#      reported NOT BUILT).
#   3. GPU tests: ctest -R cuda -E emulated (full build: test_cuda_linear,
#      test_cuda_golden, test_cuda_tier and test_cuda_step, the device-resident step
#      bit for bit against the CPU engine; the emulated twins are CPU checks that CI
#      runs) or test_cuda_linear (minimal build).
#   4. benchmark: bench_cuda_linear (V4-Flash shapes, us/call and GB/s vs 4.8 TB/s).
#   5. (full build) a synthetic V4-Flash model with the real dimensions (hidden 4096,
#      64 heads x 512, 256 FP4 experts top-6, FP8 trunk, vocab 129280) truncated to
#      V4_FLASH_LAYERS layers (default 4: window-only x2, CSA, HCA; ~16.4 GB) written by
#      `v4fleet mkmodel --preset flash` to build-gpu/flash-L<N>/ (kept and reused by the
#      next run); then bench_flash on it with --device cuda: greedy decode ms/token,
#      tokens/s, bytes/token, GB/s and % of 4.8 TB/s, with every expert resident (the
#      device-resident step, V4_CUDA_MODE=auto) and with V4_GPU_EXPERT_MEM=85% (the
#      resident step paging experts) (build-gpu/bench_flash.txt); then bench_batching on
#      it with --device cuda: aggregate tokens/s of continuous batching at N = 1, 4, 8, 16
#      (build-gpu/bench_batching.txt).
#   6. (full build) divergence: greedy ids of --device cpu vs --device cuda, first
#      position where they differ, on the golden tiny sequence (32 tokens, also vs the
#      golden ids) and on the flash model (16 tokens) (build-gpu/diverge.txt).
#   7. a final summary table (step, result, seconds) + the benchmark tables.
# Every step has a timeout (45+165+130+45+50+90+40 = 565 s at worst, under the device
# tool's 10 minutes per command); a normal run takes a few minutes on an H200 (goal:
# < 8).  Logs go to build-gpu/device-check.log (and, with the tables, to $OUT/ when the
# device tool sets OUT).
#
# Modes (one invocation each, every one under the 10 minutes; each does steps 1-2 first,
# a no-op build when build-gpu/ is already built on this machine):
#   scripts/device-check.sh             steps 3-7 above.
#   scripts/device-check.sh --paged     (full build) the full 43-layer V4-Flash shape with
#      paged experts: P1 writes or reuses build-gpu/flash-L43-trunk (`mkmodel --preset
#      flash --layers 43 --no-experts`: the trunk only, 8.85 GB, all cores; the routed
#      experts come from the synthetic source, docs/experts.md "Synthetic experts");
#      P2/P3 bench_batching --device cuda on it with the GPU expert budget 85% and 60% of
#      the routed experts (V4_PAGED_BUDGETS), a host cache of V4_PAGED_HOST_CACHE (96G),
#      V4_PAGED_IO_THREADS (12) readers, numerics V4_PAGED_NUMERICS (fast): per budget
#      tokens/s at batch N = 1, 16, 64, the GPU hit rate, GB uploaded per token and the host
#      hit rate (V4_PAGED_TOKENS = 4 generated tokens per task, one run, cold caches at N = 1:
#      the figures include the fills); P4 two long documents prefilled and decoded at once
#      (V4_LONG_TOKENS prompt ids each, default 8192: a 2 x 64k prefill with paged experts
#      does not fit the step's 90 s; V4_LONG_TOKENS=65536 tries it, a timeout is reported)
#      at the first budget (build-gpu/paged.txt).  Timeouts 45+165+80+100+100+90 = 580 s.
#   scripts/device-check.sh --sanitize  (full build) S1 the GPU tests once with the sync
#      debug mode V4_CUDA_SYNC_DEBUG=1 (a wait after every kernel, so a fault names its
#      kernel: docs/cuda.md); S2 the same tests under `compute-sanitizer --tool memcheck`
#      (per-process logs build-gpu/memcheck/, "ERROR SUMMARY" summed; skipped with a line
#      when compute-sanitizer is not found; a test that runs past ctest's --timeout 200 under
#      memcheck is reported TIMEOUT) (build-gpu/sanitize.txt).  Timeouts 45+165+150+220 = 580 s.
#      When the default mode's GPU tests fail, its summary says to run this mode.
# Every step runs under `timeout`; a failure (an OOM included) is a row of the summary
# with its message, never a hang.
# Without a GPU it says "no GPU: skipped" and exits 0 after the tool check.
# Exit status: 0 when every step that ran passed (or no GPU), 1 otherwise (a
# divergence on the golden sequence is a failure; one on the flash model is reported).
set -u
RUN=default
case ${1:-} in
    "") ;;
    --paged) RUN=paged ;;
    --sanitize) RUN=sanitize ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--paged | --sanitize]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=$ROOT/build-gpu
mkdir -p "$BUILD"
LOG=$BUILD/device-check.log
: >"$LOG"
T_START=$(date +%s)
JOBS=$(nproc 2>/dev/null || echo 4)
SUMMARY=()
FAILED=0
RUN_FLAG=""
[ "$RUN" != default ] && RUN_FLAG=" --$RUN"

say() { echo "$*" | tee -a "$LOG"; }
step_result() {   # name result seconds detail
    SUMMARY+=("$(printf '%-24s %-12s %6ss  %s' "$1" "$2" "$3" "$4")")
    case $2 in FAIL*|TIMEOUT*) FAILED=1 ;; esac
}
run_step() {      # name timeout_s cmd...  -> sets STEP_RC, STEP_S; output to log + screen + build-gpu/step.out
    local name=$1 to=$2
    shift 2
    local t0
    t0=$(date +%s)
    local cmd="$*"
    say "=== $name: ${cmd:0:160}"
    set -o pipefail
    timeout "$to" "$@" 2>&1 | tee "$BUILD/step.out" | tee -a "$LOG"
    STEP_RC=$?
    set +o pipefail
    STEP_S=$(($(date +%s) - t0))
}
bench_rc() {      # FILE -> the step's result word from STEP_RC and a "no GPU: skipped" line in FILE
    local r=ok
    [ $STEP_RC -ne 0 ] && r=FAIL
    [ $STEP_RC -eq 124 ] && r=TIMEOUT
    [ $STEP_RC -eq 0 ] && grep -q "no GPU: skipped" "$1" && r=SKIPPED
    echo "$r"
}
trim() { echo "$*" | sed -e 's/^ *//' -e 's/ *$//'; }
summary_row() {   # label text -> an indented line under the last step of the summary
    SUMMARY+=("$(printf '  %-22s %-12s %7s  %s' "$1" "" "" "$2")")
}
summary() {
    say ""
    say "================ device-check${RUN_FLAG} summary ($(($(date +%s) - T_START)) s total) ================"
    say "machine: $(hostname), $JOBS cores, ${GPU_DESC:-no GPU}"
    say "$(printf '%-24s %-12s %7s  %s' step result time detail)"
    for l in "${SUMMARY[@]}"; do say "$l"; done
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
        cp "$LOG" "$OUT/device-check.log" 2>/dev/null
        for f in bench.txt bench_flash.txt bench_batching.txt numerics.txt diverge.txt paged.txt sanitize.txt; do
            [ -f "$BUILD/$f" ] && cp "$BUILD/$f" "$OUT/$f"
        done
    fi
}

# ---------------------------------------------------------------- 1. tools --
MISSING=()
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -z "$NVCC" ] && MISSING+=(nvcc)
command -v cmake >/dev/null || MISSING+=(cmake)
command -v gcc >/dev/null || MISSING+=(gcc)
command -v g++ >/dev/null || MISSING+=(g++)
GEN=""
if command -v ninja >/dev/null; then GEN=Ninja; elif command -v make >/dev/null; then GEN="Unix Makefiles"; else MISSING+=("ninja or make"); fi
LIBS_MISSING=()
if command -v pkg-config >/dev/null; then
    for m in jansson libpcre2-8 librabbitmq hiredis libpng libxxhash; do
        pkg-config --exists "$m" 2>/dev/null || LIBS_MISSING+=("$m")
    done
else
    LIBS_MISSING+=(pkg-config)
fi
say "tools: nvcc=${NVCC:-MISSING} cmake=$(command -v cmake || echo MISSING) generator=${GEN:-MISSING} gcc=$(command -v gcc || echo MISSING)"
[ ${#MISSING[@]} -gt 0 ] && say "missing tools: ${MISSING[*]}"
[ ${#LIBS_MISSING[@]} -gt 0 ] && say "missing libraries for the full build: ${LIBS_MISSING[*]} (a minimal build is used)"
if [ ${#MISSING[@]} -eq 0 ]; then step_result tools ok 0 "nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $GEN"
else step_result tools "FAIL" 0 "missing: ${MISSING[*]}"; fi

GPU_DESC=""
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    GPU_DESC=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
fi
# V4_DEVICE_CHECK_FORCE=1 goes on without a GPU (to check this script: the tests then
# skip and the benchmark says so); V4_DEVICE_CHECK_MINIMAL=1 forces the minimal build.
[ -z "$GPU_DESC" ] && [ "${V4_DEVICE_CHECK_FORCE:-0}" = 1 ] && GPU_DESC="none (V4_DEVICE_CHECK_FORCE=1)"
[ "${V4_DEVICE_CHECK_MINIMAL:-0}" = 1 ] && LIBS_MISSING+=("(forced: V4_DEVICE_CHECK_MINIMAL=1)")
if [ -z "$GPU_DESC" ]; then
    say "no GPU: skipped (nvidia-smi finds no device; nothing to build or run here)"
    step_result gpu "SKIPPED" 0 "no GPU: skipped"
    summary
    exit 0
fi
say "GPU: $GPU_DESC"
if [ ${#MISSING[@]} -gt 0 ]; then summary; exit 1; fi

# ---------------------------------------------------------------- 2. build --
MODE=full
[ ${#LIBS_MISSING[@]} -gt 0 ] && MODE=minimal
if [ $MODE = full ]; then
    run_step configure 45 cmake -S "$ROOT" -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DV4_CUDA=ON \
        -DCMAKE_CUDA_COMPILER="$NVCC"
    if [ $STEP_RC -ne 0 ] || ! grep -q "CUDA backend: ON" "$LOG"; then
        step_result configure FAIL $STEP_S "cmake failed or CUDA backend not ON (see log)"
        summary; exit 1
    fi
    step_result configure ok $STEP_S "release, V4_CUDA=ON, build-gpu/"
    run_step build 165 cmake --build "$BUILD" -j "$JOBS" --target test_cuda_linear test_cuda_fast test_cuda_golden test_cuda_tier cuda_step_check bench_cuda_linear v4fleet bench_flash bench_batching
    if [ $STEP_RC -ne 0 ]; then step_result build "$([ $STEP_RC -eq 124 ] && echo TIMEOUT || echo FAIL)" $STEP_S "see log"; summary; exit 1; fi
    step_result build ok $STEP_S "full CMake build"
    TEST_LINEAR=$BUILD/tests/test_cuda_linear
    BENCH=$BUILD/bench/bench_cuda_linear
else
    M=$BUILD/mini
    mkdir -p "$M"
    CF="-O2 -std=gnu11 -Wall -Wextra -Werror -ffp-contract=off -fno-fast-math -pthread -I$ROOT -DV4_HAVE_CUDA=1 -DV4_TEST_NO_CLI=1"
    CUDA_INC=$(dirname "$(dirname "$NVCC")")/include
    CUDA_LIB=$(dirname "$(dirname "$NVCC")")/lib64
    mini_build() {
        set -e
        for f in kernels/cuda/*.cu; do
            "$NVCC" -std=c++17 -O3 -I"$ROOT" -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
                --fmad=false -Werror all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-ffp-contract=off,-pthread \
                -c "$f" -o "$M/$(basename "$f").o" &
        done
        for f in kernels/codec.c kernels/cpu/backend_cpu.c kernels/cpu/linear_scalar.c kernels/cpu/threadpool.c \
                 kernels/v4/weights.c kernels/v4/ops.c kernels/cuda/slot_pool.c config/error.c; do
            gcc $CF -I"$CUDA_INC" -c "$f" -o "$M/$(basename "$f").o" &
        done
        for f in linear_avx2 linear_exact_avx2; do
            gcc $CF -mavx2 -mfma -mf16c -c "kernels/cpu/$f.c" -o "$M/$f.o" &
        done
        for f in linear_avx512 linear_exact_avx512; do
            gcc $CF -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -c "kernels/cpu/$f.c" -o "$M/$f.o" &
        done
        gcc $CF -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c \
            -c kernels/cpu/linear_fp4_vnni.c -o "$M/linear_fp4_vnni.o" &
        gcc $CF -I"$CUDA_INC" -c tests/test_cuda_linear.c -o "$M/test_cuda_linear.o" &
        gcc $CF -I"$CUDA_INC" -c bench/bench_cuda_linear.c -o "$M/bench_cuda_linear.o" &
        local pid bad=0
        for pid in $(jobs -p); do wait "$pid" || bad=1; done
        [ $bad -eq 0 ] || { echo "minimal build: a compilation failed"; return 1; }
        local objs=("$M"/*.cu.o "$M"/codec.c.o "$M"/backend_cpu.c.o "$M"/linear_scalar.c.o "$M"/threadpool.c.o \
                    "$M"/weights.c.o "$M"/ops.c.o "$M"/slot_pool.c.o "$M"/error.c.o "$M"/linear_avx2.o "$M"/linear_exact_avx2.o \
                    "$M"/linear_avx512.o "$M"/linear_exact_avx512.o "$M"/linear_fp4_vnni.o)
        for t in test_cuda_linear bench_cuda_linear; do
            g++ -o "$M/$t" "$M/$t.o" "${objs[@]}" -L"$CUDA_LIB" -lcublasLt -lcudart_static -ldl -lrt -lpthread -lm
        done
    }
    run_step build-minimal 165 bash -c "$(declare -f mini_build); NVCC='$NVCC' ROOT='$ROOT' M='$M' CF='$CF' CUDA_INC='$CUDA_INC' CUDA_LIB='$CUDA_LIB' mini_build"
    if [ $STEP_RC -ne 0 ] || [ ! -x "$M/test_cuda_linear" ]; then step_result build-minimal FAIL $STEP_S "see log"; summary; exit 1; fi
    step_result build-minimal ok $STEP_S "no CMake build: missing ${LIBS_MISSING[*]}"
    TEST_LINEAR=$M/test_cuda_linear
    BENCH=$M/bench_cuda_linear
fi

# ------------------------------------------------------ --paged / --sanitize --
fail_detail() {   # FILE -> the last error-looking line of a failed step (for the summary)
    local l
    l=$(grep -iE 'error|fail|out of memory|cannot|refused|not |killed' "$1" | grep -v '^===' | tail -1)
    [ -z "$l" ] && l=$(tail -1 "$1")
    echo "${l:0:150}"
}
if [ "$RUN" != default ] && [ $MODE != full ]; then
    step_result "$RUN" "NOT BUILT" 0 "--$RUN needs the full build (missing ${LIBS_MISSING[*]})"
    summary
    exit 1
fi
if [ "$RUN" = paged ]; then
    TRUNK=$BUILD/flash-L43-trunk
    PAGED=$BUILD/paged.txt
    : >"$PAGED"
    if [ -f "$TRUNK/config.json" ] && [ -f "$TRUNK/synthetic_experts.json" ] && [ -f "$TRUNK/model.safetensors.index.json" ]; then
        say "=== mkmodel-L43-trunk: reusing $TRUNK"
        step_result mkmodel-L43-trunk ok 0 "reused build-gpu/flash-L43-trunk"
        TRUNK_OK=1
    else
        run_step mkmodel-L43-trunk 80 "$BUILD/v4fleet" mkmodel --preset flash --layers 43 --no-experts --out "$TRUNK" \
            --force --no-sync --threads "$JOBS"
        r=ok; TRUNK_OK=1
        [ $STEP_RC -ne 0 ] && r=FAIL && TRUNK_OK=0
        [ $STEP_RC -eq 124 ] && r=TIMEOUT
        if [ $TRUNK_OK = 1 ]; then
            step_result mkmodel-L43-trunk $r $STEP_S "$(grep -E '^mkmodel: wrote' "$BUILD/step.out" | sed 's/^mkmodel: wrote [^ ]* //')"
        else
            step_result mkmodel-L43-trunk $r $STEP_S "$(fail_detail "$BUILD/step.out")"
        fi
    fi
    P_HOST=${V4_PAGED_HOST_CACHE:-96G}
    P_IO=${V4_PAGED_IO_THREADS:-12}
    P_NUM=${V4_PAGED_NUMERICS:-fast}
    P_TOK=${V4_PAGED_TOKENS:-4}
    LONG=${V4_LONG_TOKENS:-8192}
    P_ARGS=(--model "$TRUNK" --device cuda --tasks-per-slot 1 --runs 1 --prefill 0 --prompt 16
            --numerics "$P_NUM" --host-cache-bytes "$P_HOST" --io-threads "$P_IO" --threads "$JOBS")
    IFS=',' read -r -a BUDGETS <<<"${V4_PAGED_BUDGETS:-85%,60%}"
    if [ "$TRUNK_OK" = 1 ]; then
        for b in "${BUDGETS[@]}"; do
            run_step "paged-$b" 100 "$BUILD/bench/bench_batching" "${P_ARGS[@]}" --gpu-expert-mem "$b" --ns 1,16,64 \
                --tokens "$P_TOK"
            { echo "GPU expert budget $b:"; grep -E '^(\||experts )' "$BUILD/step.out"; echo; } >>"$PAGED"
            r=$(bench_rc "$BUILD/step.out")
            d="host cache $P_HOST, $P_NUM, $P_TOK tokens per task"
            [ "$r" = ok ] || d=$(fail_detail "$BUILD/step.out")
            step_result "paged-$b" "$r" $STEP_S "$d"
            while IFS='|' read -r -a F; do
                summary_row "N = $(trim "${F[4]}")" "tokens/s $(trim "${F[5]}"), GPU hit $(trim "${F[20]}"), $(trim "${F[21]}") GB uploaded/token, host hit $(trim "${F[22]}")"
            done < <(grep -E '^\| GPU ' "$BUILD/step.out" | grep -vE '\| documents \|')
        done
        # Two long documents at once (prefill + decode together), at the first budget.
        run_step "long-2x$LONG" 90 "$BUILD/bench/bench_batching" "${P_ARGS[@]}" --gpu-expert-mem "${BUDGETS[0]}" --ns none \
            --tokens "$P_TOK" --long "$LONG" --long-n 2
        { echo "two documents of $LONG tokens at once, GPU expert budget ${BUDGETS[0]}:"; grep -E '^(\| GPU |\| machine \| mode \| documents|experts )' "$BUILD/step.out"; echo; } >>"$PAGED"
        r=$(bench_rc "$BUILD/step.out")
        d="2 x $LONG prompt tokens + $P_TOK generated, budget ${BUDGETS[0]}"
        [ "$r" = ok ] || d=$(fail_detail "$BUILD/step.out")
        [ "$r" = TIMEOUT ] && d="$d (V4_LONG_TOKENS=$LONG: too slow for 90 s; try a smaller value)"
        step_result "long-2x$LONG" "$r" $STEP_S "$d"
        while IFS='|' read -r -a F; do
            summary_row "2 documents" "$(trim "${F[6]}") s, $(trim "${F[7]}") positions/s, GPU hit $(trim "${F[9]}"), $(trim "${F[10]}") GB/token"
        done < <(grep -E '^\| GPU .*\| [0-9]+ \| [0-9]+ \| [0-9]+ \| [0-9.]+ \|' "$BUILD/step.out" | awk -F'|' 'NF == 13')
    else
        step_result paged SKIPPED 0 "no 43-layer trunk"
    fi
    summary
    if [ -s "$PAGED" ]; then say ""; say "build-gpu/paged.txt:"; tee -a "$LOG" <"$PAGED"; fi
    [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && cp "$LOG" "$OUT/device-check.log" 2>/dev/null
    exit $FAILED
fi
if [ "$RUN" = sanitize ]; then
    SAN=$BUILD/sanitize.txt
    : >"$SAN"
    gpu_test_rows() {   # step-label file -> a row per GPU test from ctest's lines in file
        local t line r
        for t in test_cuda_linear test_cuda_fast test_cuda_golden test_cuda_tier test_cuda_step; do
            line=$(grep -E "Test +#[0-9]+: $t " "$2" | tail -1)
            r=FAIL
            case $line in *Passed*) r=PASS ;; *Skipped*|*"Not Run"*) r=SKIPPED ;; *Timeout*) r=TIMEOUT ;; esac
            [ -z "$line" ] && r="NOT RUN" && [ $STEP_RC -eq 124 ] && r=TIMEOUT
            summary_row "$t" "$r $(echo "$line" | sed -e 's/.*\.\.\.* *//' -e 's/[*]//g')"
            case $r in FAIL|TIMEOUT) FAILED=1 ;; esac
        done
    }
    # S1: the sync debug mode (a stream wait after every kernel: a fault names its kernel)
    run_step gpu-tests-syncdebug 150 env V4_CUDA_SYNC_DEBUG=1 ctest --test-dir "$BUILD" -R cuda -E emulated \
        --output-on-failure --timeout 120
    cp "$BUILD/step.out" "$BUILD/syncdebug.out"
    r=ok; [ $STEP_RC -ne 0 ] && r=FAIL; [ $STEP_RC -eq 124 ] && r=TIMEOUT
    step_result gpu-tests-syncdebug "$r" $STEP_S "V4_CUDA_SYNC_DEBUG=1: $(grep -E 'tests passed|tests failed' "$BUILD/step.out" | tail -1)"
    gpu_test_rows syncdebug "$BUILD/syncdebug.out"
    { echo "V4_CUDA_SYNC_DEBUG=1 ctest:"; grep -E 'Test +#|tests passed|tests failed|kernel v4cu_|cuda (step|backend)' "$BUILD/syncdebug.out"; echo; } >>"$SAN"
    # S2: compute-sanitizer memcheck over the same tests
    SANI=$(command -v compute-sanitizer || true)
    [ -z "$SANI" ] && [ -x "$(dirname "$NVCC")/compute-sanitizer" ] && SANI=$(dirname "$NVCC")/compute-sanitizer
    [ -z "$SANI" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && SANI=/usr/local/cuda/bin/compute-sanitizer
    if [ -z "$SANI" ]; then
        say "=== memcheck: compute-sanitizer not found (PATH, next to nvcc, /usr/local/cuda/bin): skipped"
        step_result memcheck SKIPPED 0 "compute-sanitizer not found"
    else
        rm -rf "$BUILD/memcheck"
        mkdir -p "$BUILD/memcheck"
        run_step memcheck 220 "$SANI" --tool memcheck --target-processes all --log-file "$BUILD/memcheck/%p.log" \
            ctest --test-dir "$BUILD" -R cuda -E emulated --output-on-failure --timeout 200
        cp "$BUILD/step.out" "$BUILD/memcheck.out"
        NERR=$(cat "$BUILD"/memcheck/*.log 2>/dev/null | sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' | awk '{s += $1} END {print s + 0}')
        NLOG=$(grep -l "ERROR SUMMARY" "$BUILD"/memcheck/*.log 2>/dev/null | wc -l)
        r=ok
        [ $STEP_RC -ne 0 ] && r=FAIL
        [ "$NERR" -gt 0 ] && r=FAIL
        [ $STEP_RC -eq 124 ] && r=TIMEOUT
        step_result memcheck "$r" $STEP_S "$NERR memcheck errors in $NLOG processes (build-gpu/memcheck/); $(grep -E 'tests passed|tests failed' "$BUILD/memcheck.out" | tail -1)"
        gpu_test_rows memcheck "$BUILD/memcheck.out"
        { echo "compute-sanitizer --tool memcheck ctest: $NERR errors"; grep -E 'Test +#|tests passed|tests failed' "$BUILD/memcheck.out"
          grep -h -B2 -A8 -E '^========= (Invalid|Program hit|Uninitialized|Leaked)' "$BUILD"/memcheck/*.log 2>/dev/null | head -60; } >>"$SAN"
    fi
    summary
    if [ -s "$SAN" ]; then say ""; say "build-gpu/sanitize.txt:"; tee -a "$LOG" <"$SAN"; fi
    [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && cp "$LOG" "$OUT/device-check.log" 2>/dev/null
    exit $FAILED
fi

# ---------------------------------------------------------------- 3. tests --
if [ $MODE = full ]; then
    # the emulated tests are CPU checks (CI runs them): only the GPU ones here
    run_step gpu-tests 130 ctest --test-dir "$BUILD" -R cuda -E emulated --output-on-failure --timeout 120
    RES=$(grep -E "tests passed|tests failed" "$LOG" | tail -1)
    for t in test_cuda_linear test_cuda_fast test_cuda_golden test_cuda_tier test_cuda_step; do
        line=$(grep -E "Test +#[0-9]+: $t " "$LOG" | tail -1)
        r=FAIL
        case $line in *Passed*) r=PASS ;; *Skipped*|*"Not Run"*) r=SKIPPED ;; esac
        [ $STEP_RC -eq 124 ] && [ -z "$line" ] && r=TIMEOUT
        step_result "$t" $r $STEP_S "$(echo "$line" | sed -e 's/.*\.\.\.* *//' -e 's/[*]//g')"
    done
    say "ctest: $RES"
    if [ $STEP_RC -ne 0 ]; then   # the rerun that names a faulting kernel is its own invocation (time)
        summary_row "rerun" "scripts/device-check.sh --sanitize: the GPU tests with V4_CUDA_SYNC_DEBUG=1 + memcheck"
    fi
else
    run_step test_cuda_linear 130 "$TEST_LINEAR"
    r=FAIL
    [ $STEP_RC -eq 0 ] && r=PASS
    [ $STEP_RC -eq 77 ] && r=SKIPPED
    [ $STEP_RC -eq 124 ] && r=TIMEOUT
    step_result test_cuda_linear $r $STEP_S "$(grep -E 'outputs compared|checks,|SKIPPED' "$LOG" | tail -2 | tr '\n' ' ')"
    step_result test_cuda_golden "NOT BUILT" 0 "needs ${LIBS_MISSING[*]} (model loader)"
fi

# ---------------------------------------------------------------- 4. bench --
run_step bench 45 "$BENCH" 30
grep -A40 "^machine:" "$LOG" | tail -n +1 >"$BUILD/bench.txt" 2>/dev/null
r=ok
[ $STEP_RC -ne 0 ] && r=FAIL
[ $STEP_RC -eq 124 ] && r=TIMEOUT
step_result bench_cuda_linear $r $STEP_S "table above (build-gpu/bench.txt)"

# ------------------------------------------------- 5. flash model + bench --
FLASH_L=${V4_FLASH_LAYERS:-4}
FLASH=$BUILD/flash-L$FLASH_L
if [ $MODE = full ]; then
    if [ -f "$FLASH/config.json" ]; then
        say "=== mkmodel-flash: reusing $FLASH"
        step_result mkmodel-flash ok 0 "reused build-gpu/flash-L$FLASH_L ($FLASH_L layers)"
        FLASH_OK=1
    else
        run_step mkmodel-flash 50 "$BUILD/v4fleet" mkmodel --preset flash --layers "$FLASH_L" --out "$FLASH" \
            --force --no-sync --threads "$JOBS"
        r=ok; FLASH_OK=1
        [ $STEP_RC -ne 0 ] && r=FAIL && FLASH_OK=0
        [ $STEP_RC -eq 124 ] && r=TIMEOUT
        step_result mkmodel-flash $r $STEP_S "$FLASH_L layers: $(grep -E '^mkmodel: (wrote|checkpoint)' "$BUILD/step.out" | sed -e 's/.* in //' -e 's/.*(\([0-9.]* GB\);.*/\1/' | paste -sd' ')"
    fi
    if [ $FLASH_OK = 1 ]; then
        run_step bench-flash 90 "$BUILD/bench/bench_flash" --model "$FLASH" --device cuda --tokens 32 --runs 3 \
            --budgets "all,85%"
        grep -vE '^(mkmodel|===)' "$BUILD/step.out" >"$BUILD/bench_flash.txt"
        step_result bench_flash "$(bench_rc "$BUILD/bench_flash.txt")" $STEP_S \
            "build-gpu/bench_flash.txt ($FLASH_L layers, 32 tokens x 3 runs)"
        while IFS='|' read -r _ _ cfg _ ms tps _ gbs pct _; do
            summary_row "experts $(trim "${cfg##*experts }")" \
                "ms/token $(trim "$ms"), tokens/s $(trim "$tps"), $(trim "$gbs") GB/s = $(trim "$pct")"
        done < <(grep -E '^\| .*experts (all resident|[0-9])' "$BUILD/bench_flash.txt")
        # Continuous batching on the GPU (issue 8's GPU row): aggregate tokens/s at N.
        run_step bench-batching 110 "$BUILD/bench/bench_batching" --model "$FLASH" --device cuda --ns 1,4,8,16 \
            --tokens 16 --tasks-per-slot 1 --runs 1 --prefill 512
        grep -E '^(\||summary:)' "$BUILD/step.out" >"$BUILD/bench_batching.txt"
        step_result bench_batching "$(bench_rc "$BUILD/step.out")" $STEP_S \
            "build-gpu/bench_batching.txt (N = 1,4,8,16; 16 tokens; a 512-token prefill)"
        while IFS='|' read -r _ _ _ _ n tps _ _ sp _; do   # ... | N | tokens/s | (min-max) | tokens/CPU-s | speed-up
            summary_row "batch N = $(trim "$n")" "tokens/s $(trim "$tps"), speed-up $(trim "$sp")"
        done < <(grep -E '^\| GPU' "$BUILD/bench_batching.txt")
    else
        step_result bench_flash SKIPPED 0 "no flash model"
    fi
else
    step_result mkmodel-flash "NOT BUILT" 0 "needs ${LIBS_MISSING[*]}"
    step_result bench_flash "NOT BUILT" 0 "needs ${LIBS_MISSING[*]}"
fi

# ------------------------------------------------- 5b. numerics contract --
# numerics-check (docs/numerics.md#the-validation-contract): the GPU's fast mode (every
# product on tensor cores through cuBLASLt, --device cuda) against the CPU's exact mode,
# on the golden tiny model (its small shapes mostly fall back to the exact kernels) and
# on the flash model when there is one (V4-Flash shapes: the real check).  CPU fast vs
# CPU exact is in the test suite (tests/test_numerics_check.sh).
if [ $MODE = full ]; then
    run_step numerics-tiny 60 "$BUILD/v4fleet" numerics-check --model "$ROOT/tests/data/golden/tiny/model" \
        --positions 64 --free-logits report --device cuda
    r=$(grep -qE '^numerics-check: the contract holds' "$BUILD/step.out" && echo PASS || echo FAIL)
    [ $STEP_RC -eq 124 ] && r=TIMEOUT
    [ "$r" = PASS ] || FAILED=1
    grep -E ' (ok|FAIL|\(report\))$|^numerics-check: the contract' "$BUILD/step.out" >"$BUILD/numerics.txt"
    step_result numerics-tiny "$r" $STEP_S "GPU fast vs CPU exact: build-gpu/numerics.txt"
    if [ "${FLASH_OK:-0}" = 1 ]; then
        run_step numerics-flash 150 "$BUILD/v4fleet" numerics-check --model "$FLASH" --positions 32 --free-logits report \
            --device cuda
        r=$(grep -qE '^numerics-check: the contract holds' "$BUILD/step.out" && echo PASS || echo FAIL)
        [ $STEP_RC -eq 124 ] && r=TIMEOUT
        [ "$r" = PASS ] || FAILED=1
        grep -E ' (ok|FAIL|\(report\))$|^numerics-check: the contract' "$BUILD/step.out" >>"$BUILD/numerics.txt"
        step_result numerics-flash "$r" $STEP_S "GPU fast vs CPU exact, $FLASH_L-layer flash, 32 positions"
    fi
fi

# ---------------------------------------------------------- 6. divergence --
diverge_result() {   # name file golden(0/1) -> summary row
    local line r
    line=$(grep -E "diverge: cpu vs cuda" "$2" | tail -1)
    # On the golden set, either device off the golden ids is a failure too.
    if [ "$3" = 1 ] && grep -qE "vs golden +first difference" "$2"; then
        line="$line; $(grep -E 'vs golden +first difference' "$2" | head -1 | sed 's/^diverge: //')"
        r=FAIL; FAILED=1
        step_result "$1" "$r" $STEP_S "$(echo "$line" | sed 's/^diverge: //')"
        return
    fi
    case $line in
        *"no GPU: skipped"*) r=SKIPPED ;;
        *"none in"*) r=PASS ;;
        *"first difference at generated position"*)
            r="DIVERGE@$(echo "$line" | sed 's/.*position \([0-9]*\).*/\1/')"
            [ "$3" = 1 ] && FAILED=1 ;;
        *) r=FAIL; FAILED=1 ;;
    esac
    [ $STEP_RC -eq 124 ] && r=TIMEOUT && FAILED=1
    step_result "$1" "$r" $STEP_S "$(echo "$line" | sed 's/^diverge: //')"
}
if [ $MODE = full ]; then
    : >"$BUILD/diverge.txt"
    GOLD=$ROOT/tests/data/golden/tiny
    run_step diverge-golden 15 "$BUILD/bench/bench_flash" --model "$GOLD/model" --diverge 32 --golden "$GOLD/tokens.json" \
        --device cuda
    grep '^diverge:' "$BUILD/step.out" >>"$BUILD/diverge.txt"
    diverge_result diverge-golden "$BUILD/step.out" 1
    if [ "${FLASH_OK:-0}" = 1 ]; then
        run_step diverge-flash 25 "$BUILD/bench/bench_flash" --model "$FLASH" --diverge 16 --device cuda
        grep '^diverge:' "$BUILD/step.out" >>"$BUILD/diverge.txt"
        diverge_result diverge-flash "$BUILD/step.out" 0
    fi
else
    step_result diverge "NOT BUILT" 0 "needs ${LIBS_MISSING[*]}"
fi

summary
for f in bench.txt bench_flash.txt bench_batching.txt numerics.txt diverge.txt; do
    if [ -s "$BUILD/$f" ]; then
        say ""
        say "build-gpu/$f:"
        cat "$BUILD/$f" | tee -a "$LOG" >/dev/null
        cat "$BUILD/$f"
    fi
done
[ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && cp "$LOG" "$OUT/device-check.log" 2>/dev/null
exit $FAILED
