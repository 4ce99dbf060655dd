#!/usr/bin/env bash
# test_prefix_queue.sh - the prefix cache in the queue worker (docs/prefix-cache.md), through
# RabbitMQ (tests/lib/brokers.sh) and a real `v4fleet worker` on the tiny model, one task
# at a time (V4_CONCURRENCY=1):
#  - blocks of 128 positions (V4_PREFIX_BLOCK=128: short prompts for the sanitizer build);
#    three tasks whose input_ids share a 300-token prefix: the first prefills it
#    (cached_tokens 0), the next two resume from its 2 cached blocks (cached_tokens 256);
#    a task with another prefix misses; every result equals `v4fleet batch
#    --no-prefix-cache` on the same packets (token ids, text) and validates against
#    config/result.schema.json;
#  - the worker's log: the start-up line describes the cache, each task line says how
#    many prompt tokens were cached;
#  - /metrics: v4fleet:prefix_cache_lookups_total{result="hit"} 2 and {result="miss"} >= 2
#    (the start-up warm-up generation is a lookup too),
#    tokens_saved 512, blocks / bytes / budget gauges (budget = V4_PREFIX_CACHE_BYTES);
#  - a bad V4_PREFIX_POLICY stops the worker at start with the setting named.
# No broker = FAIL (not skip).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin prefix_queue
WPID=""
test_cleanup() { [ -z "$WPID" ] || kill -9 "$WPID" 2>/dev/null; }
py=/usr/bin/python3
$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)" >&2; exit 1; }

"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 4 --no-sync > /dev/null
$py - "$WORK/tasks.jsonl" <<'EOF'
import json, random, sys
r = random.Random(9)
pre = [r.randrange(10, 1000) for _ in range(300)]
tail = lambda n: [r.randrange(10, 1000) for _ in range(n)]
tasks = [{"id": "p1", "input_ids": pre + tail(30), "max_tokens": 8, "temperature": 0},
         {"id": "p2", "input_ids": pre + tail(50), "max_tokens": 8, "temperature": 0.8, "seed": 3},
         {"id": "other", "input_ids": tail(150), "max_tokens": 8},
         {"id": "p3", "input_ids": pre[:260], "max_tokens": 8, "logprobs": True, "top_logprobs": 2}]
with open(sys.argv[1], "w") as f:
    for t in tasks:
        f.write(json.dumps(t) + "\n")
EOF

P="pq$$"
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" V4_RESULTS_QUEUE="$P.results" \
    V4_PREFETCH=1 V4_CONCURRENCY=1 V4_HEARTBEAT_S=2 V4_LOG_LEVEL=1 V4_MODEL_NAME=tiny V4_REDIS_URL=off \
    V4_HTTP_ADDR=127.0.0.1 V4_HTTP_PORT="$(_brokers_free_port)" V4_PREFIX_CACHE_BYTES=64M V4_PREFIX_BLOCK=128 V4_LOG_FORMAT=text

# a bad setting stops the worker at start, naming it
if V4_PREFIX_POLICY=mru timeout 60 "$V4_BIN" worker > "$WORK/bad.log" 2>&1; then
    fail "the worker started with V4_PREFIX_POLICY=mru"
elif ! grep -q "V4_PREFIX_POLICY" "$WORK/bad.log"; then
    fail "V4_PREFIX_POLICY=mru: the error does not name it: $(tail -2 "$WORK/bad.log")"
fi

"$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 300); do
    rmqctl list_queues name 2>/dev/null | grep -qx "$P.tasks" && break
    sleep 0.1
done
while IFS= read -r t; do
    qclient task "$P.tasks" "$t" || fail "publish $t"
done < "$WORK/tasks.jsonl"
qclient dump "$P.results" 4 240 > "$WORK/results.jsonl" || fail "fewer than 4 results"

"$V4_BIN" batch "$WORK/tasks.jsonl" -o "$WORK/ref.jsonl" --model "$WORK/m" --model-name tiny --no-prefix-cache \
    2> "$WORK/batch.err" || fail "batch: $(tail -3 "$WORK/batch.err")"

$py - "$WORK" "$HERE/../config/result.schema.json" <<'EOF' || fail "results"
import json, sys
import jsonschema
w = sys.argv[1]
rv = jsonschema.Draft202012Validator(json.load(open(sys.argv[2])))
recs = {}
for l in open(w + "/results.jsonl", encoding="utf-8"):
    r = json.loads(l)
    rv.validate(r)
    recs[r["id"]] = r
ref = {json.loads(l)["id"]: json.loads(l) for l in open(w + "/ref.jsonl")}
want = {"p1": 0, "p2": 256, "other": 0, "p3": 256}
for k, c in want.items():
    r = recs[k]
    assert r["status"] == "succeeded", r
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == c, (k, r["usage"])
    assert r["output"] == ref[k]["output"], (k, r["output"], ref[k]["output"])
print("cached:", {k: recs[k]["usage"]["prompt_tokens_details"]["cached_tokens"] for k in want})
EOF
grep -q "prefix cache 0.06 GiB, blocks of 128 positions" "$WORK/worker.log" ||
    fail "start-up line without the prefix cache: $(grep -m1 "opened" "$WORK/worker.log")"
grep -q "task p2: succeeded, [0-9]*+8 tokens (256 cached)" "$WORK/worker.log" ||
    fail "no cached count in p2's log line: $(grep "task p2" "$WORK/worker.log")"
metrics="$(curl -sf "http://127.0.0.1:$V4_HTTP_PORT/metrics")" || fail "no /metrics"
val() { sed -n "s/^$1 \\([0-9.e+]*\\).*/\\1/p" <<< "$metrics"; }
[ "$(val 'v4fleet:prefix_cache_lookups_total{result="hit"}')" = 2 ] &&
[ "$(val 'v4fleet:prefix_cache_lookups_total{result="miss"}')" -ge 2 ] &&
[ "$(val 'v4fleet:prefix_cache_tokens_saved_total')" = 512 ] &&
[ "$(val 'v4fleet:prefix_cache_budget_bytes')" = 67108864 ] &&
[ "$(val 'v4fleet:prefix_cache_blocks')" = 3 ] || fail "prefix cache metrics: $(grep prefix_cache <<< "$metrics")"
kill -TERM "$WPID"
wrc=0
wait "$WPID" || wrc=$?
WPID=""
[ "$wrc" -eq 0 ] || fail "worker exit status $wrc after SIGTERM"
[ "$status" -eq 0 ] || { tail -n 30 "$WORK/worker.log" >&2; }
exit "$status"
