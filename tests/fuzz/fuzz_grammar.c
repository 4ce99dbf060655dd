/* fuzz_grammar.c - libFuzzer harness of the constraint engine (worker/grammar/): a
 * constraint's text (JSON Schema, regex, choice, GBNF grammar) is untrusted input from a
 * request.  Input: byte 0 picks the kind (its two top bits set: GBNF; else the two low bits;
 * and compact JSON), then the constraint text up to the first
 * 0xFF byte, then a text that is fed to a matcher over a small vocabulary (every byte and
 * some multi-byte tokens) with masks and commits along the way.  Compile errors are fine;
 * a crash, a leak, a sanitizer report or a mask that disagrees with commit is a finding.
 * Built by tests/fuzz/CMakeLists.txt, run by scripts/fuzz.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/grammar.h"

static const char *const MULTI[] = {"{\"", "\":", "\",", "\"}", "12", "true", "null", "ab", " \"", "\\u00"};
#define N_TOK (256 + (int)(sizeof MULTI / sizeof *MULTI) + 1)

static const char *tb(void *ctx, int32_t id, size_t *len)
{
    if (id < 256) {   /* ctx: the 256 bytes in order */
        *len = 1;
        return (const char *)ctx + id;
    }
    if (id < N_TOK - 1) {
        *len = strlen(MULTI[id - 256]);
        return MULTI[id - 256];
    }
    *len = 0;
    return "";
}

static int sp(void *ctx, int32_t id)
{
    (void)ctx;
    return id == N_TOK - 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    const v4g_kind kinds[] = {V4G_JSON_SCHEMA, V4G_REGEX, V4G_CHOICE, V4G_JSON_OBJECT};
    v4g_kind kind = (data[0] & 0xC0) == 0xC0 ? V4G_GRAMMAR : kinds[data[0] & 3];
    v4g_opts o = {.compact = (data[0] >> 2) & 1, .ws_max = (data[0] >> 3) & 7};
    const uint8_t *sep = memchr(data + 1, 0xFF, size - 1);
    size_t clen = sep ? (size_t)(sep - data - 1) : size - 1;
    const char *text = sep ? (const char *)sep + 1 : "";
    size_t tlen = sep ? size - (size_t)(sep - data) - 1 : 0;
    v4_error err = {0};
    v4g_constraint *c = v4g_compile(kind, (const char *)data + 1, clen, &o, &err);
    if (!c)
        return 0;
    v4g_vocab *v = v4g_vocab_new(N_TOK, tb, sp, all, N_TOK - 1, &err);
    v4g_matcher *m = v ? v4g_matcher_new(c, v, &err) : NULL;
    uint32_t bits[(N_TOK + 31) / 32];
    for (size_t i = 0; m && i < tlen && i < 256; i++) {
        if (i % 7 == 0 && v4g_matcher_mask(m, bits, &err) == 0) {
            int32_t t = (uint8_t)text[i];
            v4g_matcher *f = v4g_matcher_fork(m, &err);
            int ok = f && v4g_matcher_commit(f, t, &err) == 0;
            if (ok != (int)((bits[t >> 5] >> (t & 31)) & 1))
                abort();   /* the mask and commit disagree */
            v4g_matcher_free(f);
        }
        if (v4g_matcher_commit(m, (uint8_t)text[i], &err) != 0)
            break;
    }
    if (m)
        v4g_matcher_accepting(m);
    v4g_matcher_free(m);
    v4g_vocab_free(v);
    v4g_constraint_unref(c);
    return 0;
}
