/* tok_load.c - read tokenizer.json (+ tokenizer_config.json) with jansson into the
 * tables of tok_internal.h.
 *
 * Design: parse the whole JSON once, validate every component we rely on and reject
 * every feature we do not implement (an error naming the key, e.g.
 * "pre_tokenizer.pretokenizers[3]: type 'Metaspace' is not supported"), so that a
 * tokenizer either loads and encodes exactly like Hugging Face's or does not load.
 * Vocabulary strings are converted from the GPT-2 byte alphabet to raw bytes here;
 * an entry with a character outside that alphabet (DeepSeek's ids 0-2 mirror the
 * special tokens) keeps its UTF-8 bytes, which is what HF's ByteLevel decoder does.
 * Merges are looked up through jansson's own hash of the vocab object, so loading is
 * linear in the file size (~0.2 s for DeepSeek's 7.8 MB file).
 *
 * Post-processor: ignored (it only adds special tokens / offsets when asked to; we
 * never add special tokens implicitly - the chat encoder writes BOS as text).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tok_internal.h"

/* The ByteLevel pre-tokenizer's own split when use_regex is true (GPT-2's). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct loader {
    v4_tokenizer *t;
    const char *where;
    v4_error *err;
    char *buf;          /* scratch for merge strings */
    size_t buf_cap;
} loader;

static int fail(loader *L, v4_errcode code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(loader *L, v4_errcode code, const char *fmt, ...)
{
    char msg[sizeof L->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return v4_err_set(L->err, code, L->where, "%s", msg);
}

static int scratch(loader *L, size_t n)
{
    if (n <= L->buf_cap)
        return 0;
    size_t cap = L->buf_cap ? L->buf_cap : 256;
    while (cap < n)
        cap *= 2;
    char *b = realloc(L->buf, cap);
    if (!b)
        return fail(L, V4_ERR_NOMEM, "out of memory");
    L->buf = b;
    L->buf_cap = cap;
    return 0;
}

/* Optional boolean member (absent/null = dflt); -1 if present with another type. */
static int get_bool(const json_t *o, const char *key, int dflt)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return dflt;
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

static const char *get_type(const json_t *o)
{
    const json_t *v = json_object_get(o, "type");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ------------------------------------------------------------------- model */

/* Byte-level string -> raw bytes in L->buf; returns the length, or -1 if some
 * character is outside the byte alphabet (then the caller keeps the UTF-8). */
static long unbyte(loader *L, const char *s, size_t n)
{
    if (scratch(L, n + 1))
        return -2;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int k = tok_utf8_step(p + i, n - i);
        if (k <= 0)
            return -1;
        int b = tok_cp_to_byte(tok_utf8_decode(p + i, k));
        if (b < 0)
            return -1;
        L->buf[o++] = (char)b;
        i += (size_t)k;
    }
    return (long)o;
}

static int load_vocab(loader *L, const json_t *vocab)
{
    v4_tokenizer *t = L->t;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= (1 << 24))
            return fail(L, V4_ERR_FORMAT, "model.vocab[\"%.64s\"]: not a token id in [0, 2^24)", key);
        if (id < t->n_ids && (t->tokens[id].flags & TOK_VALID))
            return fail(L, V4_ERR_FORMAT, "model.vocab: id %lld is used twice", (long long)id);
        size_t klen = strlen(key);
        long n = unbyte(L, key, klen);
        if (n < -1)
            return -1;
        int rc = n >= 0 ? tok_set_entry(t, (int32_t)id, L->buf, (size_t)n, TOK_VALID, L->err)
                        : tok_set_entry(t, (int32_t)id, key, klen, TOK_VALID, L->err);
        if (rc)
            return -1;
    }
    for (int b = 0; b < 256; b++) {
        char s[5];
        int k = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), s);
        s[k] = 0;
        const json_t *v = json_object_get(vocab, s);
        if (!json_is_integer(v))
            return fail(L, V4_ERR_FORMAT,
                        "model.vocab has no entry \"%s\" for byte 0x%02x (not a byte-level BPE?)", s, b);
        t->byte_id[b] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* Split merge i into its two parts (in L->buf: a NUL b NUL a+b NUL). */
static int merge_parts(loader *L, const json_t *m, size_t i, const char **a, const char **b,
                       const char **ab)
{
    const char *sa, *sb;
    size_t na, nb;
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return fail(L, V4_ERR_FORMAT, "model.merges[%zu]: \"%.64s\" is not two tokens separated by one space", i, s);
        sa = s, na = (size_t)(sp - s), sb = sp + 1, nb = strlen(sb);
    } else if (json_is_array(m) && json_array_size(m) == 2 &&
               json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
        sa = json_string_value(json_array_get(m, 0));
        sb = json_string_value(json_array_get(m, 1));
        na = strlen(sa), nb = strlen(sb);
    } else {
        return fail(L, V4_ERR_FORMAT, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", i);
    }
    if (!na || !nb)
        return fail(L, V4_ERR_FORMAT, "model.merges[%zu]: empty token", i);
    if (scratch(L, 2 * (na + nb) + 3))
        return -1;
    char *p = L->buf;
    memcpy(p, sa, na), p[na] = 0;
    memcpy(p + na + 1, sb, nb), p[na + 1 + nb] = 0;
    char *q = p + na + nb + 2;
    memcpy(q, sa, na), memcpy(q + na, sb, nb), q[na + nb] = 0;
    *a = p, *b = p + na + 1, *ab = q;
    return 0;
}

static int load_merges(loader *L, const json_t *vocab, const json_t *merges)
{
    v4_tokenizer *t = L->t;
    size_t n = json_array_size(merges);
    if (tok_merges_init(t, n, L->err))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *a = NULL, *b = NULL, *ab = NULL;
        if (merge_parts(L, json_array_get(merges, i), i, &a, &b, &ab))
            return -1;
        const json_t *ia = json_object_get(vocab, a), *ib = json_object_get(vocab, b),
                     *ir = json_object_get(vocab, ab);
        if (!ia || !ib)
            return fail(L, V4_ERR_FORMAT, "model.merges[%zu]: \"%.60s\" is not in the vocab", i, ia ? b : a);
        if (!ir)
            return fail(L, V4_ERR_FORMAT, "model.merges[%zu]: the merged token \"%.120s\" is not in the vocab", i, ab);
        /* a repeated pair keeps the later rank, as HF's HashMap collect does */
        tok_merge_put(t, (int32_t)json_integer_value(ia), (int32_t)json_integer_value(ib),
                      (uint32_t)i, (int32_t)json_integer_value(ir));
    }
    return 0;
}

static int load_model(loader *L, const json_t *model)
{
    if (!json_is_object(model))
        return fail(L, V4_ERR_MISSING, "\"model\" is missing or not an object");
    const char *type = get_type(model);
    if (type && strcmp(type, "BPE"))
        return fail(L, V4_ERR_FORMAT, "model.type '%s' is not supported (only BPE)", type);
    const json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
        return fail(L, V4_ERR_FORMAT, "model.dropout is not supported");
    if (get_bool(model, "byte_fallback", 0))
        return fail(L, V4_ERR_FORMAT, "model.byte_fallback is not supported");
    static const char *const affixes[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        v = json_object_get(model, affixes[k]);
        if (v && !json_is_null(v) && !(json_is_string(v) && !*json_string_value(v)))
            return fail(L, V4_ERR_FORMAT, "model.%s is not supported", affixes[k]);
    }
    int im = get_bool(model, "ignore_merges", 0);
    if (im < 0)
        return fail(L, V4_ERR_FORMAT, "model.ignore_merges: expected a boolean");
    L->t->ignore_merges = im;
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab))
        return fail(L, V4_ERR_MISSING, "model.vocab is missing or not an object");
    if (!json_is_array(merges))
        return fail(L, V4_ERR_MISSING, "model.merges is missing or not an array");
    return load_vocab(L, vocab) || load_merges(L, vocab, merges) ? -1 : 0;
}

/* ------------------------------------------------------------ added tokens */

static int load_added(loader *L, const json_t *added)
{
    if (!added || json_is_null(added))
        return 0;
    if (!json_is_array(added))
        return fail(L, V4_ERR_FORMAT, "added_tokens: expected an array");
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        json_int_t x = json_is_integer(id) ? json_integer_value(id) : -1;
        if (x < 0 || x >= (1 << 24))
            return fail(L, V4_ERR_FORMAT, "added_tokens[%zu].id: not a token id in [0, 2^24)", i);
        if (!json_is_string(content) || !json_string_length(content))
            return fail(L, V4_ERR_FORMAT, "added_tokens[%zu].content: expected a non-empty string", i);
        int special = get_bool(a, "special", 0), lstrip = get_bool(a, "lstrip", 0),
            rstrip = get_bool(a, "rstrip", 0), single = get_bool(a, "single_word", 0);
        if (special < 0 || lstrip < 0 || rstrip < 0 || single < 0)
            return fail(L, V4_ERR_FORMAT, "added_tokens[%zu]: flags must be booleans", i);
        if (single)
            return fail(L, V4_ERR_FORMAT, "added_tokens[%zu]: single_word is not supported", i);
        const char *s = json_string_value(content);
        size_t n = json_string_length(content);
        if (tok_set_entry(L->t, (int32_t)x, s, n, TOK_VALID | TOK_ADDED | (special ? TOK_SPECIAL : 0),
                          L->err) ||
            tok_added_add(L->t, (int32_t)x, s, n, lstrip, rstrip, L->err))
            return -1;
    }
    return 0;
}

/* ----------------------------------------------------------- pre-tokenizer */

static int add_split(loader *L, const char *path, const char *pattern, size_t len, int literal,
                     int behavior, int invert)
{
    v4_tokenizer *t = L->t;
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);   /* LITERAL excludes UCP */
    char *rewritten = NULL;
    size_t rlen = len;
    if (!literal && tok_regex_rewrite(pattern, len, &rewritten, &rlen, L->err))
        return -1;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(rewritten ? rewritten : pattern), rlen, opt, &ec,
                                   &eo, NULL);
    free(rewritten);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return fail(L, V4_ERR_FORMAT, "%s: invalid regex: %s", path, (char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* no JIT: the interpreter is used */
    if (t->n_splits == t->splits_cap) {
        size_t cap = t->splits_cap ? 2 * t->splits_cap : 4;
        tok_split *s = realloc(t->splits, cap * sizeof *s);
        if (!s) {
            pcre2_code_free(re);
            return fail(L, V4_ERR_NOMEM, "out of memory");
        }
        t->splits = s;
        t->splits_cap = cap;
    }
    t->splits[t->n_splits++] = (tok_split){re, behavior, invert};
    return 0;
}

static int parse_behavior(const char *s)
{
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (s && !strcmp(s, names[i]))
            return i;   /* same order as SPLIT_* */
    return -1;
}

static int load_pretok(loader *L, const json_t *p, const char *path, int depth)
{
    if (!p || json_is_null(p))
        return 0;
    const char *type = get_type(p);
    if (!json_is_object(p) || !type)
        return fail(L, V4_ERR_FORMAT, "%s: expected an object with a \"type\"", path);
    char sub[256];
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list) || depth > 8)
            return fail(L, V4_ERR_FORMAT, "%s.pretokenizers: expected an array", path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i);
            if (load_pretok(L, json_array_get(list, i), sub, depth + 1))
                return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(p, "pattern");
        const json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        const json_t *b = json_object_get(p, "behavior");
        int beh = parse_behavior(json_is_string(b) ? json_string_value(b) : NULL);
        int inv = get_bool(p, "invert", 0);
        const json_t *s = json_is_string(re) ? re : str;
        if (!json_is_string(s) || !json_string_length(s))
            return fail(L, V4_ERR_FORMAT, "%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}", path);
        if (beh < 0)
            return fail(L, V4_ERR_FORMAT, "%s.behavior: unknown split behaviour", path);
        if (inv < 0)
            return fail(L, V4_ERR_FORMAT, "%s.invert: expected a boolean", path);
        return add_split(L, path, json_string_value(s), json_string_length(s), s == str, beh, inv);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (get_bool(p, "add_prefix_space", 0))
            return fail(L, V4_ERR_FORMAT, "%s: ByteLevel add_prefix_space is not supported", path);
        if (get_bool(p, "use_regex", 1))
            return add_split(L, path, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, SPLIT_ISOLATED, 0);
        return 0;   /* the byte mapping itself is implicit: vocab entries are raw bytes */
    }
    return fail(L, V4_ERR_FORMAT, "%s: type '%s' is not supported", path, type);
}

static int check_normalizer(loader *L, const json_t *n)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = get_type(n);
    const json_t *list = json_object_get(n, "normalizers");
    if (type && !strcmp(type, "Sequence") && json_is_array(list) && !json_array_size(list))
        return 0;
    return fail(L, V4_ERR_FORMAT, "normalizer: type '%s' is not supported (only none)",
                type ? type : "?");
}

static int check_decoder(loader *L, const json_t *d)
{
    const char *type = get_type(d);
    if (type && !strcmp(type, "ByteLevel"))
        return 0;
    return fail(L, V4_ERR_FORMAT, "decoder: type '%s' is not supported (only ByteLevel)",
                type ? type : "none");
}

/* ----------------------------------------------------------------- config */

/* bos_token / eos_token: a string or {"content": string}; absent or null = none. */
static int config_token(loader *L, const json_t *cfg, const char *key, int32_t *id, char **text)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return fail(L, V4_ERR_FORMAT, "%s: expected a string or {\"content\": string}", key);
    const char *s = json_string_value(v);
    *id = v4_tok_find(L->t, s);
    if (*id < 0)
        return fail(L, V4_ERR_CONFIG, "%s \"%s\" is not a token of tokenizer.json", key, s);
    *text = strdup(s);
    return *text ? 0 : fail(L, V4_ERR_NOMEM, "out of memory");
}

static json_t *parse(loader *L, const char *s, size_t n)
{
    json_error_t je;
    json_t *root = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        fail(L, V4_ERR_FORMAT, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    else if (!json_is_object(root)) {
        fail(L, V4_ERR_FORMAT, "expected a JSON object");
        json_decref(root);
        root = NULL;
    }
    return root;
}

static int load_all(loader *L, const char *json, size_t json_len, const char *config,
                    size_t config_len, const char *config_where)
{
    json_t *root = parse(L, json, json_len);
    if (!root)
        return -1;
    int rc = load_model(L, json_object_get(root, "model")) ||
             load_added(L, json_object_get(root, "added_tokens")) ||
             check_normalizer(L, json_object_get(root, "normalizer")) ||
             load_pretok(L, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", 0) ||
             check_decoder(L, json_object_get(root, "decoder")) ||
             tok_vocab_index_build(L->t, L->err) ? -1 : 0;
    json_decref(root);
    if (rc || !config)
        return rc;
    L->where = config_where;
    json_t *cfg = parse(L, config, config_len);
    if (!cfg)
        return -1;
    rc = config_token(L, cfg, "bos_token", &L->t->bos_id, &L->t->bos_text) ||
         config_token(L, cfg, "eos_token", &L->t->eos_id, &L->t->eos_text) ? -1 : 0;
    json_decref(cfg);
    return rc;
}

void tok_destroy(v4_tokenizer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_splits; i++)
        pcre2_code_free(t->splits[i].re);
    free(t->splits);
    free(t->tokens);
    free(t->bytes);
    free(t->merges);
    free(t->vocab_index);
    free(t->added);
    free(t->trie);
    free(t->bos_text);
    free(t->eos_text);
    free(t);
}

static int load_mem2(const char *json, size_t json_len, const char *where, const char *config,
                     size_t config_len, const char *config_where, v4_tokenizer **out, v4_error *err)
{
    *out = NULL;
    v4_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
    t->bos_id = t->eos_id = -1;
    loader L = {t, where ? where : "tokenizer.json", err, NULL, 0};
    int rc = load_all(&L, json, json_len, config, config_len,
                      config_where ? config_where : "tokenizer_config.json");
    free(L.buf);
    if (rc) {
        tok_destroy(t);
        return -1;
    }
    *out = t;
    return 0;
}

int v4_tok_load_mem(const char *json, size_t json_len, const char *config, size_t config_len,
                    const char *where, v4_tokenizer **out, v4_error *err)
{
    return load_mem2(json, json_len, where, config, config_len, where, out, err);
}

static int read_file(const char *path, char **buf, size_t *len, v4_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return v4_err_set(err, V4_ERR_IO, path, "cannot open: %s", strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = realloc(b, cap *= 2);
        if (!nb)
            free(b);
        b = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b)
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    if (bad) {
        free(b);
        return v4_err_set(err, V4_ERR_IO, path, "read error");
    }
    *buf = b;
    *len = n;
    return 0;
}

int v4_tok_load_files(const char *json_path, const char *config_path, v4_tokenizer **out,
                      v4_error *err)
{
    *out = NULL;
    char *json = NULL, *cfg = NULL;
    size_t json_len = 0, cfg_len = 0;
    if (read_file(json_path, &json, &json_len, err))
        return -1;
    if (config_path && read_file(config_path, &cfg, &cfg_len, err)) {
        free(json);
        return -1;
    }
    int rc = load_mem2(json, json_len, json_path, cfg, cfg_len, config_path, out, err);
    free(json);
    free(cfg);
    return rc;
}

int v4_tok_load(const char *dir, v4_tokenizer **out, v4_error *err)
{
    *out = NULL;
    char jp[4096], cp[4096];
    struct stat st;
    if (stat(dir, &st))
        return v4_err_set(err, V4_ERR_IO, dir, "cannot open the tokenizer directory: %s",
                          strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return v4_err_set(err, V4_ERR_IO, dir, "not a directory");
    if (snprintf(jp, sizeof jp, "%s/tokenizer.json", dir) >= (int)sizeof jp ||
        snprintf(cp, sizeof cp, "%s/tokenizer_config.json", dir) >= (int)sizeof cp)
        return v4_err_set(err, V4_ERR_INVALID, dir, "path too long");
    int have_cfg = stat(cp, &st) == 0;
    return v4_tok_load_files(jp, have_cfg ? cp : NULL, out, err);
}
