#!/usr/bin/env bash
# PENDING (not run by ctest: tests/pending/ is outside the tests/test_*.sh glob).
# Checklist R2.  Blocked by a broker-side observation on this machine (RabbitMQ 3.10.8,
# Erlang 25, single node): after `kill -9` of the VM and a restart on the same data,
# `basic.consume` on the quorum task queue does not answer for > 60 s (rabbit-c RPC
# timeouts in the worker; the same hang with python3-pika), and list_queues shows 0
# messages although 5 were confirmed.  Reproduce: tests/lib/brokers.sh brokers_start,
# declare a quorum queue, publish with confirms, brokers_crash_restart, basic.consume.
# test_queue_broker_crash.sh - checklist R2: the broker crashes (kill -9 of the Erlang VM)
# mid-run and restarts on the same data; every task whose publish was confirmed gets a
# result (duplicates allowed, same id), the worker reconnects with backoff and the task
# queue ends empty.  Uses its own private RabbitMQ (tests/lib/brokers.sh) so the shared
# one is not disturbed.  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_crash private
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 4 > /dev/null
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_HEARTBEAT_S=2 V4_LOG_LEVEL=1
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do grep -q "amqp: connected" "$WORK/worker.log" && break; sleep 0.1; done
qclient publish tasks 30 60 c-
sleep 0.5
brokers_crash_restart 1 || fail "the broker did not restart"
qclient collect results 30 120 || fail "confirmed tasks lost in the broker crash"
[ "$(qclient count tasks)" = 0 ] || fail "task queue not empty"
[ "$(grep -c "amqp: connected" "$WORK/worker.log")" -ge 2 ] || fail "the worker did not reconnect"
kill -TERM "$WPID"
wrc=0
wait "$WPID" || wrc=$?
WPID=""
[ "$wrc" -eq 0 ] || fail "worker exit status $wrc"
[ "$status" -eq 0 ] || tail -n 30 "$WORK/worker.log" >&2
exit "$status"
