#!/usr/bin/env bash
# test_queue_restart.sh - checklist R7 (shared spec queue-reliability.md §8): reconnect and
# resume after a graceful broker restart (`rabbitmqctl stop_app` / `start_app`).
#   A  a task is running when the app stops (CONNECTION_FORCED): its delivery tag is
#      stale after the reconnect, so the worker must not ack it on the new channel (no
#      406 PRECONDITION_FAILED "unknown delivery tag" in the broker log); the broker
#      redelivers it and it completes; consumption resumes within 15 s of start_app.
#   B  stop_app / reset / start_app wipes every exchange and queue: the worker must
#      re-declare the whole topology on reconnect and serve new tasks.
# Uses a private RabbitMQ node.  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin queue_restart private
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 8 > /dev/null
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_RESULTS_QUEUE=results \
    V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "amqp: connected" 1 10 || fail "the worker did not connect"

echo "--- R7 A: stop_app while a task runs, start_app"
# deadline 15 s: the task must still be running when stop_app takes effect, which on a
# slow machine (ASan) came more than 6 s after the delivery
qclient task tasks '{"id":"rs","deadline_ms":15000,"max_tokens":200000,"ignore_eos":true,"input_ids":[0,2,10,3,5],"temperature":0}'
wait_lines "delivery tag" 1 10 || fail "the worker did not take the task"
rmqctl stop_app > /dev/null 2>&1 || fail "stop_app failed"
wait_lines "connection lost" 1 10 || fail "the worker did not notice the broker shutdown"
# The broker sends connection.close (320 CONNECTION_FORCED) and closes the socket; on a
# busy machine the socket may be gone before the worker reads the frame, and the link
# then reports the socket error (seen once in CI).  Either way the worker noticed the
# shutdown of this broker; any other reason is a failure.
if grep -q "connection lost.*320 CONNECTION_FORCED" "$WORK/worker.log"; then
    echo "the shutdown was seen as CONNECTION_FORCED"
elif grep -q "connection lost (amqp [a-z]*: a socket error occurred)" "$WORK/worker.log"; then
    echo "the shutdown was seen as a closed socket (the close frame was not read first)"
else
    fail "the shutdown was not seen as CONNECTION_FORCED or a closed socket: $(grep -m 1 "connection lost" "$WORK/worker.log")"
fi
t0="$(now_ms)"
rmqctl start_app > /dev/null 2>&1 || fail "start_app failed"
wait_lines "amqp: connected" 2 15 || fail "no reconnect within 15 s of start_app"
echo "reconnected $(($(now_ms) - t0)) ms after start_app was called"
# the running task ends into a lost connection: no ack on the new channel
# (refused as a delivery of the lost connection, or at once while not yet reconnected)
wait_lines "task rs: result not confirmed" 1 45 || fail "the stale delivery was not refused"
grep -q "task rs: result not confirmed.*\(lost connection\|amqp: not connected\)" "$WORK/worker.log" ||
    fail "task rs: unexpected failure: $(grep -m 1 "task rs:" "$WORK/worker.log")"
# the redelivered run ends like the first (deadline) or, on a fast machine, earlier (the
# random tiny model may emit EOS after a few thousand tokens): either way its final line.
# The first run's result was not confirmed, so it has no final line (it is not counted:
# issue 19); the one final line is the redelivered run's.
wait_lines "task rs: \(failed\|succeeded\)" 1 60 || fail "task rs was not redelivered and run again"
r="$(qclient result results 20)" || fail "no result for task rs"
echo "$r" | grep -q '"id":"rs"' || fail "unexpected result: $r"
for _ in $(seq 1 50); do [ "$(queue_counts tasks)" = "0 0" ] && break; sleep 0.2; done
[ "$(queue_counts tasks)" = "0 0" ] || fail "task rs not acked: tasks $(queue_counts tasks)"
qclient publish tasks 2 4 a > /dev/null
qclient collect results 2 30 > /dev/null || fail "no processing after the restart"

echo "--- R7 B: stop_app, reset (all topology gone), start_app"
conn0="$(nlines "amqp: connected")"
rmqctl stop_app > /dev/null 2>&1 || fail "stop_app failed"
rmqctl reset > /dev/null 2>&1 || fail "reset failed"
[ -z "$(queue_counts tasks)" ] || fail "reset did not remove the task queue"
t0="$(now_ms)"
rmqctl start_app > /dev/null 2>&1 || fail "start_app failed"
wait_lines "amqp: connected" $((conn0 + 1)) 15 || fail "no reconnect within 15 s of start_app after reset"
echo "reconnected $(($(now_ms) - t0)) ms after start_app was called"
# (captured first: grep -q on a pipe would SIGPIPE rabbitmqctl under pipefail)
queues="$(rmqctl list_queues name type 2>/dev/null)"
exchanges="$(rmqctl list_exchanges name type 2>/dev/null)"
bindings="$(rmqctl list_bindings source_name destination_name 2>/dev/null)"
for q in tasks.dead tasks.invalid results; do
    grep -q "^${q}[[:space:]]*classic" <<< "$queues" || fail "queue $q not re-declared after reset"
done
grep -q "^tasks[[:space:]]*quorum" <<< "$queues" || fail "tasks not re-declared as a quorum queue"
grep -q "^results[[:space:]]*direct" <<< "$exchanges" || fail "exchange results not re-declared"
grep -q "^tasks\.dlx[[:space:]]*fanout" <<< "$exchanges" || fail "exchange tasks.dlx not re-declared"
grep -q "^tasks\.dlx[[:space:]]*tasks\.dead" <<< "$bindings" || fail "binding tasks.dlx -> tasks.dead not re-declared"
grep -q "^results[[:space:]]*results" <<< "$bindings" || fail "binding results -> results not re-declared"
qclient publish tasks 2 4 b > /dev/null
qclient collect results 2 30 > /dev/null || fail "no processing after the reset"

echo "--- broker log: no 406 for stale delivery tags"
if grep -h "PRECONDITION_FAILED\|unknown delivery tag" "$V4_TEST_BROKER_DIR"/log/*.log 2>/dev/null; then
    fail "the broker saw a 406 (stale delivery tag?)"
fi
worker_stop
worker_finish 40
