#!/usr/bin/env bash
# test_worker_warmup.sh - issue 7: the worker pre-loads the fleet's hottest experts before it
# reports ready (shared RabbitMQ and Redis; experts paged through a small host cache).
#   ranked   a utilization hash of 30 (layer, expert) counts in Redis: the worker pre-loads
#            min(30, slots - one token's experts) of them, hottest first in its log line,
#            before connecting; /metrics shows warmup_experts_loaded and cache bytes in use
#            before any task ran; a task then succeeds
#   none     no hash for the model, a hash of another shape, Redis unreachable: nothing is
#            pre-loaded, the log says why, and the worker still becomes ready
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin worker_warmup shared
command -v curl > /dev/null || { echo "FAIL: curl is not installed" >&2; exit 1; }
command -v redis-cli > /dev/null || { echo "FAIL: redis-cli is not installed" >&2; exit 1; }
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2> /dev/null || true; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HPORT="$(free_port)"
URL="http://127.0.0.1:$HPORT"
"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 5 > /dev/null
rcli() { redis-cli -u "$V4_TEST_REDIS_URL" "$@" > /dev/null; }

P="wu$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny \
    V4_TASK_QUEUE="$P.tasks" V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_HTTP_PORT="$HPORT" V4_HTTP_ADDR=127.0.0.1 V4_HOST_CACHE_BYTES=2M V4_LOG_LEVEL=1

start() {   # start REDIS_URL PREFIX: a worker, connected
    : > "$WORK/worker.log"
    V4_REDIS_URL="$1" V4_REDIS_PREFIX="$2" "$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
    WPID=$!
    wait_lines "amqp: connected" 1 60 || fail "the worker did not connect (redis $1, prefix $2)"
}

echo "--- ranked: the hottest experts of the fleet's statistics"
# 30 experts over layers 0-3 with distinct counts; 2:7 the hottest, then 0:3
args=(_shape "4,16,4" _tasks 10 _tokens 1000 "2:7" 100000 "0:3" 90000)
n=2
for l in 0 1 2 3; do
    for e in 0 1 2 4 5 6 8; do
        [ "$n" -lt 30 ] || break
        args+=("$l:$e" $((1000 + n))); n=$((n + 1))
    done
done
rcli HSET "$P:util:tiny:total" "${args[@]}"
start "$V4_TEST_REDIS_URL" "$P"
slots="$(sed -n 's/.*host cache (\([0-9]*\) slots.*/\1/p' "$WORK/worker.log" | tail -1)"
[ -n "$slots" ] || fail "no slot count in the log"
want=$(( slots - 16 < 30 ? slots - 16 : 30 ))
[ "$want" -gt 2 ] || fail "the test's cache is too small ($slots slots)"
grep -q "warm-up: pre-loaded $want of 30 ranked experts (.*hottest 2:7,0:3," "$WORK/worker.log" ||
    fail "warm-up line: $(grep -m 1 "warm-up:" "$WORK/worker.log") (want $want of 30, hottest 2:7,0:3)"
m="$(curl -s "$URL/metrics")"
grep -q "^v4fleet:warmup_experts_loaded $want$" <<< "$m" || fail "metrics: $(grep warmup_experts <<< "$m")"
inuse="$(sed -n 's/^v4fleet:expert_cache_bytes_in_use{tier="host"} \([0-9.e+]*\)$/\1/p' <<< "$m")"
/usr/bin/python3 -c "import sys; sys.exit(0 if float('${inuse:-0}') > 0 else 1)" || fail "cache bytes in use before any task: ${inuse:-absent}"
grep -q "^v4fleet:request_success_total 0$" <<< "$m" || fail "a task ran before the check"
qclient task "$P.tasks" '{"id":"after","prompt":"hi","max_tokens":4,"temperature":0}'
r="$(qclient result "$P.results" 30)" || fail "no result after the warm-up"
grep -q '"status":"succeeded"' <<< "$r" || fail "task after the warm-up: $r"
worker_stop

echo "--- none: no statistics, another shape, Redis unreachable"
start "$V4_TEST_REDIS_URL" "${P}x"
grep -q "warm-up: no expert pre-loaded: no fleet statistics for model .*tiny.* yet" "$WORK/worker.log" ||
    fail "no-statistics note: $(grep -m 1 "warm-up:" "$WORK/worker.log")"
worker_stop
rcli HSET "${P}s:util:tiny:total" _shape "5,16,4" "1:1" 5
start "$V4_TEST_REDIS_URL" "${P}s"
grep -q "warm-up: no expert pre-loaded: fleet statistics .* are for 5 layers x 16 experts, the model has 4 x 16" \
    "$WORK/worker.log" || fail "wrong-shape note: $(grep -m 1 "warm-up:" "$WORK/worker.log")"
worker_stop
start "redis://127.0.0.1:$(free_port)/0" "$P"
grep -q "warm-up: no expert pre-loaded: fleet statistics unavailable" "$WORK/worker.log" ||
    fail "unreachable-Redis note: $(grep -m 1 "warm-up:" "$WORK/worker.log")"
for _ in $(seq 1 50); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ] && break; sleep 0.1; done
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ] || fail "not ready without Redis"
worker_stop
rcli DEL "$P:util:tiny:total" "${P}s:util:tiny:total"
worker_finish 40
