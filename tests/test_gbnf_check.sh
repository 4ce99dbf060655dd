#!/usr/bin/env bash
# test_gbnf_check.sh - `v4fleet grammar-check --grammar FILE` end to end with the real
# tokenizer (tests/data/tokenizer) and the GBNF grammars of tests/data/gbnf/: texts
# accepted (exit 0), refused with the place (exit 1), a grammar that does not compile
# names line and column (exit 2).  docs/grammar.md "GBNF".
set -u
bin=${V4_BIN:?V4_BIN not set}
data=${V4_TEST_DATA:?V4_TEST_DATA not set}
work=$(mktemp -d "${V4_TMP:-/tmp}/gbnf.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
check() {   # check NAME GRAMMAR WANT_RC TEXT [WANT_OUTPUT]
    printf '%s' "$4" > "$work/text"
    out=$("$bin" grammar-check --tokenizer "$data/tokenizer" --grammar "$2" "$work/text" 2>&1); rc=$?
    if [ "$rc" -ne "$3" ]; then bad "$1: exit $rc, want $3: $out"; return; fi
    if [ -n "${5:-}" ] && ! grep -qF -- "$5" <<<"$out"; then bad "$1: output lacks '$5': $out"; return; fi
    ok "$1"
}
G=$data/gbnf
check "json accepted" "$G/json.gbnf" 0 '{"a": [1, 2.5, -3e+10, true, null], "b": {"c": "x\ny \u00e9"}}' "accepted"
check "json refused (trailing comma)" "$G/json.gbnf" 1 '{"a": 1,}' "refused at token"
check "json incomplete" "$G/json.gbnf" 1 '{"a": [1' "ends before"
check "arith (left recursion) accepted" "$G/arith.gbnf" 0 '12+3*(4-5)/-6.5' "accepted"
check "arith refused" "$G/arith.gbnf" 1 '1+*2' "refused at token"
check "chess accepted" "$G/chess.gbnf" 0 $'1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n4. O-O Nf6\n' "accepted"
check "chess refused" "$G/chess.gbnf" 1 $'1. e4 e9\n' "refused at token"
printf 'root ::= value\nvalue ::= "x" | valu\n' > "$work/bad.gbnf"
check "undefined rule" "$work/bad.gbnf" 2 'x' "gbnf:2:17: undefined rule 'valu'"
printf 'start: "a"\n' > "$work/lark.gbnf"
check "lark is no gbnf" "$work/lark.gbnf" 2 'a' "expected '::='"
exit $fail
