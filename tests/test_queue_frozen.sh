#!/usr/bin/env bash
# test_queue_frozen.sh - checklist R6 (shared spec queue-reliability.md §8): no indefinite
# block in the result publish (rabbitmq-c 0.11 #780 guard).  Heartbeat 2 s, confirm
# timeout 3 s, a 4 s task (deadline-bounded); the broker VM is frozen (kill -STOP)
# ~1 s before the task ends.  The worker must give up on the result within the
# configured bound (heartbeat timeout / confirm timeout + slack) instead of hanging in
# poll(-1), must not ack, and after kill -CONT must reconnect and deliver the task's
# result (duplicates allowed, same message_id); the task queue ends empty.
# Uses a private RabbitMQ node (the shared one is never frozen).  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin queue_frozen private
WPID="" BEAM=""
test_cleanup() {
    [ -z "$BEAM" ] || kill -CONT "$BEAM" 2>/dev/null
    [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null
}
# results ID TIMEOUT_S: wait for a result of task ID in the results queue, drain it for
# one more second; print "N BAD" (N results of ID, BAD results with a wrong message_id)
results() {
    /usr/bin/python3 - "$V4_TEST_AMQP_URL" "$1" "$2" <<'PY'
import json, sys, time
import pika
url, tid, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
ch = pika.BlockingConnection(pika.URLParameters(url)).channel()
n = bad = 0
end = time.time() + timeout
while time.time() < end:
    m, p, b = ch.basic_get("results", auto_ack=True)
    if m is None:
        time.sleep(0.05)
        continue
    r = json.loads(b)
    if r.get("id") != tid or p.message_id != tid:
        bad += 1
    else:
        n += 1
        end = min(end, time.time() + 1.0)
print(n, bad)
PY
}

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 7 > /dev/null
BEAM="$(cat "$V4_TEST_BROKER_DIR/rabbitmq.pid")"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_RESULTS_QUEUE=results \
    V4_HEARTBEAT_S=2 V4_CONFIRM_TIMEOUT_MS=3000 V4_LOG_LEVEL=2
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do [ "$(nlines "amqp: connected")" -ge 1 ] && break; sleep 0.1; done
[ "$(nlines "amqp: connected")" -ge 1 ] || fail "the worker did not connect"

echo "--- R6: freeze the broker ~1 s before the task's result is published"
qclient task tasks '{"id":"fz","deadline_ms":4000,"max_tokens":200000,"ignore_eos":true,"input_ids":[0,2,10,3,5],"temperature":0}'
for _ in $(seq 1 100); do [ "$(nlines "delivery tag")" -ge 1 ] && break; sleep 0.05; done
[ "$(nlines "delivery tag")" -ge 1 ] || fail "the worker did not take the task"
sleep 3
kill -STOP "$BEAM"
t0="$(now_ms)"
gave_up=""
while [ $(($(now_ms) - t0)) -lt 20000 ]; do
    if grep -q "task fz: result not confirmed" "$WORK/worker.log"; then gave_up="$(($(now_ms) - t0))"; break; fi
    sleep 0.1
done
echo "the worker gave up on the result ${gave_up:-(never)} ms after the freeze"
# the task ends ~1 s after the freeze; heartbeat timeout 2 x 2 s, confirm timeout 3 s
[ -n "$gave_up" ] && [ "$gave_up" -le 7000 ] ||
    fail "the result publish blocked: no give-up within 7 s of freezing the broker (${gave_up:-never})"
sleep 1
kill -0 "$WPID" 2>/dev/null || fail "the worker exited while the broker was frozen"
conn0="$(nlines "amqp: connected")"
kill -CONT "$BEAM"
t1="$(now_ms)"
echo "--- R6: broker resumed; expect a reconnect, the task run again, acked and its result"
# the first run's result was not confirmed: it has no final line (not counted, issue 19),
# so the one "failed deadline_exceeded" line is the run after the resume
for _ in $(seq 1 600); do [ "$(nlines "task fz: failed deadline_exceeded")" -ge 1 ] && break; sleep 0.1; done
[ "$(nlines "amqp: connected")" -gt "$conn0" ] || fail "the worker did not reconnect after the resume"
[ "$(nlines "task fz: failed deadline_exceeded")" -ge 1 ] || fail "task fz was not run again after the resume"
[ "$(nlines "not confirmed")" = 1 ] || fail "expected exactly one unconfirmed result (the one published into the freeze)"
echo "task fz done again $(($(now_ms) - t1)) ms after the resume"
ready="" unacked=""
for _ in $(seq 1 50); do
    read -r ready unacked <<< "$(rmqctl list_queues name messages_ready messages_unacknowledged 2>/dev/null |
        awk '$1 == "tasks" { print $2, $3 }')"
    [ "$ready" = 0 ] && [ "$unacked" = 0 ] && break
    sleep 0.2
done
[ "$ready" = 0 ] && [ "$unacked" = 0 ] || fail "task fz not acked: ready '$ready' unacked '$unacked'"
# the result published into the freeze may be routed after the resume: 1 or 2 copies
read -r n bad <<< "$(results fz 10)"
echo "results of fz: $n (bad $bad)"
[ "$n" -ge 1 ] && [ "$n" -le 2 ] || fail "task fz: $n results (expected 1 or 2, same message_id)"
[ "$bad" = 0 ] || fail "$bad unexpected results"

worker_stop
worker_finish 40
