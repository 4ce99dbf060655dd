#!/usr/bin/env bash
# test_synth_cli.sh - a model whose routed experts are synthetic (`mkmodel --no-experts`,
# cache/expert_synth.h): the trunk-only checkpoint (no expert tensors, the marker
# synthetic_experts.json) paged through --host-cache-bytes gives the logits file and
# the generated ids of the full checkpoint of the same seed with every expert resident
# (tiny: an evicting and a roomy budget; small, 1 layer: a budget below all experts;
# `batch` through the runner);
# the throttled source (V4_SYNTH_EXPERT_MBPS) gives the same ids and takes at least
# the time its rate implies for the loads that must happen (a lower bound only); the
# same model without paging, with --pack, or with a bad rate is a clear error (exit 1,
# one line naming the fix); inspect says the experts are synthetic; mkmodel --force of
# a full model over it removes the marker.  V4_SYNTH_SKIP_SMALL=1 leaves out small.
set -euo pipefail
: "${V4_BIN:?}" "${V4_TMP:?}"
WORK="$(mktemp -d "$V4_TMP/synth_cli.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
status=0
fail() { echo "FAIL: $*" >&2; status=1; }
M="$WORK/full" NX="$WORK/trunk"
"$V4_BIN" mkmodel --out "$M" --preset tiny --seed 9 --no-sync > /dev/null
"$V4_BIN" mkmodel --out "$NX" --preset tiny --seed 9 --no-sync --no-experts > "$WORK/mk.txt"
grep -q "routed experts not written" "$WORK/mk.txt" || fail "mkmodel --no-experts summary: $(cat "$WORK/mk.txt")"
[ -f "$NX/synthetic_experts.json" ] || fail "no marker"
grep -q '"seed": "9"' "$NX/synthetic_experts.json" || fail "marker: $(cat "$NX/synthetic_experts.json")"
! grep -q "ffn.experts" "$NX/model.safetensors.index.json" || fail "the index lists routed experts"
saved=$(( $(du -sb "$M" | cut -f1) - $(du -sb "$NX" | cut -f1) ))
[ "$saved" -ge $(( 64 * 52224 )) ] || fail "the trunk is only $saved bytes smaller (64 experts of 52224 bytes)"
python3 -c 'import json; print(json.dumps([(i * 37) % 900 + 3 for i in range(40)]))' > "$WORK/ids.json"
"$V4_BIN" logits --model "$M" --tokens "$WORK/ids.json" --out "$WORK/ref.bin" 2> /dev/null
"$V4_BIN" generate --model "$M" --prompt-ids "$WORK/ids.json" --max-tokens 12 --greedy > "$WORK/ref.txt" 2> /dev/null
for budget in 400K 64M; do
    "$V4_BIN" logits --model "$NX" --tokens "$WORK/ids.json" --out "$WORK/p.bin" --host-cache-bytes "$budget" \
        2> "$WORK/err" || fail "logits $budget: $(cat "$WORK/err")"
    cmp -s "$WORK/ref.bin" "$WORK/p.bin" || fail "logits differ: synthetic, $budget"
    "$V4_BIN" generate --model "$NX" --prompt-ids "$WORK/ids.json" --max-tokens 12 --greedy \
        --host-cache-bytes "$budget" > "$WORK/p.txt" 2> "$WORK/err" || fail "generate $budget: $(cat "$WORK/err")"
    cmp -s "$WORK/ref.txt" "$WORK/p.txt" || fail "generated ids differ: synthetic, $budget"
done
# the runner (batch, the worker's engine) too
echo '{"id": "t", "input_ids": [0, 2, 10, 3, 5], "max_tokens": 8, "temperature": 0}' > "$WORK/in.jsonl"
"$V4_BIN" batch "$WORK/in.jsonl" -o "$WORK/b1.jsonl" --model "$M" 2> /dev/null || fail "batch resident"
"$V4_BIN" batch "$WORK/in.jsonl" -o "$WORK/b2.jsonl" --model "$NX" --host-cache-bytes 400K 2> "$WORK/err" ||
    fail "batch synthetic: $(cat "$WORK/err")"
ids() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["output"]["token_ids"])' "$1"; }
[ "$(ids "$WORK/b1.jsonl")" = "$(ids "$WORK/b2.jsonl")" ] || fail "batch ids differ: $(ids "$WORK/b1.jsonl") vs $(ids "$WORK/b2.jsonl")"
rc=0
"$V4_BIN" batch "$WORK/in.jsonl" -o "$WORK/b3.jsonl" --model "$NX" > /dev/null 2> "$WORK/err" || rc=$?
[ "$rc" -ne 0 ] && grep -q "synthetic" "$WORK/err" && grep -q -- "--host-cache-bytes" "$WORK/err" ||
    fail "batch without paging: rc $rc, $(cat "$WORK/err")"
# throttled: one I/O thread at 2 MB/s; the prompt's first step loads >= n_act distinct
# experts in each of the 4 layers, 53248 bytes each, so >= 16 x 26.6 ms
"$V4_BIN" generate --model "$M" --prompt-ids "$WORK/ids.json" --max-tokens 2 --greedy > "$WORK/ref2.txt" 2> /dev/null
t0=$(date +%s%N)
V4_SYNTH_EXPERT_MBPS=2 "$V4_BIN" generate --model "$NX" --prompt-ids "$WORK/ids.json" --max-tokens 2 --greedy \
    --host-cache-bytes 64M --io-threads 1 > "$WORK/p.txt" 2> "$WORK/err" || fail "throttled generate: $(cat "$WORK/err")"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
cmp -s "$WORK/ref2.txt" "$WORK/p.txt" || fail "generated ids differ: throttled"
[ "$ms" -ge 420 ] || fail "throttled to 2 MB/s, 16+ loads of 53248 bytes took only $ms ms (want >= 420)"
echo "  throttled (2 MB/s, 1 I/O thread): $ms ms (>= 420)"
rc=0
V4_SYNTH_EXPERT_MBPS=fast "$V4_BIN" generate --model "$NX" --prompt-ids "$WORK/ids.json" --max-tokens 2 \
    --host-cache-bytes 64M > /dev/null 2> "$WORK/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "V4_SYNTH_EXPERT_MBPS" "$WORK/err" || fail "bad rate: rc $rc $(cat "$WORK/err")"
# no paging: a clear error, no crash
for cmd in generate logits; do
    rc=0
    if [ "$cmd" = generate ]; then
        "$V4_BIN" generate --model "$NX" --prompt-ids "$WORK/ids.json" --max-tokens 2 > /dev/null 2> "$WORK/err" || rc=$?
    else
        "$V4_BIN" logits --model "$NX" --tokens "$WORK/ids.json" --out "$WORK/p.bin" > /dev/null 2> "$WORK/err" || rc=$?
    fi
    [ "$rc" -eq 1 ] && [ "$(wc -l < "$WORK/err")" -eq 1 ] && grep -q "synthetic" "$WORK/err" &&
        grep -q -- "--host-cache-bytes" "$WORK/err" || fail "$cmd without paging: rc $rc, $(cat "$WORK/err")"
done
"$V4_BIN" pack --model "$M" --out "$WORK/pack" > /dev/null 2>&1 || fail "pack failed"
rc=0
"$V4_BIN" generate --model "$NX" --prompt-ids "$WORK/ids.json" --max-tokens 2 --host-cache-bytes 64M \
    --pack "$WORK/pack" > /dev/null 2> "$WORK/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "drop --pack" "$WORK/err" || fail "--pack with synthetic experts: rc $rc $(cat "$WORK/err")"
out=$("$V4_BIN" inspect --model "$NX") || fail "inspect failed"
grep -q "^routed experts: 0 tensors" <<< "$out" && grep -q "^routed experts are synthetic (synthetic_experts.json, seed 9): 4 x 16 experts of 52224 bytes" <<< "$out" ||
    fail "inspect: $out"
# a full model written over the trunk with --force is a full model again
"$V4_BIN" mkmodel --out "$NX" --preset tiny --seed 9 --no-sync --force > /dev/null
[ ! -e "$NX/synthetic_experts.json" ] || fail "--force left the marker"
"$V4_BIN" generate --model "$NX" --prompt-ids "$WORK/ids.json" --max-tokens 12 --greedy > "$WORK/p.txt" 2> /dev/null ||
    fail "full model after --force"
cmp -s "$WORK/ref.txt" "$WORK/p.txt" || fail "ids differ after --force"
rm -rf "$M" "$NX" "$WORK/pack"
if [ -z "${V4_SYNTH_SKIP_SMALL:-}" ]; then
    # small, 1 layer: 64 experts of 6.7 MB (428 MB); a 100M budget holds 14
    S="$WORK/small" SN="$WORK/small_trunk"
    "$V4_BIN" mkmodel --out "$S" --preset small --layers 1 --seed 3 --no-sync > /dev/null 2>&1
    "$V4_BIN" mkmodel --out "$SN" --preset small --layers 1 --seed 3 --no-sync --no-experts > /dev/null 2>&1
    echo '[3, 141, 5926, 535, 8979, 3238]' > "$WORK/sids.json"
    "$V4_BIN" generate --model "$S" --prompt-ids "$WORK/sids.json" --max-tokens 4 --greedy > "$WORK/sref.txt" 2> /dev/null ||
        fail "small resident"
    "$V4_BIN" generate --model "$SN" --prompt-ids "$WORK/sids.json" --max-tokens 4 --greedy --host-cache-bytes 100M \
        > "$WORK/sp.txt" 2> "$WORK/err" || fail "small synthetic: $(cat "$WORK/err")"
    cmp -s "$WORK/sref.txt" "$WORK/sp.txt" || fail "small: ids differ ($(cat "$WORK/sref.txt") vs $(cat "$WORK/sp.txt"))"
    echo "  small (1 layer): $(cat "$WORK/sp.txt")"
else
    echo "SKIP: the small preset (V4_SYNTH_SKIP_SMALL is set)"
fi
[ "$status" -eq 0 ] && echo "ok: synthetic experts paged = the full checkpoint resident (tiny, small); throttle; errors"
exit "$status"
