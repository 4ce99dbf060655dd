#!/usr/bin/env bash
# test_tokenize_cli.sh - CLI contract of `v4fleet tokenize` / `v4fleet detokenize`.
#
# Env (set by ctest): V4_BIN = the v4fleet binary, V4_TMP = scratch dir,
# V4_TEST_DATA = tests/data (tokenizer/ holds the DeepSeek tokenizer and cases.jsonl).
# Checks: `tokenize --jsonl` over the whole cases.jsonl in one process prints exactly
# the expected id arrays (compared as text with the "ids" field of each line, which
# the golden file writes in the same compact form); detokenize --jsonl of those ids
# re-tokenizes to the same ids, and (with perl's JSON::PP) gives back each text
# exactly; plain stdin mode; error lines and exit codes.  Exit 77 = skipped.
set -u
BIN=${V4_BIN:-}
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "SKIP: V4_BIN not set"; exit 77; }
DATA=${V4_TEST_DATA:-$(dirname "$0")/data}
TOK=$DATA/tokenizer
CASES=$TOK/cases.jsonl
[ -f "$CASES" ] || { echo "SKIP: $CASES not found"; exit 77; }
TMPROOT=${V4_TMP:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$TMPROOT/tokenize_cli.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

fail=0
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
to() { # to OUTFILE INFILE COMMAND...: run COMMAND < INFILE > OUTFILE
    local out=$1 in=$2; shift 2
    "$@" < "$in" > "$out"
}

# --- every golden case, one process
sed -E 's/.*"ids":(\[[0-9,]*\])\}[[:space:]]*$/\1/' "$CASES" > "$WORK/want.txt"
check "expected ids extracted" test "$(grep -c '^\[' "$WORK/want.txt")" -eq "$(wc -l < "$CASES")"
check "tokenize --jsonl runs" to "$WORK/got.txt" "$CASES" "$BIN" tokenize --tokenizer "$TOK" --jsonl
check "one output line per case" test "$(wc -l < "$WORK/got.txt")" -eq "$(wc -l < "$CASES")"
if cmp -s "$WORK/want.txt" "$WORK/got.txt"; then
    echo "ok   all $(wc -l < "$CASES") cases give exactly the expected ids"
else
    echo "FAIL ids differ from cases.jsonl:"
    diff "$WORK/want.txt" "$WORK/got.txt" | head -10
    fail=1
fi

# --- decode: ids -> {"text"} -> ids again
check "detokenize --jsonl runs" to "$WORK/texts.jsonl" "$WORK/want.txt" "$BIN" detokenize --tokenizer "$TOK" --jsonl
check "re-tokenize the decoded texts" to "$WORK/again.txt" "$WORK/texts.jsonl" "$BIN" tokenize --tokenizer "$TOK" --jsonl
check "decode(ids) re-encodes to the same ids" cmp -s "$WORK/want.txt" "$WORK/again.txt"
if perl -MJSON::PP -e 1 2>/dev/null; then
    check "decode(ids) == text for every case" perl -MJSON::PP -e '
        open my $c, "<", $ARGV[0] or die; open my $d, "<", $ARGV[1] or die;
        my $js = JSON::PP->new; my ($n, $bad) = (0, 0);
        while (defined(my $a = <$c>)) {
            my $b = <$d>; $n++;
            $bad++, print STDERR "  case $n differs\n" unless defined $b && $js->decode($a)->{text} eq $js->decode($b)->{text};
        }
        exit($bad || $n < 600 ? 1 : 0);' "$CASES" "$WORK/texts.jsonl"
else
    echo "note: perl JSON::PP not available, exact text comparison skipped"
fi

# --- plain mode: stdin text -> one array; array -> exact text
printf 'Hello, world!<｜User｜>hi' > "$WORK/in.txt"
check "tokenize stdin" to "$WORK/ids.json" "$WORK/in.txt" "$BIN" tokenize --tokenizer "$TOK"
check "special token recognised" grep -q ',128803,' "$WORK/ids.json"
check "detokenize stdin" to "$WORK/out.txt" "$WORK/ids.json" "$BIN" detokenize --tokenizer "$TOK"
check "round trip is byte-exact" cmp -s "$WORK/in.txt" "$WORK/out.txt"
check "empty input -> []" test "$("$BIN" tokenize --tokenizer "$TOK" < /dev/null)" = "[]"
check "--skip-special" test "$(printf '[0,19923,1]' | "$BIN" detokenize --tokenizer "$TOK" --skip-special)" = "Hello"

# --- errors: one line on stderr, exit 1; usage errors exit 2
expect_error() { # expect_error DESCRIPTION STATUS PATTERN STDIN COMMAND...
    local what=$1 status=$2 pattern=$3 input=$4; shift 4
    printf '%s' "$input" | "$@" > /dev/null 2> "$WORK/err.txt"
    local rc=$?
    if [ "$rc" -eq "$status" ] && grep -q -- "$pattern" "$WORK/err.txt" &&
       { [ "$status" -ne 1 ] || [ "$(wc -l < "$WORK/err.txt")" -eq 1 ]; }; then
        echo "ok   $what"
    else
        echo "FAIL $what (exit $rc): $(head -3 "$WORK/err.txt")"; fail=1
    fi
}
# an id with no token decodes to nothing (as Hugging Face tokenizers), with a notice
a="$(printf '[1]' | "$BIN" detokenize --tokenizer "$TOK" 2>/dev/null)"
b="$(printf '[1,999999,129000]' | "$BIN" detokenize --tokenizer "$TOK" 2>"$WORK/err.txt")"; rc=$?
if [ "$rc" -eq 0 ] && [ "$a" = "$b" ] && grep -q "stdin: 2 ids with no token in the vocabulary" "$WORK/err.txt"; then
    echo "ok   ids with no token: dropped, noticed"
else
    echo "FAIL ids with no token (exit $rc): '$a' vs '$b': $(head -3 "$WORK/err.txt")"; fail=1
fi
expect_error "not an array" 1 "^v4fleet detokenize: stdin: " '{"a":1}' "$BIN" detokenize --tokenizer "$TOK"
expect_error "bad JSON line" 1 "^v4fleet tokenize: stdin line 2: invalid JSON" $'{"text":"a"}\nnope\n' \
    "$BIN" tokenize --tokenizer "$TOK" --jsonl
expect_error "no text field" 1 'stdin line 1: expected an object with a "text" string' '{"txt":"a"}' \
    "$BIN" tokenize --tokenizer "$TOK" --jsonl
expect_error "invalid UTF-8" 1 "^v4fleet tokenize: stdin: input is not valid UTF-8" $'a\xff' \
    "$BIN" tokenize --tokenizer "$TOK"
expect_error "missing tokenizer dir" 1 "^v4fleet tokenize: $WORK/nope: " '' \
    "$BIN" tokenize --tokenizer "$WORK/nope"
mkdir -p "$WORK/badtok" && printf '{"model": ' > "$WORK/badtok/tokenizer.json"
expect_error "bad tokenizer.json" 1 "tokenizer.json: invalid JSON" '' "$BIN" tokenize --tokenizer "$WORK/badtok"
expect_error "missing --tokenizer" 2 "--tokenizer DIR is required" '' "$BIN" tokenize
expect_error "unknown option" 2 "unknown or incomplete option" '' "$BIN" detokenize --tokenizer "$TOK" --nope

[ $fail -eq 0 ] && echo "test_tokenize_cli: all checks passed" || echo "test_tokenize_cli: FAILED"
exit $fail
