#!/usr/bin/env bash
# test_brokers_retry.sh - the test harness's broker start survives a port that another
# process takes between the harness picking it and the server binding it (the race of
# parallel ctest runs): tests/lib/brokers.sh must notice the dead server and retry with
# fresh ports.  Forces the race: the first try's AMQP port and the second try's Redis
# port are ports this test already listens on; the third try must succeed.
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin brokers_retry none
HOLD=""
test_cleanup() { [ -z "$HOLD" ] || kill "$HOLD" 2> /dev/null; }

# two listening sockets held by a child process: the "other test" that took the ports
/usr/bin/python3 -c '
import socket, sys, time
ss = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); ss.append(s)
print(" ".join(str(s.getsockname()[1]) for s in ss), flush=True)
time.sleep(600)' > "$WORK/held" &
HOLD=$!
for _ in $(seq 1 50); do [ -s "$WORK/held" ] && break; sleep 0.1; done
read -r TAKEN_A TAKEN_R < "$WORK/held" || { fail "no held ports"; exit 1; }

# The harness asks for ports in the order amqp, dist, epmd, redis on every try: hand
# out the taken ones as try 1's amqp (call 1) and try 2's redis (call 8).
CALLS="$WORK/calls"
echo 0 > "$CALLS"
eval "_real_$(declare -f _brokers_free_port)"   # keep the harness's own picker as _real__brokers_free_port
_brokers_free_port() {
    local n
    n=$(($(cat "$CALLS") + 1))
    echo "$n" > "$CALLS"
    case "$n" in
    1) echo "$TAKEN_A" ;;
    8) echo "$TAKEN_R" ;;
    *) _real__brokers_free_port ;;
    esac
}

# A watcher notes the second the first (failed) try is reported, so that try is timed on
# its own: the whole start (two RabbitMQ boots) takes what the machine's load makes it
# take; the check is that a failed boot is noticed without sitting out a wait's timeout.
t0=$(date +%s)
( while ! grep -q "start 1 of 3 failed" "$WORK/start.log" 2> /dev/null; do sleep 0.2; done
  date +%s > "$WORK/t_fail1" ) &
watcher=$!
rc=0
brokers_start "$WORK/brokers" > "$WORK/start.log" 2>&1 || rc=$?
t1=$(date +%s)
sleep 0.5   # one more poll of the watcher
kill "$watcher" 2> /dev/null || true
wait "$watcher" 2> /dev/null || true
[ "$rc" -eq 0 ] || { cat "$WORK/start.log" >&2; fail "brokers_start gave up"; exit 1; }
cat "$WORK/start.log"
grep -q "RabbitMQ exited while starting\|RabbitMQ did not start" "$WORK/start.log" ||
    fail "the taken AMQP port did not make the first start fail"
grep -q "Redis did not answer" "$WORK/start.log" || fail "the taken Redis port did not make the second start fail"
grep -q "start 2 of 3 failed" "$WORK/start.log" || fail "no second retry"
case "$V4_TEST_AMQP_URL" in *":$TAKEN_A/"*) fail "RabbitMQ URL still names the taken port" ;; esac
case "$V4_TEST_REDIS_URL" in *":$TAKEN_R/"*) fail "Redis URL still names the taken port" ;; esac
rport="${V4_TEST_REDIS_URL##*:}"
rport="${rport%%/*}"
[ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$rport" ping)" = PONG ] || fail "Redis does not answer on $rport"
rmqctl status > /dev/null 2>&1 || fail "RabbitMQ does not answer after the retry"
/usr/bin/python3 - "$V4_TEST_AMQP_URL" <<'EOF' || fail "cannot publish to the retried RabbitMQ"
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = c.channel()
ch.queue_declare("retry_probe")
ch.basic_publish("", "retry_probe", b"x")
c.close()
EOF
tf="$(cat "$WORK/t_fail1" 2> /dev/null || true)"
echo "broker start with a forced port race: $((t1 - t0)) s, the failed first try noticed after $((${tf:-$t1} - t0)) s"
# A boot that fails is noticed when the node exits or does not answer, well before the
# 120 s `rabbitmqctl wait` timeout (and the 60 s pid-file wait) it would otherwise sit out.
# The bound scales with the machine: a failed boot may take as long as 2x the retries that
# followed it (a successful RabbitMQ boot and a failed Redis start), at least 100 s.
if [ -n "$tf" ]; then
    bound=$((2 * (t1 - tf)))
    [ "$bound" -ge 100 ] || bound=100
    [ $((tf - t0)) -le "$bound" ] ||
        fail "the failed first start took too long to notice ($((tf - t0)) s; want <= $bound s: 2x the $((t1 - tf)) s the retries took, at least 100 s)"
else
    fail "the failed first start was never reported"
fi
exit "$status"
