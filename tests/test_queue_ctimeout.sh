#!/usr/bin/env bash
# test_queue_ctimeout.sh - checklist R9 (shared spec queue-reliability.md §8, §1.4, V8): the
# broker's consumer (delivery-acknowledgement) timeout.  A private node runs with
# consumer_timeout = 10000 (evaluated about once a minute).  The worker (heartbeats off,
# so the broker cannot notice the freeze otherwise) is frozen with SIGSTOP and a task is
# published: the delivery sits unacked until the broker closes the channel with 406
# PRECONDITION_FAILED; until the client answers with channel.close-ok the task is not
# ready again (V8).  After SIGCONT the worker must send close-ok, reconnect, refuse to
# ack the copy it had received on the closed channel (it may have run it, or dropped it
# unrun when it saw the close first), and process the redelivered copy: the task is
# acked, its result published, no 406 for an unknown delivery tag.
# Takes 15-80 s (the broker's check interval).  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin queue_ctimeout private "consumer_timeout = 10000
collect_statistics_interval = 500"
WPID=""
test_cleanup() {
    [ -z "$WPID" ] || { kill -CONT "$WPID"; kill -9 "$WPID"; } 2>/dev/null
}

ct="$(rmqctl eval 'application:get_env(rabbit, consumer_timeout).' 2>/dev/null || true)"
grep -q "{ok,10000}" <<< "$ct" || fail "the private node's consumer_timeout is '$ct', not 10000"
"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 10 > /dev/null
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_RESULTS_QUEUE=results \
    V4_HEARTBEAT_S=0 V4_LOG_LEVEL=2
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "amqp: connected" 1 10 || fail "the worker did not connect"

echo "--- R9: worker frozen, task delivered, wait for the broker's consumer timeout"
kill -STOP "$WPID"
qclient task tasks '{"id":"ct","prompt":"consumer timeout","max_tokens":4,"temperature":0}'
t0="$(now_ms)"
timed_out=""
while [ $(($(now_ms) - t0)) -lt 80000 ]; do
    if grep -q "delivery acknowledgement on channel 1 timed out" "$V4_TEST_BROKER_DIR"/log/*.log 2>/dev/null; then
        timed_out="$(($(now_ms) - t0))"
        break
    fi
    sleep 0.5
done
echo "the broker timed the delivery out after ${timed_out:-(never)} ms"
[ -n "$timed_out" ] || fail "no consumer timeout within 80 s"
sleep 1.5   # statistics
c="$(queue_counts tasks)"
echo "before close-ok: tasks (ready unacked) $c"
[ "${c%% *}" = 0 ] || fail "the task was ready again before the client's close-ok ($c)"

echo "--- R9: worker resumed: close-ok, reconnect, the redelivered copy is processed"
kill -CONT "$WPID"
wait_lines "server closed the channel: 406 PRECONDITION_FAILED" 1 10 || fail "the 406 channel.close was not handled"
wait_lines "amqp: connected" 2 15 || fail "no reconnect after the channel was closed"
# The copy received on the closed channel may or may not have run before the worker saw
# the close (which thread gets there first); the redelivered copy must run after the
# reconnect either way.
ran_after_reconnect() {
    local last_ok conn2
    last_ok=$(grep -n "task ct: succeeded" "$WORK/worker.log" | tail -n 1 | cut -d: -f1 || true)
    conn2=$(grep -n "amqp: connected" "$WORK/worker.log" | sed -n 2p | cut -d: -f1 || true)
    [ -n "$last_ok" ] && [ -n "$conn2" ] && [ "$last_ok" -gt "$conn2" ]
}
for _ in $(seq 1 100); do ran_after_reconnect && break; sleep 0.2; done
ran_after_reconnect || fail "task ct was not run again after the reconnect"
echo "task ct ran $(grep -c "task ct: succeeded" "$WORK/worker.log" || true) time(s); the last one after the reconnect"
for _ in $(seq 1 30); do [ "$(queue_counts tasks)" = "0 0" ] && break; sleep 0.2; done
[ "$(queue_counts tasks)" = "0 0" ] || fail "task ct not acked: tasks $(queue_counts tasks)"
r="$(qclient result results 5)" || fail "no result for task ct"
grep -q '"id":"ct","status":"succeeded"' <<< "$r" || fail "unexpected result: $r"
[ "$(nlines "delivery tag")" = 2 ] || fail "expected 2 deliveries, saw $(nlines "delivery tag")"
if grep -h "unknown delivery tag" "$V4_TEST_BROKER_DIR"/log/*.log; then fail "stale delivery tag acked"; fi
worker_stop
worker_finish 30
