#!/usr/bin/env bash
# test_queue_urgent.sh - the urgent lane (docs/queue-worker.md "Urgent lane") with a real
# RabbitMQ (tests/lib/brokers.sh) and a `v4fleet worker` on the tiny model:
# V4_CONCURRENCY=1 and V4_PREFETCH=4, so while one task of a batch of six runs, three more
# wait in the worker's mailbox (delivered, unacked).  An urgent task published then to
# PREFIX.tasks.urgent must start as soon as the running task ends, before the normal
# deliveries already in the mailbox and those still in the broker (no pre-emption: the
# running one finishes).  Measured from the worker log: the order of the "start of task"
# lines, and the time from the urgent publish to its start against one task's duration.
# Also: every task answered once, /metrics v4fleet:tasks_taken_total{lane}.
# The sender's side is tests/lib/lane_client.py.  No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_urgent
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }
py=/usr/bin/python3
$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)" >&2; exit 1; }

"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 3 --no-sync > /dev/null
P="ur$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_UNROUTABLE_QUEUE="$P.unroutable" V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" \
    V4_RESULTS_QUEUE="$P.results" V4_CANCEL_EXCHANGE="$P.cancel" V4_CONCURRENCY=1 V4_PREFETCH=4 \
    V4_DEADLINE_MS=300000 V4_HEARTBEAT_S=2 V4_LOG_LEVEL=2 V4_LOG_FORMAT=json V4_MODEL_NAME=tiny V4_REDIS_URL=off \
    V4_HTTP_ADDR=127.0.0.1 V4_HTTP_PORT="$(_brokers_free_port)"
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "amqp: connected" 1 30 || fail "the worker did not connect"
lc() { $py "$HERE/lib/lane_client.py" "$V4_TEST_AMQP_URL" "$P" "$@"; }
SCHEMA="$HERE/../config/result.schema.json"
TOK="${V4_URGENT_TEST_TOKENS:-600}"   # tokens per task: 1-2 s on the tiny model

for i in 1 2 3 4 5 6; do lc send "n$i" "tokens=$TOK"; done
wait_lines "start of task n1 " 1 30 || fail "n1 did not start"
wait_lines "delivery tag" 4 30 || fail "the worker did not prefetch 4 deliveries"
started="$(nlines "start of task ")"
waiting=$(($(nlines "delivery tag") - started))
[ "$waiting" -ge 2 ] || fail "only $waiting normal deliveries wait in the mailbox; the test needs 2 (tasks too short?)"
t_pub="$(now_ms)"
lc send u1 "tokens=$TOK" urgent || { fail "cannot publish to $P.tasks.urgent (no urgent queue?)"; worker_finish; }
started2="$(nlines "start of task n")"   # normal tasks started by the time the publish returned
lc collect "$WORK/a.json" 7 300 > /dev/null || fail "not every task answered"
for id in n1 n2 n3 n4 n5 n6 u1; do lc check "$WORK/a.json" "$SCHEMA" "$id" succeeded || fail "$id"; done

# the order in which the tasks started, and when (the log's "time", ms)
mapfile -t order < <(sed -n 's/.*"time":"\([^"]*\)".*"msg":"start of task \([a-z0-9]*\) (\([a-z]*\) lane.*/\2 \1 \3/p' \
    "$WORK/worker.log")
echo "started at the urgent publish: $started (with $waiting normal deliveries waiting in the mailbox); start order:"
printf '  %s\n' "${order[@]}"
pos=-1
for i in "${!order[@]}"; do [ "${order[$i]%% *}" = u1 ] && pos=$i; done
[ "$pos" -ge 0 ] || fail "u1 never started"
[ "${order[$pos]##* }" = urgent ] || fail "u1 not started from the urgent lane: ${order[$pos]}"
# within one task of the free slot: the task running at the publish ends, then u1 starts
# (started2: a slot may have freed while the publish was under way)
[ "$pos" -le "$started2" ] || fail "u1 started as task $((pos + 1)), after $((pos - started2)) normal task(s) that \
had not started when it was published (want: the next one)"
# timing: publish -> start of u1 is at most about one task's duration
epoch_ms() { date -d "$1" +%s%3N; }
t_u1="$(epoch_ms "$(cut -d' ' -f2 <<< "${order[$pos]}")")"
t_prev="$(epoch_ms "$(cut -d' ' -f2 <<< "${order[$((pos - 1))]}")")"
t_next="$(epoch_ms "$(cut -d' ' -f2 <<< "${order[$((pos + 1))]}")")"
one_task=$((t_next - t_u1))   # u1's own run (start of u1 -> start of the next task)
echo "urgent publish -> start: $((t_u1 - t_pub)) ms; the task before it ran $((t_u1 - t_prev)) ms; u1 ran $one_task ms"
[ $((t_u1 - t_pub)) -le $((one_task * 3 / 2 + 1000)) ] || fail "u1 waited $((t_u1 - t_pub)) ms, more than one task ($one_task ms)"

metrics="$(curl -sf "http://127.0.0.1:$V4_HTTP_PORT/metrics")" || fail "no /metrics"
m() { sed -n "s/^$1 \([0-9]*\).*/\1/p" <<< "$metrics"; }
[ "$(m 'v4fleet:tasks_taken_total{lane="urgent"}')" = 1 ] || fail "urgent taken: $(m 'v4fleet:tasks_taken_total{lane="urgent"}')"
[ "$(m 'v4fleet:tasks_taken_total{lane="normal"}')" = 6 ] || fail "normal taken: $(m 'v4fleet:tasks_taken_total{lane="normal"}')"
[ "$(queue_counts "$P.tasks.urgent")" = "0 0" ] || fail "$P.tasks.urgent not empty: $(queue_counts "$P.tasks.urgent")"
worker_stop
worker_finish 40
