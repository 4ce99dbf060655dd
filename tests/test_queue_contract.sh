#!/usr/bin/env bash
# test_queue_contract.sh - the request/response contract (docs/queue-worker.md
# "Contract") with a real RabbitMQ (tests/lib/brokers.sh) and a `v4fleet worker` on the
# tiny model; the sender's side is tests/lib/contract_client.py:
#  1. invalid packets with reply_to get a failed result there (their correlation_id,
#     error {code, message, where}, id; valid under config/result.schema.json) besides
#     their invalid-queue record; a bad x-deadline-at header is such a packet;
#  2. a result whose reply_to queue vanished while the task ran is republished to the
#     unroutable queue (reason and original reply_to / correlation_id in headers), the task
#     is acked and runs exactly once (the worker log, /metrics
#     v4fleet:results_unroutable_total, the task and dead queues empty afterwards);
#  3. deadlines from the sender's clock: AMQP timestamp + deadline_ms, x-deadline-at,
#     timestamp + expiration; a task past one when taken fails deadline_exceeded without
#     running; an overrun keeps its partial text in output.text.
# No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_contract
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }
py=/usr/bin/python3
$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)" >&2; exit 1; }

"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 3 --no-sync > /dev/null
P="ct$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_UNROUTABLE_QUEUE="$P.unroutable" V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" \
    V4_RESULTS_QUEUE="$P.results" V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_MODEL_NAME=tiny V4_REDIS_URL=off \
    V4_HTTP_ADDR=127.0.0.1 V4_HTTP_PORT="$(_brokers_free_port)"
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do
    rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && break
    sleep 0.1
done
cc() { $py "$HERE/lib/contract_client.py" "$V4_TEST_AMQP_URL" "$P" "$HERE/../config/result.schema.json" "$@"; }

echo "--- 1. invalid packets answered on reply_to"
cc invalid || fail "invalid packets with reply_to"
echo "--- 2. a vanished reply_to queue"
cc gone || fail "result to a vanished reply_to queue"
sleep 3   # time for a redelivery (today's behaviour: up to the delivery limit) to show
runs="$(nlines 'task gone1: failed deadline_exceeded')"
[ "$runs" -eq 1 ] || fail "task gone1 finished $runs times, not once"
[ "$(nlines 'task gone1: result unroutable')" -eq 1 ] || fail "task gone1: not one 'result unroutable' log line"
[ "$(nlines 'not confirmed')" -eq 0 ] || fail "a result or record was not confirmed (the task was redelivered)"
# the broker's counters lag the acks on a busy machine: poll (up to 60 s) before judging
counts_settle() {   # counts_settle QUEUE: 0 once it reads "0 0"
    local q=$1
    for _ in $(seq 1 120); do
        [ "$(queue_counts "$q")" = "0 0" ] && return 0
        sleep 0.5
    done
    return 1
}
counts_settle "$P.tasks" || fail "$P.tasks not empty after 60 s: $(queue_counts "$P.tasks")"
counts_settle "$P.dead" || fail "$P.dead not empty after 60 s: $(queue_counts "$P.dead")"
echo "--- 3. deadlines from the sender's clock"
cc deadlines || fail "deadlines"

metrics="$(curl -sf "http://127.0.0.1:$V4_HTTP_PORT/metrics")" || fail "no /metrics"
unr="$(sed -n 's/^v4fleet:results_unroutable_total \([0-9]*\).*/\1/p' <<< "$metrics")"
[ "${unr:-x}" = 2 ] || fail "v4fleet:results_unroutable_total '$unr', expected 2 (bad-gone, gone1)"
dl="$(sed -n 's/^v4fleet:request_failure_total{code="deadline_exceeded"} \([0-9]*\).*/\1/p' <<< "$metrics")"
[ "${dl:-x}" = 5 ] || fail "deadline_exceeded failures '$dl', expected 5 (gone1, late-ts, late-at, late-exp, overrun)"
worker_stop
grep -q "unroutable (kept in $P.unroutable)" "$WORK/worker.log" || fail "exit line without the unroutable count"
worker_finish 40
