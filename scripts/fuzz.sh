#!/usr/bin/env bash
# fuzz.sh - build and run the safetensors header fuzzer, the task packet fuzzer
# (worker/serve/task_packet.c; V4_FUZZ_TASK_SECONDS, default 20) and the constraint engine
# fuzzer (worker/grammar/: schemas, regexes, choices, GBNF grammars and matching; V4_FUZZ_GRAMMAR_SECONDS,
# default 30) and the chat prompt encoder (worker/serve/chat.c: user text stays text;
# V4_FUZZ_CHAT_SECONDS, default 20) for a bounded time, one function for all four.
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
ninja -C "$build" fuzz_safetensors fuzz_task_packet fuzz_grammar fuzz_chat
mkdir -p "$build/artifacts"

# fuzz NAME WHAT SECONDS CORPUS MAX_LEN TIMEOUT [libFuzzer flags...]: run tests/fuzz/NAME on
# a scratch copy of CORPUS (the tree's seeds are never modified) for SECONDS; exits the
# script with the fuzzer's status when it finds something (reproducers in artifacts/).
fuzz() {
    local name=$1 what=$2 secs=$3 corpus=$4 max_len=$5 timeout=$6
    shift 6
    local run="$build/corpus-$name-run" rc=0
    rm -rf "$run"
    mkdir -p "$run"
    [ -z "$corpus" ] || cp "$root/tests/fuzz/$corpus"/* "$run/"
    echo "fuzzing $what for ${secs}s ..."
    "$build/tests/fuzz/$name" -max_total_time="$secs" -timeout="$timeout" -rss_limit_mb=2048 \
        -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" "$@" "$run" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "fuzz.sh: $name failed (exit $rc); reproducers in $build/artifacts/" >&2
        exit "$rc"
    fi
    echo "fuzz.sh: no crash in $what in ${secs}s"
}

fuzz fuzz_safetensors "cache/safetensors.c" "$seconds" corpus 65536 10 -dict="$root/tests/fuzz/safetensors.dict"
fuzz fuzz_task_packet "worker/serve/task_packet.c" "${V4_FUZZ_TASK_SECONDS:-20}" corpus_task 70000 10
fuzz fuzz_grammar "worker/grammar/ (schemas, regexes, choices, GBNF + matching)" "${V4_FUZZ_GRAMMAR_SECONDS:-30}" \
    corpus_grammar 4096 20
fuzz fuzz_chat "the chat prompt's encoding (worker/serve/chat.c, worker/tokenizer/)" "${V4_FUZZ_CHAT_SECONDS:-20}" \
    corpus_chat 8192 10
