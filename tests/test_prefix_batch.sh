#!/usr/bin/env bash
# test_prefix_batch.sh - the prefix cache end to end through `v4fleet batch` on the tiny
# synthetic model (docs/prefix-cache.md), with blocks of 128 positions (V4_PREFIX_BLOCK=128,
# the tiny model's smallest: its ratios are 4 and 128) to keep the prompts short:
#  - exactness: every result (token ids, text, finish_reason, logprobs with top_logprobs)
#    is identical with and without the cache, for prompts that end inside a block,
#    exactly at a block end, one past it, past the window (32) and past HCA blocks (128),
#    greedy and seeded sampling, n = 2 choices, chat prompts with a long shared system
#    message; in exact and in fast numerics; with the serial executor and --concurrency 3
#    (chunked prefill cut at block ends);
#  - cached_tokens (usage.prompt_tokens_details, validated against the result schema):
#    serial, the first prompt of a prefix 0, each later one the whole blocks it shares
#    with what was prefilled before, its last position excluded: floor(min(shared,
#    n - 1) / 128) * 128; a prompt shorter than a block 0; the run's log line counts them;
#  - off: --no-prefix-cache and V4_PREFIX_CACHE=0 (every cached_tokens 0, "prefix cache
#    off" in the log);
#  - a tight budget (--prefix-cache-bytes of 3 blocks): evictions, same results;
#  - a summary with long instructions (--max-context 900: several chunks): its generations
#    after the first resume from system + instructions; the same summary without the cache;
#  - bad settings: exit 2 with the setting named; a budget below one block: exit 1.
set -u
bin=${V4_BIN:?V4_BIN not set}
py=/usr/bin/python3
schema="$(dirname "$0")/../config/result.schema.json"
work=$(mktemp -d "${V4_TMP:-/tmp}/prefix_batch.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)"; exit 1; }
"$bin" mkmodel --out "$work/m" --preset tiny --seed 7 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
M=(--model "$work/m" --model-name tiny)
export V4_PREFIX_BLOCK=128
# Under the sanitizers (~20x slower) the exact runs only (serial and --concurrency 3, the
# cached_tokens checks, the setting errors): the other variants add no memory paths that
# test_prefix_cache and these do not cover.
asan=0
if ldd "$bin" 2>/dev/null | grep -q libasan; then asan=1; echo "sanitizer build: exact runs only"; fi

# Lines and the cached_tokens each should get when run serially in file order (id ->
# expected), written beside the input.
$py - "$work/in.jsonl" "$work/expect.json" <<'EOF'
import json, random, sys
r = random.Random(3)
B = 128
pre = [r.randrange(10, 1000) for _ in range(350)]
other = [r.randrange(10, 1000) for _ in range(350)]
lines, prompts, expect = [], [], {}
def shared(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
def add(tid, ids, **kw):
    # cached: the whole blocks shared with an earlier prompt (all inserted while prefilled)
    best = max([shared(ids, p) for p in prompts] + [0])
    expect[tid] = min(best, len(ids) - 1) // B * B
    prompts.append(ids)
    lines.append(dict({"id": tid, "input_ids": ids, "max_tokens": 10}, **kw))
tail = lambda n: [r.randrange(10, 1000) for _ in range(n)]
add("first", pre + tail(20))                                 # 370: inserts blocks 0, 1
add("inside", pre[:300] + tail(17))                          # ends inside block 2
add("at-end", pre[:256])                                     # exactly 2 blocks: 1 restored
add("past-end", pre[:257], temperature=0.9, seed=11)         # one past: 2 restored
add("short", pre[:100])                                      # shorter than a block
add("lp", pre[:350] + tail(5), logprobs=True, top_logprobs=3)
add("n2", pre[:330], n=2, temperature=1.0, seed=5)
add("other", other[:300])                                    # another prefix: a miss
add("other2", other[:150] + tail(20), temperature=0.7, seed=2)
with open(sys.argv[1], "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
    # chat prompts sharing a long system message (the chat encoding's ids)
    system = " ".join("rule %d: answer briefly and precisely." % i for i in range(30))
    for i, q in enumerate(["What is a cat?", "What is a dog?", "Name a bird."]):
        f.write(json.dumps({"id": "chat%d" % i, "max_tokens": 8,
                            "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}]}) + "\n")
json.dump(expect, open(sys.argv[2], "w"))
EOF

run() {   # run NAME [batch flags...]: out in $work/NAME.jsonl, log in $work/NAME.log
    local name=$1; shift
    "$bin" batch "$work/in.jsonl" -o "$work/$name.jsonl" "${M[@]}" "$@" >"$work/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { bad "$name: batch exited $rc: $(tail -3 "$work/$name.log")"; return 1; }
}

# same answers: compare every line of $1 and $2 (by id) on what the caller sees
same() {
    $py - "$work/$1.jsonl" "$work/$2.jsonl" <<'EOF'
import json, sys
def load(p):
    out = {}
    for l in open(p):
        o = json.loads(l)
        out[o["id"]] = o
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if k not in b or a[k].get("output") != b[k].get("output") or a[k].get("error") != b[k].get("error")
       or a[k]["usage"]["prompt_tokens"] != b[k]["usage"]["prompt_tokens"]]
if len(a) != len(b) or bad:
    print("differ:", bad, len(a), len(b))
    sys.exit(1)
EOF
}

run off --no-prefix-cache || exit 1
modes="exact fast"; [ $asan = 0 ] || modes=exact
for mode in $modes; do
    run "on-$mode" --numerics "$mode" || continue
    [ "$mode" = exact ] || run "off-$mode" --numerics fast --no-prefix-cache || continue
    ref=off; [ "$mode" = exact ] || ref="off-$mode"
    if same "on-$mode" "$ref"; then ok "$mode: every result identical with and without the cache"; else bad "$mode: results differ with the cache"; fi
    [ "$mode" = exact ] || continue   # the executors' cut of chunks at block ends is the same in both modes
    run "conc-$mode" --numerics "$mode" --concurrency 3 || continue
    if same "conc-$mode" "$ref"; then ok "$mode --concurrency 3: identical"; else bad "$mode --concurrency 3: results differ"; fi
done

# cached_tokens (serial, exact), schema-valid records, the log line
if $py - "$work/on-exact.jsonl" "$work/expect.json" "$schema" <<'EOF'
import json, sys, jsonschema
exp = json.load(open(sys.argv[2]))
schema = json.load(open(sys.argv[3]))
got, errs = {}, []
for l in open(sys.argv[1]):
    o = json.loads(l)
    jsonschema.validate(o, schema)
    got[o["id"]] = o["usage"]["prompt_tokens_details"]["cached_tokens"]
for k, v in exp.items():
    if got.get(k) != v:
        errs.append("%s: cached %s, expected %s" % (k, got.get(k), v))
c = [got["chat%d" % i] for i in range(3)]
if not (c[0] == 0 and c[1] >= 256 and c[2] >= 256):   # the system message fills >= 2 blocks
    errs.append("chat prompts sharing a long system message: cached %s" % c)
if sum(1 for v in exp.values() if v > 0) < 5:
    errs.append("the test has too few hits to mean anything")
if errs:
    print("\n".join(errs))
    sys.exit(1)
print("cached:", got)
EOF
then ok "cached_tokens as expected per prompt (schema-valid records)"; else bad "cached_tokens wrong"; fi
if grep -qE "prefix cache: [0-9]+ of 12 prompts resumed from a cached prefix" "$work/on-exact.log"; then
    ok "the log line counts the hits"; else bad "no prefix cache line in the log: $(tail -2 "$work/on-exact.log")"; fi

# off: flag (the reference run "off") and environment
hows="flag env"; [ $asan = 0 ] || hows=flag
for how in $hows; do
    if [ $how = env ]; then V4_PREFIX_CACHE=0 run "off2" || continue; else cp "$work/off.log" "$work/off2.log"; cp "$work/off.jsonl" "$work/off2.jsonl"; fi
    if grep -q "prefix cache off" "$work/off2.log" &&
       $py -c 'import json,sys; sys.exit(any(json.loads(l)["usage"]["prompt_tokens_details"]["cached_tokens"] for l in open(sys.argv[1])))' "$work/off2.jsonl"; then
        ok "off by $how: no cached tokens"; else bad "off by $how: the cache still ran"; fi
    rm -f "$work/off2.jsonl" "$work/off2.jsonl.summary.json"
done

# a tight budget: ~3 blocks of the tiny model (one block's cost from the start-up line)
if [ $asan = 0 ]; then
each=$(grep -oE "blocks of 128 positions \([0-9.]+ MiB each" "$work/on-exact.log" | grep -oE "[0-9.]+ MiB" | grep -oE "[0-9.]+")
bytes=$($py -c "print(int(float('$each') * 1048576 * 3.2))")
run tight --prefix-cache-bytes "$bytes" || true
if grep -qE "evicted" "$work/tight.log" && ! grep -qE ", 0 evicted" "$work/tight.log" && same tight off; then
    ok "a budget of ~3 blocks ($bytes bytes): evictions, same results ($(grep -oE '[0-9]+ blocks held[^,]*, [0-9]+ evicted' "$work/tight.log"))"
else bad "tight budget: $(grep "prefix cache" "$work/tight.log" | tail -1)"; fi
fi

# a summary whose instructions fill whole blocks: every generation after the first resumes
# from system + instructions (map, combine and final passes), same summary without the cache
if [ $asan = 0 ]; then
$py - "$work/summ.jsonl" <<'EOF'
import json, sys
ins = " ".join("Rule %d: keep every number and every name exactly as written." % i for i in range(20))
doc = "\n\n".join("Paragraph %d. The river town of Alder had %d bridges and %d mills in year %d." % (i, i % 7, i % 5, 1800 + i)
                  for i in range(40))
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"id": "summ", "type": "summarize", "document": doc, "instructions": ins,
                        "max_summary_tokens": 12, "temperature": 0, "ignore_eos": True}) + "\n")
EOF
for c in on off; do
    fl=(); [ $c = on ] || fl=(--no-prefix-cache)
    "$bin" batch "$work/summ.jsonl" -o "$work/summ-$c.jsonl" "${M[@]}" --max-context 900 "${fl[@]}" \
        >"$work/summ-$c.log" 2>&1 || bad "summary ($c): exit $?: $(tail -2 "$work/summ-$c.log")"
done
if $py - "$work/summ-on.jsonl" "$work/summ-off.jsonl" <<'EOF'
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
assert a["status"] == "succeeded" and a["summary"]["chunks"] >= 3, a
gens = a["summary"]["chunks"] + a["summary"]["levels"] - 1
got = a["usage"]["prompt_tokens_details"]["cached_tokens"]
assert got >= 128 * (gens - 1), (got, gens)
assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
assert a["output"] == b["output"] and a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"], (a["output"], b["output"])
print("summary: %d chunks, %d levels, %d of %d prompt tokens cached" % (a["summary"]["chunks"], a["summary"]["levels"],
                                                                    got, a["usage"]["prompt_tokens"]))
EOF
then ok "a summary's generations share system + instructions: cached, same summary"; else bad "summary with long instructions"; fi
fi

# bad settings
"$bin" batch "$work/in.jsonl" -o "$work/x.jsonl" "${M[@]}" --prefix-cache-bytes lots >"$work/x.log" 2>&1
[ $? -eq 2 ] && grep -q -- "--prefix-cache-bytes" "$work/x.log" && ok "bad --prefix-cache-bytes: exit 2" || bad "bad --prefix-cache-bytes: $(cat "$work/x.log")"
V4_PREFIX_POLICY=mru "$bin" batch "$work/in.jsonl" -o "$work/x.jsonl" "${M[@]}" >"$work/x.log" 2>&1
[ $? -eq 2 ] && grep -q "V4_PREFIX_POLICY" "$work/x.log" && ok "bad V4_PREFIX_POLICY: exit 2" || bad "bad V4_PREFIX_POLICY: $(cat "$work/x.log")"
V4_PREFIX_CACHE=yes "$bin" batch "$work/in.jsonl" -o "$work/x.jsonl" "${M[@]}" >"$work/x.log" 2>&1
[ $? -eq 2 ] && grep -q "V4_PREFIX_CACHE" "$work/x.log" && ok "bad V4_PREFIX_CACHE: exit 2" || bad "bad V4_PREFIX_CACHE: $(cat "$work/x.log")"
"$bin" batch "$work/in.jsonl" -o "$work/x.jsonl" "${M[@]}" --prefix-cache-bytes 1000 >"$work/x.log" 2>&1
[ $? -eq 1 ] && grep -q "holds no block" "$work/x.log" && ok "a budget below one block: exit 1, said why" || bad "tiny budget: $(cat "$work/x.log")"
[ ! -s "$work/x.jsonl" ] || bad "a refused run wrote results"

[ $fail -eq 0 ] && echo "test_prefix_batch: all passed"
exit $fail
