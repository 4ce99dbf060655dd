#!/usr/bin/env bash
# test_pyclient.sh - the Python client scripts/v4client.py and scripts/submit.py built on
# it (docs/queue-worker.md "Python client"), with a real RabbitMQ (tests/lib/brokers.sh)
# and a real `v4fleet worker` on the tiny model (V4_CONCURRENCY 2):
#  - tests/lib/pyclient_check.py: run() returns a result valid under
#    config/result.schema.json (generated id, message_id / correlation_id); two submits
#    of the same id in flight come back matched by correlation id, also from two
#    threads with a Client each; a wait past its timeout raises TaskTimeout naming the id
#    and the handle later gets the deadline_exceeded failure; an invalid packet comes
#    back as TaskError (invalid_field, where), raised or returned; a backdated timestamp
#    + deadline_ms and a past deadline_at fail deadline_exceeded, not run; a missing
#    queue / a rejecting queue raise PublishError (unroutable / nacked); urgent=True and
#    cancel() as the broker allows (this branch's worker has neither the urgent queue
#    nor the cancel exchange: PublishError naming QUEUE.urgent, cancel() -> False), and
#    on a queue / fanout exchange the test declares: the urgent task with its AMQP
#    properties (message_id, correlation_id, reply_to, persistent, timestamp) and the
#    {"cancel": id} message;
#  - scripts/submit.py, same CLI as before: a file of tasks (one without id) prints one
#    result line each, as the worker sent it; a queue nobody serves -> exit 1 naming the
#    ids after --timeout; a missing queue and a line that is not a JSON object -> exit 1
#    with a message;
#  - the worker exits 0 on SIGTERM.
# No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin pyclient
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
WPID=""
# shellcheck disable=SC2317  # called by brokers.sh's EXIT trap
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }
py=/usr/bin/python3
$py -c 'import jsonschema, pika' 2>/dev/null || { echo "FAIL: python3-pika / python3-jsonschema missing (V4_PACKAGES)" >&2; exit 1; }

"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 3 --no-sync > /dev/null
P="pc$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_UNROUTABLE_QUEUE="$P.unroutable" V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" \
    V4_RESULTS_QUEUE="$P.results" V4_CONCURRENCY=2 V4_PREFETCH=2 V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 \
    V4_MODEL_NAME=tiny V4_REDIS_URL=off V4_HTTP_ADDR=127.0.0.1
V4_HTTP_PORT="$(_brokers_free_port)"
export V4_HTTP_PORT
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do
    rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && break
    sleep 0.1
done

echo "--- v4client.py"
$py "$HERE/lib/pyclient_check.py" "$V4_TEST_AMQP_URL" "$P" "$HERE/../config/result.schema.json" ||
    fail "v4client checks"

echo "--- submit.py"
SUBMIT=("$py" "$HERE/../scripts/submit.py" --url "$V4_TEST_AMQP_URL")
printf '%s\n' '{"id":"s1","prompt":"one","max_tokens":3,"temperature":0}' '' \
    '{"prompt":"two","max_tokens":2,"temperature":0}' > "$WORK/two.jsonl"
if "${SUBMIT[@]}" --queue "$P.tasks" --timeout 60 "$WORK/two.jsonl" > "$WORK/two.out" 2> "$WORK/two.err"; then
    $py - "$WORK/two.out" <<'EOF' || fail "submit.py output: $(cat "$WORK/two.out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 2, lines
recs = sorted((json.loads(l) for l in lines), key=lambda r: r["id"])
assert [r["status"] for r in recs] == ["succeeded"] * 2, recs
assert recs[0]["id"].startswith("py-") and recs[1]["id"] == "s1", [r["id"] for r in recs]
assert all('"status":"succeeded"' in l for l in lines), lines   # the worker's bytes, unchanged
EOF
else
    fail "submit.py: $(cat "$WORK/two.err")"
fi
# exit_1_with NAME PATTERN: the last submit.py ($rc, $WORK/NAME.err) exited 1 saying PATTERN
exit_1_with() {
    if [ "$rc" -ne 1 ] || ! grep -q "$2" "$WORK/$1.err"; then
        fail "submit.py ($1): rc $rc, $(cat "$WORK/$1.err")"
    fi
}
rc=0
printf '%s\n' '{"id":"i1","prompt":"x","max_tokens":4}' '{"id":"i2","prompt":"y","max_tokens":4}' |
    "${SUBMIT[@]}" --queue "$P.idle" --timeout 1 > /dev/null 2> "$WORK/idle.err" || rc=$?
exit_1_with idle "no result within 1 s for: i1, i2"
rc=0
echo '{"id":"m1","prompt":"x","max_tokens":4}' | "${SUBMIT[@]}" --queue "$P.nosuch" --timeout 5 > /dev/null 2> "$WORK/nosuch.err" || rc=$?
exit_1_with nosuch "submit.py: task 'm1' not published: .*'$P.nosuch' does not exist"
rc=0
printf '%s\n' '{"id":"ok","prompt":"x","max_tokens":4}' '[1,2]' | "${SUBMIT[@]}" --queue "$P.tasks" > /dev/null 2> "$WORK/bad.err" || rc=$?
exit_1_with bad "submit.py: - line 2: a task is a JSON object"

worker_stop
worker_finish 40
