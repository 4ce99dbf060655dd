#!/usr/bin/env bash
# test_queue_e2e.sh - end to end with a real RabbitMQ (tests/lib/brokers.sh) and the tiny
# model: `v4fleet worker` serves N tasks published by python3-pika (reply_to /
# correlation_id and the results exchange), malformed packets land once each in the
# invalid queue, the worker keeps serving, SIGTERM exits 0, the log never shows the
# AMQP password; R25: the test broker's consumer_timeout exceeds the default task
# deadline.  No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_e2e
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 3 > /dev/null
P="e2e$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_PREFETCH=2 V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_MODEL_NAME=tiny
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
# the worker declares the topology; wait for the task queue to exist
for _ in $(seq 1 100); do
    rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && break
    sleep 0.1
done
/usr/bin/python3 "$HERE/lib/queue_e2e.py" "$V4_TEST_AMQP_URL" "$P" 24 || status=1
kill -TERM "$WPID"
wrc=0
for _ in $(seq 1 100); do kill -0 "$WPID" 2>/dev/null || break; sleep 0.1; done
wait "$WPID" || wrc=$?
WPID=""
[ "$wrc" -eq 0 ] || { echo "FAIL: worker exit status $wrc after SIGTERM" >&2; status=1; }
grep -q "exiting:" "$WORK/worker.log" || { echo "FAIL: no orderly exit" >&2; status=1; }
if grep -q "guest:guest@\|:guest@" "$WORK/worker.log"; then echo "FAIL: password in the log" >&2; status=1; fi
grep -q "guest:\*\*\*@" "$WORK/worker.log" || { echo "FAIL: masked URL not logged" >&2; status=1; }
# R25: the broker's consumer_timeout is above the worker's default task deadline
ct="$(rmqctl eval 'application:get_env(rabbit, consumer_timeout).' 2>/dev/null | sed -nE 's/.*\{ok,([0-9]+)\}.*/\1/p')"
[ -n "$ct" ] && [ "$ct" -gt 600000 ] || { echo "FAIL: consumer_timeout '$ct' not above the 600000 ms deadline" >&2; status=1; }
# the task queue is a quorum queue with the delivery limit
rmqctl list_queues name type arguments 2>/dev/null | grep "^$P.tasks" | grep -q quorum ||
    { echo "FAIL: $P.tasks is not a quorum queue" >&2; status=1; }
if [ "$status" -ne 0 ]; then
    echo "--- worker log (tail) ---" >&2
    tail -n 60 "$WORK/worker.log" >&2
fi
exit "$status"
