/* tok_load_pipeline.c - the text-processing components of tokenizer.json: the
 * normalizer (only none is supported), the pre-tokenizer (Sequence / Split /
 * ByteLevel, compiled to tok_split steps with PCRE2 after tok_regex_rewrite) and the
 * decoder (ByteLevel).  Anything else is an error naming the component.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_load.h"

/* The ByteLevel pre-tokenizer's own split when use_regex is true (GPT-2's). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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
        return tok_fail(L, V4_ERR_FORMAT, "%s: invalid regex: %s", path, (char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* no JIT: the interpreter is used */
    if (t->n_splits == t->splits_cap) {
        size_t cap = t->splits_cap ? 2 * t->splits_cap : 4;
        tok_split *s = realloc(t->splits, cap * sizeof *s);
        if (!s) {
            pcre2_code_free(re);
            return tok_fail(L, V4_ERR_NOMEM, "out of memory");
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

int tok_load_pretok(loader *L, const json_t *p, const char *path, int depth)
{
    if (!p || json_is_null(p))
        return 0;
    const char *type = tok_get_type(p);
    if (!json_is_object(p) || !type)
        return tok_fail(L, V4_ERR_FORMAT, "%s: expected an object with a \"type\"", path);
    char sub[256];
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list) || depth > 8)
            return tok_fail(L, V4_ERR_FORMAT, "%s.pretokenizers: expected an array", path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i);
            if (tok_load_pretok(L, json_array_get(list, i), sub, depth + 1))
                return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(p, "pattern");
        const json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        const json_t *b = json_object_get(p, "behavior");
        int beh = parse_behavior(json_is_string(b) ? json_string_value(b) : NULL);
        int inv = tok_get_bool(p, "invert", 0);
        const json_t *s = json_is_string(re) ? re : str;
        if (!json_is_string(s) || !json_string_length(s))
            return tok_fail(L, V4_ERR_FORMAT, "%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}", path);
        if (beh < 0)
            return tok_fail(L, V4_ERR_FORMAT, "%s.behavior: unknown split behaviour", path);
        if (inv < 0)
            return tok_fail(L, V4_ERR_FORMAT, "%s.invert: expected a boolean", path);
        return add_split(L, path, json_string_value(s), json_string_length(s), s == str, beh, inv);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (tok_get_bool(p, "add_prefix_space", 0))
            return tok_fail(L, V4_ERR_FORMAT, "%s: ByteLevel add_prefix_space is not supported", path);
        if (tok_get_bool(p, "use_regex", 1))
            return add_split(L, path, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, SPLIT_ISOLATED, 0);
        return 0;   /* the byte mapping itself is implicit: vocab entries are raw bytes */
    }
    return tok_fail(L, V4_ERR_FORMAT, "%s: type '%s' is not supported", path, type);
}

int tok_check_normalizer(loader *L, const json_t *n)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = tok_get_type(n);
    const json_t *list = json_object_get(n, "normalizers");
    if (type && !strcmp(type, "Sequence") && json_is_array(list) && !json_array_size(list))
        return 0;
    return tok_fail(L, V4_ERR_FORMAT, "normalizer: type '%s' is not supported (only none)",
                type ? type : "?");
}

int tok_check_decoder(loader *L, const json_t *d)
{
    const char *type = tok_get_type(d);
    if (type && !strcmp(type, "ByteLevel"))
        return 0;
    return tok_fail(L, V4_ERR_FORMAT, "decoder: type '%s' is not supported (only ByteLevel)",
                type ? type : "none");
}
