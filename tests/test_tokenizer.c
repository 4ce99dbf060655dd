/* test_tokenizer.c - the DeepSeek tokenizer against the golden cases
 * (tests/data/tokenizer/cases.jsonl: every text encodes to exactly its ids and the ids
 * decode back to the text, whole and streamed), special tokens inside text, the
 * streaming decoder on characters split across tokens, linear-time encoding of a
 * 1 MB single "word", and the error paths (missing/bad files, unknown ids, invalid
 * UTF-8, unsupported components). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include "testutil.h"
#include "worker/tokenizer/tok_internal.h"
#include "worker/tokenizer/tokenizer.h"

static char data[4096], tmp[4096];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of this thread: what the encode itself costs, not the time slices other
 * processes took from it (a busy machine stretches wall time, not this). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Independent strict UTF-8 check (no overlongs, surrogates, > U+10FFFF). */
static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && c < 0xC2))
            return 0;
        uint32_t cp = k == 1 ? c : c & (0xFF >> (k + 1));
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k;
    }
    return 1;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Streamed decode of ids: every chunk valid UTF-8; returns the concatenation. */
static char *stream_decode(const v4_tokenizer *t, const int32_t *ids, size_t n, int *chunks_ok)
{
    v4_error err = {0};
    v4_tok_stream *s = v4_tok_stream_new(t, 0, &err);
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    *chunks_ok = 1;
    for (size_t i = 0; i <= n; i++) {
        const char *c;
        size_t k;
        if (i < n) {
            if (v4_tok_stream_feed(s, ids[i], &c, &k, &err)) {
                *chunks_ok = 0;
                break;
            }
        } else {
            v4_tok_stream_flush(s, &c, &k);
        }
        if (!valid_utf8(c, k))
            *chunks_ok = 0;
        while (len + k + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + len, c, k);
        len += k;
    }
    out[len] = 0;
    v4_tok_stream_free(s);
    return out;
}

static void test_cases(const v4_tokenizer *t)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer/cases.jsonl", data);
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot open %s", path);
    if (!f)
        return;
    v4_error err = {0};
    v4_tok_encoder *enc = v4_tok_encoder_new(t, &err);
    char *line = NULL;
    size_t cap = 0;
    int n = 0, enc_bad = 0, dec_bad = 0, stream_bad = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_t *text = json_object_get(o, "text"), *ids = json_object_get(o, "ids");
        CHECK(json_is_string(text) && json_is_array(ids), "case %d: bad line", n);
        if (!json_is_string(text) || !json_is_array(ids)) {
            json_decref(o);
            continue;
        }
        const char *s = json_string_value(text);
        size_t len = json_string_length(text), m = json_array_size(ids);
        v4_ids got = {0};
        int rc = v4_tok_encoder_run(enc, s, len, &got, &err);
        int same = !rc && got.n == m;
        for (size_t i = 0; same && i < m; i++)
            same = got.v[i] == json_integer_value(json_array_get(ids, i));
        if (!same && enc_bad++ < 5) {
            fprintf(stderr, "case %d: encode mismatch (rc %d, %zu ids, want %zu): %s\n  got:", n, rc,
                    got.n, m, s);
            for (size_t i = 0; i < got.n && i < 40; i++)
                fprintf(stderr, " %d", got.v[i]);
            fprintf(stderr, "\n");
        }
        int32_t *want = malloc((m + 1) * sizeof *want);
        for (size_t i = 0; i < m; i++)
            want[i] = (int32_t)json_integer_value(json_array_get(ids, i));
        char *back;
        size_t blen;
        rc = v4_tok_decode(t, want, m, 0, &back, &blen, &err);
        if ((rc || blen != len || memcmp(back, s, len)) && dec_bad++ < 5)
            fprintf(stderr, "case %d: decode mismatch: %s\n", n, rc ? err.msg : back);
        int ok;
        char *st = stream_decode(t, want, m, &ok);
        if ((!ok || strlen(st) != len || memcmp(st, s, len)) && stream_bad++ < 5)
            fprintf(stderr, "case %d: stream decode mismatch\n", n);
        free(st);
        free(back);
        free(want);
        v4_ids_free(&got);
        json_decref(o);
        n++;
    }
    free(line);
    fclose(f);
    v4_tok_encoder_free(enc);
    printf("cases: %d, encode mismatches %d, decode mismatches %d, stream mismatches %d\n", n,
           enc_bad, dec_bad, stream_bad);
    CHECK(n >= 600, "only %d cases", n);
    CHECK(enc_bad == 0, "%d cases encode differently", enc_bad);
    CHECK(dec_bad == 0, "%d cases decode differently", dec_bad);
    CHECK(stream_bad == 0, "%d cases stream-decode differently", stream_bad);
}

static int ids_eq(const v4_ids *a, const int32_t *b, size_t n)
{
    if (a->n != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (a->v[i] != b[i])
            return 0;
    return 1;
}

static void test_special(const v4_tokenizer *t)
{
    v4_error err = {0};
    int32_t user = v4_tok_find(t, "<｜User｜>"), asst = v4_tok_find(t, "<｜Assistant｜>");
    int32_t bos = v4_tok_bos(t), eos = v4_tok_eos(t);
    /* the values of this V3 file (read from it, pinned here) */
    CHECK(bos == 0 && eos == 1, "bos %d eos %d", bos, eos);
    CHECK(user == 128803 && asst == 128804, "user %d assistant %d", user, asst);
    CHECK(v4_tok_bos_text(t) && !strcmp(v4_tok_bos_text(t), "<｜begin▁of▁sentence｜>"), "bos text");
    CHECK(v4_tok_is_special(t, bos) && !v4_tok_is_special(t, user), "special flags");
    CHECK(v4_tok_find(t, "<think>") < 0, "the V3 file has no <think> token");
    CHECK(v4_tok_find(t, "hello") >= 0 && v4_tok_find(t, " hello") >= 0, "vocab lookup");

    const char *s = "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><｜end▁of▁sentence｜>";
    v4_ids ids = {0};
    CHECK(!v4_tok_encode(t, s, strlen(s), &ids, &err), "%s", err.msg);
    int32_t hi = v4_tok_find(t, "hi");
    int32_t want[] = {bos, user, hi, asst, eos};
    CHECK(ids_eq(&ids, want, 5), "special tokens inside text (%zu ids)", ids.n);
    char *back;
    size_t blen;
    CHECK(!v4_tok_decode(t, ids.v, ids.n, 0, &back, &blen, &err) && !strcmp(back, s), "round trip");
    free(back);
    CHECK(!v4_tok_decode(t, ids.v, ids.n, V4_TOK_SKIP_SPECIAL, &back, &blen, &err) &&
              !strcmp(back, "<｜User｜>hi<｜Assistant｜>"), "skip special: %s", back);
    free(back);
    v4_ids_free(&ids);

    /* an incomplete special token is ordinary text; adjacent ones are both found */
    s = "<｜User｜<｜User｜><｜User｜>";
    CHECK(!v4_tok_encode(t, s, strlen(s), &ids, &err), "%s", err.msg);
    CHECK(ids.n >= 3 && ids.v[ids.n - 1] == user && ids.v[ids.n - 2] == user &&
              ids.v[ids.n - 3] != user, "partial special token");
    v4_ids_free(&ids);

    /* encode appends */
    CHECK(!v4_tok_encode(t, "a", 1, &ids, &err) && !v4_tok_encode(t, "b", 1, &ids, &err) &&
              ids.n == 2, "append");
    v4_ids_free(&ids);
    CHECK(!v4_tok_encode(t, "", 0, &ids, &err) && ids.n == 0, "empty text");
    v4_ids_free(&ids);
}

/* A character split across tokens is held back until complete. */
static void test_stream_split_char(const v4_tokenizer *t)
{
    v4_error err = {0};
    /* "é" = C3 A9, "€" = E2 82 AC: byte tokens one at a time */
    const char *bytes = "\xC3\xA9\xE2\x82\xAC";
    int32_t ids[5];
    for (int i = 0; i < 5; i++) {
        char b[2] = {bytes[i], 0};
        size_t len;
        ids[i] = -1;
        for (int32_t id = 0; id < v4_tok_n_ids(t) && ids[i] < 0; id++) {
            const char *p = v4_tok_bytes(t, id, &len);
            if (p && len == 1 && p[0] == b[0])
                ids[i] = id;
        }
        CHECK(ids[i] >= 0, "byte token %d", i);
    }
    v4_tok_stream *s = v4_tok_stream_new(t, 0, &err);
    const char *c;
    size_t k;
    const size_t want_len[5] = {0, 2, 0, 0, 3};
    for (int i = 0; i < 5; i++) {
        CHECK(!v4_tok_stream_feed(s, ids[i], &c, &k, &err), "feed");
        CHECK(k == want_len[i], "chunk %d has %zu bytes, want %zu", i, k, want_len[i]);
    }
    CHECK(!memcmp(c, "\xE2\x82\xAC", 3), "euro sign");
    /* an unfinished character at the end becomes U+FFFD at flush */
    CHECK(!v4_tok_stream_feed(s, ids[2], &c, &k, &err) && k == 0, "held");
    v4_tok_stream_flush(s, &c, &k);
    CHECK(k == 3 && !memcmp(c, "\xEF\xBF\xBD", 3), "flush gives U+FFFD");
    v4_tok_stream_flush(s, &c, &k);
    CHECK(k == 0, "second flush empty");
    /* a lead byte followed by a non-continuation: U+FFFD then the character */
    CHECK(!v4_tok_stream_feed(s, ids[2], &c, &k, &err) && k == 0, "held again");
    CHECK(!v4_tok_stream_feed(s, ids[0], &c, &k, &err) && k == 3 && !memcmp(c, "\xEF\xBF\xBD", 3),
          "invalid subpart replaced (%zu)", k);
    CHECK(!v4_tok_stream_feed(s, ids[1], &c, &k, &err) && k == 2, "then é");
    /* an id with no token: no text, counted (as Hugging Face drops it); a negative id:
     * error, stream unchanged */
    CHECK(!v4_tok_stream_feed(s, ids[2], &c, &k, &err) && k == 0, "held once more");
    CHECK(!v4_tok_stream_feed(s, v4_tok_n_ids(t) + 5, &c, &k, &err) && k == 0 && v4_tok_stream_unknown(s) == 1,
          "id past the vocabulary in a stream: no text, counted (%zu)", v4_tok_stream_unknown(s));
    CHECK(v4_tok_stream_feed(s, -1, &c, &k, &err) && err.code == V4_ERR_RANGE, "negative id");
    CHECK(!v4_tok_stream_feed(s, ids[3], &c, &k, &err) && k == 0, "still pending");
    CHECK(!v4_tok_stream_feed(s, ids[4], &c, &k, &err) && k == 3, "euro completes after errors");
    v4_tok_stream_free(s);

    char *text;
    size_t len;
    CHECK(!v4_tok_decode(t, ids, 3, 0, &text, &len, &err) && len == 5 &&
              !memcmp(text, "\xC3\xA9\xEF\xBF\xBD", 5), "decode: trailing partial char -> U+FFFD");
    free(text);
}

/* "Well under a second" of CPU time for a 1 MB word in a normal build (~0.1-0.3 s
 * here); the sanitizers slow everything down ~3x, and a quadratic merge loop would take
 * minutes.  Measured as the thread's CPU time (cpu_now): under V4_TEST_STRESS=2 the wall
 * time of the same encode reached 1.09 s. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LONG_WORD_LIMIT_S 4.0
#else
#define LONG_WORD_LIMIT_S 1.0
#endif

static void test_long_word(const v4_tokenizer *t)
{
    v4_error err = {0};
    const size_t n = 1 << 20;
    char *s = malloc(n + 1);
    uint64_t x = 42;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = round == 0 ? 'a' : round == 1 ? (char)('a' + (x >> 33) % 26)
                                                 : (char)("abAB"[(x >> 33) % 4]);
        }
        s[n] = 0;
        v4_ids ids = {0};
        double t0 = cpu_now();
        int rc = v4_tok_encode(t, s, n, &ids, &err);
        double dt = cpu_now() - t0;
        printf("1 MB single word (%s): %zu ids in %.3f s of CPU time\n",
               round == 0 ? "aaaa..." : round == 1 ? "random letters" : "abAB...", ids.n, dt);
        CHECK(!rc, "%s", err.msg);
        CHECK(dt < LONG_WORD_LIMIT_S, "1 MB single word took %.3f s", dt);
        char *back;
        size_t blen;
        CHECK(!v4_tok_decode(t, ids.v, ids.n, 0, &back, &blen, &err) && blen == n && !memcmp(back, s, n),
              "1 MB round trip");
        free(back);
        v4_ids_free(&ids);
    }
    /* 1 MB of spaces and of digits (other regex branches) */
    for (int round = 0; round < 2; round++) {
        memset(s, round ? '7' : ' ', n);
        v4_ids ids = {0};
        double t0 = cpu_now();
        int rc = v4_tok_encode(t, s, n, &ids, &err);
        double dt = cpu_now() - t0;
        CHECK(!rc && dt < LONG_WORD_LIMIT_S, "1 MB of '%c' took %.3f s", s[0], dt);
        v4_ids_free(&ids);
    }
    free(s);
}

static void test_errors(const v4_tokenizer *t)
{
    v4_error err = {0};
    v4_tokenizer *bad = NULL;
    char dir[4200], path[4300];
    CHECK(v4_tok_load("/nonexistent/tokenizer", &bad, &err) && !bad && err.code == V4_ERR_IO,
          "missing dir");
    snprintf(dir, sizeof dir, "%s/tok_err", tmp);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0, "mkdir");
    CHECK(v4_tok_load(dir, &bad, &err) && err.code == V4_ERR_IO && strstr(err.where, "tokenizer.json"),
          "missing tokenizer.json: %s: %s", err.where, err.msg);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_file(path, "{\"model\": {\"vocab\": {\"a\": 0}, ");
    CHECK(v4_tok_load(dir, &bad, &err) && err.code == V4_ERR_FORMAT && strstr(err.msg, "invalid JSON"),
          "bad JSON: %s", err.msg);
    write_file(path, "[1, 2]");
    CHECK(v4_tok_load(dir, &bad, &err) && err.code == V4_ERR_FORMAT, "not an object");
    write_file(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}");
    CHECK(v4_tok_load(dir, &bad, &err) && strstr(err.msg, "byte 0x"), "no byte vocab: %s", err.msg);

    /* a minimal valid byte-level file, then broken variants of it */
    char json[40000];
    size_t o = (size_t)snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        unsigned cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? (unsigned)b : 0;
        static int extra;
        if (b == 0)
            extra = 0;
        if (!cp)
            cp = 256 + extra++;
        char u[8];
        if (cp < 0x80)
            snprintf(u, sizeof u, cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : cp == '%' ? "%%%%" : "%c", cp);
        else
            snprintf(u, sizeof u, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
        o += (size_t)snprintf(json + o, sizeof json - o, "\"%s\": %d, ", u, b);
    }
    o += (size_t)snprintf(json + o, sizeof json - o, "\"ab\": 256}, \"merges\": [%%s]}, "
                          "\"pre_tokenizer\": %%s, \"decoder\": {\"type\": \"ByteLevel\"}}");
    struct {
        const char *merges, *pretok, *want;
    } v[] = {
        {"\"a b\"", "{\"type\": \"ByteLevel\", \"use_regex\": false}", NULL},
        {"[\"a\", \"b\"]", "null", NULL},
        {"\"a c\"", "null", "is not in the vocab"},
        {"\"a  b\"", "null", "one space"},
        {"\"a b\"", "{\"type\": \"Metaspace\"}", "not supported"},
        {"\"a b\"", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}",
         "invalid regex"},
        {"\"a b\"", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Bogus\"}",
         "behavio"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char full[48000];
        snprintf(full, sizeof full, json, v[i].merges, v[i].pretok);
        v4_tokenizer *tk = NULL;
        int rc = v4_tok_load_mem(full, strlen(full), NULL, 0, "mem", &tk, &err);
        if (!v[i].want) {
            CHECK(!rc, "variant %zu should load: %s", i, err.msg);
            v4_ids ids = {0};
            CHECK(tk && !v4_tok_encode(tk, "xab", 3, &ids, &err) && ids.n == 2 && ids.v[1] == 256,
                  "variant %zu: merge used", i);
            v4_ids_free(&ids);
        } else {
            CHECK(rc && strstr(err.msg, v[i].want), "variant %zu: want '%s', got '%s'", i, v[i].want,
                  err.msg);
        }
        v4_tok_free(tk);
    }
    /* config naming a token that does not exist */
    {
        char full[48000];
        snprintf(full, sizeof full, json, "\"a b\"", "null");
        const char *cfg = "{\"bos_token\": \"<nope>\"}";
        v4_tokenizer *tk = NULL;
        CHECK(v4_tok_load_mem(full, strlen(full), cfg, strlen(cfg), "mem", &tk, &err) &&
                  err.code == V4_ERR_CONFIG, "unknown bos_token: %s", err.msg);
        cfg = "{\"bos_token\": {\"content\": \"ab\"}, \"eos_token\": null}";
        CHECK(!v4_tok_load_mem(full, strlen(full), cfg, strlen(cfg), "mem", &tk, &err) &&
                  v4_tok_bos(tk) == 256 && v4_tok_eos(tk) == -1, "bos from config");
        v4_tok_free(tk);
    }

    /* decode / encode errors on the real tokenizer */
    /* ids with no token (past the vocabulary, inside the model's 129280 rows) decode to
     * nothing, as Hugging Face tokenizers drops them; a negative id is an error */
    int32_t ids[3] = {100, v4_tok_n_ids(t), 5}, two[2] = {100, 5};
    char *text = NULL, *want = NULL;
    size_t len, wlen;
    CHECK(!v4_tok_decode(t, two, 2, 0, &want, &wlen, &err), "decode: %s", err.msg);
    CHECK(!v4_tok_decode(t, ids, 3, 0, &text, &len, &err) && want && len == wlen && !memcmp(text, want, len) &&
              v4_tok_count_unknown(t, ids, 3) == 1,
          "id %d past the vocabulary: dropped: %s", (int)ids[1], err.msg);
    free(text);
    text = NULL;
    ids[1] = 129279;    /* the model's last row */
    CHECK(!v4_tok_decode(t, ids, 3, 0, &text, &len, &err) && len == wlen && v4_tok_count_unknown(t, ids, 3) == 1,
          "id 129279: dropped");
    free(text);
    free(want);
    text = NULL;
    ids[1] = -3;
    CHECK(v4_tok_decode(t, ids, 3, 0, &text, &len, &err) && err.code == V4_ERR_RANGE && !text,
          "negative id: %s", err.msg);
    v4_ids out = {0};
    CHECK(!v4_tok_encode(t, "ok", 2, &out, &err), "encode ok");
    size_t before = out.n;
    CHECK(v4_tok_encode(t, "abc\xFF", 4, &out, &err) && err.code == V4_ERR_INVALID && out.n == before,
          "invalid UTF-8 rejected, nothing appended: %s", err.msg);
    CHECK(v4_tok_encode(t, "\xED\xA0\x80", 3, &out, &err), "surrogate rejected");
    v4_ids_free(&out);
}

/* A minimal byte-level tokenizer JSON: 256 byte tokens (id = byte), "ab" = 256 with
 * merge "a b", the given pre_tokenizer and added_tokens. */
static char *mini_json(const char *pretok, const char *added)
{
    size_t cap = 64000, o = 0;
    char *j = malloc(cap);
    o += (size_t)snprintf(j + o, cap - o, "{\"added_tokens\": %s, \"model\": {\"type\": \"BPE\", \"vocab\": {", added);
    for (int b = 0; b < 256; b++) {
        char u[8];
        int k = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), u);
        u[k] = 0;
        if (b == '"' || b == '\\')
            snprintf(u, sizeof u, "\\%c", b);
        o += (size_t)snprintf(j + o, cap - o, "\"%s\": %d, ", u, b);
    }
    snprintf(j + o, cap - o, "\"ab\": 256}, \"merges\": [\"a b\"]}, \"pre_tokenizer\": %s, "
             "\"decoder\": {\"type\": \"ByteLevel\"}}", pretok);
    return j;
}

typedef struct pieces {
    char text[256];
} pieces;

static int collect_piece(v4_tok_encoder *e, const char *p, size_t n)
{
    pieces *pc = e->piece_ctx;
    size_t o = strlen(pc->text);
    snprintf(pc->text + o, sizeof pc->text - o, "%s%.*s", o ? "|" : "", (int)n, p);
    return 0;
}

/* HF's SplitDelimiterBehavior examples ("the-final--countdown" in split.rs). */
static void test_split_behaviors(void)
{
    static const struct {
        const char *behavior;
        int invert;
        const char *want;
    } cases[] = {
        {"Removed", 0, "a|b|c"},
        {"Isolated", 0, "a|-|b|-|-|c"},
        {"MergedWithPrevious", 0, "a-|b-|-|c"},
        {"MergedWithNext", 0, "a|-b|-|-c"},
        {"Contiguous", 0, "a|-|b|--|c"},
        {"Removed", 1, "-|-|-"},
        {"Isolated", 1, "a|-|b|-|-|c"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char pre[256];
        snprintf(pre, sizeof pre, "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, "
                 "\"behavior\": \"%s\", \"invert\": %s}", cases[i].behavior, cases[i].invert ? "true" : "false");
        char *j = mini_json(pre, "[]");
        v4_error err = {0};
        v4_tokenizer *t = NULL;
        CHECK(!v4_tok_load_mem(j, strlen(j), NULL, 0, "mini", &t, &err), "%s", err.msg);
        free(j);
        if (!t)
            continue;
        v4_tok_encoder *e = v4_tok_encoder_new(t, &err);
        pieces pc = {{0}};
        CHECK(!v4_tok_encoder_pieces(e, "a-b--c", 6, collect_piece, &pc, NULL, &err), "%s", err.msg);
        CHECK(!strcmp(pc.text, cases[i].want), "%s%s: got %s, want %s", cases[i].behavior,
              cases[i].invert ? " (invert)" : "", pc.text, cases[i].want);
        v4_tok_encoder_free(e);
        v4_tok_free(t);
    }
}

/* Added tokens with lstrip / rstrip take the whitespace next to them. */
static void test_added_strip(void)
{
    char *j = mini_json("null", "[{\"id\": 300, \"content\": \"<m>\", \"lstrip\": true, \"rstrip\": true},"
                                " {\"id\": 301, \"content\": \"<m>x\"}, {\"id\": 302, \"content\": \"<n>\"}]");
    v4_error err = {0};
    v4_tokenizer *t = NULL;
    CHECK(!v4_tok_load_mem(j, strlen(j), NULL, 0, "mini", &t, &err), "%s", err.msg);
    free(j);
    if (!t)
        return;
    v4_ids ids = {0};
    const char *s = "ab \u3000 <m> \t b <m>x<n> ab";
    CHECK(!v4_tok_encode(t, s, strlen(s), &ids, &err), "%s", err.msg);
    /* "ab" | <m> (eats " \u3000 " and " \t ") | "b " | <m>x (longest) | <n> | " " "ab" */
    const int32_t want[] = {256, 300, 'b', ' ', 301, 302, ' ', 256};
    int same = ids.n == 8;
    for (size_t i = 0; same && i < 8; i++)
        same = ids.v[i] == want[i];
    CHECK(same, "lstrip/rstrip/longest match (%zu ids)", ids.n);
    v4_ids_free(&ids);
    v4_tok_free(t);
}

typedef struct job {
    const v4_tokenizer *t;
    const char *text;
    size_t len;
    v4_ids ids;
    int rc;
} job;

static void *encode_job(void *arg)
{
    job *j = arg;
    v4_error err = {0};
    for (int r = 0; r < 5 && !j->rc; r++) {
        j->ids.n = 0;
        j->rc = v4_tok_encode(j->t, j->text, j->len, &j->ids, &err);
    }
    return NULL;
}

/* One tokenizer shared by 4 threads, each with its own encoder: same ids. */
static void test_threads(const v4_tokenizer *t)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer/cases.jsonl", data);
    FILE *f = fopen(path, "rb");
    char *text = malloc(1 << 20);
    size_t len = f ? fread(text, 1, (1 << 20) - 1, f) : 0;
    if (f)
        fclose(f);
    v4_error err = {0};
    v4_ids ref = {0};
    CHECK(!v4_tok_encode(t, text, len, &ref, &err), "%s", err.msg);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){t, text, len, {0}, 0};
        pthread_create(&th[i], NULL, encode_job, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(!jobs[i].rc && jobs[i].ids.n == ref.n && !memcmp(jobs[i].ids.v, ref.v, ref.n * sizeof *ref.v),
              "thread %d", i);
        v4_ids_free(&jobs[i].ids);
    }
    v4_ids_free(&ref);
    free(text);
}

int main(void)
{
    snprintf(data, sizeof data, "%s", t_env("V4_TEST_DATA", "tests/data"));
    snprintf(tmp, sizeof tmp, "%s", t_env("V4_TMP", "/tmp"));
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tokenizer", data);
    v4_error err = {0};
    v4_tokenizer *t = NULL;
    double t0 = now();
    int rc = v4_tok_load(dir, &t, &err);
    printf("loaded %s in %.3f s\n", dir, now() - t0);
    CHECK(!rc, "load: %s: %s", err.where, err.msg);
    if (rc)
        TEST_DONE();
    CHECK(v4_tok_n_ids(t) == 128815, "n_ids %d", v4_tok_n_ids(t));
    test_cases(t);
    test_special(t);
    test_stream_split_char(t);
    test_long_word(t);
    test_errors(t);
    test_threads(t);
    test_split_behaviors();
    test_added_strip();
    v4_tok_free(t);
    TEST_DONE();
}
