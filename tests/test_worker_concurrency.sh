#!/usr/bin/env bash
# test_worker_concurrency.sh - issue 8: one worker decodes V4_CONCURRENCY tasks together
# (continuous batching) with the shared RabbitMQ and Redis.
#   batched   12 tasks of different prompts and lengths (greedy, one seeded-sampling, one
#             with a stop string) through a worker with V4_CONCURRENCY=4: /metrics shows
#             more than one task running at once, and every result's text and token ids
#             equal `v4fleet batch` run serially on the same packets
#   drain     SIGTERM while several long tasks run, grace long enough: each running task
#             finishes and is published; the unstarted ones go back to the queue
# No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
brokers_test_begin worker_concurrency shared
command -v curl > /dev/null || { echo "FAIL: curl is not installed" >&2; exit 1; }
WPID=""; POLL=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2> /dev/null || true; [ -z "$POLL" ] || kill "$POLL" 2> /dev/null || true; }
HPORT="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
URL="http://127.0.0.1:$HPORT"
"$V4_BIN" mkmodel --out "$WORK/model" --preset tiny --seed 31 > /dev/null

: > "$WORK/tasks.jsonl"
for i in $(seq 0 11); do
    extra=',"temperature":0'
    [ "$i" = 5 ] && extra=',"temperature":0.8,"seed":77'
    [ "$i" = 7 ] && extra=',"stop":["e"]'
    words="$(seq -s ' ' 1 $((i * 7 + 1)))"
    echo "{\"id\":\"c$i\",\"prompt\":\"task $i: $words\",\"max_tokens\":$((40 + i * 13))$extra}" >> "$WORK/tasks.jsonl"
done
"$V4_BIN" batch "$WORK/tasks.jsonl" -o "$WORK/serial.jsonl" --model "$WORK/model" --model-name tiny --progress lines \
    > /dev/null 2>&1 || fail "serial batch reference"
key() { /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    o = r.get("output") or {}
    print(r["id"], r["status"], o.get("finish_reason"), json.dumps(o.get("token_ids")), json.dumps(o.get("text")))
' | sort; }

P="cc$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_REDIS_URL="$V4_TEST_REDIS_URL" V4_REDIS_PREFIX="$P" V4_MODEL_DIR="$WORK/model" \
    V4_MODEL_NAME=tiny V4_TASK_QUEUE="$P.tasks" V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" \
    V4_INVALID_QUEUE="$P.invalid" V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" \
    V4_RESULTS_QUEUE="$P.results" V4_HTTP_PORT="$HPORT" V4_HTTP_ADDR=127.0.0.1 V4_CONCURRENCY=4 V4_GRACE_MS=180000
"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
wait_lines "amqp: connected" 1 60 || fail "the worker did not connect"

echo "--- batched: 12 tasks, 4 slots"
( while :; do curl -s "$URL/metrics" | sed -n 's/^v4fleet:num_requests_running \([0-9]*\)$/\1/p'; sleep 0.02; done ) \
    > "$WORK/running.txt" 2> /dev/null &
POLL=$!
while read -r line; do qclient task "$P.tasks" "$line"; done < "$WORK/tasks.jsonl"
qclient dump "$P.results" 12 120 > "$WORK/queue.jsonl" || fail "not all 12 results arrived"
kill "$POLL" 2> /dev/null || true; wait "$POLL" 2> /dev/null || true; POLL=""
maxrun="$(sort -n "$WORK/running.txt" | tail -1)"
[ "${maxrun:-0}" -ge 2 ] || fail "never more than ${maxrun:-0} task running at once (V4_CONCURRENCY=4)"
[ "${maxrun:-0}" -le 4 ] || fail "$maxrun tasks running at once, more than V4_CONCURRENCY=4"
echo "most tasks running at once: $maxrun"
if ! diff <(key < "$WORK/serial.jsonl") <(key < "$WORK/queue.jsonl") > "$WORK/diff.txt"; then
    fail "batched results differ from the serial run: $(head -c 600 "$WORK/diff.txt")"
fi

echo "--- drain: SIGTERM with several tasks running"
# Each drain task must outlast the time from the 4th task's start to SIGTERM (the tasks
# are sent ~0.1 s apart, then /metrics is polled): 600 tokens took ~0.7 s on the tiny
# model and a loaded CI machine once let one finish and a 5th start first.  1500 tokens
# take ~2 s each here, and well under the worker's grace (V4_GRACE_MS, 180 s here) with
# ASan, where 3000 did not finish in 60 s.
# The length is sized from the batched phase's own speed (its tasks' decode ms per token
# with 4 running, from the worker's JSON log): about 10 s of decode, between 100 and 1500
# tokens.  A fixed 1500 took over the 180 s grace under ASan on a loaded machine.
DRAIN="$(python3 - "$WORK/worker.log" <<'PYEOF'
import json, statistics, sys
ms = []
for l in open(sys.argv[1]):
    try:
        o = json.loads(l)
    except ValueError:
        continue
    if str(o.get("task", "")).startswith("c") and o.get("status") == "succeeded" and o.get("completion_tokens"):
        ms.append(o["decode_ms"] / o["completion_tokens"])
per = statistics.median(ms) if ms else 1.0
print(max(100, min(1500, int(10000 / max(per, 0.001)))))
PYEOF
)"
echo "drain tasks of $DRAIN tokens (about 10 s each at the batched phase's speed)"
for i in $(seq 0 7); do
    qclient task "$P.tasks" "{\"id\":\"d$i\",\"prompt\":\"drain $i\",\"max_tokens\":$DRAIN,\"ignore_eos\":true,\"temperature\":0}"
done
for _ in $(seq 1 200); do
    [ "$(curl -s "$URL/metrics" | sed -n 's/^v4fleet:num_requests_running \([0-9]*\)$/\1/p')" = 4 ] && break
    sleep 0.05
done
kill -TERM "$WPID"
rc=0; wait "$WPID" || rc=$?; WPID=""
[ "$rc" = 0 ] || fail "worker exit status $rc after SIGTERM"
done_n="$(grep -c '"msg":"task d[0-9]: succeeded' "$WORK/worker.log" || true)"
[ "$done_n" -ge 2 ] && [ "$done_n" -le 4 ] || fail "$done_n drain tasks finished after SIGTERM, want the 2..4 running ones"
qclient dump "$P.results" "$done_n" 10 > /dev/null || fail "the finished drain tasks' results were not published"
left="$(qclient count "$P.tasks")"
[ "$((left + done_n))" = 8 ] || fail "drain: $done_n finished + $left back in the queue != 8"
worker_finish 40
