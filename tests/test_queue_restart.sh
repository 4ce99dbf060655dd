#!/usr/bin/env bash
# test_queue_restart.sh - checklist R7 (shared spec queue-reliability.md §8): reconnect and
# resume after a graceful broker restart (`rabbitmqctl stop_app` / `start_app`).
#   A  a task is running when the app stops (CONNECTION_FORCED): the broker requeues it,
#      so the worker stops it at its next step (abandoned, issue 19: no work nobody can
#      ack, no result, no ack on the new channel: no 406 PRECONDITION_FAILED "unknown
#      delivery tag" in the broker log, tasks_abandoned_total 1); the broker redelivers
#      it and it completes; consumption resumes within 15 s of start_app.
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
HTTP_PORT="$(_brokers_free_port)"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_RESULTS_QUEUE=results \
    V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_HTTP_PORT="$HTTP_PORT"
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "amqp: connected" 1 10 || fail "the worker did not connect"

echo "--- R7 A: stop_app while a task runs, start_app"
# deadline 60 s: the task must still be running when stop_app takes effect, which on a
# slow machine (ASan) came more than 6 s after the delivery
qclient task tasks '{"id":"rs","deadline_ms":60000,"max_tokens":200000,"ignore_eos":true,"input_ids":[0,2,10,3,5],"temperature":0}'
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
# the running task is stopped at its next step (a step of the tiny model takes
# milliseconds; 30 s is for a machine that gives the worker no CPU for a long while),
# long before its deadline, while the broker is still down: nobody could ack its result
wait_lines "task rs: abandoned" 1 30 ||
    fail "task rs still running 30 s after the connection was lost: $(grep "task rs" "$WORK/worker.log" | tail -n 2)"
grep -q "task rs: abandoned.*stopped at the next step" "$WORK/worker.log" ||
    fail "task rs: not stopped at a step: $(grep -m 1 "task rs: abandoned" "$WORK/worker.log")"
grep -m 1 -o "task rs: abandoned.*" "$WORK/worker.log"
! grep -q "task rs: result not confirmed" "$WORK/worker.log" || fail "task rs: a result was published for it"
metric() { curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
[ "$(metric v4fleet:tasks_abandoned_total)" = 1 ] ||
    fail "tasks_abandoned_total: '$(metric v4fleet:tasks_abandoned_total)', want 1"
t0="$(now_ms)"
rmqctl start_app > /dev/null 2>&1 || fail "start_app failed"
wait_lines "amqp: connected" 2 15 || fail "no reconnect within 15 s of start_app"
echo "reconnected $(($(now_ms) - t0)) ms after start_app was called"
# the redelivered run ends at its deadline or, on a fast machine, earlier (the random
# tiny model may emit EOS after a few thousand tokens): either way its final line, the
# only one (the first run was abandoned).  Bound: its 60 s deadline and a slow machine.
wait_lines "task rs: \(failed\|succeeded\)" 1 120 || fail "task rs was not redelivered and run again"
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
