# shellcheck shell=bash
# brokers.sh - start a private RabbitMQ node and a private Redis on loopback for the
# queue tests (source it, don't run it).  Recipe: shared spec queue-reliability.md §5.1-5.2.
#
#   brokers_start DIR [AMQP_PORT [EXTRA_CONF]]
#                       start both under DIR (own node name, ports, epmd, HOME/cookie,
#                       mnesia/log dirs, config file; one plugin:
#                       rabbitmq_consistent_hash_exchange, for fleet affinity,
#                       docs/operations.md "Fleet affinity"); EXTRA_CONF: lines
#                       for rabbitmq.conf ("key = value", newline-separated) that are
#                       added, replacing a default line with the same key; exports
#                       V4_TEST_AMQP_URL, V4_TEST_REDIS_URL, V4_TEST_BROKER_DIR and
#                       V4_TEST_RABBITMQCTL (a command line: $V4_TEST_RABBITMQCTL list_queues)
#   brokers_crash_restart [DOWN_S]
#                       kill -9 the RabbitMQ VM, wait DOWN_S (1), restart it on the same data
#   brokers_stop        stop what brokers_start started (by pid), keep DIR
#   brokers_ensure      reuse brokers already announced in V4_TEST_AMQP_URL (scripts/test.sh
#                       starts one set for the whole run), else start private ones under
#                       a temp dir and stop them at exit (EXIT trap)
#   brokers_release     brokers_stop + remove the temp dir, only if brokers_ensure started them
#   rmqctl ARGS...      rabbitmqctl against the test node
#
# The common start of a queue test script (after `set -euo pipefail` and sourcing this):
#   brokers_test_begin NAME [shared|private|none [EXTRA_CONF]]
#       checks V4_BIN and V4_TMP, creates WORK=$V4_TMP/NAME.XXXXXX, gets a broker
#       (shared: brokers_ensure, the default; private: a node of its own under
#       $WORK/brokers, for tests that stop, freeze or reconfigure the broker; none: the
#       test calls brokers_start itself) and installs an EXIT trap that calls the
#       test's own `test_cleanup` function if it defines one, then stops/releases the
#       broker and removes WORK.  Failing to get a broker exits 1 (FAIL, not skip).
#       Also defines status=0, fail MSG (prints "FAIL: MSG", sets status=1) and
#       qclient ARGS (tests/lib/queue_client.py against $V4_TEST_AMQP_URL).
# Every function returns non-zero on failure; a test that cannot get a broker must fail.
# Runs as any user: calls /usr/lib/rabbitmq/lib/*/sbin/rabbitmq-server directly (the
# Debian wrapper would su to the rabbitmq user).

_brokers_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

_brokers_sbin() {
    local d
    for d in /usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin; do
        [ -x "$d/rabbitmq-server" ] && { echo "$d"; return 0; }
    done
    echo "brokers.sh: rabbitmq-server is not installed (apt-get install rabbitmq-server)" >&2
    return 1
}

rmqctl() {
    env HOME="$V4_TEST_BROKER_DIR/home" ERL_EPMD_PORT="$(cat "$V4_TEST_BROKER_DIR/epmd.port")" \
        "$(_brokers_sbin)/rabbitmqctl" -n "$(cat "$V4_TEST_BROKER_DIR/node")" "$@"
}

# The "free" ports come from binding port 0 and closing it, so under a parallel ctest
# another test may take one before our servers bind it: a start whose RabbitMQ or
# Redis does not come up is stopped, its state removed, and retried (3 tries) with
# fresh ports (an AMQP_PORT given by the caller is kept).
brokers_start() {
    local try
    for try in 1 2 3; do
        _brokers_start_once "$@" && return 0
        [ "${V4_TEST_BROKER_DIR:-}" != "$1" ] || brokers_stop
        rm -rf "$1/home" "$1/mnesia" "$1/log" "$1/redis" "$1"/*.pid "$1/ports" 2> /dev/null
        [ "$try" -lt 3 ] && echo "brokers.sh: start $try of 3 failed; retrying with other ports" >&2
    done
    return 1
}

_brokers_start_once() {
    local dir="$1" sbin amqp_port="${2:-}" extra="${3:-}" dist_port epmd_port redis_port node conf line
    sbin="$(_brokers_sbin)" || return 1
    command -v redis-server >/dev/null || { echo "brokers.sh: redis-server is not installed" >&2; return 1; }
    mkdir -p "$dir/home" "$dir/mnesia" "$dir/log" "$dir/redis" || return 1
    [ -n "$amqp_port" ] || amqp_port="$(_brokers_free_port)" || return 1
    dist_port="$(_brokers_free_port)" &&
        epmd_port="$(_brokers_free_port)" && redis_port="$(_brokers_free_port)" || return 1
    node="v4test$$r$RANDOM@localhost"
    echo "$node" > "$dir/node"
    echo "$epmd_port" > "$dir/epmd.port"
    conf="listeners.tcp.default = 127.0.0.1:$amqp_port
loopback_users = none
consumer_timeout = 1800000
max_message_size = 16777216"
    while IFS= read -r line; do
        [ -n "${line// /}" ] || continue
        conf="$(printf '%s\n' "$conf" | grep -v "^${line%%[ =]*}[ =]" || true)
$line"
    done <<< "$extra"
    printf '%s\n' "$conf" > "$dir/rabbitmq.conf"
    # the consistent-hash exchange (fleet affinity) when the package ships it (Debian's
    # rabbitmq-server does); without it the affinity test fails, every other test runs
    if ls -d "$sbin"/../plugins/rabbitmq_consistent_hash_exchange-* > /dev/null 2>&1; then
        echo "[rabbitmq_consistent_hash_exchange]." > "$dir/enabled_plugins"
    else
        echo "[]." > "$dir/enabled_plugins"
    fi
    # our own epmd on a private port, so that we can stop it by pid
    epmd -address 127.0.0.1 -port "$epmd_port" > "$dir/log/epmd.log" 2>&1 &
    echo $! > "$dir/epmd.pid"
    echo "$amqp_port $dist_port" > "$dir/ports"
    export V4_TEST_BROKER_DIR="$dir"
    _brokers_launch_rabbit || return 1
    redis-server --port "$redis_port" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no \
        --dir "$dir/redis" --pidfile "$dir/redis.pid" --logfile "$dir/log/redis.log" || return 1
    export V4_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$amqp_port/"
    export V4_TEST_REDIS_URL="redis://127.0.0.1:$redis_port/0"
    export V4_TEST_RABBITMQCTL="rmqctl"
    _brokers_wait_redis "$redis_port" || return 1
    _brokers_wait_rabbit || return 1
    echo "brokers.sh: RabbitMQ $node on 127.0.0.1:$amqp_port, Redis on 127.0.0.1:$redis_port ($dir)"
}

# Start the RabbitMQ node of $V4_TEST_BROKER_DIR (first start or restart on the same data).
_brokers_launch_rabbit() {
    local dir="$V4_TEST_BROKER_DIR" sbin amqp_port dist_port
    sbin="$(_brokers_sbin)" || return 1
    read -r amqp_port dist_port < "$dir/ports" || return 1
    rm -f "$dir/rabbitmq.pid"
    (
        export HOME="$dir/home" RABBITMQ_NODENAME="$(cat "$dir/node")" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
            RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT="$dist_port" ERL_EPMD_ADDRESS=127.0.0.1 \
            ERL_EPMD_PORT="$(cat "$dir/epmd.port")" RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
            RABBITMQ_PID_FILE="$dir/rabbitmq.pid" RABBITMQ_CONFIG_FILE="$dir/rabbitmq" \
            RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
        "$sbin/rabbitmq-server" >> "$dir/log/console.log" 2>&1 &
        echo $! > "$dir/rabbitmq.launcher.pid"
    )
}

# Redis daemonizes before it binds: a taken port only shows in its log (and the
# daemon exits), so ask it, for up to ~5 s.  Another program on the port may accept
# and never answer: each ping has a 1 s limit.
_brokers_wait_redis() {
    local end=$((SECONDS + 5)) pid
    while [ "$SECONDS" -le "$end" ]; do
        [ "$(timeout 1 redis-cli -h 127.0.0.1 -p "$1" ping 2> /dev/null)" = PONG ] && return 0
        pid="$(cat "$V4_TEST_BROKER_DIR/redis.pid" 2> /dev/null)"
        [ -n "$pid" ] && ! kill -0 "$pid" 2> /dev/null && break
        sleep 0.1
    done
    echo "brokers.sh: Redis did not answer on 127.0.0.1:$1; see $V4_TEST_BROKER_DIR/log/redis.log" >&2
    tail -n 5 "$V4_TEST_BROKER_DIR/log/redis.log" >&2 2> /dev/null
    return 1
}

_brokers_wait_rabbit() {
    local dir="$V4_TEST_BROKER_DIR" i lpid
    lpid="$(cat "$dir/rabbitmq.launcher.pid" 2> /dev/null)"
    for i in $(seq 1 600); do
        [ -s "$dir/rabbitmq.pid" ] && break
        # a node that failed to boot (e.g. its port was taken) exits: don't wait 60 s
        [ -n "$lpid" ] && ! kill -0 "$lpid" 2> /dev/null && [ ! -s "$dir/rabbitmq.pid" ] && break
        sleep 0.1
    done
    if [ ! -s "$dir/rabbitmq.pid" ]; then
        echo "brokers.sh: RabbitMQ exited while starting; see $dir/log" >&2
        tail -n 20 "$dir/log/console.log" >&2
        return 1
    fi
    # rabbitmqctl wait (itself an Erlang VM: slow to start on a busy machine), while the
    # node is watched: a node that dies while booting (e.g. its port was taken) is noticed
    # when it exits, not when the wait times out
    local npid wpid rc=0
    npid="$(cat "$dir/rabbitmq.pid")"
    rmqctl wait --timeout 120 "$dir/rabbitmq.pid" > "$dir/log/wait.log" 2>&1 &
    wpid=$!
    while kill -0 "$wpid" 2> /dev/null; do
        if ! kill -0 "$npid" 2> /dev/null; then
            kill "$wpid" 2> /dev/null
            rc=1
            break
        fi
        sleep 0.2
    done
    wait "$wpid" 2> /dev/null || rc=1
    if [ "$rc" -ne 0 ]; then
        echo "brokers.sh: RabbitMQ did not start; see $dir/log" >&2
        tail -n 20 "$dir/log/console.log" >&2
        return 1
    fi
}

# Crash the RabbitMQ node (kill -9 of the Erlang VM) and start it again on the same data.
brokers_crash_restart() {
    local pid
    pid="$(cat "$V4_TEST_BROKER_DIR/rabbitmq.pid")" || return 1
    kill -9 "$pid" || return 1
    sleep "${1:-1}"
    _brokers_launch_rabbit && _brokers_wait_rabbit
}

# Wait (up to ~5 s) until none of the given pids exists any more.
_brokers_wait_gone() {
    local p
    for p in "$@"; do
        for _ in $(seq 1 50); do
            kill -0 "$p" 2> /dev/null || break
            sleep 0.1
        done
    done
}

brokers_stop() {
    local dir="${V4_TEST_BROKER_DIR:-}" pid="" f gone=()
    [ -n "$dir" ] || return 0
    [ -s "$dir/rabbitmq.pid" ] && pid="$(cat "$dir/rabbitmq.pid" 2> /dev/null)" || true
    if [ -n "$pid" ]; then
        kill -CONT "$pid" 2> /dev/null || true   # a test may have frozen it
        rmqctl stop > /dev/null 2>&1 || true
        kill -9 "$pid" 2> /dev/null || true
        gone+=("$pid")
    fi
    for f in redis.pid rabbitmq.launcher.pid epmd.pid; do
        pid=""
        [ -s "$dir/$f" ] && pid="$(cat "$dir/$f" 2> /dev/null)" || true
        [ -n "$pid" ] && { kill -CONT "$pid" 2> /dev/null; kill "$pid" 2> /dev/null && gone+=("$pid"); }
    done
    # the processes must be gone before a caller removes DIR (they write logs there)
    [ "${#gone[@]}" -eq 0 ] || _brokers_wait_gone "${gone[@]}"
    return 0
}

_BROKERS_OWNED=""

brokers_ensure() {
    if [ -n "${V4_TEST_AMQP_URL:-}" ] && [ -n "${V4_TEST_BROKER_DIR:-}" ]; then
        return 0
    fi
    _BROKERS_OWNED="$(mktemp -d /tmp/v4brokers.XXXXXX)" || return 1
    brokers_start "$_BROKERS_OWNED"
}

brokers_release() {
    [ -n "$_BROKERS_OWNED" ] || return 0
    brokers_stop
    rm -rf "$_BROKERS_OWNED" 2> /dev/null || { sleep 0.5; rm -rf "$_BROKERS_OWNED"; } || true
    _BROKERS_OWNED=""
}

# ---- the common start of a queue test script (see the header) ----

_BROKERS_TEST_MODE=""

brokers_test_begin() {
    local name="$1" mode="${2:-shared}" extra="${3:-}"
    : "${V4_BIN:?V4_BIN must name the v4fleet binary}" "${V4_TMP:?V4_TMP must name a scratch directory}"
    # shellcheck disable=SC2034  # read by the sourcing test script
    status=0
    WORK="$(mktemp -d "$V4_TMP/$name.XXXXXX")" || { echo "FAIL: cannot create a work dir" >&2; exit 1; }
    _BROKERS_TEST_MODE="$mode"
    trap '_brokers_test_end' EXIT
    case "$mode" in
    shared)
        brokers_ensure || { echo "FAIL: no RabbitMQ for the queue tests" >&2; exit 1; } ;;
    private)
        unset V4_TEST_AMQP_URL V4_TEST_REDIS_URL V4_TEST_BROKER_DIR
        brokers_start "$WORK/brokers" "" "$extra" || { echo "FAIL: cannot start a private RabbitMQ" >&2; exit 1; } ;;
    none)
        unset V4_TEST_AMQP_URL V4_TEST_REDIS_URL V4_TEST_BROKER_DIR ;;
    *)
        echo "FAIL: brokers_test_begin: unknown mode '$mode'" >&2
        exit 1 ;;
    esac
}

fail() {
    echo "FAIL: $*" >&2
    # shellcheck disable=SC2034  # read by the sourcing test script
    status=1
}

qclient() {
    /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/queue_client.py" "$V4_TEST_AMQP_URL" "$@"
}

# EXIT trap of brokers_test_begin: never changes the test's exit status.
_brokers_test_end() {
    set +e
    if declare -F test_cleanup > /dev/null; then test_cleanup; fi
    case "$_BROKERS_TEST_MODE" in
    shared) brokers_release ;;
    *) brokers_stop ;;
    esac
    [ -z "${WORK:-}" ] || rm -rf "$WORK" 2> /dev/null || { sleep 0.5; rm -rf "$WORK"; }
    return 0
}
