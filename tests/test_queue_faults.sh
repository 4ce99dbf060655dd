#!/usr/bin/env bash
# test_queue_faults.sh - reliability rows of the checklist (shared spec queue-reliability.md §8)
# against a real RabbitMQ (tests/lib/brokers.sh) with the tiny model:
#   R22+R12  a task whose result is unroutable (the results queue's binding deleted) is
#            never acked: basic.return -> nack(requeue), x-delivery-count grows, and past
#            the delivery limit the task ends in the dead-letter queue; the worker keeps
#            serving.  (A reply_to queue that is gone is another case: the result goes to
#            the unroutable queue and the task is acked; tests/test_queue_contract.sh.)
#   R8       `rabbitmqctl close_all_connections` (CONNECTION_FORCED): the worker reconnects
#            and keeps processing.
#   R10      the task queue is deleted under the worker: basic.cancel (consumer_cancel_notify)
#            is noticed, the worker reconnects, re-declares the topology and keeps serving.
#   R1       kill -9 one of two workers mid-run: every task still gets a result
#            (duplicates allowed, same id) and the task queue ends empty.
#   R16      two workers with prefetch 1: messages_unacknowledged never exceeds 2.
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_faults private   # R8 closes every connection of its broker: only this test's may be on it
PIDS=()
test_cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 5 > /dev/null
P="flt$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_PREFETCH=1 V4_HEARTBEAT_S=2 V4_DELIVERY_LIMIT=3 V4_LOG_LEVEL=1 V4_MODEL_NAME=tiny
start_worker() {
    "$V4_BIN" worker >> "$WORK/worker$1.log" 2>&1 &
    PIDS+=($!)
    eval "W$1=$!"
}
wait_queue() {
    for _ in $(seq 1 100); do
        rmqctl list_queues name 2>/dev/null | grep -qx "$1" && return 0
        sleep 0.1
    done
    return 1
}
start_worker 1
wait_queue "$P.tasks" || fail "the worker did not declare $P.tasks"

echo "--- R22+R12: unroutable result -> requeue -> dead-letter after the delivery limit"
qclient unbind "$P.results" "$P.results" "$P.results"
qclient publish "$P.tasks" 1 4 poison
qclient dead "$P.dead" poison000 30 || fail "poison task not dead-lettered"
qclient bind "$P.results" "$P.results" "$P.results"
qclient publish "$P.tasks" 3 4 ok
qclient collect "$P.results" 3 30 || fail "tasks after the poison one were not served"
grep -q "unroutable" "$WORK/worker1.log" || fail "no log line for the returned result"

echo "--- R8: close_all_connections -> reconnect and continue"
rmqctl close_all_connections "test R8" > /dev/null 2>&1 || fail "close_all_connections failed"
sleep 1
qclient publish "$P.tasks" 5 4 r8-
qclient collect "$P.results" 5 30 || fail "no processing after CONNECTION_FORCED"
grep -q "connection lost" "$WORK/worker1.log" || fail "the worker did not notice the forced close"

echo "--- R10: the task queue is deleted under the worker"
rmqctl delete_queue "$P.tasks" > /dev/null 2>&1 || fail "delete_queue failed"
wait_queue "$P.tasks" || fail "the worker did not re-declare $P.tasks"
grep -q "cancelled the consumer" "$WORK/worker1.log" || fail "basic.cancel not noticed"
qclient publish "$P.tasks" 3 4 r10-
qclient collect "$P.results" 3 30 || fail "no processing after the queue was re-declared"

echo "--- R1: kill -9 a worker mid-run, nothing lost"
start_worker 2
qclient publish "$P.tasks" 20 150 r1-
sleep 1.5
kill -9 "$W1" 2>/dev/null || true
start_worker 3
qclient collect "$P.results" 20 120 || fail "tasks lost after kill -9"
for _ in $(seq 1 50); do
    [ "$(qclient count "$P.tasks")" = 0 ] && break
    sleep 0.2
done
[ "$(qclient count "$P.tasks")" = 0 ] || fail "$P.tasks not empty"
[ "$(qclient count "$P.dead")" = 0 ] || fail "$P.dead not empty"

echo "--- R16: prefetch respected"
qclient publish "$P.tasks" 20 150 r16-
max=0
for _ in 1 2 3 4; do
    n="$(rmqctl list_queues name messages_unacknowledged 2>/dev/null | awk -v q="$P.tasks" '$1 == q { print $2 }')"
    [ -n "$n" ] && [ "$n" -gt "$max" ] && max="$n"
done
echo "max messages_unacknowledged: $max"
[ "$max" -le 2 ] || fail "R16: $max unacked deliveries with 2 workers x prefetch 1"
qclient collect "$P.results" 20 120 || fail "R16 tasks not served"

for w in "$W2" "$W3"; do
    kill -TERM "$w"
    wait "$w" || fail "worker $w exit status $? after SIGTERM"
done
if [ "$status" -ne 0 ]; then
    for f in "$WORK"/worker*.log; do echo "--- $f" >&2; tail -n 30 "$f" >&2; done
fi
exit "$status"
