/* test_grammar_gbnf.c - GBNF constraints (V4G_GRAMMAR, worker/grammar/gr_gbnf*.c):
 *   - parse errors name line, column and what was expected; empty languages do not compile;
 *   - texts accepted or refused, and where: JSON in GBNF, arithmetic with left recursion,
 *     repetition bounds, classes with negation and escapes, Unicode literals, multi-line
 *     rules, ambiguous terminals ("a" "b" | "ab" "c"), a code point in over 16 classes;
 *   - an oracle: regular grammars against the engine's regex constraint (a different
 *     compile path) on every string up to a length over a small alphabet, refusal offsets
 *     included, and balanced brackets against a counter; rules merged into one lexeme
 *     (gr_gbnf_merge.c) inside a right-recursive list against the regex kind, cases that
 *     an unsound merge would get wrong ([a-z]* "x", "true" | [a-z]+, FOLLOW in the rule);
 *   - the mask against commit-on-a-fork for every token along texts and random walks, the
 *     mask never empty where the text is not finished (no dead end), EOS only where the
 *     text is complete;
 *   - the real tokenizer (tests/data/tokenizer): a JSON document through the JSON grammar
 *     token by token (mask times printed).
 * docs/grammar.md "GBNF".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "worker/grammar/grammar.h"
#include "worker/serve/constrain.h"

static const char *const MULTI[] = {"{\"", "\":", "\",", "\"}", " \"", "12", "+1", "ab", "abc", "bc", "yz", "xy",
                                    "true", "null", "e4", "Nf3", "O-O", "\xc3\xa9", "h\xc3\xa9", "\xe6\x97\xa5",
                                    "((", "))", "()", "aa", "aaa", "bbb", NULL};

typedef struct vocab_src {
    int n;
    char **tok;
} vocab_src;

static vocab_src SRC;
static v4g_vocab *V;
static int32_t EOS;

static const char *tb(void *ctx, int32_t id, size_t *len)
{
    vocab_src *v = ctx;
    if (id >= v->n - 1) {
        *len = 0;
        return "";
    }
    *len = id < 256 ? 1 : strlen(v->tok[id]);
    return v->tok[id];
}

static int sp(void *ctx, int32_t id)
{
    vocab_src *v = ctx;
    return id == v->n - 1;
}

static void make_vocab(void)
{
    int nm = 0;
    while (MULTI[nm])
        nm++;
    SRC.n = 256 + nm + 1;
    SRC.tok = calloc((size_t)SRC.n, sizeof *SRC.tok);
    for (int i = 0; i < 256; i++) {
        SRC.tok[i] = calloc(2, 1);
        SRC.tok[i][0] = (char)i;
    }
    for (int i = 0; i < nm; i++)
        SRC.tok[256 + i] = strdup(MULTI[i]);
    EOS = SRC.n - 1;
    v4_error err = {0};
    V = v4g_vocab_new(SRC.n, tb, sp, &SRC, EOS, &err);
    CHECK(V != NULL, "vocab: %s", err.msg);
}

static v4g_constraint *gbnf(const char *text)
{
    v4_error err = {0};
    v4g_constraint *c = v4g_compile(V4G_GRAMMAR, text, strlen(text), NULL, &err);
    CHECK(c != NULL, "compile %.80s: %s", text, err.msg);
    return c;
}

/* -1 accepted whole and complete; else the refusing offset (len: taken but incomplete) */
static long run_text(v4g_constraint *c, const char *text, size_t len)
{
    v4_error err = {0};
    v4g_matcher *m = v4g_matcher_new(c, V, &err);
    if (!m)
        return -2;
    size_t at = 0;
    int r = v4g_matcher_feed(m, text, len, &at, &err);
    long out = r ? (long)at : v4g_matcher_accepting(m) ? -1 : (long)len;
    v4g_matcher_free(m);
    return out;
}

static void expect(v4g_constraint *c, const char *text, long want)
{
    if (!c)
        return;
    long got = run_text(c, text, strlen(text));
    CHECK(got == want, "'%s': want %ld, got %ld (-1 accepted, else refused at / incomplete)", text, want, got);
}

static int bit(const uint32_t *b, int i)
{
    return (b[i >> 5] >> (i & 31)) & 1;
}

/* the mask at m's state against commit on a fork, every token; the mask not empty unless
 * finished; EOS as accepting says.  Returns the mismatches. */
static int check_mask(v4g_matcher *m, uint32_t *bits, const char *what, size_t pos)
{
    v4_error err = {0};
    CHECK(v4g_matcher_mask(m, bits, &err) == 0, "mask: %s", err.msg);
    int bad = 0, any = 0;
    for (int t = 0; t < SRC.n && bad < 3; t++) {
        v4g_matcher *f = v4g_matcher_fork(m, &err);
        int ok = f && v4g_matcher_commit(f, t, &err) == 0;
        v4g_matcher_free(f);
        any |= ok;
        if (ok != bit(bits, t)) {
            bad++;
            CHECK(0, "%s at %zu: token %d (%.8s) mask %d, commit %d", what, pos, t, SRC.tok[t], bit(bits, t), ok);
        }
    }
    CHECK(any, "%s at %zu: a dead end (no token, no EOS)", what, pos);
    CHECK(bit(bits, EOS) == v4g_matcher_accepting(m), "%s at %zu: EOS %d, accepting %d", what, pos, bit(bits, EOS),
          v4g_matcher_accepting(m));
    return bad;
}

/* commit text with the longest allowed tokens, checking the mask at every step; the end
 * must allow EOS (complete) */
static void mask_walk(v4g_constraint *c, const char *text)
{
    if (!c)
        return;
    v4_error err = {0};
    v4g_matcher *m = v4g_matcher_new(c, V, &err);
    CHECK(m != NULL, "matcher: %s", err.msg);
    if (!m)
        return;
    uint32_t *bits = calloc((size_t)(SRC.n + 31) / 32, sizeof *bits);
    size_t pos = 0, len = strlen(text);
    for (;;) {
        if (check_mask(m, bits, text, pos))
            break;
        if (pos == len)
            break;
        int best = -1;
        size_t bl = 0;
        for (int t = 0; t < SRC.n - 1; t++) {
            size_t tl = t < 256 ? 1 : strlen(SRC.tok[t]);
            if (tl > bl && tl <= len - pos && !memcmp(SRC.tok[t], text + pos, tl) && bit(bits, t))
                best = t, bl = tl;
        }
        CHECK(best >= 0, "'%.40s': no allowed token at %zu", text, pos);
        if (best < 0)
            break;
        CHECK(v4g_matcher_commit(m, best, &err) == 0, "commit at %zu", pos);
        pos += bl;
    }
    CHECK(bit(bits, EOS), "'%.40s': EOS not allowed at the end", text);
    CHECK(v4g_matcher_commit(m, EOS, &err) == 0 && v4g_matcher_finished(m), "EOS commit");
    free(bits);
    v4g_matcher_free(m);
}

/* random walks over allowed tokens (a fixed seed), every step checked */
static void random_walks(v4g_constraint *c, const char *what, int walks, int steps)
{
    if (!c)
        return;
    uint64_t x = 88172645463325252ull;
    uint32_t *bits = calloc((size_t)(SRC.n + 31) / 32, sizeof *bits);
    int32_t *allowed = malloc((size_t)SRC.n * sizeof *allowed);
    for (int w = 0; w < walks; w++) {
        v4_error err = {0};
        v4g_matcher *m = v4g_matcher_new(c, V, &err);
        for (int s = 0; m && s < steps; s++) {
            if (check_mask(m, bits, what, (size_t)s))
                break;
            int n = 0;
            for (int t = 0; t < SRC.n; t++)
                if (bit(bits, t))
                    allowed[n++] = t;
            if (!n)
                break;
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int32_t t = allowed[x % (uint64_t)n];
            CHECK(v4g_matcher_commit(m, t, &err) == 0, "%s: an allowed token refused", what);
            if (t == EOS)
                break;
        }
        v4g_matcher_free(m);
    }
    free(bits);
    free(allowed);
}

/* ------------------------------------------------------------------ errors -- */
typedef struct bad_case {
    const char *text, *where, *msg;
} bad_case;

static void test_errors(void)
{
    static const bad_case BAD[] = {
        {"root ::= valu\nvalue ::= \"x\"", "gbnf:1:10", "gbnf:1:10: undefined rule 'valu'"},
        {"", "gbnf", "no root rule"},
        {"# only a comment\n", "gbnf", "no root rule"},
        {"a ::= \"x\"", "gbnf", "no root rule"},
        {"root ::= \"abc", "gbnf:1:10", "unterminated string literal"},
        {"root ::= [a-", "gbnf:1:10", "unterminated character class"},
        {"root ::= [z-a]", "gbnf:1:11", "out of order"},
        {"root ::= (\"a\" | \"b\"", "gbnf:1:20", "expected ')'"},
        {"root ::= \"a\")", "gbnf:1:13", "')' without"},
        {"root ::= \"\\q\"", "gbnf:1:11", "unknown escape"},
        {"root ::= \"\\x4\"", "gbnf:1:14", "hex digits"},
        {"root ::= \"\\ud800\"", "gbnf:1:11", "not a Unicode scalar"},
        {"root ::= \"\xff\"", "gbnf:1:11", "invalid UTF-8"},
        {"root ::= \"a\"{3,1}", "gbnf:1:13", "below the minimum"},
        {"root ::= \"a\"{5000}", "gbnf:1:14", "over 4096"},
        {"root ::= \"a\"{x}", "gbnf:1:14", "expected a number"},
        {"root ::= \"a\"{2", "gbnf:1:15", "expected '}'"},
        {"root = \"a\"", "gbnf:1:6", "expected '::='"},
        {"root ::= \"a\"\nroot ::= \"b\"", "gbnf:2:1", "defined twice"},
        {"root ::= <think>", "gbnf:1:10", "token references"},
        {"root ::= \"a\" }", "gbnf:1:14", "expected a rule name"},
        {"root ::= a\n\n  b ::= \"x\"\nc d ::= \"y\"", "gbnf:4:3", "expected '::=' after the rule name 'c'"},
        {"root ::= x ::= \"y\"", "gbnf:1:10", "inside the previous one"},
        {"::= \"a\"", "gbnf:1:1", "expected a rule definition"},
        {"root ::= x\nx ::= x \"a\"", NULL, "admits no text"},
        {"root ::= [^\\x00-\\U0010FFFF]", NULL, "admits no text"},
        {"root ::= \"a\" (\"b\" (\"c\"", "gbnf:1:23", "expected ')'"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        v4_error err = {0};
        v4g_constraint *c = v4g_compile(V4G_GRAMMAR, BAD[i].text, strlen(BAD[i].text), NULL, &err);
        CHECK(!c, "bad %zu compiled: %s", i, BAD[i].text);
        v4g_constraint_unref(c);
        CHECK(err.code == V4_ERR_INVALID, "bad %zu: code %d", i, (int)err.code);
        CHECK(strstr(err.msg, BAD[i].msg) != NULL, "bad %zu: message '%s' lacks '%s'", i, err.msg, BAD[i].msg);
        CHECK(!BAD[i].where || !strcmp(err.where, BAD[i].where), "bad %zu: where '%s', want '%s' (%s)", i, err.where,
              BAD[i].where, err.msg);
        if (BAD[i].where && strcmp(BAD[i].where, "gbnf"))
            CHECK(!strncmp(err.msg, BAD[i].where, strlen(BAD[i].where)), "bad %zu: message starts '%s'", i, err.msg);
    }
    /* a NULL text is an empty grammar */
    v4_error err = {0};
    CHECK(!v4g_compile(V4G_GRAMMAR, NULL, 0, NULL, &err) && strstr(err.msg, "no root"), "NULL text: %s", err.msg);
}

/* ----------------------------------------------------------------- grammars -- */
static const char JSON_G[] =
    "# JSON\n"
    "root   ::= value\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt/] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_json(void)
{
    v4g_constraint *c = gbnf(JSON_G);
    expect(c, "{\"a\": [1, 2.5, -3e+10, true, null], \"b\": {\"c\": \"x\\ny \\u00e9 \xc3\xa9\"}}", -1);
    expect(c, "[]", -1);
    expect(c, "{\"a\":1,}", 7);
    expect(c, "{\"a\" 1}", 5);
    expect(c, "[01]", 2);
    expect(c, "\"a\\x\"", 3);
    expect(c, "[1, 2", 5);
    expect(c, "\"\x01\"", 1);
    expect(c, "[1,  2]", 4);
    mask_walk(c, "{\"name\": \"h\xc3\xa9\", \"n\": [12, true, null]}");
    mask_walk(c, "{\"a\":{\"b\":\"c\"}}");
    random_walks(c, "json", 6, 30);
    v4g_constraint_unref(c);
}

static void test_arith(void)
{
    const char *g = "root ::= expr\n"
                    "expr ::= expr (\"+\" | \"-\") term | term   # left recursion\n"
                    "term ::= term (\"*\" | \"/\") factor | factor\n"
                    "factor ::= number | \"(\" expr \")\" | \"-\" factor\n"
                    "number ::= [0-9]+ (\".\" [0-9]+)?\n";
    v4g_constraint *c = gbnf(g);
    expect(c, "1+2*3", -1);
    expect(c, "12+1", -1);
    expect(c, "(1-2)/-3.5", -1);
    expect(c, "((1))", -1);
    expect(c, "1++2", 2);
    expect(c, "1+", 2);
    expect(c, "(1", 2);
    expect(c, "1)", 1);
    expect(c, "1.", 2);
    expect(c, "1..2", 2);
    mask_walk(c, "12+1*(3-4)");
    random_walks(c, "arith", 6, 25);
    v4g_constraint_unref(c);
    /* right recursion and mutual recursion too */
    c = gbnf("root ::= a\na ::= \"x\" b | \"x\"\nb ::= \"y\" a");
    expect(c, "xyxyx", -1);
    expect(c, "xyxy", 4);
    expect(c, "xx", 1);
    v4g_constraint_unref(c);
}

static void test_repetition(void)
{
    v4g_constraint *c = gbnf("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,} \"d\"{0,2} \"e\"?");
    expect(c, "aabbbc", -1);
    expect(c, "aaaabbbcccdde", -1);
    expect(c, "abbbc", 1);
    expect(c, "aaaaabbbc", 4);
    expect(c, "aabbc", 4);
    expect(c, "aabbbbc", 5);
    expect(c, "aabbb", 5);
    expect(c, "aabbbcddd", 8);
    mask_walk(c, "aaabbbccd");
    v4g_constraint_unref(c);
    c = gbnf("root ::= (\"ab\" | \"c\")* \"x\"+ ([0-9] [a-z]){2}");
    expect(c, "x1a2b", -1);
    expect(c, "abcabxx1a2b", -1);
    expect(c, "abx1a", 5);
    expect(c, "ax", 1);
    mask_walk(c, "abcx1a2b");
    random_walks(c, "rep", 4, 15);
    v4g_constraint_unref(c);
    c = gbnf("root ::= \"\"");   /* the empty text only */
    expect(c, "", -1);
    expect(c, "a", 0);
    v4g_constraint_unref(c);
}

static void test_classes(void)
{
    v4g_constraint *c = gbnf("root ::= [^\\n\\]\\\\-]+ \"\\n\"");
    expect(c, "ab c\n", -1);
    expect(c, "a]b\n", 1);
    expect(c, "a-b\n", 1);
    expect(c, "a\\b\n", 1);
    expect(c, "\n", 0);
    expect(c, "\xc3\xa9\xe6\x97\xa5\n", -1);
    v4g_constraint_unref(c);
    c = gbnf("root ::= [\\x41-\\x43\\u00e9_] [^a-z0-9]? .");
    expect(c, "A!x", -1);
    expect(c, "\xc3\xa9" "Z\n", -1);
    expect(c, "_\xe6\x97\xa5", -1);
    expect(c, "Da", 0);
    expect(c, "Aaa", 2);
    expect(c, "\xc3\xa8", 1);   /* è: the first byte is shared with é */
    expect(c, "\xc3", 1);
    mask_walk(c, "\xc3\xa9" "Zy");
    v4g_constraint_unref(c);
    c = gbnf("root ::= [\\[\\]^-] [-a] [a-]");
    expect(c, "^-a", -1);
    expect(c, "]a-", -1);
    expect(c, "[-b", 2);
    v4g_constraint_unref(c);
}

static void test_unicode(void)
{
    v4g_constraint *c = gbnf("root ::= \"h\xc3\xa9llo\" | \"\\u00e9t\\u00E9\" | \"\xe6\x97\xa5\xe6\x9c\xac\" | "
                             "\"\\U0001F600\" | \"\\x41\\t\\\"\"");
    expect(c, "h\xc3\xa9llo", -1);
    expect(c, "\xc3\xa9t\xc3\xa9", -1);
    expect(c, "\xe6\x97\xa5\xe6\x9c\xac", -1);
    expect(c, "\xf0\x9f\x98\x80", -1);
    expect(c, "A\t\"", -1);
    expect(c, "hello", 1);
    expect(c, "h\xc3\xa9ll", 5);
    expect(c, "\xe6\x97\xa5\xe6", 4);
    mask_walk(c, "h\xc3\xa9llo");
    mask_walk(c, "\xe6\x97\xa5\xe6\x9c\xac");
    v4g_constraint_unref(c);
}

static void test_layout(void)
{
    /* comments, multi-line rules (indented, after '|', inside groups), names with '-' */
    const char *g = "# a comment\n"
                    "root ::= greeting \" \"\n"
                    "   name   # an indented continuation\n"
                    "greeting ::= \"hi\" |\n"
                    "  \"hello\"\n"
                    "  | \"hey\"\n"
                    "\n"
                    "name ::= (\n"
                    "  \"bob\"   # inside a group\n"
                    "  | first-name\n"
                    ")\n"
                    "first-name ::= [A-Z] [a-z]*\r\n";
    v4g_constraint *c = gbnf(g);
    expect(c, "hi bob", -1);
    expect(c, "hello Ann", -1);
    expect(c, "hey Z", -1);
    expect(c, "hey", 3);
    expect(c, "ho", 1);
    v4g_constraint_unref(c);
}

/* terminals that a longest-match lexer would split wrongly */
static void test_ambiguity(void)
{
    v4g_constraint *c = gbnf("root ::= \"a\" \"b\" | \"ab\" \"c\"");
    expect(c, "ab", -1);
    expect(c, "abc", -1);
    expect(c, "abcc", 3);
    mask_walk(c, "ab");
    mask_walk(c, "abc");
    v4g_constraint_unref(c);
    c = gbnf("root ::= [a-z]* \"x\" [a-z]{2}");
    expect(c, "xab", -1);
    expect(c, "axxxx", -1);
    expect(c, "abxyz", -1);
    expect(c, "abxy", 4);
    mask_walk(c, "xxxx");
    v4g_constraint_unref(c);
    /* chess: optional disambiguation squares before the target square */
    c = gbnf("root ::= move (\" \" move)*\n"
             "move ::= (pawn | nonpawn | castle) [+#]?\n"
             "pawn ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBRQ])?\n"
             "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
             "castle ::= \"O-O\" (\"-O\")?");
    expect(c, "e4 Nf3 Nbd7 R1a3 Qh4xe1+ exd8=Q# O-O-O", -1);
    expect(c, "Nbd", 3);
    expect(c, "e9", 1);
    expect(c, "O-O-", 4);
    mask_walk(c, "e4 Nf3 O-O");
    random_walks(c, "chess", 4, 20);
    v4g_constraint_unref(c);
}

/* one code point in more classes than the matcher takes at once: disjoint atoms */
static void test_overlap(void)
{
    char g[4096];
    size_t o = (size_t)snprintf(g, sizeof g, "root ::= ");
    for (int k = 0; k < 20; k++)
        o += (size_t)snprintf(g + o, sizeof g - o, "%s[a-%c] \"%c\"", k ? " | " : "", 'b' + k, 'A' + k);
    v4g_constraint *c = gbnf(g);
    expect(c, "aA", -1);
    expect(c, "aT", -1);
    expect(c, "bA", -1);
    expect(c, "cA", 1);
    expect(c, "cB", -1);
    expect(c, "uT", -1);
    expect(c, "vT", 0);
    mask_walk(c, "aC");
    random_walks(c, "overlap", 4, 4);
    v4g_constraint_unref(c);
}

/* ------------------------------------------------------------------ oracles -- */
/* every string over alpha up to maxlen: the GBNF grammar and the regex refuse at the same
 * offset (or both accept, or both run out) */
static void oracle_regex(const char *g, const char *rx, const char *alpha, int maxlen)
{
    v4_error err = {0};
    v4g_constraint *a = gbnf(g), *b = v4g_compile(V4G_REGEX, rx, strlen(rx), NULL, &err);
    CHECK(b != NULL, "regex %s: %s", rx, err.msg);
    if (!a || !b) {
        v4g_constraint_unref(a);
        v4g_constraint_unref(b);
        return;
    }
    int na = (int)strlen(alpha), diff = 0, acc = 0;
    long total = 0;
    char s[16];
    for (int len = 0; len <= maxlen; len++) {
        int idx[16] = {0};
        for (;;) {
            for (int k = 0; k < len; k++)
                s[k] = alpha[idx[k]];
            long x = run_text(a, s, (size_t)len), y = run_text(b, s, (size_t)len);
            if (len == 0 && y == 0)
                y = 0;   /* a regex never takes the empty text */
            total++;
            acc += x == -1;
            if (x != y && diff++ < 5)
                CHECK(0, "'%.*s': gbnf %ld, regex %ld (%s vs %s)", len, s, x, y, g, rx);
            int k = len - 1;
            while (k >= 0 && ++idx[k] == na)
                idx[k--] = 0;
            if (k < 0)
                break;
        }
    }
    CHECK(diff == 0, "%s: %d of %ld strings differ from the regex", g, diff, total);
    CHECK(acc > 0, "%s: no string accepted (a vacuous oracle)", g);
    v4g_constraint_unref(a);
    v4g_constraint_unref(b);
}

static void test_oracles(void)
{
    oracle_regex("root ::= [a-c]{1,3} (\"x\" | \"yz\")*", "[a-c]{1,3}(x|yz)*", "abxyz", 6);
    oracle_regex("root ::= (\"a\" | \"ab\") (\"b\" | \"bc\")? \"c\"*", "(a|ab)(b|bc)?c*", "abc", 7);
    oracle_regex("root ::= [^b]+ \"b\" | \"b\"{2,4}", "[^b]+b|b{2,4}", "abc", 6);
    oracle_regex("root ::= x \"-\" x\nx ::= ([0-9] | [1-9] [0-9])", "([0-9]|[1-9][0-9])-([0-9]|[1-9][0-9])",
                 "01-9", 6);
    /* balanced brackets (not regular) against a counter */
    v4g_constraint *c = gbnf("root ::= (\"(\" root \")\")*");
    int diff = 0;
    char s[16];
    for (int len = 0; c && len <= 10; len++)
        for (int bits = 0; bits < (1 << len); bits++) {
            int depth = 0;
            long want = -1;
            for (int k = 0; k < len; k++) {
                s[k] = (bits >> k) & 1 ? ')' : '(';
                depth += s[k] == '(' ? 1 : -1;
                if (depth < 0 && want == -1)
                    want = k;
            }
            if (want == -1 && depth > 0)
                want = len;
            long got = run_text(c, s, (size_t)len);
            if (got != want && diff++ < 5)
                CHECK(0, "brackets '%.*s': want %ld, got %ld", len, s, want, got);
        }
    CHECK(diff == 0, "brackets: %d strings differ", diff);
    random_walks(c, "brackets", 4, 20);
    v4g_constraint_unref(c);
}

/* merged lexemes (gr_gbnf_merge.c): rules in a right-recursive list (not regular to the
 * merger, so the rule is merged or not under the list's FOLLOW, yet the language is
 * regular) against the regex kind on every short string: a merge that a greedy lexer
 * splits wrongly refuses or accepts some string the regex does not */
static void test_merge(void)
{
    static const struct {
        const char *x, *rx, *alpha;
        int len;
    } CASES[] = {
        {"[a-z]* \"x\"", "[a-z]*x", "ax,", 7},                                  /* merged: x never follows x */
        {"\"a\"* \"ab\"", "a*ab", "ab,", 7},
        {"[0-9]+ (\".\" [0-9]+)?", "[0-9]+(\\.[0-9]+)?", "1.,", 7},
        {"\"true\" | [a-z]+", "true|[a-z]+", "tre,", 7},                          /* a keyword that prefixes */
        {"\"\\\"\" ([^\"\\\\] | \"\\\\\" [\"\\\\n])* \"\\\"\"", "\"([^\"\\\\]|\\\\[\"\\\\n])*\"", "\"\\n,", 7},
        {"\"a\" \"b\" | \"ab\" \"c\"", "ab|abc", "abc,", 7},
        {"[a-c]+ | \"-\" [a-c]*", "[a-c]+|-[a-c]*", "a-,", 7},
        {"(\"ab\")+ | \"ac\" | \"a\"", "(ab)+|ac|a", "abc,", 7},               /* same first byte: not merged */
        {"[0-9]+ [,]?", "[0-9]+,?", "1,", 8},                                    /* FOLLOW in EXT: not merged */
    };
    char g[512], rx[512];
    for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
        snprintf(g, sizeof g, "root ::= x \",\" root | x\nx ::= %s", CASES[k].x);
        snprintf(rx, sizeof rx, "(%s)(,(%s))*", CASES[k].rx, CASES[k].rx);
        oracle_regex(g, rx, CASES[k].alpha, CASES[k].len);
    }
    /* a list element that ends in the separator's character: "a"+ then "a" */
    oracle_regex("root ::= x \"a\" root | x\nx ::= \"a\"+ \"b\"?", "(a+b?a)*a+b?", "ab", 8);
    /* two different lexemes after the same text, and runs ("," ws) shared by two rules */
    oracle_regex("root ::= \"[\" ws l ws \"]\" | \"{\" ws m ws \"}\"\nl ::= n \",\" ws l | n\nm ::= n \";\" ws m | n\n"
                 "n ::= [0-9]+\nws ::= \" \"?",
                 "\\[ ?[0-9]+(, ?[0-9]+)* ?\\]|\\{ ?[0-9]+(; ?[0-9]+)* ?\\}", "[{1,; }]", 6);
    /* a merged rule and a one-code-point terminal that start alike after the same text
     * (r is right-recursive: never merged): the greedy lexer would take "ab" as x */
    oracle_regex("root ::= x \";\" root | x | \"a\" r\nx ::= (\"ab\")+\nr ::= \"b\" \"c\" | \"b\" s\n"
                 "s ::= \"d\" s | \"d\"",
                 "((ab)+;)*((ab)+|a(bc|bd+))", "abcd;", 6);
    /* the masks too, against commit, along random walks */
    v4g_constraint *c = gbnf("root ::= x \",\" root | x\nx ::= \"true\" | [a-z]+ | [0-9]+ (\".\" [0-9]+)?");
    expect(c, "true,truex,12.5,ab", -1);
    expect(c, "12.", 3);
    expect(c, "12.,", 3);
    random_walks(c, "merged list", 6, 12);
    v4g_constraint_unref(c);
}

/* ------------------------------------------------------------ real tokenizer -- */
static void test_real_tokenizer(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tokenizer", t_env("V4_TEST_DATA", "tests/data"));
    v4_error err = {0};
    v4_tokenizer *t = NULL;
    if (v4_tok_load(dir, &t, &err)) {
        CHECK(0, "tokenizer %s: %s", dir, err.msg);
        return;
    }
    v4g_vocab *v = v4_grammar_vocab(t, v4_tok_eos(t), &err);
    v4g_constraint *c = gbnf(JSON_G);
    const char *doc = "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"tags\": [\"math\", \"poet\\u00e9\"], "
                      "\"alive\": false, \"note\": null}";
    v4_ids ids = {0};
    CHECK(v && c && v4_tok_encode(t, doc, strlen(doc), &ids, &err) == 0, "setup: %s", err.msg);
    v4g_matcher *m = v && c ? v4g_matcher_new(c, v, &err) : NULL;
    uint32_t *bits = v ? calloc(((size_t)v4g_vocab_size(v) + 31) / 32, sizeof *bits) : NULL;
    double total = 0, worst = 0;
    int32_t eos = v4_tok_eos(t);
    for (size_t i = 0; m && bits && i <= ids.n; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        CHECK(v4g_matcher_mask(m, bits, &err) == 0, "mask: %s", err.msg);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double dt = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        total += dt;
        worst = dt > worst ? dt : worst;
        if (i == ids.n) {
            CHECK(bit(bits, eos), "EOS not allowed after the document");
            break;
        }
        CHECK(!bit(bits, eos), "EOS allowed inside the document (token %zu)", i);
        CHECK(bit(bits, ids.v[i]), "token %zu (id %d) of the document not allowed", i, ids.v[i]);
        CHECK(v4g_matcher_commit(m, ids.v[i], &err) == 0, "commit %zu", i);
    }
    printf("real tokenizer, JSON grammar: %zu tokens, mask mean %.0f us, max %.0f us\n", ids.n,
           total * 1e6 / (double)(ids.n + 1), worst * 1e6);
    free(bits);
    v4_ids_free(&ids);
    v4g_matcher_free(m);
    v4g_constraint_unref(c);
    v4g_vocab_free(v);
    v4_tok_free(t);
}

int main(void)
{
    make_vocab();
    if (!V)
        TEST_DONE();
    test_errors();
    test_json();
    test_arith();
    test_repetition();
    test_classes();
    test_unicode();
    test_layout();
    test_ambiguity();
    test_overlap();
    test_oracles();
    test_merge();
    test_real_tokenizer();
    v4g_vocab_free(V);
    for (int i = 0; i < SRC.n; i++)
        free(SRC.tok[i]);
    free(SRC.tok);
    TEST_DONE();
}
