#!/usr/bin/env bash
# fleet_affinity.sh [WORKERS [TASKS [PREFIXES [PREFIX_CHARS]]]] - prefix-cache hit rate of a
# fleet on one broker, round-robin dispatch against fleet affinity (docs/queue-worker.md
# "Fleet affinity", docs/operations.md "Fleet affinity"; issue 37 item 4).
#
# A private RabbitMQ on loopback (tests/lib/brokers.sh, rabbitmq_consistent_hash_exchange
# enabled), WORKERS (3) `v4fleet worker`s on the tiny model (mkmodel --preset tiny --seed 1),
# TASKS (300) tasks over PREFIXES (10) distinct prompt prefixes of PREFIX_CHARS (1600)
# characters (>= 2 cache blocks of 256 tokens on the tiny tokenizer; the bench prints the
# figure) plus a short variable part, sent through scripts/v4client.py by
# tests/lib/affinity_client.py.  Three runs, each on fresh queues and fresh workers:
#   round-robin  V4_AFFINITY=0: the shared task queue, as today
#   affinity     V4_AFFINITY=1, the key derived by the client from the prompt
#   affinity+kill  the same, one worker killed (-9) once a third of the answers are in
#                (V4_AFFINITY_KILL_TTL_MS, default 30000: its queued tasks fall through then)
# Table columns: answered / lost (no answer within the timeout) / duplicate answers;
# workers per prefix (mean, max: how many workers served a prefix); prompt cached (sum of
# usage.prompt_tokens_details.cached_tokens / sum of prompt_tokens: the share of prefill
# saved) and hit rate by tasks (cached_tokens > 0 / all; the best a fleet can do is
# (TASKS - PREFIXES) / TASKS: each prefix's first task misses); wall seconds.  Without the prefix cache (no
# cached_tokens in the results) the hit columns read "n/a".  The workers inherit the
# environment (V4_PREFIX_CACHE=0, a cache budget, V4_AFFINITY_TTL_MS ...).  All tasks are
# published at once, so a worker's backlog is about TASKS/WORKERS task times (minutes here):
# V4_AFFINITY_TTL_MS defaults to 600000 in this bench so that routing stays pure; with a
# TTL below the backlog's wait the overflow falls through to the task queue and spreads
# over the workers (the "fell through" column counts the tasks taken that way).
# Needs build/v4fleet (or V4_BIN), python3-pika.  Not part of scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$ROOT/tests/lib/brokers.sh"
WORKERS="${1:-3}" TASKS="${2:-300}" PREFIXES="${3:-10}" PCHARS="${4:-1600}"
BIN="${V4_BIN:-$ROOT/build/v4fleet}"
TOKENS="${V4_BENCH_TOKENS:-8}"
py=/usr/bin/python3
unset V4_TEST_AMQP_URL V4_TEST_BROKER_DIR
WORK="$(mktemp -d /tmp/v4fleetaff.XXXXXX)"
PIDS=()
stop_workers() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_workers
    brokers_stop
    rm -rf "$WORK"
}
trap cleanup EXIT
brokers_start "$WORK/brokers" > /dev/null
"$BIN" mkmodel --out "$WORK/model" --preset tiny --seed 1 --no-sync > /dev/null
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_REDIS_URL=off V4_MODEL_DIR="$WORK/model" V4_LOG_LEVEL=1 \
    V4_LOG_FORMAT=json V4_MODEL_NAME=tiny V4_HTTP_PORT=0 V4_THREADS=1 V4_WARMUP_TOKENS=0 \
    V4_AFFINITY_TTL_MS="${V4_AFFINITY_TTL_MS:-600000}"

# the cacheable prefix: tokens two prompts of one key share, in whole 256-token blocks
SHARED="$($py - "$ROOT" "$PCHARS" <<'EOF' | "$BIN" tokenize --tokenizer "$WORK/model" --jsonl |
import json, sys
sys.path.insert(0, sys.argv[1] + "/tests/lib")
from affinity_client import prefix_text
p = prefix_text("k0", int(sys.argv[2]))
print(json.dumps({"text": p + " item 0"}))
print(json.dumps({"text": p + " item 10"}))
EOF
    $py -c '
import json, sys
a, b = [json.loads(l) for l in sys.stdin]
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print(n, n // 256 * 256, len(a))')"
read -r shared_tok cacheable_tok prompt_tok <<< "$SHARED"
echo "prefix: $PCHARS characters = $shared_tok shared tokens ($cacheable_tok cacheable in 256-token blocks); a prompt: $prompt_tok tokens"
[ "$cacheable_tok" -ge 512 ] || echo "warning: fewer than 2 cache blocks shared; raise PREFIX_CHARS" >&2

# run NAME AFFINITY MODE KILL: fresh queues and workers, TASKS tasks; answers in $WORK/NAME.jsonl
run() {
    local name="$1" aff="$2" mode="$3" kill="$4" i cpid t0 victim="" got
    local q="$name.tasks"
    mkdir -p "$WORK/$name"
    for i in $(seq 1 "$WORKERS"); do
        V4_TASK_QUEUE="$q" V4_DEAD_QUEUE="$name.dead" V4_DLX_EXCHANGE="$name.dlx" V4_INVALID_QUEUE="$name.invalid" \
            V4_UNROUTABLE_QUEUE="$name.unroutable" V4_RESULTS_EXCHANGE="$name.results" \
            V4_RESULTS_ROUTING_KEY="$name.results" V4_RESULTS_QUEUE="$name.results" V4_AFFINITY="$aff" \
            V4_WORKER_ID="w$i" "$BIN" worker > "$WORK/$name/w$i.log" 2>&1 &
        PIDS+=("$!")
    done
    for i in $(seq 1 "$WORKERS"); do
        for _ in $(seq 1 600); do
            grep -q "amqp: connected" "$WORK/$name/w$i.log" && break
            sleep 0.1
        done
    done
    t0="$(date +%s.%N)"
    $py "$ROOT/tests/lib/affinity_client.py" "$V4_AMQP_URL" "$q" run "$WORK/$name.jsonl" t "$TASKS" "$PREFIXES" \
        "$mode" "$TOKENS" 1800 "$PCHARS" > "$WORK/$name.out" 2>&1 &
    cpid=$!
    if [ "$kill" = 1 ]; then
        while kill -0 "$cpid" 2>/dev/null; do
            got="$(grep -c '"id"' "$WORK/$name.jsonl" 2>/dev/null || true)"
            if [ "${got:-0}" -ge $((TASKS / 3)) ]; then
                victim="${PIDS[0]}"
                kill -9 "$victim"
                echo "$name: killed w1 (-9) after $(grep -c '"id"' "$WORK/$name.jsonl") answers" >&2
                break
            fi
            sleep 0.1
        done
    fi
    wait "$cpid" || { echo "$name: the client reports:" >&2; cat "$WORK/$name.out" >&2; }
    echo "$(date +%s.%N) $t0" | awk '{ printf "%.1f\n", $1 - $2 }' > "$WORK/$name.wall"
    cat "$WORK/$name"/w*.log | grep -c '(fallback lane' > "$WORK/$name.fell" || true
    stop_workers
}

run rr 0 off 0
run affinity 1 derived 0
# the killed worker's tasks wait the TTL in its queue: a shorter one for this run
V4_AFFINITY_TTL_MS="${V4_AFFINITY_KILL_TTL_MS:-30000}" run affinity_kill 1 derived 1

$py - "$WORK" "$TASKS" "$cacheable_tok" <<'EOF'
import json, sys
work, n, cacheable = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print()
print("%-15s %8s %5s %4s %14s %12s %14s %14s %7s" % ("dispatch", "answered", "lost", "dup", "workers/prefix",
                                                        "fell through", "prompt cached", "hit (tasks)", "wall s"))
for name, label in (("rr", "round-robin"), ("affinity", "affinity"), ("affinity_kill", "affinity+kill")):
    try:
        rows = [json.loads(l) for l in open("%s/%s.jsonl" % (work, name))]
    except OSError:
        rows = []
    ans = [r for r in rows if "id" in r]
    stray = sum(r.get("stray", 0) for r in rows)
    ids = {r["id"] for r in ans}
    lost = n - len(ids)
    by = {}
    for r in ans:
        by.setdefault(r["key"], set()).add(r["worker"])
    wpp = [len(v) for v in by.values()] or [0]
    have = any("cached_tokens" in r and r.get("cached_tokens") for r in ans)
    cached = sum(r.get("cached_tokens") or 0 for r in ans)
    prompt = sum(r.get("prompt_tokens") or 0 for r in ans)
    hit_tok = "%.1f%%" % (100.0 * cached / prompt) if have and prompt else "n/a"
    hit_task = "%.1f%%" % (100.0 * sum(1 for r in ans if (r.get("cached_tokens") or 0) > 0) / len(ans)) \
        if have and ans else "n/a"
    wall = open("%s/%s.wall" % (work, name)).read().strip()
    fell = open("%s/%s.fell" % (work, name)).read().strip() or "0"
    print("%-15s %8d %5d %4d %9.2f / %-2d %12s %14s %14s %7s" % (label, len(ids), lost, stray, sum(wpp) / len(wpp),
                                                                 max(wpp), fell, hit_tok, hit_task, wall))
EOF
