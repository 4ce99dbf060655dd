#!/usr/bin/env bash
# test_generate_constrained.sh - `v4fleet generate` under an output constraint
# (--json-schema / --json-object / --regex / --choice, worker/tools/constraint_opts.h): on
# random weights at temperature 1, every answer that ends with finish_reason "stop" parses
# and validates (python3-jsonschema, Python's re); the flags' errors are one line naming
# the flag: two constraints, a missing file, a constraint that does not compile, and a
# constraint with --ignore-eos.
set -u
bin=${V4_BIN:?V4_BIN not set}
py=/usr/bin/python3
work=$(mktemp -d "${V4_TMP:-/tmp}/genconst.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)"; exit 1; }
"$bin" mkmodel --out "$work/m" --preset tiny --seed 5 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
run() { "$bin" generate --model "$work/m" --prompt "Describe one pet." "$@"; }

cat >"$work/schema.json" <<'J'
{"type": "object",
 "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer", "minimum": 0, "maximum": 30},
                "name": {"type": "string", "maxLength": 8}},
 "required": ["kind", "age", "name"], "additionalProperties": false}
J
echo '["yes", "no", "maybe later"]' >"$work/choice.json"

# check KIND ARG FILE ERR: the answer in FILE (summary in ERR) is complete and valid
check() {
    $py - "$@" <<'P'
import json, re, sys, jsonschema
kind, arg, out, err = sys.argv[1:5]
text = open(out, encoding="utf-8").read()
assert text.endswith("\n"), "no final line break"
text = text[:-1]
summary = open(err).read()
m = re.search(r"finish_reason (\w+)", summary)
assert m, summary
if m.group(1) != "stop":
    print("length", end="")
    sys.exit(0)
if kind == "schema":
    jsonschema.validate(json.loads(text), json.load(open(arg)))
elif kind == "object":
    assert isinstance(json.loads(text), dict), text
elif kind == "regex":
    assert re.fullmatch(arg, text), repr(text)
elif kind == "choice":
    assert text in json.load(open(arg)), repr(text)
print("stop", end="")
P
}

for seed in 3 4 5 6; do
    for c in "schema|--json-schema|$work/schema.json" "object|--json-object|" "regex|--regex|[a-z]{2,6}@[a-z]{2,4}\\.(com|org)" \
             "choice|--choice|$work/choice.json"; do
        IFS='|' read -r kind flag arg <<<"$c"
        args=("$flag"); [ -n "$arg" ] && args+=("$arg")
        [ "$kind" = schema ] && [ "$seed" -gt 4 ] && args+=(--compact)
        run --max-tokens 200 --seed "$seed" "${args[@]}" >"$work/out" 2>"$work/err"; rc=$?
        if [ "$rc" -ne 0 ]; then bad "$kind seed $seed: exit $rc: $(cat "$work/err")"; continue; fi
        res=$(check "$kind" "$arg" "$work/out" "$work/err" 2>&1)
        case "$res" in
            stop) ok "$kind seed $seed: complete and valid"; eval "stops_$kind=\$((\${stops_$kind:-0} + 1))" ;;
            length) ok "$kind seed $seed: max_tokens came first (finish_reason length)" ;;
            *) bad "$kind seed $seed: $res" ;;
        esac
        [ "$kind" = choice ] && [ "$res" != stop ] && bad "choice seed $seed ended '$res', not stop"
    done
done
for kind in schema object regex choice; do   # each kind ended complete at least once
    n=$(eval "echo \${stops_$kind:-0}")
    [ "$n" -gt 0 ] && ok "$kind: $n of 4 answers complete" || bad "$kind: no answer of 4 was complete"
done
# a GBNF grammar: the answer is a sentence of it
printf 'root ::= "n" [0-9]{1,3} ("," " "? "n" [0-9]{1,3})*\n' >"$work/g.gbnf"
run --max-tokens 60 --seed 5 --grammar "$work/g.gbnf" >"$work/out" 2>"$work/err"
if grep -q 'finish_reason stop' "$work/err"; then
    $py -c 'import re,sys; t=open(sys.argv[1]).read()[:-1]; sys.exit(0 if re.fullmatch(r"n[0-9]{1,3}(, ?n[0-9]{1,3})*", t) else 1)' "$work/out" \
        && ok "--grammar: a sentence of the grammar" || bad "--grammar: '$(cat "$work/out")'"
else
    grep -q 'finish_reason length' "$work/err" && ok "--grammar: max_tokens came first" || bad "--grammar: $(cat "$work/err")"
fi
# compact: no whitespace between JSON tokens
run --max-tokens 200 --seed 9 --json-schema "$work/schema.json" --compact >"$work/out" 2>/dev/null
grep -q '^{"kind":"' "$work/out" && ok "--compact: no whitespace" || bad "--compact: $(cat "$work/out")"
# the same seed, the same answer
a=$(run --max-tokens 60 --seed 7 --json-object 2>/dev/null); b=$(run --max-tokens 60 --seed 7 --json-object 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "same seed, same constrained answer" || bad "answers differ: '$a' / '$b'"
# thinking: the reasoning is free, the answer after </think> is constrained: over four
# seeds, every run that ends "stop" has a choice after its </think>, and at least one does
# (on this model, seed 3 ends its reasoning within the budget)
done_think=0
for seed in 1 2 3 4; do
    "$bin" generate --model "$work/m" --prompt hi --thinking --max-tokens 300 --seed "$seed" --choice "$work/choice.json" \
        >"$work/out" 2>"$work/err"
    grep -q 'finish_reason stop' "$work/err" || continue
    done_think=$((done_think + 1))
    ans=$($py -c 'import sys; t = open(sys.argv[1], encoding="utf-8").read(); print(t.rsplit("</think>", 1)[1].strip() if "</think>" in t else "NO END OF THINKING")' "$work/out")
    case "$ans" in yes|no|"maybe later") ;; *) bad "--thinking seed $seed: answer after </think>: '$ans'" ;; esac
done
[ "$done_think" -gt 0 ] && ok "--thinking: $done_think of 4 runs ended, each with free reasoning then one of the choices" \
    || bad "--thinking: no run of 4 ended within 300 tokens"

expect() {  # expect DESCRIPTION EXIT PATTERN ARGS...
    local what=$1 code=$2 pat=$3; shift 3
    local out rc
    out=$(run "$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" -eq "$code" ] && grep -qE -- "$pat" <<<"$out" && [ "$(printf '%s\n' "$out" | wc -l)" -le 3 ]; then
        ok "$what"
    else
        bad "$what: exit $rc: $out"
    fi
}
expect "two constraints" 2 '--json-object and --regex: give one' --json-object --regex x
expect "missing schema file" 2 '--json-schema .*nope.*No such file' --json-schema "$work/nope.json"
expect "regex that does not compile" 1 '--regex: does not compile: .*character class' --regex '[a-z'
expect "schema keyword not enforced" 1 '--json-schema: does not compile' --json-schema <(echo '{"not": {"type": "string"}}')
expect "constraint with --ignore-eos" 2 'ignore-eos' --json-object --ignore-eos
expect "regex without a value" 2 '--regex needs a value' --regex
exit $fail
