#!/usr/bin/env bash
# demo.sh - run the main job on an embedded default: bash scripts/demo.sh [--worker]
#
# Installs the build dependencies if missing, builds the release binary in build/,
# writes a synthetic tiny checkpoint to models/tiny (once; kept if config.json is
# there), then runs the main job: `v4fleet batch` over scripts/demo_batch.jsonl (task
# packets, OpenAI batch lines, one answer under a JSON Schema (response_format,
# docs/structured-outputs.md) and deliberately bad lines; no broker needed) and prints the
# output JSONL; then generates 16 greedy tokens from the prompt ids in
# scripts/demo_prompt.json and a short chat answer.
# --worker: instead of generating directly, start a private RabbitMQ + Redis on loopback
# (tests/lib/brokers.sh; no root, no systemd), a `v4fleet worker` on models/tiny, submit
# scripts/demo_tasks.jsonl through the queue (scripts/submit.py), print the results and
# the fleet's expert-utilization report, then stop everything.
set -euo pipefail
MODE=direct
case "${1:-}" in
    "") ;;
    --worker) MODE=worker ;;
    *) echo "usage: bash scripts/demo.sh [--worker]" >&2; exit 2 ;;
esac

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$V4_ROOT"

v4_section "dependencies"
v4_ensure_packages

v4_section "build (release, build/)"
if [ -f build/CMakeCache.txt ]; then
    cmake --build build -j "$(v4_jobs)"
else
    v4_build build -DCMAKE_BUILD_TYPE=Release
fi

v4_section "model (models/tiny)"
if [ -f models/tiny/config.json ] && [ -f models/tiny/tokenizer.json ]; then
    echo "models/tiny exists; not regenerating"
else
    build/v4fleet mkmodel --out models/tiny --preset tiny --seed 1 --force
fi

if [ "$MODE" = worker ]; then
    # shellcheck source=tests/lib/brokers.sh
    source tests/lib/brokers.sh
    DEMO_DIR="$(mktemp -d /tmp/v4demo.XXXXXX)"
    WPID=""
    demo_stop() {
        [ -n "$WPID" ] && kill -TERM "$WPID" 2>/dev/null && wait "$WPID" || true
        brokers_stop > /dev/null 2>&1 || true
        rm -rf "$DEMO_DIR"
    }
    trap demo_stop EXIT
    v4_section "private RabbitMQ + Redis on loopback ($DEMO_DIR)"
    brokers_start "$DEMO_DIR/brokers"
    v4_section "worker (log: $DEMO_DIR/worker.log)"
    V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_REDIS_URL="$V4_TEST_REDIS_URL" V4_MODEL_DIR=models/tiny \
        V4_MODEL_NAME=tiny build/v4fleet worker > "$DEMO_DIR/worker.log" 2>&1 &
    WPID=$!
    for _ in $(seq 1 100); do rmqctl list_queues name 2>/dev/null | grep -qx tasks && break; sleep 0.1; done
    head -n 3 "$DEMO_DIR/worker.log"
    v4_section "submit scripts/demo_tasks.jsonl -> results"
    /usr/bin/python3 scripts/submit.py --url "$V4_TEST_AMQP_URL" --timeout 60 scripts/demo_tasks.jsonl
    v4_section "fleet expert utilization (v4fleet stats)"
    sleep 0.5
    build/v4fleet stats --redis "$V4_TEST_REDIS_URL" --model tiny --top 3
    exit 0
fi

v4_section "run the main job: v4fleet batch scripts/demo_batch.jsonl (no broker)"
BATCH_DIR="$(mktemp -d /tmp/v4batch.XXXXXX)"
trap 'rm -rf "$BATCH_DIR"' EXIT
build/v4fleet batch scripts/demo_batch.jsonl -o "$BATCH_DIR/out.jsonl" --model models/tiny --model-name tiny --concurrency 4
v4_section "batch output ($BATCH_DIR/out.jsonl: one line per input line; re-running the command resumes)"
cat "$BATCH_DIR/out.jsonl"

v4_section "generate (token ids in, ids out)"
build/v4fleet generate --model models/tiny --prompt-ids scripts/demo_prompt.json \
    --max-tokens 16 --greedy

v4_section "generate (chat prompt in, streamed text out; random weights, so the text is noise)"
build/v4fleet generate --model models/tiny --prompt "Summarize: the fleet serves DeepSeek-V4 from queues." \
    --max-tokens 32 --temperature 0.8 --top-p 0.95 --seed 1
