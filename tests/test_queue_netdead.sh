#!/usr/bin/env bash
# test_queue_netdead.sh - checklist R5 (shared spec queue-reliability.md §8): a dead network
# is detected within 2 x heartbeat + 2 s.  The worker (heartbeat 2 s) reaches RabbitMQ
# through a socat TCP proxy; the proxy is frozen (kill -STOP, a blackhole: no RST, no
# FIN); the worker must log a heartbeat timeout within 6 s, then reconnect once the
# proxy is replaced by a fresh one on the same port, and serve tasks again.
# Uses the shared broker (only the proxy is frozen).  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin queue_netdead
WPID="" SPID=""
test_cleanup() {
    [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null
    proxy_kill
}
command -v socat > /dev/null || { echo "FAIL: socat is not installed" >&2; exit 1; }

BPORT="$(echo "$V4_TEST_AMQP_URL" | sed -nE 's|.*:([0-9]+)/?$|\1|p')"
PPORT="$(_brokers_free_port)"
proxy_start() {   # (re)launch socat until it listens: a killed one may still hold the port briefly
    local try
    for _ in $(seq 1 10); do
        socat "TCP-LISTEN:$PPORT,bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$BPORT" 2>> "$WORK/socat.log" &
        SPID=$!
        disown "$SPID"   # killed on purpose: no job-control message
        for _ in $(seq 1 20); do
            (exec 3<> "/dev/tcp/127.0.0.1/$PPORT") 2>/dev/null && return 0
            kill -0 "$SPID" 2>/dev/null || break   # bind failed: try again
            sleep 0.1
        done
        kill -9 "$SPID" 2>/dev/null || true
        sleep 0.5
    done
    fail "socat does not listen on $PPORT (see $WORK/socat.log)"
}
proxy_pids() { [ -z "$SPID" ] || { echo "$SPID"; pgrep -P "$SPID" || true; }; }
proxy_kill() {   # kill the proxy and its per-connection children, wait until they are gone
    local p pids
    pids="$(proxy_pids)"
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    for p in $pids; do
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    done
    SPID=""
}

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 6 > /dev/null
P="nd$$"
proxy_start
export V4_AMQP_URL="amqp://guest:guest@127.0.0.1:$PPORT/" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny \
    V4_TASK_QUEUE="$P.tasks" V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_HEARTBEAT_S=2 V4_LOG_LEVEL=1
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do [ "$(nlines "amqp: connected")" -ge 1 ] && break; sleep 0.1; done
[ "$(nlines "amqp: connected")" -ge 1 ] || fail "the worker did not connect through the proxy"
qclient publish "$P.tasks" 2 4 a > /dev/null
qclient collect "$P.results" 2 30 > /dev/null || fail "no results through the proxy"

echo "--- R5: freeze the proxy (blackhole), expect a heartbeat timeout within 6 s"
lost0="$(nlines "connection lost")"
t0="$(now_ms)"
for p in $(proxy_pids); do kill -STOP "$p"; done
detected=""
while [ $(($(now_ms) - t0)) -lt 15000 ]; do
    if [ "$(nlines "connection lost")" -gt "$lost0" ]; then detected="$(($(now_ms) - t0))"; break; fi
    sleep 0.1
done
echo "dead network detected after ${detected:-(never)} ms"
if [ -z "$detected" ]; then
    fail "no connection loss logged within 15 s of freezing the proxy"
else
    [ "$detected" -le 6000 ] || fail "dead network detected after $detected ms (bound 2 x 2 s + 2 s)"
    grep "connection lost" "$WORK/worker.log" | tail -n 1 | grep -q "heartbeat timeout" ||
        fail "the loss was not reported as a heartbeat timeout: $(grep "connection lost" "$WORK/worker.log" | tail -n 1)"
fi
kill -0 "$WPID" 2>/dev/null || fail "the worker exited on a dead network"

echo "--- R5: replace the proxy, expect a reconnect and tasks served"
sleep 1
conn0="$(nlines "amqp: connected")"
proxy_kill
proxy_start
t1="$(now_ms)"
while [ $(($(now_ms) - t1)) -lt 20000 ]; do
    [ "$(nlines "amqp: connected")" -gt "$conn0" ] && break
    sleep 0.1
done
[ "$(nlines "amqp: connected")" -gt "$conn0" ] || fail "no reconnect within 20 s of restarting the proxy"
echo "reconnected $(($(now_ms) - t1)) ms after the proxy restart"
qclient publish "$P.tasks" 3 4 b > /dev/null
qclient collect "$P.results" 3 30 > /dev/null || fail "no results after the reconnect"

worker_stop
worker_finish 30
