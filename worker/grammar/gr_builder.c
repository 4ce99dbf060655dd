/* gr_builder.c - what the constraint compilers emit into: lexemes (deduplicated by their
 * source), nonterminals and productions; then frozen into a gr_grammar (nullable symbols,
 * productions grouped by left-hand side, the NFA trimmed to states that can still accept).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_internal.h"

static int grow(void **p, int32_t *cap, int64_t need, size_t el, v4_error *err)
{
    if (need <= *cap)
        return 0;
    int64_t nc = *cap ? *cap : 32;
    while (nc < need)
        nc *= 2;
    if (nc > INT32_MAX / 2)
        return v4_err_set(err, V4_ERR_RANGE, "grammar", "constraint too large");
    void *q = realloc(*p, (size_t)nc * el);
    if (!q)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    *p = q;
    *cap = (int32_t)nc;
    return 0;
}

void gr_builder_init(gr_builder *b)
{
    memset(b, 0, sizeof *b);
    b->skip = -1;
    b->start = -1;
}

void gr_builder_free(gr_builder *b)
{
    gr_nfa_free(&b->nfa);
    for (int i = 0; i < b->n_lex; i++)
        free(b->lex[i].key);
    free(b->lex);
    free(b->prods);
    free(b->syms);
    for (int i = 0; i < b->n_nt; i++)
        free(b->nt_names[i]);
    free(b->nt_names);
    free(b->lex_ht);
    free(b->gheads);
    memset(b, 0, sizeof *b);
}

/* remember a loop head of unconstrained JSON string content followed by the closing quote */
static int ghead(gr_builder *b, int32_t s, v4_error *err)
{
    if (grow((void **)&b->gheads, &b->cap_gheads, b->n_gheads + 1, sizeof *b->gheads, err))
        return -1;
    b->gheads[b->n_gheads++] = s;
    return 0;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int lex_find(gr_builder *b, const char *key)
{
    if (!b->lex_ht_cap)
        return -1;
    for (uint64_t i = hash_str(key) & (uint64_t)(b->lex_ht_cap - 1);; i = (i + 1) & (uint64_t)(b->lex_ht_cap - 1)) {
        int32_t v = b->lex_ht[i];
        if (v < 0)
            return -1;
        if (!strcmp(b->lex[v].key, key))
            return v;
    }
}

/* the lexeme already made under key (key freed), -1 out of memory (key NULL), -2 none yet */
static int lex_known(gr_builder *b, char *key, v4_error *err)
{
    if (!key)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    int have = lex_find(b, key);
    if (have < 0)
        return -2;
    free(key);
    return have;
}

static int lex_index(gr_builder *b, int id, v4_error *err)
{
    if ((int64_t)(b->n_lex + 1) * 2 > b->lex_ht_cap) {
        int32_t nc = b->lex_ht_cap ? b->lex_ht_cap * 2 : 64;
        int32_t *ht = malloc((size_t)nc * sizeof *ht);
        if (!ht)
            return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        memset(ht, 0xFF, (size_t)nc * sizeof *ht);
        free(b->lex_ht);
        b->lex_ht = ht;
        b->lex_ht_cap = nc;
        for (int k = 0; k < b->n_lex; k++) {
            if (k == id)
                continue;
            uint64_t i = hash_str(b->lex[k].key) & (uint64_t)(nc - 1);
            while (ht[i] >= 0)
                i = (i + 1) & (uint64_t)(nc - 1);
            ht[i] = k;
        }
    }
    uint64_t i = hash_str(b->lex[id].key) & (uint64_t)(b->lex_ht_cap - 1);
    while (b->lex_ht[i] >= 0)
        i = (i + 1) & (uint64_t)(b->lex_ht_cap - 1);
    b->lex_ht[i] = id;
    return 0;
}

/* a new lexeme from a built fragment: its end accepts the lexeme; states from st0 on are
 * its own (or its vetoes', already marked) */
static int lex_add_from(gr_builder *b, char *key, const gr_frag *f, int32_t st0, v4_error *err);
static int lex_add(gr_builder *b, char *key, const gr_frag *f, v4_error *err)
{
    return lex_add_from(b, key, f, b->lex_end, err);   /* the states made since the last lexeme */
}

static int lex_add_from(gr_builder *b, char *key, const gr_frag *f, int32_t st0, v4_error *err)
{
    if (b->n_lex >= GR_MAX_LEXEMES) {
        free(key);
        return v4_err_set(err, V4_ERR_RANGE, "grammar", "constraint too large: over %d lexemes", GR_MAX_LEXEMES);
    }
    if (grow((void **)&b->lex, &b->cap_lex, b->n_lex + 1, sizeof *b->lex, err)) {
        free(key);
        return -1;
    }
    int id = b->n_lex++;
    b->lex[id].key = key;
    b->lex[id].start = f->start;
    b->nfa.st[f->end].accept = id;
    for (int32_t s = st0; s < b->nfa.n_st; s++)
        b->nfa.st[s].owner = id;
    b->lex_end = b->nfa.n_st;
    /* the end must be a state of its own: an accepting state takes no other edges out */
    if (lex_index(b, id, err))
        return -1;
    return id;
}

/* "kind:a:c:d:" + src, with NUL and \x01 escaped (\x01 '0', \x01 '1') so keys stay C strings */
static char *keyf(const char *kind, const char *src, size_t len, int a, int c, int d)
{
    size_t n = 2 * len + strlen(kind) + 64;
    char *k = malloc(n);
    if (!k)
        return NULL;
    size_t o = (size_t)snprintf(k, n, "%s:%d:%d:%d:", kind, a, c, d);
    for (size_t i = 0; i < len; i++) {
        if (src[i] == 0 || src[i] == 1) {
            k[o++] = 1;
            k[o++] = (char)('0' + src[i]);
        } else {
            k[o++] = src[i];
        }
    }
    k[o] = 0;
    return k;
}

/* wrap a fragment so that its end is a fresh state (the accepting one) */
static int seal(gr_builder *b, gr_frag *f, v4_error *err)
{
    int e = gr_nfa_state(&b->nfa, err);
    if (e < 0 || gr_nfa_eps(&b->nfa, f->end, e, err))
        return -1;
    f->end = e;
    return 0;
}

int gr_lex_regex(gr_builder *b, const char *src, size_t len, int mode, int json, int min_len, int max_len,
                 v4_error *err)
{
    char *key = keyf("rx", src, len, mode, json, min_len * 65536 + max_len);
    int have = lex_known(b, key, err);
    if (have != -2)
        return have;
    if (min_len > 0 || max_len >= 0) {
        free(key);
        return v4_err_set(err, V4_ERR_INVALID, "grammar", "a length bound together with a pattern is not supported");
    }
    gr_frag f, body;
    int rc = gr_regex_emit(&b->nfa, src, len, mode, json, &body, err);
    if (!rc && json) {   /* the quotes around the content */
        gr_frag q1, q2;
        rc = gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q1, err) ||
                     gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q2, err) ||
                     gr_nfa_eps(&b->nfa, q1.end, body.start, err) || gr_nfa_eps(&b->nfa, body.end, q2.start, err)
                 ? -1
                 : 0;
        f.start = q1.start;
        f.end = q2.end;
    } else {
        f = body;
    }
    if (rc || seal(b, &f, err)) {
        free(key);
        return -1;
    }
    return lex_add(b, key, &f, err);
}

int gr_lex_bytes(gr_builder *b, const char *bytes, size_t len, v4_error *err)
{
    char *key = keyf("lit", bytes, len, 0, 0, 0);
    int have = lex_known(b, key, err);
    if (have != -2)
        return have;
    gr_frag f;
    if (gr_emit_bytes(&b->nfa, (const uint8_t *)bytes, len, &f, err) || seal(b, &f, err)) {
        free(key);
        return -1;
    }
    if (len >= 2 && bytes[0] == '"' && bytes[len - 1] == '"')   /* a quoted string: its inside */
        for (size_t j = 1; j < len; j++)   /* gr_emit_bytes: the state before byte j is start + j */
            b->nfa.st[f.start + (int32_t)j].srem = GR_SREM_LIT;
    return lex_add(b, key, &f, err);
}

/* one code point of the set s (UTF-8); the key is the set's ranges */
int gr_lex_cset(gr_builder *b, const gr_cset *s, v4_error *err)
{
    char *src = malloc((size_t)s->n * 20 + 1);
    if (!src)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    size_t o = 0;
    for (int i = 0; i < s->n; i++)
        o += (size_t)sprintf(src + o, "%x-%x,", s->r[2 * i], s->r[2 * i + 1]);
    char *key = keyf("cs", src, o, 0, 0, 0);
    free(src);
    int have = lex_known(b, key, err);
    if (have != -2)
        return have;
    gr_frag f;
    if (gr_emit_cset(&b->nfa, s, 0, &f, err) || seal(b, &f, err)) {
        free(key);
        return -1;
    }
    return lex_add(b, key, &f, err);
}

/* a lexeme from a fragment the caller built in b->nfa since the last lexeme (GBNF's merged
 * rules, gr_gbnf_merge.c); name: unique among the caller's lexemes */
int gr_lex_frag(gr_builder *b, const char *name, gr_frag *f, v4_error *err)
{
    char *key = keyf("frag", name, strlen(name), 0, 0, 0);
    if (!key)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    if (seal(b, f, err)) {
        free(key);
        return -1;
    }
    return lex_add(b, key, f, err);
}

int gr_lex_json_string(gr_builder *b, int min, int max, v4_error *err)
{
    char *key = keyf("str", "", 0, min, max, 0);
    int have = lex_known(b, key, err);
    if (have != -2)
        return have;
    gr_frag q1, q2, body, f;
    b->nfa.str_mark = 1;
    int rc = gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q1, err) ||
             gr_emit_any_len(&b->nfa, 1, min, max, &body, err);
    b->nfa.str_mark = 0;
    if (rc || gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q2, err) ||
        gr_nfa_eps(&b->nfa, q1.end, body.start, err) || gr_nfa_eps(&b->nfa, body.end, q2.start, err)) {
        free(key);
        return -1;
    }
    b->nfa.st[q2.start].srem = GR_SREM_CLOSE;
    f.start = q1.start;
    f.end = q2.end;
    if (seal(b, &f, err) || (min == 0 && max < 0 && ghead(b, body.start, err))) {
        free(key);
        return -1;
    }
    return lex_add(b, key, &f, err);
}

/* ---- a JSON string that is none of the given keys: a code point trie of the keys --- */
typedef struct ktrie {
    uint32_t cp;
    int child, sib, is_key;
} ktrie;

static int utf8_dec(const unsigned char *s, size_t n, size_t *i, uint32_t *cp)
{
    unsigned c = s[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || *i + (size_t)len > n)
        return -1;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[*i + (size_t)k] & 0xC0) != 0x80)
            return -1;
        v = (v << 6) | (s[*i + (size_t)k] & 0x3F);
    }
    *i += (size_t)len;
    *cp = v;
    return 0;
}

/* node v of the trie -> NFA state; 'free' is the state "content differs from every key" */
static int emit_ktrie(gr_builder *b, ktrie *t, int v, int state, int free_st, int close, v4_error *err)
{
    gr_cset kids = {0}, other;
    int rc = 0;
    for (int c = t[v].child; c >= 0 && !rc; c = t[c].sib) {
        gr_cset one = {0};
        gr_frag f;
        if (gr_cset_add(&one, t[c].cp, t[c].cp) || gr_cset_add(&kids, t[c].cp, t[c].cp))
            rc = v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        if (!rc)
            rc = gr_emit_cset(&b->nfa, &one, 1, &f, err);
        if (!rc)
            b->nfa.st[f.start].srem = INT32_MAX;   /* a character of string content */
        gr_cset_free(&one);
        if (!rc)
            rc = gr_nfa_eps(&b->nfa, state, f.start, err);
        if (!rc)
            rc = emit_ktrie(b, t, c, f.end, free_st, close, err);
    }
    if (!rc) {
        gr_cset_norm(&kids);
        rc = gr_cset_negate(&kids, &other) ? v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory") : 0;
        if (!rc) {
            gr_frag f;
            rc = gr_emit_cset(&b->nfa, &other, 1, &f, err) || gr_nfa_eps(&b->nfa, state, f.start, err) ||
                         gr_nfa_eps(&b->nfa, f.end, free_st, err)
                     ? -1
                     : 0;
            if (!rc)
                b->nfa.st[f.start].srem = INT32_MAX;
            gr_cset_free(&other);
        }
    }
    if (!rc && !t[v].is_key)   /* the content may end here: it is a proper prefix, not a key */
        rc = gr_nfa_eps(&b->nfa, state, close, err);
    gr_cset_free(&kids);
    return rc;
}

int gr_lex_key_except(gr_builder *b, const char *const *keys, int n, v4_error *err)
{
    size_t klen = 16;
    for (int i = 0; i < n; i++)
        klen += strlen(keys[i]) + 1;
    char *src = malloc(klen);
    if (!src)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(keys[i]);
        memcpy(src + o, keys[i], l);
        o += l;
        src[o++] = '\x01';
    }
    char *key = keyf("kx", src, o, n, 0, 0);
    free(src);
    int have = lex_known(b, key, err);
    if (have != -2)
        return have;
    ktrie *t = NULL;
    int nt = 1, cap = 0, rc = 0;
    if (grow((void **)&t, &cap, 1, sizeof *t, err)) {
        free(key);
        return -1;
    }
    t[0] = (ktrie){.child = -1, .sib = -1};
    for (int i = 0; i < n && !rc; i++) {
        const unsigned char *s = (const unsigned char *)keys[i];
        size_t len = strlen(keys[i]), j = 0;
        int v = 0;
        while (j < len && !rc) {
            uint32_t cp;
            if (utf8_dec(s, len, &j, &cp)) {
                rc = v4_err_set(err, V4_ERR_INVALID, "grammar", "a property name is not valid UTF-8");
                break;
            }
            int c = t[v].child;
            while (c >= 0 && t[c].cp != cp)
                c = t[c].sib;
            if (c < 0) {
                if (grow((void **)&t, &cap, nt + 1, sizeof *t, err)) {
                    rc = -1;
                    break;
                }
                c = nt++;
                t[c] = (ktrie){.cp = cp, .child = -1, .sib = t[v].child};
                t[v].child = c;
            }
            v = c;
        }
        if (!rc)
            t[v].is_key = 1;
    }
    gr_frag q1, body, q2, f;
    if (!rc) {
        int st = gr_nfa_state(&b->nfa, err), free_st = gr_nfa_state(&b->nfa, err), close = gr_nfa_state(&b->nfa, err);
        rc = st < 0 || free_st < 0 || close < 0 ? -1 : 0;
        if (!rc)
            rc = gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q1, err) || gr_nfa_eps(&b->nfa, q1.end, st, err) ? -1 : 0;
        if (!rc)
            rc = emit_ktrie(b, t, 0, st, free_st, close, err);
        b->nfa.str_mark = 1;
        if (!rc)   /* free: any content, then the closing quote */
            rc = gr_emit_any_len(&b->nfa, 1, 0, -1, &body, err) || ghead(b, body.start, err) ||
                         gr_nfa_eps(&b->nfa, free_st, body.start, err) ||
                         gr_nfa_eps(&b->nfa, body.end, close, err)
                     ? -1
                     : 0;
        b->nfa.str_mark = 0;
        if (!rc)
            rc = gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q2, err) || gr_nfa_eps(&b->nfa, close, q2.start, err)
                     ? -1
                     : 0;
        if (!rc)
            b->nfa.st[q2.start].srem = GR_SREM_CLOSE;
        f.start = q1.start;
        f.end = rc ? -1 : q2.end;
    }
    free(t);
    if (rc || seal(b, &f, err)) {
        free(key);
        return -1;
    }
    return lex_add(b, key, &f, err);
}

int gr_nt(gr_builder *b, const char *hint, v4_error *err)
{
    char **q = realloc(b->nt_names, (size_t)(b->n_nt + 1) * sizeof *q);
    if (!q)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    b->nt_names = q;
    b->nt_names[b->n_nt] = hint ? strdup(hint) : NULL;
    return GR_NT0 + b->n_nt++;
}

int gr_rule(gr_builder *b, int lhs, const int32_t *syms, int n, v4_error *err)
{
    if (b->n_prods >= GR_MAX_PRODS)
        return v4_err_set(err, V4_ERR_RANGE, "grammar", "constraint too large: over %d productions", GR_MAX_PRODS);
    if (grow((void **)&b->prods, &b->cap_prods, b->n_prods + 1, sizeof *b->prods, err) ||
        grow((void **)&b->syms, &b->cap_syms, (int64_t)b->n_syms + n, sizeof *b->syms, err))
        return -1;
    b->prods[b->n_prods++] = (gr_prod){.lhs = lhs, .off = b->n_syms, .len = n};
    if (n > 0)   /* an empty rule may come with syms NULL (memcpy must not see it) */
        memcpy(b->syms + b->n_syms, syms, (size_t)n * sizeof *syms);
    b->n_syms += n;
    return 0;
}

int gr_set_skip(gr_builder *b, int max_run, v4_error *err)
{
    char src[64];
    snprintf(src, sizeof src, "[ \\t\\n\\r]{1,%d}", max_run);
    int id = gr_lex_regex(b, src, strlen(src), GR_RX_FULL, 0, 0, -1, err);
    if (id < 0)
        return -1;
    b->skip = id;
    b->skip_max = max_run;
    return 0;
}

/* ------------------------------------------------------------ vetoed strings -- */
static int veto_frag(gr_builder *b, const char *rx, size_t len, int mode, int32_t start, v4_error *err)
{
    gr_frag q1, body, q2;
    int32_t lo = b->nfa.n_st;
    b->nfa.n_absorb = 0;
    b->nfa.absorb_on = mode == GR_RX_SEARCH;
    int rc = gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q1, err) ||
                     gr_regex_emit(&b->nfa, rx, len, mode, 1, &body, err) ||
                     gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q2, err) ||
                     gr_nfa_eps(&b->nfa, q1.end, body.start, err) || gr_nfa_eps(&b->nfa, body.end, q2.start, err) ||
                     gr_nfa_eps(&b->nfa, start, q1.start, err)
                 ? -1
                 : 0;
    b->nfa.absorb_on = 0;
    if (rc)
        return -1;
    for (int32_t s = lo; s < b->nfa.n_st; s++)
        b->nfa.st[s].role = GR_ROLE_VETO;
    /* a found match stays found: the trailing "anything" and the closing quote absorb */
    for (int32_t k = 0; k + 1 < b->nfa.n_absorb; k += 2)
        for (int32_t s = b->nfa.absorb[k]; s < b->nfa.absorb[k + 1]; s++)
            b->nfa.st[s].role = GR_ROLE_VETO_ABSORB;
    if (b->nfa.n_absorb)
        for (int32_t s = q2.start; s < b->nfa.n_st; s++)
            b->nfa.st[s].role = GR_ROLE_VETO_ABSORB;
    b->nfa.n_absorb = 0;
    b->nfa.st[q2.end].role = GR_ROLE_VETO_ACCEPT;
    return 0;
}

static void json_escape_regex(const char *k, char *out, size_t n)
{
    size_t o = 0;
    for (const char *p = k; *p && o + 3 < n; p++) {
        if (strchr("\\^$.|?*+()[]{}/", *p))
            out[o++] = '\\';
        out[o++] = *p;
    }
    out[o] = 0;
}

int gr_lex_string_vetoed(gr_builder *b, const char *pattern, const char *const *keys, int nkeys,
                         const char *const *vetoes, int nvetoes, v4_error *err)
{
    size_t kl = 32 + (pattern ? strlen(pattern) : 0);
    for (int i = 0; i < nkeys; i++)
        kl += strlen(keys[i]) + 1;
    for (int i = 0; i < nvetoes; i++)
        kl += strlen(vetoes[i]) + 1;
    char *src = malloc(kl);
    if (!src)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    size_t o = (size_t)snprintf(src, kl, "%s", pattern ? pattern : "");
    for (int i = 0; i < nkeys; i++)
        o += (size_t)snprintf(src + o, kl - o, "\x02%s", keys[i]);
    for (int i = 0; i < nvetoes; i++)
        o += (size_t)snprintf(src + o, kl - o, "\x03%s", vetoes[i]);
    char *key = keyf(pattern ? "sv" : "sva", src, o, nkeys, nvetoes, 0);
    free(src);
    int have = lex_known(b, key, err);
    if (have != -2)
        return have;
    int32_t st0 = b->nfa.n_st;
    int start = gr_nfa_state(&b->nfa, err);
    gr_frag q1, body, q2, f;
    int rc = start < 0 ? -1 : 0;
    if (!rc)   /* the lexeme itself */
        rc = gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q1, err) ||
                     (pattern ? gr_regex_emit(&b->nfa, pattern, strlen(pattern), GR_RX_SEARCH, 1, &body, err)
                              : gr_emit_any_len(&b->nfa, 1, 0, -1, &body, err)) ||
                     gr_emit_bytes(&b->nfa, (const uint8_t *)"\"", 1, &q2, err) ||
                     gr_nfa_eps(&b->nfa, q1.end, body.start, err) || gr_nfa_eps(&b->nfa, body.end, q2.start, err) ||
                     gr_nfa_eps(&b->nfa, start, q1.start, err)
                 ? -1
                 : 0;
    if (!rc) {
        f.start = start;
        f.end = q2.end;
        rc = seal(b, &f, err);
    }
    for (int i = 0; !rc && i < nkeys; i++) {   /* a key: the exact text, vetoed at its end */
        char *esc = malloc(2 * strlen(keys[i]) + 4);
        if (!esc) {
            rc = v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
            break;
        }
        json_escape_regex(keys[i], esc, 2 * strlen(keys[i]) + 4);
        rc = veto_frag(b, esc, strlen(esc), GR_RX_FULL, start, err);
        free(esc);
    }
    for (int i = 0; !rc && i < nvetoes; i++)
        rc = veto_frag(b, vetoes[i], strlen(vetoes[i]), GR_RX_SEARCH, start, err);
    if (rc) {
        free(key);
        return -1;
    }
    if (st0 < b->lex_end)
        st0 = b->lex_end;
    return lex_add_from(b, key, &f, st0, err);
}
