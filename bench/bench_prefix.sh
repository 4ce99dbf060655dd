#!/usr/bin/env bash
# bench_prefix.sh - the prefix cache's benchmark (docs/prefix-cache.md, docs/benchmarks.md):
#
#   prefill  `v4fleet batch` (one task at a time) on MODEL (default models/bench/small:
#            `v4fleet mkmodel --out models/bench/small --preset small --seed 1`): TASKS
#            tasks sharing a PREFIX-token prefix plus TAIL tokens each (random ids,
#            max_tokens 1), RUNS times with the cache and once without.  Figures from the
#            results' timing.prefill_ms: the total prefill of the TASKS tasks against one
#            task's (the first, a miss; bound <= 1.5x), and time to first token (prefill +
#            the first sample) of a hit against a miss (bound <= 15%).  Medians of RUNS.
#   memory   the tiny model, MEM_TASKS prompts of 1,024 distinct tokens (4 blocks each:
#            far more than the budget), cache budget MEM_BUDGET: the process's RssAnon
#            sampled every 50 ms from outside (/proc), peak with the cache minus peak
#            without, against the budget; the run's evictions.
#
# Usage: bench/bench_prefix.sh [--model DIR] [--tasks 8] [--prefix 2048] [--tail 64]
#            [--runs 3] [--mem-tasks 120] [--mem-budget 16M] [--threads N] [--skip-prefill]
# Needs build/v4fleet (or V4_BIN).  Prints one table.  Not part of the test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${V4_BIN:-$ROOT/build/v4fleet}"
MODEL="$ROOT/models/bench/small" TASKS=8 PREFIX=2048 TAIL=64 RUNS=3 MEM_TASKS=120 MEM_BUDGET=16M THREADS=""
SKIP_PREFILL=0
while [ $# -gt 0 ]; do
    case "$1" in
        --model) MODEL="$2"; shift 2 ;;
        --tasks) TASKS="$2"; shift 2 ;;
        --prefix) PREFIX="$2"; shift 2 ;;
        --tail) TAIL="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --mem-tasks) MEM_TASKS="$2"; shift 2 ;;
        --mem-budget) MEM_BUDGET="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --skip-prefill) SKIP_PREFILL=1; shift ;;
        *) echo "usage: $0 [--model DIR] [--tasks N] [--prefix N] [--tail N] [--runs N] [--mem-tasks N] [--mem-budget B] [--threads N] [--skip-prefill]" >&2; exit 2 ;;
    esac
done
WORK="$(mktemp -d /tmp/v4prefix.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
TH=(); [ -z "$THREADS" ] || TH=(--threads "$THREADS")
CPU="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1 | cut -c1-40)"
NCPU="$(nproc)"

# tasks: NAME N PREFIX TAIL SEED -> $WORK/NAME.jsonl (input_ids, max_tokens 1)
mk() {
    /usr/bin/python3 - "$WORK/$1.jsonl" "$2" "$3" "$4" "$5" <<'EOF'
import json, random, sys
out, n, pre, tail, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
r = random.Random(seed)
p = [r.randrange(10, 1000) for _ in range(pre)]
with open(out, "w") as f:
    for i in range(n):
        ids = (p if pre else [r.randrange(10, 1000) for _ in range(1024)]) + [r.randrange(10, 1000) for _ in range(tail)]
        f.write(json.dumps({"id": "t%d" % i, "input_ids": ids, "max_tokens": 1, "temperature": 0}) + "\n")
EOF
}

# figures of one batch output: total prefill, the first task's, median hit prefill, ttft
figs() {
    /usr/bin/python3 - "$1" <<'EOF'
import json, statistics, sys
rs = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: int(r["id"][1:]))
pf = [r["timing"]["prefill_ms"] for r in rs]
ttft = [r["timing"]["prefill_ms"] + r["timing"]["decode_ms"] for r in rs]
cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in rs]
hits = [t for t, c in zip(ttft[1:], cached[1:]) if c > 0]
print("%.1f %.1f %.1f %.1f %d %d" % (sum(pf), pf[0], statistics.median(hits) if hits else 0, ttft[0],
                                     len(hits), cached[-1]))
EOF
}

med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

rows=()
if [ "$SKIP_PREFILL" = 0 ]; then
    [ -f "$MODEL/config.json" ] || { echo "no model at $MODEL (v4fleet mkmodel --out $MODEL --preset small --seed 1)" >&2; exit 1; }
    mk pre "$TASKS" "$PREFIX" "$TAIL" 1
    ratio=(); ttr=(); tot=(); one=(); hit=(); miss=()
    for r in $(seq 1 "$RUNS"); do
        rm -f "$WORK/on.jsonl" "$WORK/on.jsonl.summary.json"
        "$BIN" batch "$WORK/pre.jsonl" -o "$WORK/on.jsonl" --model "$MODEL" --model-name bench "${TH[@]}" \
            2> "$WORK/on.log" || { tail -5 "$WORK/on.log" >&2; exit 1; }
        read -r t o h m nh c <<< "$(figs "$WORK/on.jsonl")"
        echo "run $r with the cache: total prefill $t ms, first task $o ms, hit ttft $h ms ($nh hits, cached $c)" >&2
        tot+=("$t"); one+=("$o"); hit+=("$h"); miss+=("$m")
        ratio+=("$(awk -v a="$t" -v b="$o" 'BEGIN {printf "%.3f", a / b}')")
        ttr+=("$(awk -v a="$h" -v b="$m" 'BEGIN {printf "%.4f", a / b}')")
    done
    "$BIN" batch "$WORK/pre.jsonl" -o "$WORK/off.jsonl" --model "$MODEL" --model-name bench "${TH[@]}" \
        --no-prefix-cache 2> "$WORK/off.log" || { tail -5 "$WORK/off.log" >&2; exit 1; }
    read -r t0 o0 _ m0 _ _ <<< "$(figs "$WORK/off.jsonl")"
    echo "without the cache: total prefill $t0 ms, first task $o0 ms" >&2
    R="$(med "${ratio[@]}")" T="$(med "${ttr[@]}")"
    rows+=("| $CPU ($NCPU cpu) | $(basename "$MODEL"), $TASKS x ($PREFIX shared + $TAIL) | cache on (median of $RUNS) | total prefill $(med "${tot[@]}") ms = ${R}x one task's ($(med "${one[@]}") ms) | <= 1.5x: $(awk -v r="$R" 'BEGIN {print (r <= 1.5 ? "met" : "MISSED")}') |")
    rows+=("| $CPU ($NCPU cpu) | same | cache on (median of $RUNS) | ttft hit $(med "${hit[@]}") ms = $(awk -v t="$T" 'BEGIN {printf "%.1f", 100 * t}')% of a miss ($(med "${miss[@]}") ms) | <= 15%: $(awk -v t="$T" 'BEGIN {print (t <= 0.15 ? "met" : "MISSED")}') |")
    rows+=("| $CPU ($NCPU cpu) | same | cache off (1 run) | total prefill $t0 ms = $(awk -v a="$t0" -v b="$o0" 'BEGIN {printf "%.2f", a / b}')x one task's ($o0 ms) | (today's figure) |")
fi

# memory: RssAnon peak from outside, with and without the cache
peak_run() {   # OUT [flags...]: runs batch, prints the peak RssAnon (KiB)
    local out=$1; shift
    rm -f "$WORK/$out.jsonl" "$WORK/$out.jsonl.summary.json"
    "$BIN" batch "$WORK/mem.jsonl" -o "$WORK/$out.jsonl" --model "$WORK/tiny" --model-name tiny "${TH[@]}" "$@" \
        2> "$WORK/$out.log" &
    local pid=$! peak=0 v
    while kill -0 "$pid" 2>/dev/null; do
        v="$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)"
        [ "${v:-0}" -le "$peak" ] || peak=$v
        sleep 0.05
    done
    wait "$pid" || { tail -3 "$WORK/$out.log" >&2; exit 1; }
    echo "$peak"
}
"$BIN" mkmodel --out "$WORK/tiny" --preset tiny --seed 1 --no-sync > /dev/null 2>&1
mk mem "$MEM_TASKS" 0 0 2
pon="$(peak_run mon --prefix-cache-bytes "$MEM_BUDGET")"
poff="$(peak_run moff --no-prefix-cache)"
bud="$(/usr/bin/python3 -c "
import sys; sys.path.insert(0, '$ROOT/scripts')
s = '$MEM_BUDGET'; m = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
print(int(float(s[:-1]) * m[s[-1].upper()]) if s[-1].upper() in m else int(s))")"
line="$(grep "prefix cache:" "$WORK/mon.log" | tail -1 | sed 's/.*prefix cache: //')"
delta=$(( (pon - poff) * 1024 ))
rows+=("| $CPU ($NCPU cpu) | tiny, $MEM_TASKS prompts x 4 blocks | budget $MEM_BUDGET | RssAnon peak $(awk -v k="$pon" 'BEGIN {printf "%.1f", k / 1024}') MiB on, $(awk -v k="$poff" 'BEGIN {printf "%.1f", k / 1024}') MiB off: +$(awk -v b="$delta" 'BEGIN {printf "%.2f", b / 1048576}') MiB ($line) | <= budget: $([ "$delta" -le "$bud" ] && echo met || echo MISSED) |")

echo
echo "| machine | config | mode | figures | bound |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
