#!/usr/bin/env bash
# test_worker_tls.sh - amqps:// end to end: a private RabbitMQ with a TLS listener (a CA and
# a server certificate for "localhost" made here with openssl), the worker connecting with
# V4_AMQP_URL=amqps://...@localhost:PORT/ and V4_AMQP_CACERT = the CA (peer and host name
# verified), tasks in and results out; then a worker given the wrong CA must refuse the
# server (a precise TLS error in its log), keep retrying without crashing, and lose
# nothing: the task it could not take is served once a correctly configured worker runs.
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin worker_tls none
command -v openssl > /dev/null || { echo "FAIL: openssl is not installed" >&2; exit 1; }
WPID=""
test_cleanup() { [ -n "$WPID" ] && kill -9 "$WPID" 2>/dev/null; true; }

# --- certificates: CA, server (CN/SAN localhost), and an unrelated CA ---
C="$WORK/certs"
mkdir -p "$C"
mkca() {
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$2" -keyout "$C/$1.key" -out "$C/$1.pem" 2> /dev/null
}
mkca ca "v4fleet test CA"
mkca other "unrelated CA"
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$C/server.key" -out "$C/server.csr" 2> /dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$C/ext.cnf"
openssl x509 -req -in "$C/server.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 2 \
    -extfile "$C/ext.cnf" -out "$C/server.pem" 2> /dev/null
TLS_PORT="$(_brokers_free_port)"
brokers_start "$WORK/brokers" "" "listeners.ssl.default = 127.0.0.1:$TLS_PORT
ssl_options.cacertfile = $C/ca.pem
ssl_options.certfile = $C/server.pem
ssl_options.keyfile = $C/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false" || { echo "FAIL: cannot start RabbitMQ with TLS" >&2; exit 1; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 2 > /dev/null
P="tls$$"
export V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_TASK_QUEUE="$P.tasks" V4_DEAD_QUEUE="$P.dead" \
    V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" V4_RESULTS_EXCHANGE="$P.results" \
    V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" V4_REDIS_URL=off V4_HEARTBEAT_S=5
TLS_URL="amqps://guest:guest@localhost:$TLS_PORT/"
tasks_file() {
    local i
    for i in $(seq 1 "$2"); do printf '{"id":"%s%d","prompt":"tls %d","max_tokens":6,"temperature":0}\n' "$1" "$i" "$i"; done
}
start_worker() {   # start_worker CACERT
    V4_AMQP_URL="$TLS_URL" V4_AMQP_CACERT="$1" "$V4_BIN" worker >> "$WORK/worker.log" 2>&1 &
    WPID=$!
}

# --- a verified TLS connection serves tasks ---
start_worker "$C/ca.pem"
for _ in $(seq 1 100); do rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && break; sleep 0.1; done
out="$(tasks_file a 5 | /usr/bin/python3 "$HERE/../scripts/submit.py" --url "$V4_TEST_AMQP_URL" --queue "$P.tasks" --timeout 60)" ||
    fail "results over amqps missing"
[ "$(printf '%s\n' "$out" | grep -c '"status":"succeeded"')" -eq 5 ] || fail "want 5 succeeded results: $out"
rmqctl list_connections ssl peer_host 2>/dev/null | grep -q '^true' || fail "the broker saw no TLS connection"
grep -q "connected to amqps://guest:\*\*\*@localhost:$TLS_PORT/" "$WORK/worker.log" || fail "no masked amqps connect line"
worker_stop

# --- the wrong CA: refused, retried with backoff, no crash, nothing lost ---
: > "$WORK/bad.log"
V4_AMQP_URL="$TLS_URL" V4_AMQP_CACERT="$C/other.pem" "$V4_BIN" worker > "$WORK/bad.log" 2>&1 &
WPID=$!
WR=(/usr/bin/python3 "$HERE/lib/worker_redis.py" "$V4_TEST_AMQP_URL")
"${WR[@]}" publish "$P.tasks" b1     # no reply_to: the result goes to the results queue
"${WR[@]}" publish "$P.tasks" b2
sleep 3
kill -0 "$WPID" 2>/dev/null || fail "the worker with the wrong CA exited"
grep -qi "ssl\|tls\|certificate\|verif" "$WORK/bad.log" || fail "no TLS error in the log: $(tail -n 3 "$WORK/bad.log")"
if grep -q "guest:guest" "$WORK/bad.log"; then fail "password in the log"; fi
worker_stop
for _ in $(seq 1 50); do   # quorum-queue counters are refreshed every few seconds
    ready="$(rmqctl list_queues name messages_ready 2>/dev/null | awk -v q="$P.tasks" '$1 == q {print $2}')"
    [ "$ready" = 2 ] && break
    sleep 0.2
done
[ "$ready" = 2 ] || fail "the 2 tasks should wait in the queue (ready: $ready)"
start_worker "$C/ca.pem"
"${WR[@]}" collect "$P.results" b1 1 30 > /dev/null || fail "task b1 not served after the CA was fixed"
"${WR[@]}" collect "$P.results" b2 1 30 > /dev/null || fail "task b2 not served after the CA was fixed"
worker_stop
if [ "$status" -ne 0 ]; then
    echo "--- worker logs (tail) ---" >&2
    tail -n 20 "$WORK/worker.log" "$WORK/bad.log" >&2
fi
[ "$status" -eq 0 ] && echo "ok: amqps with a verified CA; wrong CA refused and retried; nothing lost"
exit "$status"
