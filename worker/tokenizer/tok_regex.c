/* tok_regex.c - make PCRE2 split a text like the reference tokenizer's regex engine.
 *
 * The reference is Hugging Face `tokenizers` 0.22.2 (the library under transformers,
 * vLLM and SGLang; the golden ids in tests/data/tokenizer/cases_README.md come from
 * it), whose regex engine is Oniguruma with Unicode 16.0 tables.  PCRE2 (UTF + UCP)
 * agrees on the syntax DeepSeek's patterns use, with two differences that change
 * pre-token boundaries:
 *   - property tables: Debian 12's PCRE2 10.42 has Unicode 14.0, so a letter or mark
 *     assigned in 15.0 or 16.0 is "unassigned" to it.  Every \p{L|M|N|P|S} (and \P{..}
 *     outside a class) gets the generated ranges of tok_unicode.c added (characters
 *     new in 17.0 stay unassigned, as for the reference);
 *   - \s: Oniguruma's is Unicode's White_Space (U+0085 included, U+FEFF and U+180E
 *     not), PCRE2's also holds U+180E.  \s and \S are replaced by the explicit set.
 * The rewrite is a single pass that tracks whether it is inside a character class
 * (escapes, \Q..\E, POSIX [:name:] and a leading ']' are respected); a property
 * inside a class gets the ranges appended to the class, outside it becomes a class.
 * Not rewritten (not used by DeepSeek; PCRE2's Unicode meaning is kept): \d \w \b,
 * \P{..} inside a class, multi-letter categories such as \p{Lu}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "config/strbuf.h"

/* Unicode White_Space (Oniguruma's \s: 09-0D, NEL, Zl, Zp, Zs), as tok_is_whitespace. */
static const tok_range WS_SET[] = {
    {0x09, 0x0D}, {0x20, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};
#define N_WS_SET (sizeof WS_SET / sizeof WS_SET[0])


static void puts_(v4_strbuf *b, const char *s) { v4_sb_putn(b, s, strlen(s)); }

static void put_ranges(v4_strbuf *b, const tok_range *r, size_t n)
{
    char tmp[48];
    for (size_t i = 0; i < n; i++) {
        int k = r[i].lo == r[i].hi
                    ? snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)r[i].lo)
                    : snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", (unsigned)r[i].lo, (unsigned)r[i].hi);
        v4_sb_putn(b, tmp, (size_t)k);
    }
}

/* The complement of WS_SET in [0, 0x10FFFF], as ranges (for \S inside a class). */
static void put_not_space(v4_strbuf *b)
{
    tok_range r[N_WS_SET + 1];
    size_t n = 0;
    uint32_t next = 0;
    for (size_t i = 0; i < N_WS_SET; i++) {
        if (WS_SET[i].lo > next)
            r[n++] = (tok_range){next, WS_SET[i].lo - 1};
        next = WS_SET[i].hi + 1;
    }
    r[n++] = (tok_range){next, 0x10FFFF};
    put_ranges(b, r, n);
}

static const tok_unicode_delta *delta_for(const char *name, size_t n)
{
    if (n != 1)
        return NULL;
    for (const tok_unicode_delta *d = tok_unicode_deltas; d->cls; d++)
        if (d->cls == name[0])
            return d;
    return NULL;
}

/* At pat[i] == '\\' and pat[i+1] in "pP": the property name and the escape's length. */
static size_t prop_name(const char *pat, size_t i, size_t len, const char **name, size_t *n)
{
    if (i + 2 >= len)
        return 2;
    if (pat[i + 2] != '{') {
        *name = pat + i + 2;
        *n = 1;
        return 3;
    }
    const char *close = memchr(pat + i + 3, '}', len - i - 3);
    if (!close)
        return 2;
    *name = pat + i + 3;
    *n = (size_t)(close - (pat + i + 3));
    return (size_t)(close - (pat + i)) + 1;
}

int tok_regex_rewrite(const char *pat, size_t len, char **out, size_t *out_len, v4_error *err)
{
    v4_strbuf b = {0};
    int in_class = 0;
    size_t i = 0;
    while (i < len) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char d = pat[i + 1];
            if (d == 'Q') {                         /* \Q...\E: literal */
                const char *e = NULL;
                for (size_t j = i + 2; j + 1 < len && !e; j++)
                    if (pat[j] == '\\' && pat[j + 1] == 'E')
                        e = pat + j;
                size_t end = e ? (size_t)(e - pat) + 2 : len;
                v4_sb_putn(&b, pat + i, end - i);
                i = end;
            } else if (d == 'p' || d == 'P') {
                const char *name = NULL;
                size_t n = 0, k = prop_name(pat, i, len, &name, &n);
                const tok_unicode_delta *dl = name ? delta_for(name, n) : NULL;
                if (dl && d == 'p') {
                    puts_(&b, in_class ? "" : "[");
                    v4_sb_putn(&b, pat + i, k);
                    put_ranges(&b, dl->r, dl->n);
                    puts_(&b, in_class ? "" : "]");
                } else if (dl && !in_class) {       /* \P{X} -> [^\p{X}...] */
                    puts_(&b, "[^\\p{");
                    v4_sb_putn(&b, name, n);
                    puts_(&b, "}");
                    put_ranges(&b, dl->r, dl->n);
                    puts_(&b, "]");
                } else {
                    v4_sb_putn(&b, pat + i, k);
                }
                i += k;
            } else if (d == 's' || d == 'S') {
                if (in_class && d == 's')
                    put_ranges(&b, WS_SET, N_WS_SET);
                else if (in_class)
                    put_not_space(&b);
                else {
                    puts_(&b, d == 's' ? "[" : "[^");
                    put_ranges(&b, WS_SET, N_WS_SET);
                    puts_(&b, "]");
                }
                i += 2;
            } else {
                v4_sb_putn(&b, pat + i, 2);
                i += 2;
            }
        } else if (c == '[' && !in_class) {
            in_class = 1;
            v4_sb_putn(&b, pat + i, 1);
            i++;
            if (i < len && pat[i] == '^')
                v4_sb_putn(&b, pat + i++, 1);
            if (i < len && pat[i] == ']')           /* a leading ']' is literal */
                v4_sb_putn(&b, pat + i++, 1);
        } else if (c == '[' && i + 1 < len && pat[i + 1] == ':') {   /* [:name:] */
            const char *e = NULL;
            for (size_t j = i + 2; j + 1 < len && !e; j++)
                if (pat[j] == ':' && pat[j + 1] == ']')
                    e = pat + j;
            size_t end = e ? (size_t)(e - pat) + 2 : i + 1;
            v4_sb_putn(&b, pat + i, end - i);
            i = end;
        } else {
            if (c == ']' && in_class)
                in_class = 0;
            v4_sb_putn(&b, pat + i, 1);
            i++;
        }
    }
    if (!b.p && !b.oom)
        puts_(&b, "");
    if (b.oom) {
        free(b.p);
        return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    }
    *out = b.p;
    *out_len = b.n;
    return 0;
}
