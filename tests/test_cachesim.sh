#!/usr/bin/env bash
# test_cachesim.sh - CLI contract of `v4fleet cachesim` (worker/tools/cmd_cachesim.c).
#
# Env (set by ctest): V4_BIN = the v4fleet binary, V4_TMP = scratch dir.
# Checks: --help explains the step-pinning rule; a cyclic scan of k+1 experts with k
# slots gives LRU/SLRU/LFRU 0 hits and Belady > 0 (exact count); the textbook trace
# 1 2 3 4 1 2 5 1 2 3 4 5 with 3 slots (MIN 7 faults, LRU 10); a random multi-layer
# trace with blank-line steps against an independent Python model of LRU and MIN
# under the same pinning rule; budget smaller than a step's working set -> exit 1 with
# a message; bad arguments -> 2, malformed trace -> 1; and a real trace from
# `v4fleet logits --trace` on the tiny model (JSON auto-detected, every token's 16
# experts counted, Belady >= every policy, 4 rows).
# Exit 77 = skipped.
set -u
BIN=${V4_BIN:-}
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "SKIP: V4_BIN not set"; exit 77; }
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
TMPROOT=${V4_TMP:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$TMPROOT/cachesim_test.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

fail=0
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
# field POLICY COLUMN FILE: column 2 = hit rate, 3 hits, 4 misses, 5 evictions, 6 bytes/token
field() { awk -v p="$1" -v c="$2" '$1 == p { v = $c; sub("%", "", v); print v }' "$3"; }

"$BIN" cachesim --help >"$WORK/help" 2>&1
check "--help exits 0 and explains the pinning rule" grep -q "pinned together" "$WORK/help"

# 1. cyclic scan: 5 experts, 4 slots, 50 rounds, one token per line
for r in $(seq 50); do for k in 0 1 2 3 4; do echo "0 $k"; done; done >"$WORK/cyc.txt"
"$BIN" cachesim --trace "$WORK/cyc.txt" --budget-bytes $((4 * 4096 + 4095)) --block-bytes 4096 >"$WORK/cyc.out" 2>&1
check "cyclic: exit 0" [ $? -eq 0 ]
check "cyclic: 4 slots" grep -q "= 4 slots" "$WORK/cyc.out"
for p in lru slru lfru; do
    check "cyclic: $p has 0 hits" [ "$(field $p 3 "$WORK/cyc.out")" = 0 ]
done
# MIN: 4 cold misses, then (keeping the 3 keys needed next) one miss every 4 accesses:
# 4 + ceil(246 / 4) = 66 misses, 184 hits of 250
check "cyclic: belady 184 hits" [ "$(field belady 3 "$WORK/cyc.out")" = 184 ]
check "cyclic: lru reads one block per token" [ "$(field lru 6 "$WORK/cyc.out")" = 4096 ]

# 2. textbook trace with 3 slots
for k in 1 2 3 4 1 2 5 1 2 3 4 5; do echo "0 $k"; done >"$WORK/book.txt"
"$BIN" cachesim --trace "$WORK/book.txt" --budget-bytes $((3 * 4096)) --block-bytes 100 >"$WORK/book.out" 2>&1
check "textbook: belady 7 misses" [ "$(field belady 4 "$WORK/book.out")" = 7 ]
check "textbook: lru 10 misses" [ "$(field lru 4 "$WORK/book.out")" = 10 ]
check "textbook: block rounded up to 4096" grep -q "block 4096 bytes" "$WORK/book.out"

# 3. random trace vs a Python model (LRU and MIN with step pinning)
"$PY" - "$WORK/rand.txt" "$WORK/rand.want" <<'EOF'
import random, sys
random.seed(11)
steps = []
for s in range(300):
    n = random.randint(2, 6)
    keys = random.sample([(l, e) for l in range(3) for e in range(9)], n)
    if random.random() < 0.5:   # some locality
        keys = random.sample([(0, e) for e in range(4)], 2) + [k for k in keys if k[0] != 0][:3]
    steps.append(keys)
with open(sys.argv[1], "w") as f:
    for st in steps:
        for l, e in st:
            f.write(f"{l} {e}\n")
        f.write("\n")
acc = [(s, k) for s, st in enumerate(steps) for k in st]
SLOTS = 8
def lru():
    res, stamp, t, hits = set(), {}, 0, 0
    for s, st in enumerate(steps):
        for k in st:
            if k in res: hits += 1
            else:
                if len(res) == SLOTS:
                    v = min((x for x in res if x not in st), key=lambda x: stamp[x])
                    res.remove(v)
                res.add(k)
        for k in st:
            t += 1; stamp[k] = t
    return hits
def belady():
    res, hits = set(), 0
    for i, (s, k) in enumerate(acc):
        if k in res: hits += 1; continue
        if len(res) == SLOTS:
            def nxt(x):
                for j in range(i + 1, len(acc)):
                    if acc[j][1] == x: return j
                return 10**9
            v = max((x for x in res if x not in steps[s]), key=nxt)
            res.remove(v)
        res.add(k)
    return hits
def nextpol():
    # NEXT (kernels/xpolicy.h): the replay touches/inserts each access, the step's keys
    # pinned; victim = max expected next use E, ties: larger d, lower count, older time
    L, E_ = 3, 9
    period = 16 * L * E_
    res, cnt, vis, tim = set(), {}, [0] * L, {}
    st = {"cur": -1, "since": 0, "clock": 0}
    def note(k):
        l = k[0]
        if l != st["cur"]:
            vis[l] += 1
        st["cur"] = l
    def count(k):
        cnt[k] = cnt.get(k, 0) + 1
        st["since"] += 1
        if st["since"] >= period:
            st["since"] = 0
            for x in cnt: cnt[x] //= 2
            for l in range(L): vis[l] //= 2
    def score(x):
        l, c = x[0], cnt.get(x, 0)
        d = (l - st["cur"] + L) % L if st["cur"] >= 0 else L
        if d == 0: d = L
        e = 1e300 if c == 0 else d + L * (vis[l] / c - 1.0)
        if e < d: e = d
        return (-e, -d, c, tim[x])
    hits = 0
    for s, stp in enumerate(steps):
        for k in stp:
            if k in res:
                hits += 1; note(k); count(k)
            else:
                note(k)
                if len(res) == SLOTS:
                    v = min((x for x in res if x not in stp), key=score)
                    res.remove(v)
                res.add(k); count(k)
        for k in stp:
            st["clock"] += 1; tim[k] = st["clock"]
    return hits
open(sys.argv[2], "w").write(f"{lru()} {belady()} {nextpol()}\n")
EOF
read -r want_lru want_min want_next <"$WORK/rand.want"
"$BIN" cachesim --trace "$WORK/rand.txt" --budget-bytes $((8 * 8192)) --block-bytes 8192 >"$WORK/rand.out" 2>&1
check "random: 300 tokens (blank-line steps)" grep -q "300 tokens" "$WORK/rand.out"
check "random: lru hits = Python model ($want_lru)" [ "$(field lru 3 "$WORK/rand.out")" = "$want_lru" ]
check "random: belady hits = Python model ($want_min)" [ "$(field belady 3 "$WORK/rand.out")" = "$want_min" ]
check "random: next hits = Python model ($want_next)" [ "$(field next 3 "$WORK/rand.out")" = "$want_next" ]
"$BIN" cachesim --trace "$WORK/rand.txt" --budget-bytes $((8 * 8192)) --block-bytes 8192 --policy slru >"$WORK/rand1.out" 2>&1
check "--policy slru: one policy row + belady" [ "$(grep -cE '^(lru|slru|lfru|next|belady) ' "$WORK/rand1.out")" = 2 ]

# 4. errors
"$BIN" cachesim --trace "$WORK/rand.txt" --budget-bytes $((5 * 8192)) --block-bytes 8192 >"$WORK/small.out" 2>&1
rc=$?
check "budget below a step's working set: exit 1" [ $rc -eq 1 ]
check "budget below a step's working set: says which step" grep -q "needs 6 distinct experts" "$WORK/small.out"
"$BIN" cachesim --trace "$WORK/rand.txt" --budget-bytes 10 >/dev/null 2>&1
check "no block size: exit 2" [ $? -eq 2 ]
"$BIN" cachesim --trace "$WORK/rand.txt" --budget-bytes 99999 --block-bytes 8 --policy fifo >/dev/null 2>&1
check "unknown policy: exit 2" [ $? -eq 2 ]
printf '0 1\nzero one\n' >"$WORK/bad.txt"
"$BIN" cachesim --trace "$WORK/bad.txt" --budget-bytes 99999 --block-bytes 8 >"$WORK/bad.out" 2>&1
check "malformed trace: exit 1 naming the line" sh -c "[ $? -eq 1 ] && grep -q 'line 2' '$WORK/bad.out'"

# 5. synthetic traces at the V4-Flash shape (43 x 256, top-6): deterministic, the summary
# table, and at batch 256 (a step uses most experts of every layer: LRU's cyclic-scan
# case) NEXT far below LRU and no better than Belady; the best fixed set shown
"$BIN" cachesim --synth flash --budget-pct 85 --batch 1,256 --steps 60 >"$WORK/syn.out" 2>&1
check "synth: exit 0" [ $? -eq 0 ]
"$BIN" cachesim --synth flash --budget-pct 85 --batch 1,256 --steps 60 >"$WORK/syn2.out" 2>&1
check "synth: the same trace twice (deterministic)" cmp -s "$WORK/syn.out" "$WORK/syn2.out"
check "synth: 9356 slots = 85% of 11008" grep -q "9356 slots (85.0%)" "$WORK/syn.out"
check "synth: summary row for batch 256" grep -qE '^\| 256 \| [0-9]+ \| [0-9.]+x \| [0-9.]+x' "$WORK/syn.out"
b256=$(awk '/batch 256,/ {on = 1} on && $1 == "belady" { print $4; exit }' "$WORK/syn.out")
l256=$(awk '/batch 256,/ {on = 1} on && $1 == "lru" { print $4; exit }' "$WORK/syn.out")
n256=$(awk '/batch 256,/ {on = 1} on && $1 == "next" { print $4; exit }' "$WORK/syn.out")
check "synth batch 256: belady ($b256) <= next ($n256), next < lru / 2 ($l256)" \
    [ "${b256:-0}" -gt 0 -a "${b256:-0}" -le "${n256:-0}" -a $((2 * ${n256:-999999999})) -lt "${l256:-0}" ]
"$BIN" cachesim --synth nosuch --budget-pct 85 >/dev/null 2>&1
check "synth: unknown preset: exit 2" [ $? -eq 2 ]
"$BIN" cachesim --synth flash --budget-pct 85 --batch 0 >/dev/null 2>&1
check "synth: bad --batch: exit 2" [ $? -eq 2 ]
"$BIN" cachesim --trace "$WORK/rand.txt" --budget-pct 85 --block-bytes 8 >/dev/null 2>&1
check "--budget-pct without --synth: exit 2" [ $? -eq 2 ]

# 5b. --popularity: the fleet's counts instead of Zipf (tiny shape: 4 layers x 16, top-4)
# Only experts 0..3 counted on every layer: each token draws exactly those, so every
# policy and MIN miss just the 16 compulsory first uses.
"$PY" -c '
for l in range(4):
    for e in range(16):
        print(l, e, 100 if e < 4 else 0)' >"$WORK/pop4.txt"
"$BIN" cachesim --synth tiny --popularity "$WORK/pop4.txt" --budget-pct 50 --batch 4 --steps 200 >"$WORK/pop4.out" 2>&1
check "popularity: exit 0" [ $? -eq 0 ]
check "popularity: counts read" grep -q "4 of 4 layers drawn from their counts, 0 uniform" "$WORK/pop4.out"
check "popularity: 16 distinct experts" grep -q "16 distinct experts of 64" "$WORK/pop4.out"
for p in lru next belady; do
    check "popularity: $p misses only the 16 first uses" [ "$(field $p 4 "$WORK/pop4.out")" = 16 ]
done
check "popularity: named in the summary" grep -q "top-4, popularity $WORK/pop4.txt, 32 slots" "$WORK/pop4.out"
# a skewed layer beside one with too few counted experts (uniform): more misses than above
"$PY" -c '
for l in range(4):
    for e in range(16):
        print(l, e, (1000 >> e) if l != 2 else (5 if e < 2 else 0))' >"$WORK/pop_skew.txt"
"$BIN" cachesim --synth tiny --popularity "$WORK/pop_skew.txt" --budget-pct 50 --batch 1 --steps 500 >"$WORK/pops.out" 2>&1
check "popularity: a layer with 2 counted experts is uniform" grep -q "3 of 4 layers drawn from their counts, 1 uniform" "$WORK/pops.out"
check "popularity: skewed + uniform layers miss more than 16" [ "$(field belady 4 "$WORK/pops.out")" -gt 16 ]
printf '0 0 5\n0 0 6\n' >"$WORK/pop_dup.txt"
"$BIN" cachesim --synth tiny --popularity "$WORK/pop_dup.txt" --budget-pct 50 >"$WORK/popd.out" 2>&1
check "popularity: a pair listed twice: exit 1" [ $? -eq 1 ]
check "popularity: the line is named" grep -q "pop_dup.txt:2: layer 0 expert 0 listed twice" "$WORK/popd.out"
printf '4 0 5\n' >"$WORK/pop_out.txt"
"$BIN" cachesim --synth tiny --popularity "$WORK/pop_out.txt" --budget-pct 50 >"$WORK/popo.out" 2>&1
check "popularity: a layer outside the shape: exit 1" [ $? -eq 1 ]
check "popularity: outside named" grep -q "pop_out.txt:1: layer 4 expert 0 outside the model's 4 layers x 16 experts" "$WORK/popo.out"
"$BIN" cachesim --synth tiny --popularity "$WORK/pop4.txt" --zipf 1 --budget-pct 50 >/dev/null 2>&1
check "popularity with --zipf: exit 2" [ $? -eq 2 ]
"$BIN" cachesim --trace "$WORK/rand.txt" --popularity "$WORK/pop4.txt" --budget-bytes 100 --block-bytes 8 >/dev/null 2>&1
check "popularity without --synth: exit 2" [ $? -eq 2 ]

# 6. a real trace from the tiny model
MODEL="$WORK/tiny"
if "$BIN" mkmodel --out "$MODEL" --preset tiny --no-sync >/dev/null 2>&1; then
    "$PY" -c 'import random; random.seed(3); print([random.randrange(2, 4096) for _ in range(96)])' >"$WORK/tok.json"
    "$BIN" logits --model "$MODEL" --tokens "$WORK/tok.json" --out "$WORK/l.bin" --trace "$WORK/tr.jsonl" --threads 2 \
        >/dev/null 2>&1
    check "logits --trace on the tiny model" [ -s "$WORK/tr.jsonl" ]
    blk=$("$BIN" cachesim --trace "$WORK/tr.jsonl" --model "$MODEL" --budget-bytes 1000000000 2>/dev/null |
          sed -n 's/^block \([0-9]*\) bytes.*/\1/p')
    check "tiny trace: block size from the model ($blk)" [ "${blk:-0}" -gt 0 ]
    # 50% of the 64 experts (4 layers x 16)
    "$BIN" cachesim --trace "$WORK/tr.jsonl" --model "$MODEL" --budget-bytes $((32 * ${blk:-1})) >"$WORK/tiny.out" 2>&1
    check "tiny trace: exit 0" [ $? -eq 0 ]
    cat "$WORK/tiny.out"
    check "tiny trace: JSON detected, 96 tokens x 16 accesses" grep -q "JSON, 96 tokens, 1536 expert accesses" "$WORK/tiny.out"
    check "tiny trace: 5 rows" [ "$(grep -cE '^(lru|slru|lfru|next|belady) ' "$WORK/tiny.out")" = 5 ]
    bh=$(field belady 3 "$WORK/tiny.out")
    for p in lru slru lfru next; do
        h=$(field $p 3 "$WORK/tiny.out")
        check "tiny trace: belady ($bh) >= $p ($h) > 0" [ "$bh" -ge "$h" -a "$h" -gt 0 ]
    done
else
    echo "FAIL mkmodel --preset tiny"; fail=1
fi
exit $fail
