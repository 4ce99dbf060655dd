#!/usr/bin/env bash
# test_queue_affinity.sh - fleet affinity (docs/queue-worker.md "Fleet affinity") with a real
# RabbitMQ (tests/lib/brokers.sh: the test brokers enable rabbitmq_consistent_hash_exchange)
# and three `v4fleet worker`s on the tiny model, V4_AFFINITY=1, ids a1 a2 a3.  The sender is
# scripts/v4client.py through tests/lib/affinity_client.py; who served a task comes from
# the result's "worker" and from the workers' "start of task ID (LANE lane" log lines.
#   1. routing: 36 tasks over 6 prefix keys -> every key's tasks taken from one worker's own
#      queue (affinity lane) by that one worker (at most a quarter may wait longer than
#      the TTL and fall through); every task answered once, by the worker the log says;
#      also a key derived from the prompt (no prefix_key) sticks to one worker.
#   2. kill -9 of a worker mid-run (60 longer tasks over 6 keys; killed once it has started
#      two of them): every task answered, none twice (at most the one a kill can duplicate:
#      confirmed, not acked), nothing left in any queue.
#   3. the killed worker stays dead: tasks of its keys wait in its queue for
#      V4_AFFINITY_TTL_MS and fall through to the task queue (fallback lane), answered by
#      the others within the TTL + slack; its queue is empty afterwards.
# A worker must not have answered anything routed with affinity off either: the existing
# queue tests (affinity off by default) cover today's behaviour.  No broker = FAIL.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$HERE/lib/brokers.sh"
brokers_test_begin queue_affinity
# shellcheck source=tests/lib/worker.sh
source "$HERE/lib/worker.sh"
declare -A WP=()
test_cleanup() {
    local w
    for w in "${!WP[@]}"; do [ -z "${WP[$w]}" ] || kill -9 "${WP[$w]}" 2>/dev/null; done
}
py=/usr/bin/python3
"$V4_BIN" mkmodel --out "$WORK/m" --preset tiny --seed 1 --no-sync > /dev/null
P="af$$"
TTL_MS="${V4_AFFINITY_TEST_TTL_MS:-15000}"   # raise on a very slow machine
export V4_AMQP_URL="$V4_TEST_AMQP_URL" V4_MODEL_DIR="$WORK/m" V4_TASK_QUEUE="$P.tasks" \
    V4_DEAD_QUEUE="$P.dead" V4_DLX_EXCHANGE="$P.dlx" V4_INVALID_QUEUE="$P.invalid" \
    V4_UNROUTABLE_QUEUE="$P.unroutable" V4_RESULTS_EXCHANGE="$P.results" V4_RESULTS_ROUTING_KEY="$P.results" \
    V4_RESULTS_QUEUE="$P.results" V4_CANCEL_EXCHANGE="$P.cancel" V4_URGENT_QUEUE="$P.tasks.urgent" \
    V4_AFFINITY=1 V4_AFFINITY_TTL_MS="$TTL_MS" V4_THREADS=1 V4_DEADLINE_MS=600000 V4_HEARTBEAT_S=5 \
    V4_LOG_LEVEL=1 V4_LOG_FORMAT=json V4_MODEL_NAME=tiny V4_REDIS_URL=off V4_HTTP_PORT=0 V4_WARMUP_TOKENS=0
AQ="$P.tasks.affinity"

start_worker() {   # start_worker ID
    V4_WORKER_ID="$1" "$V4_BIN" worker > "$WORK/$1.log" 2>&1 &
    WP[$1]=$!
}
wlog_count() { grep -c "$2" "$WORK/$1.log" || true; }
wait_log() {   # wait_log ID PATTERN SECS
    local end=$(($(now_ms) + $3 * 1000))
    while [ "$(now_ms)" -lt "$end" ]; do
        [ "$(wlog_count "$1" "$2")" -ge 1 ] && return 0
        sleep 0.2
    done
    return 1
}
# "ID WORKER LANE" for every start of task in the logs
starts() {
    local w
    for w in a1 a2 a3; do
        sed -n 's/.*"msg":"start of task \([A-Za-z0-9]*\) (\([a-z]*\) lane.*/\1 '"$w"' \2/p' "$WORK/$w.log"
    done
}
# wait_empty QUEUE SECS: until QUEUE holds nothing (the broker's counts of a quorum queue
# lag by a few seconds); non-zero on timeout
wait_empty() {
    local end=$(($(now_ms) + $2 * 1000))
    while [ "$(now_ms)" -lt "$end" ]; do
        [ "$(queue_counts "$1")" = "0 0" ] && return 0
        sleep 0.5
    done
    return 1
}
ac() { $py "$HERE/lib/affinity_client.py" "$V4_TEST_AMQP_URL" "$P.tasks" run "$@"; }
finish() {
    if [ "$status" -ne 0 ]; then
        local w
        for w in a1 a2 a3; do echo "--- $w.log (last 15 lines)" >&2; tail -n 15 "$WORK/$w.log" >&2; done
        rmqctl list_queues name messages_ready messages_unacknowledged 2>/dev/null | grep "$P" >&2 || true
    fi
    exit "$status"
}

for w in a1 a2 a3; do start_worker "$w"; done
for w in a1 a2 a3; do
    wait_log "$w" "amqp: connected" 60 || { fail "worker $w did not connect"; finish; }
    grep -q "fleet affinity: consuming $AQ.$w " "$WORK/$w.log" || fail "worker $w does not say it consumes $AQ.$w"
done
for w in a1 a2 a3; do
    [ -n "$(queue_counts "$AQ.$w")" ] || fail "no queue $AQ.$w"
done

# ---- 1. routing: one worker per key ----
ac "$WORK/r1.jsonl" r 36 6 key 4 240 || fail "routing run: not every task answered"
ac "$WORK/r2.jsonl" d 12 2 derived 4 240 600 || fail "derived-key run: not every task answered"
starts > "$WORK/starts1.txt"
$py - "$WORK/r1.jsonl" "$WORK/r2.jsonl" "$WORK/starts1.txt" <<'EOF' || fail "routing (above)"
import json, sys
lane = {}
for line in open(sys.argv[3]):
    tid, worker, ln = line.split()
    lane.setdefault(tid, []).append((worker, ln))
for path, n in ((sys.argv[1], 36), (sys.argv[2], 12)):
    rows = [json.loads(l) for l in open(path)]
    ans = [r for r in rows if "id" in r]
    stray = [r["stray"] for r in rows if "stray" in r]
    ids = [r["id"] for r in ans]
    assert len(set(ids)) == n and len(ids) == n, "%s: %d answers, %d distinct, want %d" % (path, len(ids), len(set(ids)), n)
    assert stray == [0], "%s: duplicate answers: %s" % (path, stray)
    bad = [r for r in ans if r["status"] != "succeeded" or r["worker"] not in ("a1", "a2", "a3")]
    assert not bad, "failed or unknown worker: %s" % bad[:3]
    for r in ans:
        st = lane.get(r["id"], [])
        assert len(st) == 1 and st[0][0] == r["worker"], "%s: result says %s, log starts %s" % (r["id"], r["worker"], st)
    # the tasks taken from a worker's own queue: one worker per key (a task that waited
    # longer than the TTL falls through to the task queue: any worker, counted apart)
    by, fell = {}, 0
    for r in ans:
        if lane[r["id"]][0][1] == "affinity":
            by.setdefault(r["key"], set()).add(r["worker"])
        else:
            fell += 1
    print("%s: workers per key (affinity lane): %s; %d of %d fell through" % (
        path.rsplit("/", 1)[1], {k: sorted(v) for k, v in sorted(by.items())}, fell, n))
    multi = {k: sorted(v) for k, v in by.items() if len(v) != 1}
    assert not multi, "keys taken from more than one worker's own queue: %s" % multi
    if n == 36:   # short prompts: the backlog stays under the TTL, so routing is the rule
        assert fell <= n // 4, "%d of %d tasks fell through to the task queue (TTL too short for this machine?)" % (fell, n)
    else:         # the derived keys' 600-character prompts: both keys may hash to one worker, whose
                  # backlog can outlast the TTL under the sanitizers (the overflow falls through,
                  # as designed); each key must still have been routed to its worker's own queue
        assert len(by) == 2, "derived keys: %d of 2 keys reached a worker's own queue" % len(by)
EOF

# ---- 2. kill -9 of a worker mid-run ----
TOK="${V4_AFFINITY_TEST_TOKENS:-120}"
ac "$WORK/k.jsonl" k 60 6 key "$TOK" 480 > "$WORK/k.out" 2>&1 &
CPID=$!
victim=""
end=$(($(now_ms) + 240000))
while [ -z "$victim" ] && [ "$(now_ms)" -lt "$end" ]; do
    for w in a1 a2 a3; do
        if [ "$(wlog_count "$w" '"msg":"start of task k')" -ge 2 ]; then victim="$w"; break; fi
    done
    sleep 0.1
done
if [ -z "$victim" ]; then
    fail "no worker started two of the phase-2 tasks within 240 s"
else
    kill -9 "${WP[$victim]}"
    wait "${WP[$victim]}" 2>/dev/null || true
    WP[$victim]=""
    echo "killed $victim (-9) after $(wlog_count "$victim" '"msg":"start of task k') starts, $(grep -c . "$WORK/k.jsonl" || true) answers"
fi
wait "$CPID" || { cat "$WORK/k.out" >&2; fail "kill run: not every task answered (lost tasks)"; }
$py - "$WORK/k.jsonl" "$victim" <<'EOF' || fail "kill -9 run (above)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ans = [r for r in rows if "id" in r]
stray = sum(r["stray"] for r in rows if "stray" in r)
ids = {r["id"] for r in ans}
lost = sorted({"k%d" % i for i in range(60)} - ids)
print("kill -9 of %s: %d tasks answered, %d lost, %d duplicate answer(s)" % (sys.argv[2], len(ids), len(lost), stray))
assert not lost, "lost: %s" % lost
assert stray <= 1, "%d duplicate answers (a kill can duplicate at most the task confirmed but not acked)" % stray
assert all(r["status"] == "succeeded" for r in ans), [r for r in ans if r["status"] != "succeeded"][:3]
EOF

# ---- 3. the killed worker stays dead: its keys fall through within the TTL ----
if [ -n "$victim" ]; then
    # keys the victim owned (it took them from its own queue in phase 2)
    mapfile -t vkeys < <(starts | awk -v v="$victim" '$1 ~ /^k[0-9]+$/ && $2 == v && $3 == "affinity" { print $1 }' |
        sed 's/^k//' | awk '{ print "k" ($1 % 6) }' | sort -u)
    echo "keys of $victim: ${vkeys[*]:-none}"
    if [ "${#vkeys[@]}" -eq 0 ]; then
        fail "the victim took no phase-2 task from its own queue"
    else
        # 6 tasks, each with one of the victim's keys (prefix_key k<j>)
        $py - "$V4_TEST_AMQP_URL" "$P.tasks" "$WORK/f.jsonl" "$TTL_MS" "${vkeys[@]}" <<EOF || fail "fall-through run (above)"
import json, sys, time
sys.path.insert(0, "$HERE/../scripts")
from v4client import Client
url, q, out, ttl = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
keys = sys.argv[5:]
with Client(url, task_queue=q, affinity=True, on_failure="return") as c:
    t0 = time.time()
    hs = [c.submit({"id": "f%d" % i, "prompt": "late %d" % i, "max_tokens": 4, "temperature": 0},
                   prefix_key=keys[i % len(keys)]) for i in range(6)]
    got = {}
    for h in c.as_completed(hs, timeout=ttl / 1e3 + 120):
        got[h.id] = (round((time.time() - t0) * 1e3), (h.record or {}).get("worker"), (h.record or {}).get("status"))
    print("fall-through answers (ms after publish, worker):", got)
    assert len(got) == 6, got
    assert all(s == "succeeded" for _, _, s in got.values()), got
    # they waited in the dead worker's queue for the TTL, then the others answered
    first = min(ms for ms, _, _ in got.values())
    assert first >= ttl * 0.8, "answered after %d ms, before the TTL (%d ms): did they wait in the dead queue?" % (first, ttl)
    assert max(ms for ms, _, _ in got.values()) <= ttl + 90000, "answered too late"
EOF
        fl="$(starts | awk '$1 ~ /^f[0-9]+$/ && $3 == "fallback"' | wc -l)"
        [ "$fl" -eq 6 ] || fail "want the 6 tasks of the dead worker's keys taken from the fallback lane, got $fl: $(starts | grep '^f' | tr '\n' ';')"
    fi
    wait_empty "$AQ.$victim" 60 || fail "$AQ.$victim not empty after 60 s (ready unacked): $(queue_counts "$AQ.$victim")"
fi
for q in "$P.tasks" "$AQ.a1" "$AQ.a2" "$AQ.a3" "$P.dead"; do
    wait_empty "$q" 60 || fail "$q holds messages after 60 s (ready unacked): $(queue_counts "$q")"
done

for w in a1 a2 a3; do
    [ -n "${WP[$w]}" ] || continue
    kill -TERM "${WP[$w]}"
    rc=0
    wait "${WP[$w]}" || rc=$?
    WP[$w]=""
    [ "$rc" -eq 0 ] || fail "worker $w exit status $rc after SIGTERM"
done
finish
