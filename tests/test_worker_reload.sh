#!/usr/bin/env bash
# test_worker_reload.sh - issue 7 "Warm-up and guards": warm-up before ready and model
# reload without failing a task, on a real worker with the shared RabbitMQ and Redis.
#   start    the warm-up runs (and logs) before the worker connects; /readyz is 200 after
#   watch    V4_MODEL_WATCH_S=1, the model symlink flipped to model B while a stream of tasks
#            runs: the worker reloads between tasks; every task succeeds (none lost, none
#            failed); a probe afterwards answers exactly as `v4fleet batch` does on model B
#   SIGHUP   the settings file is rewritten to name model A and SIGHUP sent mid-stream:
#            /readyz answers 503 "reloading" during the reload, every task succeeds, the
#            probe answers as model A
#   failed   the settings file names an empty directory, SIGHUP: "reload failed", the
#            worker keeps serving model A (probe), metrics count reloads ok 2 / failed 1
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin worker_reload shared
command -v curl > /dev/null || { echo "FAIL: curl is not installed" >&2; exit 1; }
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2> /dev/null || true; }
HPORT="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
URL="http://127.0.0.1:$HPORT"

"$V4_BIN" mkmodel --out "$WORK/A" --preset tiny --seed 21 > /dev/null
"$V4_BIN" mkmodel --out "$WORK/B" --preset tiny --seed 22 > /dev/null
mkdir -p "$WORK/broken"
ln -sfn "$WORK/A" "$WORK/cur"
PROBE='{"id":"probe","prompt":"the probe","max_tokens":12,"temperature":0}'
ids_of() { /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print(r["status"], r["output"]["token_ids"] if r["status"]=="succeeded" else r["error"])'; }
for m in A B; do
    echo "$PROBE" > "$WORK/probe.jsonl"
    "$V4_BIN" batch "$WORK/probe.jsonl" -o "$WORK/ref$m.jsonl" --model "$WORK/$m" --model-name tiny --progress lines \
        > /dev/null 2>&1 || fail "batch reference on model $m"
done
REF_A="$(ids_of < "$WORK/refA.jsonl")"; REF_B="$(ids_of < "$WORK/refB.jsonl")"
[ "$REF_A" != "$REF_B" ] || fail "models A and B answer the probe alike: the test could not tell them apart"

P="rl$$"
echo "V4_MODEL_DIR=$WORK/cur" > "$WORK/worker.conf"
export V4_CONFIG_FILE="$WORK/worker.conf" V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_REDIS_URL="$V4_TEST_REDIS_URL" \
    V4_REDIS_PREFIX="$P" V4_TASK_QUEUE="$P.tasks" V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" \
    V4_INVALID_QUEUE="$P.invalid" V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" \
    V4_RESULTS_QUEUE="$P.results" V4_MODEL_NAME=tiny V4_HTTP_PORT="$HPORT" V4_HTTP_ADDR=127.0.0.1 \
    V4_MODEL_WATCH_S=1 V4_WARMUP_TOKENS=400 V4_LOG_LEVEL=1
unset V4_MODEL_DIR
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!

straddles() {   # straddles PREFIX PATTERN: tasks PREFIX* finished both before and after the line PATTERN
    local at first last
    # (grep -m 1, not | head -1: head's early exit would SIGPIPE grep under pipefail)
    at="$(grep -n -m 1 "$2" "$WORK/worker.log" | cut -d: -f1)" || true
    first="$(grep -n -m 1 "task $1[0-9]*: succeeded" "$WORK/worker.log" | cut -d: -f1)" || true
    last="$(grep -n "task $1[0-9]*: succeeded" "$WORK/worker.log" | tail -1 | cut -d: -f1)" || true
    [ -n "$at" ] && [ -n "$first" ] && [ "$first" -lt "$at" ] && [ "$last" -gt "$at" ] ||
        fail "the reload ($2: line ${at:-none}) did not happen mid-stream (tasks $1: lines ${first:-none}..${last:-none})"
}
probe() {   # probe WANT WHAT: the probe task's answer must be WANT
    qclient task "$P.tasks" "$PROBE"
    local r
    r="$(qclient result "$P.results" 30)" || { fail "$2: no probe result"; return; }
    [ "$(ids_of <<< "$r")" = "$1" ] || fail "$2: probe answered $(ids_of <<< "$r"), want $1"
}
stream() {  # stream PREFIX: 30 tasks; returns once 5 have finished
    qclient publish "$P.tasks" 30 120 "$1" > /dev/null
    wait_lines "task $1[0-9]*: succeeded" 5 60 || fail "stream $1 did not start"
}

echo "--- start: warm-up, then ready"
wait_lines "amqp: connected" 1 60 || fail "the worker did not connect"
wl="$(grep -n -m 1 "warm-up: generation of 400 tokens" "$WORK/worker.log" | cut -d: -f1)" || true
cl="$(grep -n -m 1 "amqp: connected" "$WORK/worker.log" | cut -d: -f1)" || true
[ -n "$wl" ] && [ "$wl" -lt "$cl" ] || fail "the warm-up generation did not run before connecting (lines ${wl:-none} / $cl)"
grep -q "warm-up: no expert pre-loaded: experts resident" "$WORK/worker.log" || fail "warm-up note for resident experts"
for _ in $(seq 1 50); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ] && break; sleep 0.1; done
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ] || fail "/readyz not 200 after the start"
probe "$REF_A" "start"

echo "--- watch: the model symlink flipped mid-stream"
stream w
ln -sfn "$WORK/B" "$WORK/cur.new" && mv -T "$WORK/cur.new" "$WORK/cur"
qclient collect "$P.results" 30 120 > /dev/null || fail "watch: not every task of the stream succeeded"
grep -q "reload (V4_MODEL_DIR now resolves to $WORK/B)" "$WORK/worker.log" || fail "watch: no reload on the flipped symlink"
grep -q "reload done" "$WORK/worker.log" || fail "watch: reload not done"
straddles w "reload (V4_MODEL_DIR now resolves"
probe "$REF_B" "after the watched flip"

echo "--- SIGHUP: settings file rewritten mid-stream"
echo "V4_MODEL_DIR=$WORK/A" > "$WORK/worker.conf"
stream h
kill -HUP "$WPID"
saw=""
# The reload starts when the stream's running tasks are done (slow under ASan on a busy
# machine): poll until the second "reload done", within a generous bound.
deadline=$((SECONDS + 180))
while [ $SECONDS -lt $deadline ]; do
    body="$(curl -s -w ' %{http_code}' "$URL/readyz" || true)"
    case "$body" in *reloading*503) saw=1; break ;; esac
    [ "$(nlines "reload done")" -ge 2 ] && break
    sleep 0.01
done
[ -n "$saw" ] || fail "SIGHUP: /readyz never answered 503 reloading (reload done lines: $(nlines "reload done"))"
qclient collect "$P.results" 30 120 > /dev/null || fail "SIGHUP: not every task of the stream succeeded"
wait_lines "reload done" 2 30 || fail "SIGHUP: reload not done"
straddles h "reload (SIGHUP)"
probe "$REF_A" "after SIGHUP"

echo "--- a failed reload keeps the old model"
echo "V4_MODEL_DIR=$WORK/broken" > "$WORK/worker.conf"
kill -HUP "$WPID"
wait_lines "reload failed" 1 30 || fail "no 'reload failed' for an empty model directory"
probe "$REF_A" "after the failed reload"
m="$(curl -s "$URL/metrics")"
grep -q '^v4fleet:model_reloads_total{result="ok"} 2$' <<< "$m" || fail "metrics: reloads ok: $(grep reloads_total <<< "$m")"
grep -q '^v4fleet:model_reloads_total{result="failed"} 1$' <<< "$m" || fail "metrics: reloads failed"
[ "$(nlines "task [a-z0-9]*: failed")" = 0 ] || fail "a task failed: $(grep -m 3 "task [a-z0-9]*: failed" "$WORK/worker.log")"
# the probe's result can reach the client before the worker's log line: wait for the line
wait_lines "task [a-z0-9]*: succeeded" 64 60 || true
[ "$(nlines "task [a-z0-9]*: succeeded")" = 64 ] || fail "$(nlines "task [a-z0-9]*: succeeded") tasks succeeded, want 64"
worker_stop
worker_finish 40
