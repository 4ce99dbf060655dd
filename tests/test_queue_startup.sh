#!/usr/bin/env bash
# test_queue_startup.sh - checklist R21 (the worker starts before the broker is up and
# connects once it is) and R20 (no busy loop while the broker is down: < 5 % CPU, the
# reconnect attempts back off).  Starts its own private RabbitMQ (tests/lib/brokers.sh)
# on a port chosen in advance.  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin queue_startup none
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 2 > /dev/null
PORT="$(_brokers_free_port)"
export V4_AMQP_URL="amqp://guest:guest@127.0.0.1:$PORT/" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny \
    V4_HEARTBEAT_S=2 V4_LOG_LEVEL=1
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
# The CPU is measured from the first connection attempt on: model load and warm-up come
# before it and cost what they cost (seconds under ASan on a busy machine); waiting for
# that attempt is bounded by progress of the start (120 s), not by a guess.
for _ in $(seq 1 1200); do
    grep -q "cannot connect" "$WORK/worker.log" && break
    kill -0 "$WPID" 2>/dev/null || break
    sleep 0.1
done
grep -q "cannot connect" "$WORK/worker.log" || fail "no connection attempt within 120 s of the start (still loading?)"
hz="$(getconf CLK_TCK)"
t0="$(awk '{print $14 + $15}' "/proc/$WPID/stat")"
sleep 4
kill -0 "$WPID" 2>/dev/null || fail "the worker exited while the broker was down"
ticks=$(( $(awk '{print $14 + $15}' "/proc/$WPID/stat") - t0 ))
echo "worker CPU while the broker was down: $ticks ticks of 1/$hz s in 4 s after the first attempt"
[ "$ticks" -le $((4 * hz / 20)) ] || fail "busy loop while the broker is down ($ticks ticks in 4 s)"
attempts="$(grep -c "cannot connect" "$WORK/worker.log" || true)"
echo "connection attempts in ~4 s: $attempts"
[ "$attempts" -ge 2 ] && [ "$attempts" -le 8 ] || fail "no backoff: $attempts attempts in 4 s"

brokers_start "$WORK/brokers" "$PORT" || { fail "cannot start RabbitMQ"; exit 1; }
for _ in $(seq 1 400); do
    grep -q "amqp: connected" "$WORK/worker.log" && break
    sleep 0.1
done
grep -q "amqp: connected" "$WORK/worker.log" || fail "the worker did not connect after the broker came up"
qclient publish tasks 2 4 s
qclient collect results 2 30 || fail "no results after a late broker start"
worker_stop
worker_finish 30
