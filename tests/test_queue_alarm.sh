#!/usr/bin/env bash
# test_queue_alarm.sh - checklist R3 (shared spec queue-reliability.md §8): a task is acked
# only after its result is confirmed.  A memory alarm (`set_vm_memory_high_watermark
# 0.0000001`) blocks publishing connections; the worker (confirm timeout 1.5 s) takes a
# task and publishes its result into the block.  Expected: the worker logs the
# connection.blocked notification; for several confirm timeouts the task stays unacked
# (ready 0, unacked 1), no result exists, the task is not redelivered (a requeue would
# re-run it and count against x-delivery-limit), the connections stay up (no hang: both
# links keep being serviced, rabbitmq-c #519/#780); once the alarm clears the result is
# confirmed, the task acked, exactly one result with the task's message_id.
# Uses a private RabbitMQ node (statistics every 500 ms).  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin queue_alarm private "collect_statistics_interval = 500"
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 9 > /dev/null
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_RESULTS_QUEUE=results \
    V4_HEARTBEAT_S=2 V4_CONFIRM_TIMEOUT_MS=1500 V4_LOG_LEVEL=2
# a first worker declares the topology; the task is queued before the alarm (the alarm
# blocks every publisher, the test's own included)
"$V4_BIN" worker > "$WORK/worker0.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do grep -q "amqp: connected" "$WORK/worker0.log" && break; sleep 0.1; done
grep -q "amqp: connected" "$WORK/worker0.log" || fail "the worker did not connect"
worker_stop
qclient task tasks '{"id":"al","prompt":"alarm","max_tokens":4,"temperature":0}'

echo "--- R3: memory alarm on, the worker publishes a result into the block"
rmqctl set_vm_memory_high_watermark 0.0000001 > /dev/null 2>&1 || fail "cannot set the memory watermark"
alarm=""
for _ in $(seq 1 20); do
    alarm="$(rmqctl eval 'rabbit_alarm:get_alarms().' 2>/dev/null || true)"
    grep -q "resource_limit,memory" <<< "$alarm" && break
    sleep 0.5
done
grep -q "resource_limit,memory" <<< "$alarm" || fail "no memory alarm: $alarm"
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "blocked the publisher connection" 1 15 || fail "connection.blocked not logged"
# quorum-queue statistics lag a few seconds: wait until they show the delivery
for _ in $(seq 1 40); do [ "$(queue_counts tasks)" = "0 1" ] && break; sleep 0.3; done
[ "$(queue_counts tasks)" = "0 1" ] || fail "the task never showed as unacked: tasks $(queue_counts tasks)"
t0="$(now_ms)"
bad=0 samples=0
# at least 4 samples over at least 6 s (4 more confirm timeouts); rabbitmqctl is slow
# on a loaded machine, so the count is what matters
while [ "$samples" -lt 4 ] || [ $(($(now_ms) - t0)) -lt 6000 ]; do
    all="$(rmqctl list_queues name messages_ready messages_unacknowledged 2>/dev/null)"
    c="$(awk '$1 == "tasks" { print $2, $3 }' <<< "$all")"
    r="$(awk '$1 == "results" { print $2, $3 }' <<< "$all")"
    samples=$((samples + 1))
    [ "$c" = "0 1" ] && [ "$r" = "0 0" ] || { echo "sample: tasks '$c' results '$r'"; bad=$((bad + 1)); }
    sleep 0.3
done
echo "$samples samples during the alarm, $bad off"
[ "$samples" -ge 3 ] && [ "$bad" = 0 ] || fail "during the alarm the task was not held unacked without a result"
[ "$(nlines "delivery tag")" = 1 ] || fail "the task was redelivered during the alarm ($(nlines "delivery tag") deliveries)"
[ "$(nlines "task al:")" = 0 ] || fail "task al finished during the alarm: $(grep -m 1 "task al:" "$WORK/worker.log")"
[ "$(nlines "connection lost")" = 0 ] || fail "a connection was lost during the alarm: $(grep -m 1 "connection lost" "$WORK/worker.log")"
kill -0 "$WPID" 2>/dev/null || fail "the worker exited during the alarm"

echo "--- R3: alarm cleared, the result is confirmed and the task acked"
rmqctl set_vm_memory_high_watermark 0.4 > /dev/null 2>&1 || fail "cannot clear the memory watermark"
t1="$(now_ms)"
wait_lines "task al: succeeded" 1 15 || fail "task al did not complete after the alarm cleared"
echo "task al completed $(($(now_ms) - t1)) ms after the alarm was cleared"
grep -q "unblocked the publisher connection" "$WORK/worker.log" || fail "connection.unblocked not logged"
for _ in $(seq 1 30); do [ "$(queue_counts tasks)" = "0 0" ] && break; sleep 0.2; done
[ "$(queue_counts tasks)" = "0 0" ] || fail "task al not acked: tasks $(queue_counts tasks)"
r="$(qclient result results 5)" || fail "no result for task al"
grep -q '"id":"al","status":"succeeded"' <<< "$r" || fail "unexpected result: $r"
[ "$(qclient count results)" = 0 ] || fail "more than one result for task al"
[ "$(qclient count tasks.dead)" = 0 ] || fail "a task was dead-lettered"
worker_stop
worker_finish 30
