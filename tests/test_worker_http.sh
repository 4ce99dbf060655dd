#!/usr/bin/env bash
# test_worker_http.sh - the worker's observability end to end: a real worker (tiny model),
# a private RabbitMQ started AFTER the worker (on a port chosen up front) and a private Redis:
#   /healthz  200 "ok" from start to exit
#   /readyz   503 "not connected to the broker" before RabbitMQ is up, 200 once it is,
#             503 "draining" after SIGTERM while the running task finishes
#   /metrics  valid Prometheus text (HELP/TYPE, cumulative buckets); after N good tasks, one
#             wrong-model task and one invalid packet: success == N,
#             failure{code="model_not_available"} == 1, invalid == 1, prompt/generation token
#             totals == the sums of the results' usage, TTFT _count == N, inter-token _count
#             == tasks with >= 2 tokens, queue-wait/e2e _count == N + 1, ready 1, broker
#             connected, info{model,worker}, Redis records sent == N
#   logs      every stderr line is a JSON object (time, level, worker id, component, msg);
#             each task has a line with its id and status; no credentials
#   robustness garbage, a 16 KiB header, an unknown path, POST: 400/431/404/405, and the
#             worker keeps serving; V4_LOG_FORMAT=text / --log-format text give text lines
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin worker_http none
command -v curl > /dev/null || { echo "FAIL: curl is not installed" >&2; exit 1; }
command -v redis-server > /dev/null || { echo "FAIL: redis-server is not installed" >&2; exit 1; }
PY=(/usr/bin/python3 "$HERE/lib/worker_http.py")
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
APORT="$(free_port)"; RPORT="$(free_port)"; HPORT="$(free_port)"
WPID=""
test_cleanup() {
    [ -z "$WPID" ] || kill -9 "$WPID" 2> /dev/null || true
    [ -f "$WORK/redis.pid" ] && kill -9 "$(cat "$WORK/redis.pid")" 2> /dev/null || true
}
redis-server --port "$RPORT" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no --dir "$WORK" \
    --pidfile "$WORK/redis.pid" --logfile "$WORK/redis.log"
"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 3 > /dev/null
P="wh$$"
WID="whttp-$$"
export V4_AMQP_URL="amqp://guest:guest@127.0.0.1:$APORT/" V4_MODEL_DIR="$WORK/model" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_MODEL_NAME=tiny V4_HEARTBEAT_S=5 V4_REDIS_URL="redis://127.0.0.1:$RPORT/0" V4_REDIS_PREFIX="$P" \
    V4_HTTP_PORT="$HPORT" V4_HTTP_ADDR=127.0.0.1 V4_WORKER_ID="$WID" V4_GRACE_MS=60000
URL="http://127.0.0.1:$HPORT"
code() { curl -s -o "$WORK/body" -w '%{http_code}' --max-time 5 "$@" || true; }
wait_code() {   # wait_code WANT PATH TIMEOUT_S
    local i
    for i in $(seq 1 $(($3 * 10))); do
        [ "$(code "$URL$2")" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
metric() {   # metric 'name{labels}' < parsed JSON in $WORK/m.json
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d.get(sys.argv[2]); print("absent" if v is None else ("%d" % v if v == int(v) else v))' \
        "$WORK/m.json" "$1"
}
scrape() {
    [ "$(code "$URL/metrics")" = 200 ] || { fail "/metrics did not answer 200"; return 1; }
    grep -q "^Content-Type: text/plain; version=0.0.4" < <(curl -s -D - -o /dev/null "$URL/metrics") ||
        fail "/metrics content type"
    "${PY[@]}" parse "$WORK/body" > "$WORK/m.json" || { fail "/metrics is not valid exposition text"; return 1; }
}

echo "--- before the broker is up"
"$V4_BIN" worker 2> "$WORK/worker.log" &
WPID=$!
wait_code 200 /healthz 30 || fail "/healthz never answered 200"
# 503 all along: first "loading the model" and "warming up", then "not connected to the broker"
for _ in $(seq 1 300); do
    c="$(code "$URL/readyz")"
    [ "$c" = 503 ] || { fail "/readyz $c without a broker, want 503"; break; }
    grep -q "not connected to the broker" "$WORK/body" && break
    grep -q "loading the model\|warming up" "$WORK/body" || { fail "/readyz reason: $(cat "$WORK/body")"; break; }
    sleep 0.1
done
grep -q "not connected to the broker" "$WORK/body" || fail "/readyz reason: $(cat "$WORK/body")"
scrape && { [ "$(metric 'v4fleet:ready')" = 0 ] || fail "ready $(metric 'v4fleet:ready') without a broker"; }

echo "--- broker up: ready"
brokers_start "$WORK/brokers" "$APORT" || { echo "FAIL: cannot start RabbitMQ" >&2; exit 1; }
wait_code 200 /readyz 40 || fail "/readyz did not become 200 after the broker came up: $(cat "$WORK/body")"
[ "$(cat "$WORK/body")" = ready ] || fail "/readyz body: $(cat "$WORK/body")"

echo "--- tasks"
N=6
S="$("${PY[@]}" run "$V4_TEST_AMQP_URL" "$P.tasks" "$P.results" "$P.invalid" t "$N" 90)" || fail "tasks: $S"
jget() { /usr/bin/python3 -c 'import json,sys; v=json.loads(sys.argv[1]); [v := v[k] for k in sys.argv[2:]]; print(v)' "$S" "$@"; }
[ "$(jget ok)" = "$N" ] && [ "$(jget failed model_not_available)" = 1 ] || fail "results: $S"
scrape
[ "$(metric 'v4fleet:request_success_total')" = "$N" ] || fail "success_total $(metric 'v4fleet:request_success_total') != $N"
[ "$(metric 'v4fleet:request_failure_total{code="model_not_available"}')" = 1 ] || fail "failure{model_not_available}"
[ "$(metric 'v4fleet:request_failure_total{code="internal"}')" = 0 ] || fail "failure{internal} not 0"
[ "$(metric 'v4fleet:invalid_packets_total')" = 1 ] || fail "invalid_packets_total $(metric 'v4fleet:invalid_packets_total')"
[ "$(metric 'v4fleet:generation_tokens_total')" = "$(jget completion_tokens)" ] ||
    fail "generation_tokens_total $(metric 'v4fleet:generation_tokens_total') != results' $(jget completion_tokens)"
[ "$(metric 'v4fleet:prompt_tokens_total')" = "$(jget prompt_tokens)" ] ||
    fail "prompt_tokens_total $(metric 'v4fleet:prompt_tokens_total') != results' $(jget prompt_tokens)"
[ "$(metric 'v4fleet:time_to_first_token_seconds_count')" = "$N" ] || fail "TTFT count"
[ "$(metric 'v4fleet:inter_token_latency_seconds_count')" = "$(jget multi_token)" ] || fail "ITL count"
[ "$(metric 'v4fleet:queue_wait_seconds_count')" = $((N + 1)) ] || fail "queue wait count"
[ "$(metric 'v4fleet:e2e_request_latency_seconds_count')" = $((N + 1)) ] || fail "e2e count"
[ "$(metric 'v4fleet:ready')" = 1 ] && [ "$(metric 'v4fleet:broker_connected')" = 1 ] || fail "ready/connected gauges"
[ "$(metric 'v4fleet:broker_reconnects_total')" = 0 ] || fail "reconnects $(metric 'v4fleet:broker_reconnects_total')"
[ "$(metric "v4fleet:info{model=\"tiny\",worker=\"$WID\"}")" = 1 ] || fail "info series"
[ "$(metric 'v4fleet:expert_cache_hits_total{tier="host"}')" = absent ] || fail "host cache series with resident experts"
# the memory split: host trunk / experts (mapped) / sequences > 0, no GPU series on a CPU worker, the start-up line
for part in trunk experts sequences; do
    v="$(metric "v4fleet:memory_bytes{device=\"host\",part=\"$part\"}")"
    /usr/bin/python3 -c 'import sys; sys.exit(0 if sys.argv[1] != "absent" and float(sys.argv[1]) > 0 else 1)' "$v" ||
        fail "memory_bytes{host,$part} = $v"
done
[ "$(metric 'v4fleet:memory_bytes{device="gpu",part="held"}')" = absent ] || fail "GPU memory series on a CPU worker"
# nothing waited for memory on a CPU worker with room to spare: the counters are there, at 0
for kind in admission retry stall; do
    [ "$(metric "v4fleet:memory_waits_total{kind=\"$kind\"}")" = 0 ] ||
        fail "memory_waits_total{$kind} = $(metric "v4fleet:memory_waits_total{kind=\"$kind\"}")"
done
grep -q "memory: host trunk .* GiB, experts .* GiB (mapped), sequences <= " "$WORK/worker.log" ||
    fail "no memory split line in the log: $(grep -m1 'memory' "$WORK/worker.log")"
for _ in $(seq 1 50); do
    scrape; [ "$(metric 'v4fleet:redis_counter_records{state="sent"}')" = "$N" ] && break; sleep 0.1
done
[ "$(metric 'v4fleet:redis_counter_records{state="sent"}')" = "$N" ] || fail "redis sent $(metric 'v4fleet:redis_counter_records{state="sent"}')"
[ "$(metric 'v4fleet:redis_counter_records{state="dropped"}')" = 0 ] || fail "redis dropped"
ttft_sum="$(metric 'v4fleet:time_to_first_token_seconds_sum')"
/usr/bin/python3 -c 'import sys; s=float(sys.argv[1]); sys.exit(0 if 0 < s < 60 else 1)' "$ttft_sum" || fail "TTFT sum $ttft_sum"

echo "--- bad requests"
/usr/bin/python3 - "$HPORT" <<'EOF' || fail "raw bad requests"
import socket, sys
def ask(raw):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    s.sendall(raw)
    data = b""
    while True:
        c = s.recv(4096)
        if not c:
            break
        data += c
    s.close()
    return data.split(b" ", 2)[1] if data.startswith(b"HTTP/1.1 ") else data[:40]
want = [(b"garbage\r\n\r\n", b"400"), (b"\x00\xff\x13\r\n\r\n", b"400"),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 16384 + b"\r\n\r\n", b"431"),
        (b"GET /nope HTTP/1.1\r\n\r\n", b"404"), (b"POST /metrics HTTP/1.1\r\n\r\n", b"405"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"200")]
bad = [(r, w, g) for r, w in want for g in [ask(r)] if g != w]
for r, w, g in bad:
    print("request %r: got %r, want %r" % (r[:40], g, w), file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
[ "$(code "$URL/does/not/exist")" = 404 ] || fail "unknown path"
[ "$(code "$URL/healthz")" = 200 ] && [ "$(code "$URL/readyz")" = 200 ] || fail "not serving after bad requests"

echo "--- drain: SIGTERM while a task runs"
/usr/bin/python3 - "$V4_TEST_AMQP_URL" "$P.tasks" <<'EOF'
import json, sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1])); ch = c.channel(); ch.confirm_delivery()
t = {"id": "drain1", "deadline_ms": 3000, "max_tokens": 200000, "input_ids": [0, 2, 10, 3, 5], "temperature": 0}
ch.basic_publish("", sys.argv[2], json.dumps(t).encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)
c.close()
EOF
for _ in $(seq 1 100); do scrape; [ "$(metric 'v4fleet:num_requests_running')" = 1 ] && break; sleep 0.05; done
[ "$(metric 'v4fleet:num_requests_running')" = 1 ] || fail "the drain task never showed as running"
kill -TERM "$WPID"
sleep 0.3
[ "$(code "$URL/readyz")" = 503 ] && grep -q draining "$WORK/body" || fail "/readyz during drain: $(cat "$WORK/body")"
[ "$(code "$URL/healthz")" = 200 ] || fail "/healthz during drain"
scrape && { [ "$(metric 'v4fleet:ready')" = 0 ] || fail "ready gauge during drain"; }
rc=0; wait "$WPID" || rc=$?; WPID=""
[ "$rc" = 0 ] || fail "worker exit status $rc after SIGTERM"
[ "$(code "$URL/healthz")" = 000 ] || fail "endpoint still up after exit"

echo "--- logs"
"${PY[@]}" logs "$WORK/worker.log" "$WID" $(for i in $(seq 0 $((N - 1))); do printf 't%03d ' "$i"; done) t-wrong drain1 ||
    fail "JSON log lines"
grep -q '"component":"amqp","msg":"amqp: connected to amqp://guest:\*\*\*@' "$WORK/worker.log" || fail "AMQP line not in JSON"
grep -q '"component":"redis"' "$WORK/worker.log" || fail "Redis thread line not in JSON"
grep -q '"task":"t-wrong".*"code":"model_not_available"' "$WORK/worker.log" || fail "failed-task line lacks its code"
if grep -q "guest:guest@" "$WORK/worker.log"; then fail "credentials in the log"; fi

echo "--- text format"
V4_HTTP_PORT=0 V4_LOG_FORMAT=text V4_AMQP_URL="amqp://guest:guest@127.0.0.1:1/" timeout -s TERM 2 "$V4_BIN" worker 2> "$WORK/text.log" || true
grep -qE '^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} v4fleet worker info: worker ' "$WORK/text.log" || fail "text format: $(head -n 2 "$WORK/text.log")"
if grep -q '^{' "$WORK/text.log"; then fail "JSON lines with V4_LOG_FORMAT=text"; fi
V4_HTTP_PORT=0 V4_AMQP_URL="amqp://guest:guest@127.0.0.1:1/" timeout -s TERM 2 "$V4_BIN" worker --log-format text 2> "$WORK/text2.log" || true
grep -q ' v4fleet worker info: ' "$WORK/text2.log" && ! grep -q '^{' "$WORK/text2.log" || fail "--log-format text"
rc=0; V4_LOG_FORMAT=xml "$V4_BIN" worker 2> "$WORK/bad.log" || rc=$?
[ "$rc" = 2 ] && grep -q V4_LOG_FORMAT "$WORK/bad.log" || fail "V4_LOG_FORMAT=xml: exit $rc $(cat "$WORK/bad.log")"
# the port taken by another process (SO_REUSEADDR: the old worker's TIME_WAIT sockets remain)
/usr/bin/python3 -c 'import socket,time,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); open(sys.argv[2],"w").close(); time.sleep(20)' "$HPORT" "$WORK/bound" &
busy_pid=$!
for _ in $(seq 1 50); do [ -f "$WORK/bound" ] && break; sleep 0.1; done
rc=0; timeout -s KILL 20 "$V4_BIN" worker 2> "$WORK/busy.log" || rc=$?
kill "$busy_pid" 2> /dev/null || true; wait "$busy_pid" 2> /dev/null || true
[ "$rc" = 1 ] && grep -q "V4_HTTP_PORT: cannot listen" "$WORK/busy.log" || fail "port in use: exit $rc $(cat "$WORK/busy.log")"

if [ "$status" -ne 0 ]; then
    echo "--- worker log (tail) ---" >&2
    tail -n 30 "$WORK/worker.log" >&2
fi
[ "$status" -eq 0 ] && echo "ok: healthz, readyz (503 -> 200 -> 503 drain), metrics after $N tasks, JSON logs, bad requests, text format"
exit "$status"
