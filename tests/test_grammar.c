/* test_grammar.c - the constraint engine (worker/grammar/grammar.h) on a small vocabulary
 * of its own: every byte as a token plus multi-byte tokens that cross lexeme boundaries
 * (`{"`, `":`, `",`, `"}`, ` "`, digits with punctuation ...).
 *   - texts accepted or refused, and where, for regexes, choices and JSON Schemas;
 *   - every mask equals, token by token, what commit on a fork of the matcher says (the
 *     mask is the trie walk, commit feeds the token's bytes: two paths, one answer),
 *     along valid documents, and EOS only where the text is complete;
 *   - the same for states inside strings of several kinds (length bounds, keys ruled out);
 *   - integer and number bounds against arithmetic on hundreds of values;
 *   - compile errors name the keyword and its JSON pointer; $ref recursion works.
 * No model, no files: runs everywhere.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "worker/grammar/grammar.h"

static const char *const MULTI[] = {"{\"", "\":", "\",", "\"}", " \"", "\": ", "12", "3,", "0}", "true", "false",
                                    "null", "name", "age", "\"name\"", "ab", "abc", "yes", "no", "\": \"", "[1",
                                    "],", "-1", ".5", "e+", "  ", "\n", "\":{\"", "}}", "next", "\xc3\xa9", NULL};

typedef struct vocab_src {
    int n;
    char **tok;
} vocab_src;

static const char *tb(void *ctx, int32_t id, size_t *len)
{
    vocab_src *v = ctx;
    if (id >= v->n - 1) {   /* the EOS token: no bytes */
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

static vocab_src SRC;
static v4g_vocab *V;
static int32_t EOS;

static void make_vocab(void)
{
    int nm = 0;
    while (MULTI[nm])
        nm++;
    SRC.n = 256 + nm + 1;
    SRC.tok = calloc((size_t)SRC.n, sizeof *SRC.tok);
    for (int i = 0; i < 256; i++) {
        SRC.tok[i] = malloc(2);
        SRC.tok[i][0] = (char)i;
        SRC.tok[i][1] = 0;
    }
    for (int i = 0; i < nm; i++)
        SRC.tok[256 + i] = strdup(MULTI[i]);
    EOS = SRC.n - 1;
    v4_error err = {0};
    V = v4g_vocab_new(SRC.n, tb, sp, &SRC, EOS, &err);
    CHECK(V != NULL, "vocab: %s", err.msg);
}

static v4g_constraint *compile(v4g_kind k, const char *text, int compact)
{
    v4_error err = {0};
    v4g_opts o = {.compact = compact};
    v4g_constraint *c = v4g_compile(k, text, strlen(text), &o, &err);
    CHECK(c != NULL, "compile %.80s: %s", text, err.msg);
    return c;
}

/* feed the text byte by byte: -1 accepted whole and complete, else the refusing offset
 * (len when all bytes were taken but the text is not complete) */
static long run_text(v4g_constraint *c, const char *text)
{
    v4_error err = {0};
    v4g_matcher *m = v4g_matcher_new(c, V, &err);
    if (!m)
        return -2;
    size_t at = 0;
    int r = v4g_matcher_feed(m, text, strlen(text), &at, &err);
    long out = r ? (long)at : v4g_matcher_accepting(m) ? -1 : (long)strlen(text);
    v4g_matcher_free(m);
    return out;
}

static int bit(const uint32_t *b, int i)
{
    return (b[i >> 5] >> (i & 31)) & 1;
}

/* the mask against commit-on-a-fork for every token, then commit the text's bytes one
 * token at a time (the longest vocabulary token that is a prefix), checking each step */
static void mask_walk(v4g_constraint *c, const char *text)
{
    v4_error err = {0};
    v4g_matcher *m = v4g_matcher_new(c, V, &err);
    CHECK(m != NULL, "matcher: %s", err.msg);
    if (!m)
        return;
    uint32_t *bits = calloc((size_t)(SRC.n + 31) / 32, sizeof *bits);
    size_t pos = 0, len = strlen(text);
    int steps = 0, bad = 0;
    for (;;) {
        CHECK(v4g_matcher_mask(m, bits, &err) == 0, "mask: %s", err.msg);
        for (int t = 0; t < SRC.n && bad < 5; t++) {
            v4g_matcher *f = v4g_matcher_fork(m, &err);
            int ok = f && v4g_matcher_commit(f, t, &err) == 0;
            v4g_matcher_free(f);
            if (ok != bit(bits, t)) {
                bad++;
                CHECK(0, "'%.40s' at %zu: token %d (%.8s) mask %d, commit %d", text, pos, t, SRC.tok[t],
                      bit(bits, t), ok);
            }
        }
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
        steps++;
    }
    CHECK(bit(bits, EOS), "'%.40s': EOS not allowed at the end", text);
    CHECK(v4g_matcher_commit(m, EOS, &err) == 0 && v4g_matcher_finished(m), "EOS commit");
    CHECK(v4g_matcher_mask(m, bits, &err) == 0 && !bit(bits, 'a') && !bit(bits, EOS), "nothing after EOS");
    free(bits);
    v4g_matcher_free(m);
}

static void expect(v4g_constraint *c, const char *text, long want)
{
    long got = run_text(c, text);
    CHECK(got == want, "'%s': want %ld, got %ld (-1 accepted, else refused at / incomplete)", text, want, got);
}

static void test_regex(void)
{
    v4g_constraint *c = compile(V4G_REGEX, "[a-c]+x(yz)?", 0);
    if (!c)
        return;
    expect(c, "abx", -1);
    expect(c, "abxyz", -1);
    expect(c, "abxy", 4);
    expect(c, "abd", 2);
    expect(c, "x", 0);
    mask_walk(c, "cabxyz");
    v4g_constraint_unref(c);
    c = compile(V4G_REGEX, "\\d{3}-\\d{2}|[^\\x00-\\x7f]+", 0);
    expect(c, "123-45", -1);
    expect(c, "12-45", 2);
    expect(c, "\xc3\xa9\xc3\xa9", -1);
    expect(c, "\xc3", 1);
    mask_walk(c, "\xc3\xa9");
    v4g_constraint_unref(c);
    v4_error err = {0};
    CHECK(!v4g_compile(V4G_REGEX, "a(?=b)", 6, NULL, &err) && strstr(err.msg, "lookaround"), "lookaround: %s", err.msg);
    CHECK(!v4g_compile(V4G_REGEX, "(a)\\1", 5, NULL, &err) && strstr(err.msg, "backreference"), "backref: %s",
          err.msg);
    CHECK(!v4g_compile(V4G_REGEX, "a{5,2}", 6, NULL, &err), "bad counts refused");
}

static void test_choice(void)
{
    v4g_constraint *c = compile(V4G_CHOICE, "[\"yes\", \"no\", \"yesterday\"]", 0);
    if (!c)
        return;
    expect(c, "yes", -1);
    expect(c, "yesterday", -1);
    expect(c, "yest", 4);
    expect(c, "nope", 2);
    mask_walk(c, "yes");
    mask_walk(c, "no");
    v4g_constraint_unref(c);
    v4_error err = {0};
    CHECK(!v4g_compile(V4G_CHOICE, "[1]", 3, NULL, &err) && !strcmp(err.where, "/0"), "choice of a number: %s",
          err.where);
}

static const char PERSON[] = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
                             "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":130},"
                             "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},"
                             "\"required\":[\"name\"],\"additionalProperties\":false}";

static void test_schema(void)
{
    v4g_constraint *c = compile(V4G_JSON_SCHEMA, PERSON, 0);
    if (!c)
        return;
    expect(c, "{\"name\":\"x\",\"age\":3}", -1);
    expect(c, "{\"name\":\"x\"}", -1);
    expect(c, "{ \"name\" : \"\xc3\xa9\" , \"tags\": [\"a\",\"b\"] }", -1);
    expect(c, "{\"age\":3}", 2);
    expect(c, "{\"name\":\"x\",\"age\":-1}", 18);
    expect(c, "{\"name\":\"x\",\"age\":131}", 20);
    expect(c, "{\"name\":\"toolong\"}", 14);
    expect(c, "{\"name\":\"x\",\"zzz\":1}", 13);
    expect(c, "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"a\"]}", 27);
    expect(c, "{\"name\":\"x\"", 11);
    mask_walk(c, "{\"name\":\"ab\",\"age\":12,\"tags\":[\"a\"]}");
    mask_walk(c, "{ \"name\": \"abc\" }");
    v4g_constraint_unref(c);
    /* compact: no whitespace */
    c = compile(V4G_JSON_SCHEMA, PERSON, 1);
    expect(c, "{ \"name\":\"x\"}", 1);
    v4g_constraint_unref(c);
    /* extra keys allowed, but not under a listed name */
    c = compile(V4G_JSON_SCHEMA, "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}", 0);
    expect(c, "{\"a\":1,\"b\":\"x\"}", -1);
    expect(c, "{\"b\":\"x\",\"ab\":\"y\"}", -1);
    expect(c, "{\"a\":\"x\"}", 5);
    expect(c, "{\"b\":1}", 5);
    expect(c, "{\"a\":1,\"a\":\"x\"}", 9);
    mask_walk(c, "{\"a\":1,\"abc\":\"x\"}");
    v4g_constraint_unref(c);
    /* recursion through $ref, anyOf, nullable types, const objects */
    c = compile(V4G_JSON_SCHEMA,
                "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"next\":"
                "{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]},\"v\":{\"const\":{\"k\":[1,true]}}},"
                "\"additionalProperties\":false}}}",
                0);
    expect(c, "{\"next\":{\"next\":{\"next\":null}}}", -1);
    expect(c, "{\"v\":{\"k\":[1,true]}}", -1);
    expect(c, "{\"v\":{\"k\":[1,false]}}", 13);
    expect(c, "{\"next\":1}", 8);
    mask_walk(c, "{\"next\":{\"next\":null},\"v\":{\"k\":[1,true]}}");
    v4g_constraint_unref(c);
    /* what can never be written is left out: an optional property whose enum has no value
     * of its type, a false branch; a format the spec does not define is an annotation */
    c = compile(V4G_JSON_SCHEMA,
                "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"enum\":[\"x\"]},\"b\":{\"anyOf\":[false,"
                "{\"type\":\"integer\"}]},\"c\":{\"type\":\"string\",\"format\":\"int32\"}},\"additionalProperties\":false}",
                0);
    expect(c, "{\"b\":1,\"c\":\"q\"}", -1);
    expect(c, "{\"a\":", 2);
    mask_walk(c, "{\"b\":12}");
    v4g_constraint_unref(c);
    c = compile(V4G_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"ipv6\"}", 0);
    expect(c, "\"::1\"", -1);
    expect(c, "\"2001:db8::ff00:42:8329\"", -1);
    expect(c, "\"::ffff:192.0.2.128\"", -1);
    expect(c, "\"1::2::3\"", 6);
    v4g_constraint_unref(c);
    /* oneOf by required keys: exactly one of the alternatives' keys */
    c = compile(V4G_JSON_SCHEMA,
                "{\"type\":\"object\",\"properties\":{\"wkt\":{\"type\":\"string\"},\"wkid\":{\"type\":\"integer\"},"
                "\"z\":{\"type\":\"integer\"}},\"oneOf\":[{\"required\":[\"wkt\"]},{\"required\":[\"wkid\"]}]}",
                0);
    expect(c, "{\"wkt\":\"a\",\"z\":1}", -1);
    expect(c, "{\"wkid\":1}", -1);
    expect(c, "{\"wkt\":\"a\",\"wkid\":1}", 16);
    expect(c, "{\"z\":1}", 2);
    mask_walk(c, "{\"wkid\":12,\"z\":3}");
    v4g_constraint_unref(c);
    /* allOf beside additionalProperties false: the other branch's properties are extra */
    c = compile(V4G_JSON_SCHEMA,
                "{\"allOf\":[{\"properties\":{\"w\":{\"type\":\"integer\"}}}],\"properties\":{\"id\":{\"type\":\"string\"}},"
                "\"additionalProperties\":false,\"type\":\"object\"}",
                0);
    expect(c, "{\"id\":\"x\"}", -1);
    expect(c, "{\"id\":\"x\",\"w\":1}", 9);
    v4g_constraint_unref(c);
    /* patternProperties beside additionalProperties: keys by their pattern, the others free */
    c = compile(V4G_JSON_SCHEMA,
                "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"patternProperties\":{\"^x-\":{\"type\":"
                "\"string\"},\"[0-9]$\":{\"type\":\"boolean\"}},\"additionalProperties\":{\"type\":\"integer\"}}",
                0);
    expect(c, "{\"id\":1,\"x-a\":\"s\",\"k9\":true,\"other\":3}", -1);
    expect(c, "{\"x-a\":3}", 7);
    expect(c, "{\"k9\":3}", 6);
    expect(c, "{\"other\":\"s\"}", 9);
    expect(c, "{\"id\":1,\"id\":2}", 11);
    mask_walk(c, "{\"x-ab\":\"s\",\"abc\":12,\"ab0\":false}");
    mask_walk(c, "{\"name\":3}");
    v4g_constraint_unref(c);
    /* json_object: any object */
    c = compile(V4G_JSON_OBJECT, "", 0);
    expect(c, "{\"a\":[1,{\"b\":null}],\"c\":-1.5e3}", -1);
    expect(c, "[1]", 0);
    mask_walk(c, "{\"name\":[12,true,\"x\"]}");
    v4g_constraint_unref(c);
    /* formats and patterns */
    c = compile(V4G_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\"}", 0);
    expect(c, "\"2024-02-29\"", -1);
    expect(c, "\"2024-13-01\"", 7);
    v4g_constraint_unref(c);
    c = compile(V4G_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^[a-z]+\\\\d$\"}", 0);
    expect(c, "\"abc1\"", -1);
    expect(c, "\"abc\"", 4);
    v4g_constraint_unref(c);
    c = compile(V4G_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"x\"}", 0);
    expect(c, "\"axb\"", -1);
    expect(c, "\"ab\"", 3);
    expect(c, "\"a\\\"x\\n\"", -1);
    v4g_constraint_unref(c);
}

static void test_errors(void)
{
    static const struct {
        const char *schema, *where, *word;
    } cases[] = {
        {"{\"not\":{}}", "/not", "not"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "/uniqueItems", "uniqueItems"},
        {"{\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"idn-email\"}}}", "/properties/a/format", "format"},
        {"{\"properties\":{\"a/b\":{\"$ref\":\"#/nowhere\"}}}", "/properties/a~1b/$ref", "nowhere"},
        {"{\"type\":\"number\",\"multipleOf\":3}", "/multipleOf", "multipleOf"},
        {"{\"type\":\"string\",\"pattern\":\"(?!x)\"}", "/pattern", "lookaround"},
        {"{\"type\":\"blob\"}", "/type", "unknown type"},
        {"{\"type\":\"object\",\"minProperties\":2}", "/minProperties", "minProperties"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "/$ref", "local"},
        {"{\"anyOf\":[]}", "/anyOf", "anyOf"},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", "", "admits no text"},
        {"{\"type\":\"string\",\"format\":\"uri-template\"}", "/format", "uri-template"},
        {"not json", "", "not JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        v4_error err = {0};
        v4g_constraint *c = v4g_compile(V4G_JSON_SCHEMA, cases[i].schema, strlen(cases[i].schema), NULL, &err);
        CHECK(!c, "'%s' compiled", cases[i].schema);
        v4g_constraint_unref(c);
        if (cases[i].where[0])
            CHECK(!strcmp(err.where, cases[i].where), "'%s': where '%s', want '%s' (%s)", cases[i].schema, err.where,
                  cases[i].where, err.msg);
        CHECK(strstr(err.msg, cases[i].word) != NULL, "'%s': message '%s' lacks '%s'", cases[i].schema, err.msg,
              cases[i].word);
        CHECK(err.code == V4_ERR_INVALID, "'%s': code %d", cases[i].schema, err.code);
    }
    /* annotations are fine */
    v4_error err = {0};
    const char *ok = "{\"title\":\"t\",\"description\":\"d\",\"examples\":[1],\"default\":1,\"type\":\"integer\"}";
    v4g_constraint *c = v4g_compile(V4G_JSON_SCHEMA, ok, strlen(ok), NULL, &err);
    CHECK(c != NULL, "annotations: %s", err.msg);
    v4g_constraint_unref(c);
}

/* integer and number bounds against arithmetic */
static void test_bounds(void)
{
    static const char *const INT_CASES[] = {
        "{\"type\":\"integer\",\"minimum\":-37,\"maximum\":1205}",
        "{\"type\":\"integer\",\"exclusiveMinimum\":9,\"exclusiveMaximum\":100}",
        "{\"type\":\"integer\",\"minimum\":-1000,\"maximum\":-10}",
        "{\"type\":\"integer\",\"minimum\":99}",
        "{\"type\":\"integer\",\"maximum\":-5}",
    };
    const long lo[] = {-37, 10, -1000, 99, -100000}, hi[] = {1205, 99, -10, 100000, -5};
    for (size_t k = 0; k < sizeof INT_CASES / sizeof *INT_CASES; k++) {
        v4g_constraint *c = compile(V4G_JSON_SCHEMA, INT_CASES[k], 1);
        if (!c)
            continue;
        int bad = 0;
        for (long x = -2000; x <= 2000 && bad < 3; x += (x > -60 && x < 1300) ? 1 : 7) {
            char t[32];
            snprintf(t, sizeof t, "%ld", x);
            int want = x >= lo[k] && x <= hi[k], got = run_text(c, t) == -1;
            if (want != got) {
                bad++;
                CHECK(0, "%s: %ld accepted %d, want %d", INT_CASES[k], x, got, want);
            }
        }
        CHECK(run_text(c, "007") != -1, "%s: leading zeros refused", INT_CASES[k]);
        v4g_constraint_unref(c);
    }
    static const char *const NUM_CASES[] = {
        "{\"type\":\"number\",\"minimum\":0}",
        "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}",
        "{\"type\":\"number\",\"minimum\":-5,\"exclusiveMaximum\":5}",
        "{\"type\":\"number\",\"minimum\":-20,\"maximum\":-3}",
    };
    const double nlo[] = {0, 0, -5, -20}, nhi[] = {1e9, 1, 5, -3};
    const int lo_ex[] = {0, 1, 0, 0}, hi_ex[] = {0, 0, 1, 0};
    for (size_t k = 0; k < sizeof NUM_CASES / sizeof *NUM_CASES; k++) {
        v4g_constraint *c = compile(V4G_JSON_SCHEMA, NUM_CASES[k], 1);
        if (!c)
            continue;
        int bad = 0;
        for (int x = -250; x <= 250 && bad < 3; x++) {
            for (int form = 0; form < 3; form++) {
                char t[32];
                double v = x / 10.0;
                if (form == 0 && x % 10)
                    continue;
                if (form == 0)
                    snprintf(t, sizeof t, "%d", x / 10);
                else if (form == 1)
                    snprintf(t, sizeof t, "%.1f", v);
                else
                    snprintf(t, sizeof t, "%.3f", v);
                if (!strcmp(t, "-0") || !strncmp(t, "-0.0", 4) || !strcmp(t, "-0.000"))
                    continue;   /* negative zero: not produced, not checked */
                int want = (lo_ex[k] ? v > nlo[k] : v >= nlo[k]) && (hi_ex[k] ? v < nhi[k] : v <= nhi[k]);
                int got = run_text(c, t) == -1;
                if (want != got) {
                    bad++;
                    CHECK(0, "%s: %s accepted %d, want %d", NUM_CASES[k], t, got, want);
                }
            }
        }
        v4g_constraint_unref(c);
    }
}

/* lexer states inside strings of several kinds at once (length bounds, keys ruled out,
 * two string types accepted together) take their mask cache from the vocabulary's string
 * cache (gr_strcache.c's gr_str_fill): the masks must still equal commit-on-a-fork */
static void test_string_states(void)
{
    static const struct {
        const char *schema, *text, *bad;
        long bad_at;
    } CASES[] = {
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}", "\"a\\nbc\"", "\"abcde\"", 5},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}", "\"\xc3\xa9" "abc\"", "\"a\"", 2},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"minLength\":4,\"maxLength\":6}]}",
         "\"abcde\"", "\"abc\"", 4},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"minLength\":4,\"maxLength\":6}]}",
         "\"ab\"", "\"abcdefg\"", 7},
        {"{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}}",
         "[\"ab\",\"abcdef\",\"\"]", "[\"ab\"1", 5},
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"next\":{\"type\":\"integer\"}},"
         "\"additionalProperties\":{\"type\":\"string\",\"maxLength\":3}}",
         "{\"name\":\"abcdef\",\"next\":12,\"nam\":\"ab\",\"nextx\":\"\",\"\":\"yes\"}", "{\"nam\":\"abcd\"}", 11},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":300}", "\"abcabcabcabcnamenextnull\"", "\"ab\"", 3},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
        v4g_constraint *c = compile(V4G_JSON_SCHEMA, CASES[k].schema, 1);
        if (!c)
            continue;
        expect(c, CASES[k].text, -1);
        expect(c, CASES[k].bad, CASES[k].bad_at);
        mask_walk(c, CASES[k].text);
        v4g_constraint_unref(c);
    }
}

static void test_cache(void)
{
    v4g_cache *k = v4g_cache_new(1 << 20);
    v4_error err = {0};
    int hit = -1;
    v4g_constraint *a = v4g_cache_get(k, V4G_JSON_SCHEMA, PERSON, strlen(PERSON), NULL, &hit, &err);
    CHECK(a && hit == 0, "first get compiles: %s", err.msg);
    v4g_constraint *b = v4g_cache_get(k, V4G_JSON_SCHEMA, PERSON, strlen(PERSON), NULL, &hit, &err);
    CHECK(b == a && hit == 1, "second get is the same constraint, a hit");
    v4g_opts compact = {.compact = 1};
    v4g_constraint *c = v4g_cache_get(k, V4G_JSON_SCHEMA, PERSON, strlen(PERSON), &compact, &hit, &err);
    CHECK(c && c != a && hit == 0, "other options: another entry");
    CHECK(!v4g_cache_get(k, V4G_JSON_SCHEMA, "{\"not\":{}}", 10, NULL, &hit, &err) && !strcmp(err.where, "/not"),
          "a compile error comes back through the cache: %s", err.where);
    if (c)
        CHECK(run_text(c, "{ \"name\":\"x\"}") == 1, "the cached compact constraint refuses whitespace");
    v4g_cache_figs f;
    v4g_cache_stats(k, &f);
    CHECK(f.entries == 2 && f.hits == 1 && f.misses == 3 && f.bytes > 0, "stats: %zu entries, %llu hits, %llu misses",
          f.entries, (unsigned long long)f.hits, (unsigned long long)f.misses);
    v4g_constraint_unref(a);
    v4g_constraint_unref(b);
    v4g_constraint_unref(c);
    /* a budget of one byte keeps only the latest entry */
    v4g_cache *tiny = v4g_cache_new(1);
    for (int i = 0; i < 5; i++) {
        char re[32];
        snprintf(re, sizeof re, "a{%d}", i + 1);
        v4g_constraint_unref(v4g_cache_get(tiny, V4G_REGEX, re, strlen(re), NULL, &hit, &err));
    }
    v4g_cache_stats(tiny, &f);
    CHECK(f.entries == 1, "a tiny budget keeps %zu entries", f.entries);
    v4g_cache_free(tiny);
    v4g_cache_free(k);
}

int main(void)
{
    make_vocab();
    if (!V)
        TEST_DONE();
    test_regex();
    test_choice();
    test_schema();
    test_errors();
    test_bounds();
    test_string_states();
    test_cache();
    v4g_vocab_free(V);
    for (int i = 0; i < SRC.n - 1; i++)
        free(SRC.tok[i]);
    free(SRC.tok);
    TEST_DONE();
}
