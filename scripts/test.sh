#!/usr/bin/env bash
# test.sh - THE test command of v4fleet: bash scripts/test.sh
#
# Stages: (1) install the Debian build dependencies if missing and start one private
# RabbitMQ + Redis on loopback for the queue tests (tests/lib/brokers.sh; stopped at
# exit; a queue test without a broker fails), (2) release build in
# build/ + ctest, (3) ASan/UBSan build in build-asan/ (-DV4_SANITIZE=ON) + ctest,
# (4) scripts/fuzz.sh if it exists.  Every stage runs even if an earlier one failed
# (except (1): without dependencies nothing can build); the ctest results of both
# builds are summed from ctest's "N tests failed out of M" line and its list of
# skipped tests.  ctest runs V4_TEST_JOBS tests at a time (default: CPUs + 1, at most
# 4): most queue tests wait on brokers and timers, and each queue test that stops or
# freezes a broker has a node of its own, so they overlap safely (on the 2-vCPU VM:
# release 544 -> 210 s, ASan/UBSan 1082 -> 606 s, the same results; V4_TEST_JOBS=1
# runs them one at a time).  A build or fuzz stage that fails counts as one failure, so the last
# line "P passed, F failed[, S skipped]" has F > 0 exactly when the exit status is 1.
# V4_TEST_STRESS=N runs N busy competing processes (shell loops, killed at exit) for the
# whole run: the suite must also pass on a machine shared with other work, where every
# wait is slower (the tests wait for progress, not for fixed times).
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$V4_ROOT"

PASSED=0
FAILED=0
SKIPPED=0
LOG_DIR="$(mktemp -d)"
# shellcheck source=tests/lib/brokers.sh
source "$V4_ROOT/tests/lib/brokers.sh"
STRESS_PIDS=()
trap 'stress_stop; brokers_release; rm -rf "$LOG_DIR"' EXIT

# V4_TEST_STRESS=N: N busy loops competing for the CPUs until exit.
stress_start() {
    local n="${V4_TEST_STRESS:-0}" i
    case "$n" in
    '' | *[!0-9]*) echo "test.sh: V4_TEST_STRESS must be a non-negative integer, not '$n'" >&2; return 1 ;;
    esac
    for ((i = 0; i < n; i++)); do
        sh -c 'while :; do :; done' &
        STRESS_PIDS+=("$!")
    done
    [ "$n" -eq 0 ] || echo "test.sh: $n busy competing processes for the whole run (V4_TEST_STRESS=$n)"
}

stress_stop() {
    [ "${#STRESS_PIDS[@]}" -eq 0 ] || kill "${STRESS_PIDS[@]}" 2> /dev/null || true
}

summary() {
    local line="$PASSED passed, $FAILED failed"
    [ "$SKIPPED" -eq 0 ] || line+=", $SKIPPED skipped"
    echo "$line"
}

# Add the counts of one ctest log to the totals.
count_ctest() {
    local log="$1" total=0 failed=0 skipped nums
    nums="$(sed -nE 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1 \2/p' "$log" | tail -n 1)"
    if [ -n "$nums" ]; then
        failed="${nums% *}"
        total="${nums#* }"
    fi
    # the list under "The following tests did not run:" ends at the next blank line
    skipped="$(awk '/^The following tests did not run:/ { inlist = 1; next }
                    inlist && /^[[:space:]]*$/ { inlist = 0 }
                    inlist && /\(Skipped\)[[:space:]]*$/ { n++ }
                    END { print n + 0 }' "$log")"
    PASSED=$((PASSED + total - failed - skipped))
    FAILED=$((FAILED + failed))
    SKIPPED=$((SKIPPED + skipped))
}

# How many tests ctest runs at once (see the header).
test_jobs() {
    local j="${V4_TEST_JOBS:-}"
    if [ -z "$j" ]; then
        j=$(($(nproc 2> /dev/null || echo 1) + 1))
        [ "$j" -le 4 ] || j=4
    fi
    case "$j" in
    '' | *[!0-9]* | 0) echo "test.sh: V4_TEST_JOBS must be a positive integer, not '$j'" >&2; return 1 ;;
    esac
    echo "$j"
}

# run_ctest NAME DIR: run ctest in DIR, count its results; returns ctest's status.
run_ctest() {
    local name="$1" dir="$2" rc=0 jobs
    jobs="$(test_jobs)" || { FAILED=$((FAILED + 1)); return 1; }
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" 2>&1 | tee "$LOG_DIR/$name.log" || rc=$?
    count_ctest "$LOG_DIR/$name.log"
    if [ "$rc" -ne 0 ] && ! grep -qE ' [0-9]+ tests? failed out of ' "$LOG_DIR/$name.log"; then
        FAILED=$((FAILED + 1))   # ctest itself failed without a result line
    fi
    return "$rc"
}

# build_and_test NAME DIR [CMAKE_ARGS...]
build_and_test() {
    local name="$1" dir="$2"
    shift 2
    v4_section "$name: build ($dir)"
    if ! v4_build "$dir" "$@"; then
        echo "test.sh: $name build FAILED" >&2
        FAILED=$((FAILED + 1))
        return 1
    fi
    v4_section "$name: ctest ($dir)"
    run_ctest "$name" "$dir" || { echo "test.sh: $name tests FAILED" >&2; return 1; }
}

main() {
    local status=0
    v4_section "dependencies"
    if ! v4_ensure_packages; then
        echo "test.sh: cannot install the build dependencies" >&2
        FAILED=$((FAILED + 1))
        summary
        exit 1
    fi

    if ! stress_start; then
        FAILED=$((FAILED + 1))
        summary
        exit 1
    fi
    v4_section "brokers (RabbitMQ + Redis on loopback)"
    if ! brokers_ensure; then
        echo "test.sh: cannot start the test brokers (the queue tests will fail)" >&2
    fi

    build_and_test release build -DCMAKE_BUILD_TYPE=Release || status=1

    export ASAN_OPTIONS=detect_leaks=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    build_and_test asan build-asan -DCMAKE_BUILD_TYPE=Debug -DV4_SANITIZE=ON || status=1

    if [ -f scripts/fuzz.sh ]; then
        v4_section "fuzz (scripts/fuzz.sh)"
        if ! bash scripts/fuzz.sh; then
            echo "test.sh: fuzz FAILED" >&2
            FAILED=$((FAILED + 1))
            status=1
        fi
    fi

    v4_section "summary"
    if [ "$status" -eq 0 ]; then
        echo "test.sh: all stages passed"
    else
        echo "test.sh: FAILURES (see above)"
    fi
    summary
    exit "$status"
}

main "$@"
