#!/usr/bin/env bash
# test_queue_shutdown.sh - deadlines and SIGTERM with a real RabbitMQ (tests/lib/brokers.sh)
# and the tiny model (input_ids [0,2,10,3,5] greedy runs thousands of tokens without EOS):
#   deadline  a task with deadline_ms 300 and 20000 tokens fails fast with deadline_exceeded
#   R4        heartbeat 1 s, a task busy for 4 s (deadline-bounded): the connection survives
#             (no reconnect, no "missed heartbeats" in the broker log), one delivery
#   R14       SIGTERM during a task that fits the grace period: the task completes, its
#             result is published and acked, the worker exits 0, the queue is empty
#   R15       SIGTERM during a task that does not fit (V4_GRACE_MS=300): the task is
#             aborted and requeued (ready again), the worker exits 0 within a few seconds
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_shutdown private   # R4 reads the broker's log: only this test's connections may be in it
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 1 > /dev/null
P="sd$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_MODEL_NAME=tiny
LONG='"input_ids":[0,2,10,3,5],"temperature":0'
start_worker() {
    "$V4_BIN" worker >> "$WORK/worker.log" 2>&1 &
    WPID=$!
    for _ in $(seq 1 100); do
        grep -q "amqp: connected" "$WORK/worker.log" && return 0
        sleep 0.1
    done
    fail "worker did not connect"
}
# wait until the worker has taken a delivery (debug line), then a little more
wait_started() {
    for _ in $(seq 1 100); do
        [ "$(grep -c "delivery tag" "$WORK/worker.log")" -ge "$1" ] && return 0
        sleep 0.05
    done
    fail "the worker did not take task $1"
}
stop_worker() {   # stop_worker MAX_S: SIGTERM, expect exit 0 within MAX_S
    local t0 rc=0
    t0=$(date +%s)
    kill -TERM "$WPID"
    wait "$WPID" || rc=$?
    WPID=""
    [ "$rc" -eq 0 ] || fail "worker exit status $rc after SIGTERM"
    [ $(($(date +%s) - t0)) -le "$1" ] || fail "worker took more than $1 s to stop"
}

echo "--- deadline"
V4_GRACE_MS=60000 start_worker
qclient task "$P.tasks" '{"id":"dl","deadline_ms":300,"max_tokens":20000,"ignore_eos":true,'"$LONG"'}'
r="$(qclient result "$P.results" 30)" || fail "no result for the deadline task"
echo "$r" | grep -q '"code":"deadline_exceeded"' || fail "deadline task: $r"

echo "--- R4: heartbeats during a long task"
stop_worker 120
V4_HEARTBEAT_S=1 V4_GRACE_MS=60000 start_worker
qclient task "$P.tasks" '{"id":"hb","deadline_ms":4000,"max_tokens":200000,"ignore_eos":true,'"$LONG"'}'
r="$(qclient result "$P.results" 60)" || fail "no result for the heartbeat task"
echo "$r" | grep -q '"id":"hb"' || fail "R4 result: $r"
[ "$(grep -c "connection lost" "$WORK/worker.log")" = 0 ] || fail "R4: the connection was lost during the task"
if grep -q "missed heartbeats" "$V4_TEST_BROKER_DIR"/log/*.log 2>/dev/null; then fail "R4: broker saw missed heartbeats"; fi
[ "$(grep -c "task hb:" "$WORK/worker.log")" = 1 ] || fail "R4: task hb ran more than once"

echo "--- R14: SIGTERM, the running task fits the grace period"
qclient task "$P.tasks" '{"id":"fits","max_tokens":400,'"$LONG"'}'
wait_started 3
stop_worker 120
r="$(qclient result "$P.results" 10)" || fail "no result for the task running at SIGTERM"
echo "$r" | grep -q '"id":"fits","status":"succeeded"' || fail "R14 result: $r"
[ "$(qclient count "$P.tasks")" = 0 ] || fail "R14: task queue not empty"

echo "--- R15: SIGTERM, the running task does not fit the grace period"
V4_GRACE_MS=300 start_worker
qclient task "$P.tasks" '{"id":"long","max_tokens":20000,"ignore_eos":true,'"$LONG"'}'
wait_started 4
sleep 0.3
stop_worker 6
grep -q "task long: grace period over, requeued" "$WORK/worker.log" || fail "R15: no requeue log line"
n=0
for _ in $(seq 1 50); do
    n="$(qclient count "$P.tasks")"
    [ "$n" = 1 ] && break
    sleep 0.2
done
[ "$n" = 1 ] || fail "R15: task not back in the queue (ready $n)"
[ "$status" -eq 0 ] || tail -n 40 "$WORK/worker.log" >&2
exit "$status"
