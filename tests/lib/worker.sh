# shellcheck shell=bash
# worker.sh - helpers for the tests that run a `v4fleet worker` (source it after
# tests/lib/brokers.sh and brokers_test_begin, which define WORK, status and fail).
# The worker's log is $WORK/worker.log and its pid $WPID.
#
#   now_ms                      monotonic-enough milliseconds (date)
#   nlines PATTERN              lines of the worker log matching PATTERN
#   wait_lines PATTERN N SECS   wait until nlines PATTERN >= N; non-zero on timeout
#   queue_counts QUEUE          "ready unacked" of QUEUE (empty if it does not exist)
#   worker_stop                 SIGTERM the worker, wait, FAIL unless it exits 0
#   worker_finish [LINES]       on failure print the worker log's last LINES (30); exit $status

now_ms() { echo $(($(date +%s%N) / 1000000)); }

nlines() { grep -c "$1" "$WORK/worker.log" || true; }

wait_lines() {
    local end=$(($(now_ms) + $3 * 1000))
    while [ "$(now_ms)" -lt "$end" ]; do
        [ "$(nlines "$1")" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

queue_counts() {
    rmqctl list_queues name messages_ready messages_unacknowledged 2>/dev/null | awk -v q="$1" '$1 == q { print $2, $3 }'
}

worker_stop() {
    local rc=0
    kill -TERM "$WPID"
    wait "$WPID" || rc=$?
    WPID=""
    [ "$rc" -eq 0 ] || fail "worker exit status $rc after SIGTERM"
}

worker_finish() {
    [ "$status" -eq 0 ] || tail -n "${1:-30}" "$WORK/worker.log" >&2
    exit "$status"
}
