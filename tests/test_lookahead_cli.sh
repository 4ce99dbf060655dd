#!/usr/bin/env bash
# test_lookahead_cli.sh - the router look-ahead of paged experts as a user setting
# (--no-lookahead of generate / logits / batch, V4_LOOKAHEAD of the worker and, when the
# flag is absent, of the commands).  It is a prefetch hint, so:
#  - generate on the golden tiny model (tests/data) with paged experts (--host-cache-bytes:
#    a budget that evicts and one that holds every expert): the same ids with the
#    look-ahead on (default, V4_LOOKAHEAD=1) and off (--no-lookahead, V4_LOOKAHEAD=0, the
#    flag over V4_LOOKAHEAD=1) as with resident experts; the setting reaches the engine:
#    the stderr figures say "router look-ahead on: N experts prefetched" with N > 0, or
#    "off: 0 experts prefetched", and with every expert fitting the look-ahead has fewer
#    demand misses;
#  - logits with paged experts and --no-lookahead: the resident run's bytes;
#  - batch (the serving core's runner, as the worker opens it): the same output tokens on
#    and off, more prefetched and fewer missed activations in the results' experts
#    figures with it on, and the start line says which;
#  - the worker: V4_LOOKAHEAD=0 (environment or config file) reaches its runner (the
#    start-up log's experts line says "router look-ahead off", unset: "on"); an invalid
#    V4_LOOKAHEAD is refused by the worker's settings (exit 2, one line naming it and the
#    range) and by generate (exit 1, one line); numerics-check refuses --no-lookahead.
set -u
bin=${V4_BIN:?V4_BIN not set}
data=${V4_TEST_DATA:?V4_TEST_DATA not set}
py=/usr/bin/python3
work=$(mktemp -d "${V4_TMP:-/tmp}/lookahead.XXXXXX")
wpid=""
trap '[ -n "$wpid" ] && kill -KILL "$wpid" 2>/dev/null; rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
unset V4_LOOKAHEAD

G="$data/golden/tiny/model"
$py -c 'import json; print(json.dumps([(i * 37) % 900 + 3 for i in range(40)]))' > "$work/ids.json"
gen() { "$bin" generate --model "$G" --prompt-ids "$work/ids.json" --max-tokens 12 --greedy "$@"; }
gen > "$work/ref.txt" 2> "$work/ref.err" || { bad "resident generate: $(cat "$work/ref.err")"; exit 1; }
gen --no-lookahead > "$work/r0.txt" 2> "$work/r0.err" && cmp -s "$work/ref.txt" "$work/r0.txt" &&
    ok "--no-lookahead with resident experts: no effect" || bad "--no-lookahead, resident: $(cat "$work/r0.err")"

figure() {  # figure ERRFILE FIELD -> the number before FIELD in generate's cache line
    sed -n "s/.*host expert cache: .* \([0-9][0-9]*\) $2.*/\1/p" "$1"
}
for budget in 600K 64M; do
    # the four ways to ask: (env, flag, want)
    for way in "default||on" "1||on" "0||off" "|--no-lookahead|off" "1|--no-lookahead|off"; do
        env_v=${way%%|*}; rest=${way#*|}; flag=${rest%%|*}; want=${rest#*|}
        tag="$budget env='$env_v' flag='$flag'"
        if [ "$env_v" = default ]; then
            gen --host-cache-bytes "$budget" > "$work/p.txt" 2> "$work/p.err"; rc=$?
        elif [ -n "$flag" ]; then
            V4_LOOKAHEAD=$env_v gen --host-cache-bytes "$budget" "$flag" > "$work/p.txt" 2> "$work/p.err"; rc=$?
        else
            V4_LOOKAHEAD=$env_v gen --host-cache-bytes "$budget" > "$work/p.txt" 2> "$work/p.err"; rc=$?
        fi
        if [ "$rc" -ne 0 ]; then bad "$tag: exit $rc: $(cat "$work/p.err")"; continue; fi
        cmp -s "$work/ref.txt" "$work/p.txt" || bad "$tag: ids differ from resident: $(cat "$work/p.txt")"
        line=$(grep "host expert cache:" "$work/p.err" || true)
        n=$(sed -n "s/.*router look-ahead $want: \([0-9][0-9]*\) experts prefetched.*/\1/p" <<< "$line")
        if [ -z "$n" ]; then bad "$tag: no 'router look-ahead $want' figure: $line"; continue; fi
        if { [ "$want" = on ] && [ "$n" -gt 0 ]; } || { [ "$want" = off ] && [ "$n" -eq 0 ]; }; then
            ok "$tag: same ids, look-ahead $want ($n experts prefetched)"
        else
            bad "$tag: look-ahead $want but $n experts prefetched"
        fi
        cp "$work/p.err" "$work/$budget.$want.err"
    done
    m_on=$(figure "$work/$budget.on.err" misses); m_off=$(figure "$work/$budget.off.err" misses)
    echo "  $budget: demand misses $m_on with the look-ahead, $m_off without"
    if [ "$budget" = 64M ]; then
        [ -n "$m_on" ] && [ -n "$m_off" ] && [ "$m_on" -lt "$m_off" ] &&
            ok "every expert fits: fewer demand misses with the look-ahead ($m_off -> $m_on)" ||
            bad "every expert fits: misses on '$m_on', off '$m_off'"
    fi
done

# logits: paged with the look-ahead off = resident, byte for byte
"$bin" logits --model "$G" --tokens "$work/ids.json" --out "$work/ref.bin" 2> /dev/null
"$bin" logits --model "$G" --tokens "$work/ids.json" --out "$work/p.bin" --host-cache-bytes 600K --no-lookahead \
    2> "$work/l.err" && cmp -s "$work/ref.bin" "$work/p.bin" && ok "logits --no-lookahead, paged: resident bytes" ||
    bad "logits --no-lookahead: $(cat "$work/l.err")"

# an invalid V4_LOOKAHEAD: one error line naming it
for v in 2 yes -1; do
    out=$(V4_LOOKAHEAD=$v gen --host-cache-bytes 600K 2>&1 >/dev/null); rc=$?
    [ "$rc" -eq 1 ] && grep -q "V4_LOOKAHEAD: '$v' is not 0 or 1" <<< "$out" && [ "$(wc -l <<< "$out")" -eq 1 ] &&
        ok "generate, V4_LOOKAHEAD=$v: refused" || bad "generate, V4_LOOKAHEAD=$v: exit $rc: $out"
done
out=$("$bin" numerics-check --model "$G" --no-lookahead 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "no-lookahead does not apply" <<< "$out" && ok "numerics-check refuses --no-lookahead" ||
    bad "numerics-check --no-lookahead: exit $rc: $out"

# batch: the runner of the serving core (a synthetic tiny model: batch needs a tokenizer)
"$bin" mkmodel --out "$work/m" --preset tiny --seed 5 --no-sync > /dev/null 2>&1 || { bad "mkmodel"; exit 1; }
cat > "$work/in.jsonl" <<'EOF'
{"id": "a", "input_ids": [0, 2, 10, 3, 5, 77, 901, 33, 12, 400], "max_tokens": 10, "temperature": 0}
{"id": "b", "input_ids": [4011, 4000, 46, 1557, 701], "max_tokens": 8, "temperature": 0}
{"id": "c", "prompt": "Tell me about message queues.", "max_tokens": 8, "temperature": 0}
EOF
for budget in 400K 64M; do
    for way in on off env0; do
        case $way in
            on) "$bin" batch "$work/in.jsonl" -o "$work/b.$budget.$way.jsonl" --model "$work/m" --host-cache-bytes "$budget" \
                    2> "$work/b.$budget.$way.err"; rc=$? ;;
            off) "$bin" batch "$work/in.jsonl" -o "$work/b.$budget.$way.jsonl" --model "$work/m" --host-cache-bytes "$budget" \
                    --no-lookahead 2> "$work/b.$budget.$way.err"; rc=$? ;;
            env0) V4_LOOKAHEAD=0 "$bin" batch "$work/in.jsonl" -o "$work/b.$budget.$way.jsonl" --model "$work/m" \
                    --host-cache-bytes "$budget" 2> "$work/b.$budget.$way.err"; rc=$? ;;
        esac
        [ "$rc" -eq 0 ] || bad "batch $budget $way: exit $rc: $(cat "$work/b.$budget.$way.err")"
    done
    grep -q "router look-ahead on" "$work/b.$budget.on.err" && grep -q "router look-ahead off" "$work/b.$budget.off.err" &&
        grep -q "router look-ahead off" "$work/b.$budget.env0.err" && ok "batch $budget: the start line says on / off / off" ||
        bad "batch $budget: start lines: $(grep -h 'lines to run' "$work"/b.$budget.*.err)"
    if res=$($py - "$work/b.$budget.on.jsonl" "$work/b.$budget.off.jsonl" "$work/b.$budget.env0.jsonl" <<'EOF'
import json, sys
runs = []
for p in sys.argv[1:]:
    recs = {r["id"]: r for r in map(json.loads, open(p, encoding="utf-8"))}
    assert len(recs) == 3 and all(r["status"] == "succeeded" for r in recs.values()), p
    runs.append(recs)
on, off, env0 = runs
for i in on:
    assert on[i]["output"]["token_ids"] == off[i]["output"]["token_ids"] == env0[i]["output"]["token_ids"], i
    assert off[i]["experts"] == env0[i]["experts"], (i, off[i]["experts"], env0[i]["experts"])
    for r in (on[i], off[i]):
        x = r["experts"]
        assert x["activations"] == x["hits"] + x["misses"] + x["prefetched"], x
def tot(run, k): return sum(r["experts"][k] for r in run.values())
assert tot(on, "prefetched") > tot(off, "prefetched"), (tot(on, "prefetched"), tot(off, "prefetched"))
assert tot(on, "misses") < tot(off, "misses"), (tot(on, "misses"), tot(off, "misses"))
print("misses %d -> %d, prefetched %d -> %d, bytes loaded %d -> %d (off -> on)" % (
    tot(off, "misses"), tot(on, "misses"), tot(off, "prefetched"), tot(on, "prefetched"),
    tot(off, "bytes_loaded"), tot(on, "bytes_loaded")))
EOF
    ); then ok "batch $budget: same tokens on and off; $res"
    else bad "batch $budget: results on / off: $res"
    fi
done

# the worker: V4_LOOKAHEAD reaches its runner (the experts line of the start-up log, from
# the ctx); no broker needed: the model opens before the first connection attempt
worker_line() {  # worker_line LOG [ENV...] -> the "model ... opened" line
    local log=$1; shift
    env "$@" V4_AMQP_URL=amqp://guest:guest@127.0.0.1:1/ V4_REDIS_URL=off V4_MODEL_DIR="$work/m" \
        V4_HOST_CACHE_BYTES=400K V4_HTTP_PORT=0 V4_WARMUP_TOKENS=0 V4_LOG_FORMAT=text "$bin" worker > "$log" 2>&1 &
    wpid=$!
    for _ in $(seq 1 300); do grep -q "opened in" "$log" && break; sleep 0.1; done
    kill -TERM "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null; wpid=""
    grep "opened in" "$log"
}
l=$(worker_line "$work/w1.log") && grep -q "router look-ahead on" <<< "$l" && ok "worker, V4_LOOKAHEAD unset: on" ||
    bad "worker, V4_LOOKAHEAD unset: $(cat "$work/w1.log")"
l=$(worker_line "$work/w2.log" V4_LOOKAHEAD=0) && grep -q "router look-ahead off" <<< "$l" &&
    ok "worker, V4_LOOKAHEAD=0: off" || bad "worker, V4_LOOKAHEAD=0: $(cat "$work/w2.log")"
printf 'V4_LOOKAHEAD=0\n' > "$work/w.conf"
l=$(worker_line "$work/w3.log" V4_CONFIG_FILE="$work/w.conf") && grep -q "router look-ahead off" <<< "$l" &&
    ok "worker, V4_LOOKAHEAD=0 in the config file: off" || bad "worker, config file: $(cat "$work/w3.log")"
for v in 2 yes; do
    out=$(V4_LOOKAHEAD=$v V4_MODEL_DIR="$work/m" timeout 60 "$bin" worker 2>&1); rc=$?
    [ "$rc" -eq 2 ] && grep -q "V4_LOOKAHEAD: '$v' is not an integer in \[0, 1\]" <<< "$out" &&
        [ "$(wc -l <<< "$out")" -eq 1 ] && ok "worker, V4_LOOKAHEAD=$v: refused at start (exit 2)" ||
        bad "worker, V4_LOOKAHEAD=$v: exit $rc: $out"
done
exit $fail
