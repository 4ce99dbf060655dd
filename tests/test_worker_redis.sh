#!/usr/bin/env bash
# test_worker_redis.sh - the worker's Redis expert-utilization counters end to end, with a
# real RabbitMQ (tests/lib/brokers.sh), a private Redis started here, and the tiny model:
#   counts   each result's experts.hits = forwarded positions x layers x experts-per-token;
#            the fleet hash holds exactly the results' routed tokens, _hits, _tasks,
#            _tokens, _shape, and a time-bucket hash with an expiry
#   R19      at most one EVAL per task (pending tasks share one), and one Redis connection
#   R17      Redis SIGSTOPped (commands would time out after 2 s): tasks keep flowing at
#            full speed; after SIGCONT the backlog is flushed and nothing is lost
#   R13      V4_FAULT_EXIT_BEFORE_ACK: the worker dies after its result was confirmed and
#            its counters sent, before the ack; the redelivered task gives a second
#            result with the same id, and Redis counts the task once (done:{id} guard)
#   R18      Redis killed and restarted: the worker reconnects and counting resumes
#   paged    a host cache of half the experts: each result's experts figures add up
#            (activations = hits + misses + prefetched = forwarded x layers x k, bytes =
#            loads x block), and Redis (_hits, _misses, _prefetched) and /metrics
#            (expert_activations_total{outcome}) hold exactly the results' sums
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
trap 'brokers_release' EXIT
brokers_ensure || { echo "FAIL: no RabbitMQ for the queue tests" >&2; exit 1; }
: "${V4_BIN:?}" "${V4_TMP:?}"
command -v redis-server > /dev/null || { echo "FAIL: redis-server is not installed" >&2; exit 1; }
WORK="$(mktemp -d "$V4_TMP/worker_redis.XXXXXX")"
WPID=""
RPORT="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
redis_pid() { cat "$WORK/redis.pid" 2>/dev/null || true; }
cleanup() {
    [ -n "$WPID" ] && kill -9 "$WPID" 2>/dev/null
    local rp; rp="$(redis_pid)"
    [ -n "$rp" ] && { kill -CONT "$rp" 2>/dev/null; kill -9 "$rp" 2>/dev/null; }
    rm -rf "$WORK"
}
trap 'cleanup; brokers_release' EXIT
status=0
fail() { echo "FAIL: $*" >&2; status=1; }
rcli() { redis-cli -p "$RPORT" "$@"; }
redis_up() {
    redis-server --port "$RPORT" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no --dir "$WORK" \
        --pidfile "$WORK/redis.pid" --logfile "$WORK/redis.log"
    for _ in $(seq 1 100); do [ "$(rcli ping 2>/dev/null)" = PONG ] && return 0; sleep 0.05; done
    echo "FAIL: private redis did not start" >&2; exit 1
}
redis_up

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 5 > /dev/null
read -r L E K < <(/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["num_hidden_layers"], c["n_routed_experts"], c["num_experts_per_tok"])' "$WORK/model/config.json")
P="wr$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_MODEL_NAME=tiny V4_HEARTBEAT_S=5 V4_REDIS_URL="redis://127.0.0.1:$RPORT/0" V4_REDIS_PREFIX="$P" \
    V4_REDIS_TIMEOUT_MS=2000
TOTAL="$P:util:tiny:total"
PY=(/usr/bin/python3 "$HERE/lib/worker_redis.py" "$V4_TEST_AMQP_URL")

start_worker() {
    "$V4_BIN" worker >> "$WORK/worker.log" 2>&1 &
    WPID=$!
    for _ in $(seq 1 100); do
        rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && return 0
        sleep 0.1
    done
}
jget() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
hsum() { rcli hgetall "$TOTAL" | awk 'NR%2==1 {k=$0; next} k ~ /^[0-9]+:[0-9]+$/ {s+=$0} END {print s+0}'; }   # routing cells only
evals() { rcli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_eval:calls=\([0-9]*\),.*/\1/p' | grep . || echo 0; }
wait_tasks() {   # wait_tasks N TIMEOUT_S: until _tasks == N
    local i
    for i in $(seq 1 $(($2 * 10))); do
        [ "$(rcli hget "$TOTAL" _tasks)" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

start_worker
# --- counts + R19 ---
E0="$(evals)"
A="$("${PY[@]}" run "$P.tasks" "$P.results" a 12 60)" || fail "first batch: results missing: $A"
hits_a="$(jget "$A" hits)"; fwd_a="$(jget "$A" forwarded)"
[ "$hits_a" -eq $((fwd_a * L * K)) ] || fail "experts.hits $hits_a != forwarded $fwd_a x $L layers x $K"
[ "$(jget "$A" misses)" = 0 ] && [ "$(jget "$A" bytes)" = 0 ] || fail "resident experts: misses/bytes must be 0: $A"
wait_tasks 12 10 || fail "_tasks $(rcli hget "$TOTAL" _tasks), want 12"
[ "$(hsum)" = "$hits_a" ] || fail "Redis holds $(hsum) routed tokens, the results say $hits_a"
[ "$(rcli hget "$TOTAL" _tokens)" = "$fwd_a" ] || fail "_tokens $(rcli hget "$TOTAL" _tokens) != $fwd_a"
[ "$(rcli hget "$TOTAL" _shape)" = "$L,$E,$K" ] || fail "_shape $(rcli hget "$TOTAL" _shape) != $L,$E,$K"
[ "$(rcli hget "$TOTAL" _hits)" = "$hits_a" ] || fail "_hits $(rcli hget "$TOTAL" _hits) != the results' $hits_a"
[ -z "$(rcli hget "$TOTAL" _misses)" ] || fail "resident experts: no _misses expected ($(rcli hget "$TOTAL" _misses))"
B="$(rcli --scan --pattern "$P:util:tiny:b:*" | head -n 1)"
[ -n "$B" ] && [ "$(rcli ttl "$B")" -gt 0 ] || fail "no time-bucket hash with an expiry ($B)"
[ "$(rcli hget "$B" _tasks)" = 12 ] || fail "bucket _tasks $(rcli hget "$B" _tasks) != 12"
n_ev=$(($(evals) - E0)); [ "$n_ev" -ge 1 ] && [ "$n_ev" -le 12 ] || fail "R19: $n_ev EVAL calls for 12 tasks (want 1..12)"
n_conn="$(grep -c 'util-redis: connected' "$WORK/worker.log" || true)"
[ "$n_conn" -eq 1 ] || fail "R19: the worker connected to Redis $n_conn times for 12 tasks (want 1)"

# --- R17: Redis frozen ---
kill -STOP "$(redis_pid)"
S="$("${PY[@]}" run "$P.tasks" "$P.results" b 12 60)" || fail "R17: results missing while Redis is frozen: $S"
el="$(jget "$S" elapsed_s)"
/usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 10 else 1)' "$el" ||
    fail "R17: 12 tasks took ${el}s with Redis frozen (a 2 s command timeout per task would show)"
kill -CONT "$(redis_pid)"
wait_tasks 24 20 || fail "R17: after SIGCONT _tasks is $(rcli hget "$TOTAL" _tasks), want 24"
[ "$(hsum)" = $((hits_a + $(jget "$S" hits))) ] || fail "R17: counters lost: $(hsum) != $hits_a + $(jget "$S" hits)"
worker_stop

# --- R13: crash after the result's confirm, before the ack ---
V4_FAULT_EXIT_BEFORE_ACK=1 "$V4_BIN" worker >> "$WORK/worker.log" 2>&1 &
WPID=$!
"${PY[@]}" publish "$P.tasks" dup1
rc=0
wait "$WPID" || rc=$?
WPID=""
[ "$rc" -eq 86 ] || fail "R13: fault hook exit status $rc, want 86"
[ "$(rcli hget "$TOTAL" _tasks)" = 25 ] || fail "R13: counters of the first attempt not sent ($(rcli hget "$TOTAL" _tasks))"
start_worker
D="$("${PY[@]}" collect "$P.results" dup1 2 30)" || fail "R13: want 2 results for dup1: $D"
sleep 1
[ "$(rcli hget "$TOTAL" _tasks)" = 25 ] || fail "R13: task counted twice (_tasks $(rcli hget "$TOTAL" _tasks))"
[ "$(rcli exists "$P:done:dup1")" = 1 ] || fail "R13: no done guard"

# --- R18: Redis restart ---
kill -9 "$(redis_pid)"
sleep 1
redis_up
R="$("${PY[@]}" run "$P.tasks" "$P.results" c 4 60)" || fail "R18: results missing: $R"
wait_tasks 4 20 || fail "R18: counting did not resume after the Redis restart ($(rcli hget "$TOTAL" _tasks))"
worker_stop

# --- paged experts: the figures add up in the results, Redis and /metrics ---
BLOCK="$("$V4_BIN" inspect --model "$WORK/model" | sed -n 's/^bytes per routed expert: \([0-9]*\).*/\1/p')"
[ -n "$BLOCK" ] || fail "no expert block size from inspect"
HPORT="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
h0="$(rcli hget "$TOTAL" _hits)"; m0="$(rcli hget "$TOTAL" _misses)"; p0="$(rcli hget "$TOTAL" _prefetched)"
t0="$(rcli hget "$TOTAL" _tasks)"
export V4_HOST_CACHE_BYTES=$((L * E * BLOCK / 2)) V4_HTTP_PORT="$HPORT"
start_worker
X="$("${PY[@]}" run "$P.tasks" "$P.results" p 6 60)" || fail "paged: results missing: $X"
read -r xh xm xp xa xb xf < <(/usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["hits"], d["misses"], d["prefetched"], d["activations"], d["bytes"], d["forwarded"])' "$X")
[ "$xa" -eq $((xf * L * K)) ] && [ $((xh + xm + xp)) -eq "$xa" ] ||
    fail "paged: hits $xh + misses $xm + prefetched $xp, activations $xa, forwarded $xf x $L x $K"
# every load reads one expert block (the tensors, padded to the pack's alignment)
[ "$xm" -gt 0 ] && [ $((xb % (xm + xp))) -eq 0 ] && [ $((xb / (xm + xp))) -ge "$BLOCK" ] &&
    [ $((xb / (xm + xp))) -lt $((BLOCK + 65536)) ] || fail "paged: misses $xm, prefetched $xp, bytes $xb: not one block ($BLOCK tensor bytes) per load"
wait_tasks $((t0 + 6)) 20 || fail "paged: _tasks $(rcli hget "$TOTAL" _tasks), want $t0 + 6"
[ "$(rcli hget "$TOTAL" _misses)" = $((m0 + xm)) ] || fail "paged: _misses $(rcli hget "$TOTAL" _misses) != ${m0:-0} + the results' $xm"
[ "$(rcli hget "$TOTAL" _prefetched)" = $((p0 + xp)) ] || fail "paged: _prefetched $(rcli hget "$TOTAL" _prefetched) != ${p0:-0} + the results' $xp"
[ "$(rcli hget "$TOTAL" _hits)" = $((h0 + xh)) ] || fail "paged: _hits $(rcli hget "$TOTAL" _hits) != $h0 + $xh"
metric() { curl -s --max-time 5 "http://127.0.0.1:$HPORT/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
for o in hit:$xh miss:$xm prefetched:$xp; do
    got="$(metric "v4fleet:expert_activations_total{outcome=\"${o%%:*}\"}")"
    [ "$got" = "${o#*:}" ] || fail "paged: /metrics expert_activations_total{outcome=${o%%:*}} '$got', the results ${o#*:}"
done
echo "paged: $xa activations = $xh hits + $xm misses + $xp prefetched, $xb bytes"
worker_stop
grep -q "redis counters: .* 0 dropped" "$WORK/worker.log" || fail "no final counter summary with 0 dropped"
if grep -q ":[^*@/]*@127.0.0.1:$RPORT" "$WORK/worker.log"; then fail "Redis URL credentials in the log"; fi
if [ "$status" -ne 0 ]; then
    echo "--- worker log (tail) ---" >&2
    tail -n 40 "$WORK/worker.log" >&2
fi
[ "$status" -eq 0 ] && echo "ok: counts, R19, R17, R13, R18, paged"
exit "$status"
