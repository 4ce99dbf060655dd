#!/usr/bin/env bash
# bench_queue.sh [WORKERS] [TASKS] - load run of the queue worker: a private RabbitMQ on
# loopback (tests/lib/brokers.sh), WORKERS `v4fleet worker` processes on the tiny model,
# TASKS one-token tasks published with confirms by python3-pika; prints tasks/s and the
# per-task overhead outside inference (bench_queue_client.py).  Needs build/v4fleet
# (or V4_BIN).  The workers record expert utilization in the private Redis (one EVAL per
# task), as in production; after the run the Redis counters are checked against TASKS.
# Also prints each worker's RSS before and after the run (checklist R23: memory stays
# flat over many tasks).  Not part of scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$ROOT/tests/lib/brokers.sh"
WORKERS="${1:-2}" TASKS="${2:-1000}"
BIN="${V4_BIN:-$ROOT/build/v4fleet}"
unset V4_TEST_AMQP_URL V4_TEST_BROKER_DIR
WORK="$(mktemp -d /tmp/v4bench.XXXXXX)"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    brokers_stop
    rm -rf "$WORK"
}
trap cleanup EXIT
brokers_start "$WORK/brokers"
"$BIN" mkmodel --out "$WORK/model" --preset tiny --seed 1 > /dev/null
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_REDIS_URL="$V4_TEST_REDIS_URL" V4_REDIS_PREFIX=bench V4_MODEL_DIR="$WORK/model" V4_LOG_LEVEL=0 V4_MODEL_NAME=tiny
for i in $(seq 1 "$WORKERS"); do
    "$BIN" worker 2> "$WORK/worker$i.log" &
    PIDS+=($!)
done
sleep 1
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
RSS0=(); for p in "${PIDS[@]}"; do RSS0+=("$(rss "$p")"); done
echo "bench_queue: $WORKERS workers x $TASKS tasks (1 token each, prefetch 1, confirms on both sides)"
/usr/bin/python3 "$ROOT/bench/bench_queue_client.py" "$V4_TEST_AMQP_URL" tasks "$TASKS"
sleep 1
echo "redis: $(redis-cli -u "$V4_TEST_REDIS_URL" hget bench:util:tiny:total _tasks) tasks counted," \
    "$(redis-cli -u "$V4_TEST_REDIS_URL" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_eval:calls=\([0-9]*\),.*/\1/p') EVAL calls"
line="worker RSS (KiB) before -> after:"
for i in "${!PIDS[@]}"; do line+=" ${RSS0[$i]} -> $(rss "${PIDS[$i]}")"; done
echo "$line   (checklist R23: flat = no per-task growth)"
