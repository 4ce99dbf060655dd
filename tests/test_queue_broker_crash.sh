#!/usr/bin/env bash
# test_queue_broker_crash.sh - checklist R2 (shared spec queue-reliability.md §8): the
# broker crashes (kill -9 of the Erlang VM) mid-run and restarts on the same data; every
# task whose publish was confirmed gets a result (duplicates allowed, same id), the
# worker reconnects with backoff and the task queue ends empty.  Uses its own private
# RabbitMQ (tests/lib/brokers.sh) so the shared one is not disturbed.  No broker = FAIL.
#
# Broker-side caveat (RabbitMQ 3.10.8 / Ra, single node, found while this test was
# parked in tests/pending/): a quorum queue declared shortly before a kill -9 comes back
# without its Ra server registration ("ra system 'quorum_queues' running pre init for 0
# registered servers", then "leader call - leader not known" forever): list_queues shows
# 0 messages and basic.consume never answers, although the publishes were confirmed.
# The registration is only persisted later (periodic save) or on a graceful stop; after
# one stop_app/start_app between the declaration and the crash, all confirmed messages
# come back and consumption works at once.  The test therefore lets the worker declare
# the topology, restarts the app gracefully once, and only then crashes the VM.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin queue_crash private
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }

"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 4 > /dev/null
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/model" V4_MODEL_NAME=tiny V4_HEARTBEAT_S=2 V4_LOG_LEVEL=1
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do grep -q "amqp: connected" "$WORK/worker.log" && break; sleep 0.1; done
grep -q "amqp: connected" "$WORK/worker.log" || fail "the worker did not connect"
# persist the quorum queue's Ra registration (see the caveat above), wait for the reconnect
rmqctl stop_app > /dev/null 2>&1 && rmqctl start_app > /dev/null 2>&1 || fail "graceful restart failed"
for _ in $(seq 1 150); do [ "$(grep -c "amqp: connected" "$WORK/worker.log")" -ge 2 ] && break; sleep 0.1; done
[ "$(grep -c "amqp: connected" "$WORK/worker.log")" -ge 2 ] || fail "no reconnect after the graceful restart"
qclient publish tasks 30 60 c-
sleep 0.5
brokers_crash_restart 1 || fail "the broker did not restart"
got="$(qclient collect results 30 120)" || fail "confirmed tasks lost in the broker crash"
echo "$got"
# a result counts as succeeded only once the broker confirmed it: never more "succeeded"
# lines than results that arrived (issue 19: unconfirmed results were counted too)
delivered=$(awk '{print $2 + $4}' <<< "$got")
succ=$(grep -c "task c-[0-9]*: succeeded" "$WORK/worker.log" || true)
[ "$succ" -le "$delivered" ] || fail "$succ tasks logged as succeeded, $delivered results delivered"
[ "$(qclient count tasks)" = 0 ] || fail "task queue not empty"
[ "$(grep -c "amqp: connected" "$WORK/worker.log")" -ge 3 ] || fail "the worker did not reconnect after the crash"
worker_stop
worker_finish 30
