#!/usr/bin/env bash
# test_paged_cli.sh - `v4fleet logits` and `generate` with paged experts
# (--host-cache-bytes [--pack DIR] [--cache-policy P]): on a synthetic tiny model the
# logits file and the generated ids are byte-identical to the all-resident run, for a
# pack and for the safetensors source, with a budget that evicts and one that holds
# everything; `generate` with paged experts prefills in chunks of slots / n_act prompt
# positions (1..16, said on stderr) with the same ids; a budget below one layer's
# experts and paging flags without a budget are clear errors (exit 1, one line).
set -euo pipefail
: "${V4_BIN:?}" "${V4_TMP:?}"
WORK="$(mktemp -d "$V4_TMP/paged_cli.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
status=0
fail() { echo "FAIL: $*" >&2; status=1; }
M="$WORK/model"
"$V4_BIN" mkmodel --out "$M" --preset tiny --seed 9 > /dev/null
"$V4_BIN" pack --model "$M" --out "$WORK/pack" > /dev/null 2>&1 || fail "pack failed"
python3 -c 'import json; print(json.dumps([(i * 37) % 900 + 3 for i in range(40)]))' > "$WORK/ids.json"
"$V4_BIN" logits --model "$M" --tokens "$WORK/ids.json" --out "$WORK/ref.bin" 2> /dev/null
"$V4_BIN" generate --model "$M" --prompt-ids "$WORK/ids.json" --max-tokens 12 --greedy > "$WORK/ref.txt" 2> /dev/null
for src in pack safetensors; do
    for budget in 400K 64M; do
        for pol in lru lfru next; do
            extra=()
            [ "$src" = pack ] && extra=(--pack "$WORK/pack")
            "$V4_BIN" logits --model "$M" --tokens "$WORK/ids.json" --out "$WORK/p.bin" --host-cache-bytes "$budget" \
                --cache-policy "$pol" "${extra[@]}" 2> "$WORK/err" || fail "logits $src $budget $pol: $(cat "$WORK/err")"
            cmp -s "$WORK/ref.bin" "$WORK/p.bin" || fail "logits differ: $src $budget $pol"
            "$V4_BIN" generate --model "$M" --prompt-ids "$WORK/ids.json" --max-tokens 12 --greedy \
                --host-cache-bytes "$budget" --cache-policy "$pol" "${extra[@]}" > "$WORK/p.txt" 2> /dev/null ||
                fail "generate $src $budget $pol"
            cmp -s "$WORK/ref.txt" "$WORK/p.txt" || fail "generated ids differ: $src $budget $pol"
        done
    done
done
# prefill chunks with paged experts (worker/serve/step_rows.h): a step carries at most
# slots / n_act prompt positions (between 1 and the CPU's chunk, 64) unless the slots hold a
# whole layer's experts (then 64), and the ids stay identical
K=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_experts_per_tok"])' "$M/config.json")
E=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["n_routed_experts"])' "$M/config.json")
for budget in 400K 500K 900K 1100K 64M; do
    "$V4_BIN" generate --model "$M" --prompt-ids "$WORK/ids.json" --max-tokens 12 --greedy \
        --host-cache-bytes "$budget" > "$WORK/p.txt" 2> "$WORK/err" || fail "generate $budget: $(cat "$WORK/err")"
    cmp -s "$WORK/ref.txt" "$WORK/p.txt" || fail "generated ids differ: chunked prefill, $budget"
    line=$(grep "host cache of" "$WORK/err" || true)
    slots=$(sed -n 's/.*host cache of \([0-9]*\) slots.*/\1/p' <<< "$line")
    rows=$(sed -n 's/.*chunks of up to \([0-9]*\) prompt positions.*/\1/p' <<< "$line")
    want=$(( slots / K )); [ -n "$slots" ] && [ "$slots" -ge "$E" ] && want=64
    [ "$want" -gt 64 ] && want=64; [ "$want" -lt 1 ] && want=1
    [ -n "$slots" ] && [ "$rows" = "$want" ] ||
        fail "$budget: chunk of '$rows' rows for '$slots' slots and $K experts per token (want $want): $line"
    echo "  $budget: $slots slots -> prefill chunks of $rows"
done
rc=0
"$V4_BIN" logits --model "$M" --tokens "$WORK/ids.json" --out "$WORK/p.bin" --host-cache-bytes 60K \
    2> "$WORK/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "budget too small" "$WORK/err" && [ "$(wc -l < "$WORK/err")" -eq 1 ] ||
    fail "a budget below one layer's experts: rc $rc, $(cat "$WORK/err")"
rc=0
"$V4_BIN" generate --model "$M" --prompt-ids "$WORK/ids.json" --pack "$WORK/pack" > /dev/null 2> "$WORK/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "need --host-cache-bytes" "$WORK/err" || fail "--pack without a budget: rc $rc $(cat "$WORK/err")"
rc=0
"$V4_BIN" generate --model "$M" --prompt-ids "$WORK/ids.json" --host-cache-bytes lots > /dev/null 2> "$WORK/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "byte count" "$WORK/err" || fail "bad byte count: rc $rc $(cat "$WORK/err")"
[ "$status" -eq 0 ] && echo "ok: paged logits/generate identical to resident (pack, safetensors; evicting and full budgets)"
exit "$status"
