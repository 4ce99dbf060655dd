#!/usr/bin/env bash
# test_util_redis.sh - telemetry/util_redis.c against real Redis servers (checklist R13, R17,
# R18, R19; see tests/util_redis_check.c for what each scenario asserts).
#   basic  on the suite's Redis (tests/lib/brokers.sh brokers_ensure; unique key prefix)
#   r19, r17, r18, auth, busy on a private redis-server started here on a free loopback
#   port, because they read INFO commandstats, SIGSTOP the server, kill and restart it,
#   set a password or maxmemory.
# No Redis = FAIL, never skip.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
: "${V4_TMP:?}"
CHECKER="${V4_UTIL_REDIS_CHECK:-$V4_TMP/util_redis_check}"
[ -x "$CHECKER" ] || { echo "FAIL: helper $CHECKER not built" >&2; exit 1; }
command -v redis-server > /dev/null || { echo "FAIL: redis-server is not installed" >&2; exit 1; }

WORK="$(mktemp -d "$V4_TMP/util_redis.XXXXXX")"
PIDFILE="$WORK/redis.pid"
cleanup() {
    local pid=""
    if [ -s "$PIDFILE" ]; then pid="$(cat "$PIDFILE" 2> /dev/null || true)"; fi
    if [ -n "$pid" ]; then
        kill -CONT "$pid" 2> /dev/null || true
        kill "$pid" 2> /dev/null || true
    fi
    brokers_release
    rm -rf "$WORK"
}
trap cleanup EXIT
status=0
fail() { echo "FAIL: $*" >&2; status=1; }

brokers_ensure || { echo "FAIL: cannot start the test brokers" >&2; exit 1; }
: "${V4_TEST_REDIS_URL:?brokers_ensure did not announce a Redis}"
echo "== basic (R13) on $V4_TEST_REDIS_URL"
"$CHECKER" basic || fail "basic"

PORT="$(_brokers_free_port)"
mkdir -p "$WORK/data"
export V4_PRIV_REDIS_URL="redis://127.0.0.1:$PORT/0" V4_PRIV_REDIS_PIDFILE="$PIDFILE"
export V4_PRIV_REDIS_START="redis-server --port $PORT --bind 127.0.0.1 --daemonize yes --save '' \
--appendonly no --dir '$WORK/data' --pidfile '$PIDFILE' --logfile '$WORK/redis.log' && \
for i in \$(seq 1 100); do redis-cli -p $PORT ping 2>/dev/null | grep -q PONG && exit 0; sleep 0.05; done; exit 1"
sh -c "$V4_PRIV_REDIS_START" || { echo "FAIL: cannot start a private redis-server on port $PORT" >&2; exit 1; }
for s in r19 r17 r18 auth busy; do
    echo "== $s on $V4_PRIV_REDIS_URL"
    "$CHECKER" "$s" || fail "$s"
    pid="$(cat "$PIDFILE" 2> /dev/null || true)"
    if [ -z "$pid" ] || ! kill -0 "$pid" 2> /dev/null; then
        fail "private redis-server is gone after $s"
        break
    fi
done
[ "$status" -eq 0 ] && echo "PASS"
exit "$status"
