#!/usr/bin/env bash
# fuzz.sh - build and run the safetensors header fuzzer, the task packet fuzzer
# (worker/serve/task_packet.c; V4_FUZZ_TASK_SECONDS, default 20) and the constraint engine
# fuzzer (worker/grammar/: schemas, regexes, choices, GBNF grammars and matching; V4_FUZZ_GRAMMAR_SECONDS,
# default 30) for a bounded time.
#
# Configures build-fuzz/ with clang and -DV4_FUZZ=ON, builds only the fuzz target,
# and runs it for V4_FUZZ_SECONDS (default 60) on a scratch copy of
# tests/fuzz/corpus (the seed corpus in the tree is never modified; new inputs stay
# in build-fuzz/corpus-run).  Crash inputs are written to build-fuzz/artifacts/.
# Exit status: 0 when no crash/leak/timeout was found, non-zero otherwise.
# Env: V4_FUZZ_SECONDS, CC (default clang).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-fuzz"
seconds=${V4_FUZZ_SECONDS:-60}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER="${CC:-clang}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DV4_FUZZ=ON >/dev/null
ninja -C "$build" fuzz_safetensors fuzz_task_packet fuzz_grammar

rm -rf "$build/corpus-run"
mkdir -p "$build/corpus-run" "$build/artifacts"
cp "$root"/tests/fuzz/corpus/* "$build/corpus-run/"

echo "fuzzing cache/safetensors.c for ${seconds}s ..."
rc=0
"$build/tests/fuzz/fuzz_safetensors" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -dict="$root/tests/fuzz/safetensors.dict" -artifact_prefix="$build/artifacts/" \
    "$build/corpus-run" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "fuzz.sh: fuzzer failed (exit $rc); reproducers in $build/artifacts/" >&2
    exit "$rc"
fi
echo "fuzz.sh: no crash in ${seconds}s"

task_seconds=${V4_FUZZ_TASK_SECONDS:-20}
rm -rf "$build/corpus-task-run"
mkdir -p "$build/corpus-task-run"
cp "$root"/tests/fuzz/corpus_task/* "$build/corpus-task-run/"
echo "fuzzing worker/serve/task_packet.c for ${task_seconds}s ..."
rc=0
"$build/tests/fuzz/fuzz_task_packet" -max_total_time="$task_seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=70000 -print_final_stats=1 -artifact_prefix="$build/artifacts/task-" \
    "$build/corpus-task-run" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "fuzz.sh: task packet fuzzer failed (exit $rc); reproducers in $build/artifacts/" >&2
    exit "$rc"
fi
echo "fuzz.sh: no crash in the task packet parser in ${task_seconds}s"

grammar_seconds=${V4_FUZZ_GRAMMAR_SECONDS:-30}
rm -rf "$build/corpus-grammar-run"
mkdir -p "$build/corpus-grammar-run"
cp "$root"/tests/fuzz/corpus_grammar/* "$build/corpus-grammar-run/"
echo "fuzzing worker/grammar/ (schemas, regexes, choices, GBNF + matching) for ${grammar_seconds}s ..."
rc=0
"$build/tests/fuzz/fuzz_grammar" -max_total_time="$grammar_seconds" -timeout=20 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$build/artifacts/grammar-" \
    "$build/corpus-grammar-run" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "fuzz.sh: constraint engine fuzzer failed (exit $rc); reproducers in $build/artifacts/" >&2
    exit "$rc"
fi
echo "fuzz.sh: no crash in the constraint engine in ${grammar_seconds}s"
