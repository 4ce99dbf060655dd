#!/usr/bin/env bash
# test_queue_cancel.sh - cancellation (docs/queue-worker.md "Cancellation") with a real
# RabbitMQ (tests/lib/brokers.sh) and a `v4fleet worker` on the tiny model
# (V4_CONCURRENCY=1); the sender's side is tests/lib/lane_client.py:
#  1. a long task (200000 tokens, ignore_eos) cancelled while it runs (a message
#     {"cancel": id} on the fanout exchange PREFIX.cancel) is answered once, `cancelled`,
#     with the text generated so far, well before its deadline; a malformed cancel message
#     is logged and dropped; the worker keeps serving (the next task succeeds);
#  2. a task still in the broker's queue (behind a long one: prefetch 1) is cancelled; when
#     it is delivered later it is answered `cancelled` without running (no start in the
#     log, no prefill, no expert activation);
#  3. /metrics counts them (v4fleet:tasks_cancelled_total{stage}, cancel_messages_total,
#     request_failure_total{code="cancelled"}); the task and dead queues end empty (each
#     task acked once, none redelivered);
#  4. the same with continuous batching (a second worker, V4_CONCURRENCY=3): of three
#     tasks decoded together, the cancelled one answers `cancelled` with its text, the
#     others go on (one succeeds, the other is cancelled later).
# No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_cancel
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }
py=/usr/bin/python3
$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)" >&2; exit 1; }

"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 3 --no-sync > /dev/null
P="cn$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_UNROUTABLE_QUEUE="$P.unroutable" V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" \
    V4_RESULTS_QUEUE="$P.results" V4_CANCEL_EXCHANGE="$P.cancel" V4_CONCURRENCY=1 V4_DEADLINE_MS=120000 \
    V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_MODEL_NAME=tiny V4_REDIS_URL=off \
    V4_HTTP_ADDR=127.0.0.1 V4_HTTP_PORT="$(_brokers_free_port)"
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "amqp: connected" 1 30 || fail "the worker did not connect"
lc() { $py "$HERE/lib/lane_client.py" "$V4_TEST_AMQP_URL" "$P" "$@"; }
SCHEMA="$HERE/../config/result.schema.json"

echo "--- 1. a running task cancelled"
lc send long1 long
wait_lines "start of task long1 " 1 30 || fail "long1 did not start"
sleep 1   # some text first
t0="$(now_ms)"
lc cancel long1 || fail "cannot publish the cancel message (no exchange $P.cancel?)"
lc cancel-raw 'not a cancel message'
lc send after1 short
lc collect "$WORK/a1.json" 2 60 || fail "answers of long1, after1"
t1="$(now_ms)"
lc check "$WORK/a1.json" "$SCHEMA" long1 running-cancelled || fail "long1"
lc check "$WORK/a1.json" "$SCHEMA" after1 succeeded || fail "after1: the worker did not keep serving"
echo "cancel -> both answers in $((t1 - t0)) ms (incl. 1.5 s waiting for duplicates)"
[ "$(nlines 'cancel message ignored')" -eq 1 ] || fail "the malformed cancel message was not logged once"

echo "--- 2. a queued task cancelled before it starts"
lc send long2 long
wait_lines "start of task long2 " 1 30 || fail "long2 did not start"
lc send q1 short
# the broker's counts lag a little on a loaded machine: poll (up to 10 s) for q1 ready and
# long2 unacked
qc=""
for _ in $(seq 1 100); do
    qc="$(queue_counts "$P.tasks")"
    [ "$qc" = "1 1" ] && break
    sleep 0.1
done
[ "$qc" = "1 1" ] || fail "q1 is not waiting in the broker: ready/unacked $qc after 10 s"
lc cancel q1
wait_lines "cancel of task 'q1' received" 1 10 || fail "the worker did not take the cancel of q1"
lc cancel long2   # frees the slot: q1 is delivered now, after its cancel
lc collect "$WORK/a2.json" 2 60 || fail "answers of long2, q1"
lc check "$WORK/a2.json" "$SCHEMA" long2 running-cancelled || fail "long2"
lc check "$WORK/a2.json" "$SCHEMA" q1 queued-cancelled || fail "q1"
[ "$(nlines 'start of task q1 ')" -eq 0 ] || fail "q1 was run: $(grep -m1 'start of task q1 ' "$WORK/worker.log")"
[ "$(nlines 'task q1: cancelled before it started')" -eq 1 ] || fail "no 'cancelled before it started' line for q1"
[ "$(nlines 'task q1: failed cancelled')" -eq 1 ] || fail "q1 not answered exactly once"

echo "--- 3. metrics, queues"
metrics="$(curl -sf "http://127.0.0.1:$V4_HTTP_PORT/metrics")" || fail "no /metrics"
m() { sed -n "s/^$1 \([0-9]*\).*/\1/p" <<< "$metrics"; }
[ "$(m 'v4fleet:tasks_cancelled_total{stage="running"}')" = 2 ] || fail "cancelled running: $(m 'v4fleet:tasks_cancelled_total{stage="running"}'), want 2"
[ "$(m 'v4fleet:tasks_cancelled_total{stage="queued"}')" = 1 ] || fail "cancelled queued: $(m 'v4fleet:tasks_cancelled_total{stage="queued"}'), want 1"
[ "$(m 'v4fleet:cancel_messages_total')" = 3 ] || fail "cancel messages: $(m 'v4fleet:cancel_messages_total'), want 3"
[ "$(m 'v4fleet:request_failure_total{code="cancelled"}')" = 3 ] || fail "failures cancelled: $(m 'v4fleet:request_failure_total{code="cancelled"}')"
counts_settle() {   # the broker's counters lag the acks on a busy machine: poll (up to 60 s)
    for _ in $(seq 1 120); do
        [ "$(queue_counts "$1")" = "0 0" ] && return 0
        sleep 0.5
    done
    return 1
}
counts_settle "$P.tasks" || fail "$P.tasks not empty: $(queue_counts "$P.tasks")"
counts_settle "$P.dead" || fail "$P.dead not empty: $(queue_counts "$P.dead")"
[ "$(nlines 'not confirmed')" -eq 0 ] || fail "a result was not confirmed (redelivered)"
worker_stop
grep -q "(3 of them cancelled)" "$WORK/worker.log" || fail "exit line without the cancelled count"

echo "--- 4. continuous batching: one of three running tasks cancelled"
mv "$WORK/worker.log" "$WORK/worker1.log"
V4_CONCURRENCY=3 "$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "amqp: connected" 1 30 || fail "the second worker did not connect"
lc send c1 long
lc send c2 long
lc send c3 tokens=300
wait_lines "start of task c3 " 1 30 || fail "c3 did not start"
lc cancel c1
lc collect "$WORK/a3.json" 2 60 || fail "answers of c1, c3"
lc check "$WORK/a3.json" "$SCHEMA" c1 running-cancelled || fail "c1"
lc check "$WORK/a3.json" "$SCHEMA" c3 succeeded || fail "c3 (batched with the cancelled c1)"
lc cancel c2
lc collect "$WORK/a4.json" 1 60 || fail "answer of c2"
lc check "$WORK/a4.json" "$SCHEMA" c2 running-cancelled || fail "c2"
worker_stop
grep -q "(2 of them cancelled)" "$WORK/worker.log" || fail "second worker: exit line without 2 cancelled"
worker_finish 40
