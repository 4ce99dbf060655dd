/* gr_nfa.c - the lexemes' Thompson NFA: states and edges, code point sets, and their
 * emission as byte automata (UTF-8, or JSON-encoded as inside a string).
 * docs/structured-outputs.md ("How the engine works") explains why bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_internal.h"

static int grow(void **p, int32_t *cap, int32_t need, size_t el, v4_error *err)
{
    if (need <= *cap)
        return 0;
    int32_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * el);
    if (!q)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory (NFA)");
    *p = q;
    *cap = nc;
    return 0;
}

int gr_nfa_state(gr_nfa *n, v4_error *err)
{
    if (n->n_st >= GR_MAX_NFA_STATES)
        return v4_err_set(err, V4_ERR_RANGE, "grammar", "constraint too large: over %d automaton states",
                          GR_MAX_NFA_STATES);
    if (grow((void **)&n->st, &n->cap_st, n->n_st + 1, sizeof *n->st, err))
        return -1;
    n->st[n->n_st] = (gr_nstate){.first = -1, .accept = -1, .owner = -1, .role = GR_ROLE_MAIN};
    return n->n_st++;
}

static int add_edge(gr_nfa *n, int from, int to, int lo, int hi, int eps, v4_error *err)
{
    if (grow((void **)&n->ed, &n->cap_ed, n->n_ed + 1, sizeof *n->ed, err))
        return -1;
    n->ed[n->n_ed] = (gr_edge){.to = to, .next = n->st[from].first, .lo = (uint8_t)lo, .hi = (uint8_t)hi,
                               .eps = (uint8_t)eps};
    n->st[from].first = n->n_ed++;
    return 0;
}

int gr_nfa_edge(gr_nfa *n, int from, int to, int lo, int hi, v4_error *err)
{
    return add_edge(n, from, to, lo, hi, 0, err);
}

int gr_nfa_eps(gr_nfa *n, int from, int to, v4_error *err)
{
    return add_edge(n, from, to, 0, 0, 1, err);
}

void gr_nfa_free(gr_nfa *n)
{
    free(n->st);
    free(n->ed);
    free(n->absorb);
    memset(n, 0, sizeof *n);
}

/* ------------------------------------------------------------ code point sets -- */
int gr_cset_add(gr_cset *s, uint32_t lo, uint32_t hi)
{
    if (lo > hi)
        return 0;
    if (s->n + 1 > s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        uint32_t *q = realloc(s->r, (size_t)nc * 2 * sizeof *q);
        if (!q)
            return -1;
        s->r = q;
        s->cap = nc;
    }
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return 0;
}

static int cmp_range(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

void gr_cset_norm(gr_cset *s)
{
    if (s->n < 2)
        return;
    qsort(s->r, (size_t)s->n, 2 * sizeof *s->r, cmp_range);
    int w = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[2 * i] <= s->r[2 * w + 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * w + 1])
                s->r[2 * w + 1] = s->r[2 * i + 1];
        } else {
            w++;
            s->r[2 * w] = s->r[2 * i];
            s->r[2 * w + 1] = s->r[2 * i + 1];
        }
    }
    s->n = w + 1;
}

int gr_cset_negate(const gr_cset *s, gr_cset *out)
{
    memset(out, 0, sizeof *out);
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[2 * i] > next && gr_cset_add(out, next, s->r[2 * i] - 1))
            return -1;
        next = s->r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF && gr_cset_add(out, next, 0x10FFFF))
        return -1;
    return 0;
}

int gr_cset_copy(const gr_cset *s, gr_cset *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < s->n; i++)
        if (gr_cset_add(out, s->r[2 * i], s->r[2 * i + 1]))
            return -1;
    return 0;
}

void gr_cset_free(gr_cset *s)
{
    free(s->r);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ UTF-8 emission -- */
static int utf8_enc(uint32_t c, uint8_t *o)
{
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | (c >> 6));
        o[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (c >> 12));
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (c >> 18));
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* a chain start -[r0]-> . -[r1]-> ... -> end for byte ranges lo[i]..hi[i] */
static int chain(gr_nfa *n, int start, int end, const uint8_t *lo, const uint8_t *hi, int len, v4_error *err)
{
    int cur = start;
    for (int i = 0; i < len; i++) {
        int nx = i + 1 == len ? end : gr_nfa_state(n, err);
        if (nx < 0 || gr_nfa_edge(n, cur, nx, lo[i], hi[i], err))
            return -1;
        cur = nx;
    }
    return 0;
}

/* [lo, hi] with one UTF-8 length, split until each byte position is a plain range. */
static int utf8_split(gr_nfa *n, int start, int end, uint32_t lo, uint32_t hi, v4_error *err)
{
    uint8_t a[4], b[4];
    int len = utf8_enc(lo, a);
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_split(n, start, end, lo, lo | m, err) ||
                               utf8_split(n, start, end, (lo | m) + 1, hi, err)
                           ? -1
                           : 0;
            if ((hi & m) != m)
                return utf8_split(n, start, end, lo, (hi & ~m) - 1, err) ||
                               utf8_split(n, start, end, hi & ~m, hi, err)
                           ? -1
                           : 0;
        }
    }
    utf8_enc(hi, b);
    return chain(n, start, end, a, b, len, err);
}

static int utf8_range(gr_nfa *n, int start, int end, uint32_t lo, uint32_t hi, v4_error *err)
{
    static const uint32_t cut[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int k = 0; k < 4 && lo <= hi; k++) {
        if (lo > cut[k])
            continue;
        uint32_t h = hi < cut[k] ? hi : cut[k];
        /* never the surrogates: they are not Unicode scalars */
        if (lo <= 0xDFFF && h >= 0xD800) {
            if (lo < 0xD800 && utf8_split(n, start, end, lo, 0xD7FF, err))
                return -1;
            if (h > 0xDFFF && utf8_split(n, start, end, 0xE000, h, err))
                return -1;
        } else if (utf8_split(n, start, end, lo, h, err)) {
            return -1;
        }
        lo = h + 1;
    }
    return 0;
}

static int lit(gr_nfa *n, int start, int end, const char *s, v4_error *err)
{
    uint8_t b[8];
    int len = (int)strlen(s);
    memcpy(b, s, (size_t)len);
    return chain(n, start, end, b, b, len, err);
}

static int has(const gr_cset *s, uint32_t c)
{
    for (int i = 0; i < s->n; i++)
        if (c >= s->r[2 * i] && c <= s->r[2 * i + 1])
            return 1;
    return 0;
}

int gr_emit_cset(gr_nfa *n, const gr_cset *s, int json, gr_frag *out, v4_error *err)
{
    int st = gr_nfa_state(n, err), en = gr_nfa_state(n, err);
    if (st < 0 || en < 0)
        return -1;
    out->start = st;
    out->end = en;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (!json) {
            if (utf8_range(n, st, en, lo, hi, err))
                return -1;
            continue;
        }
        /* raw: >= 0x20, not '"' (0x22), not '\' (0x5C) */
        static const uint32_t raw[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
        for (int k = 0; k < 3; k++) {
            uint32_t a = lo > raw[k][0] ? lo : raw[k][0], b = hi < raw[k][1] ? hi : raw[k][1];
            if (a <= b && utf8_range(n, st, en, a, b, err))
                return -1;
        }
    }
    if (!json)
        return 0;
    static const struct {
        uint32_t c;
        const char *esc;
    } short_esc[] = {{0x22, "\\\""}, {0x5C, "\\\\"}, {0x2F, "\\/"}, {0x08, "\\b"},
                     {0x0C, "\\f"},  {0x0A, "\\n"},  {0x0D, "\\r"}, {0x09, "\\t"}};
    for (size_t k = 0; k < sizeof short_esc / sizeof *short_esc; k++)
        if (has(s, short_esc[k].c) && lit(n, st, en, short_esc[k].esc, err))
            return -1;
    for (uint32_t c = 0; c < 0x20; c++) {
        if (!has(s, c) || c == 0x08 || c == 0x0C || c == 0x0A || c == 0x0D || c == 0x09)
            continue;
        /* \u00XX, hex digits of either case */
        static const char hx[] = "0123456789abcdef";
        int a = gr_nfa_state(n, err), b = gr_nfa_state(n, err);
        if (a < 0 || b < 0 || lit(n, st, a, "\\u00", err) || gr_nfa_edge(n, a, b, hx[c >> 4], hx[c >> 4], err))
            return -1;
        int d = (int)(c & 15);
        if (gr_nfa_edge(n, b, en, hx[d], hx[d], err))
            return -1;
        if (d >= 10 && gr_nfa_edge(n, b, en, hx[d] - 32, hx[d] - 32, err))
            return -1;
    }
    return 0;
}

int gr_emit_bytes(gr_nfa *n, const uint8_t *b, size_t len, gr_frag *out, v4_error *err)
{
    int st = gr_nfa_state(n, err);
    if (st < 0)
        return -1;
    out->start = st;
    int cur = st;
    for (size_t i = 0; i < len; i++) {
        int nx = gr_nfa_state(n, err);
        if (nx < 0 || gr_nfa_edge(n, cur, nx, b[i], b[i], err))
            return -1;
        cur = nx;
    }
    out->end = cur;
    return 0;
}

int gr_emit_any_len(gr_nfa *n, int json, int min, int max, gr_frag *out, v4_error *err)
{
    if (min > GR_MAX_REPEAT || max > GR_MAX_REPEAT)
        return v4_err_set(err, V4_ERR_RANGE, "grammar", "length bound %d over the engine's %d",
                          min > max ? min : max, GR_MAX_REPEAT);
    gr_cset any = {0};
    if (gr_cset_add(&any, 0, 0x10FFFF)) {
        gr_cset_free(&any);
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    }
    int st = gr_nfa_state(n, err);
    int rc = st < 0 ? -1 : 0;
    int cur = st;
    const int mark = n->str_mark && json;   /* string content: srem on each character's start */
    for (int i = 0; rc == 0 && i < min; i++) {
        gr_frag f;
        rc = gr_emit_cset(n, &any, json, &f, err);
        if (!rc && mark)
            n->st[f.start].srem = max < 0 ? INT32_MAX : max - i;
        if (!rc)
            rc = gr_nfa_eps(n, cur, f.start, err);
        cur = f.end;
    }
    if (rc == 0 && max < 0) {   /* cur -> (char)* */
        gr_frag f;
        rc = gr_emit_cset(n, &any, json, &f, err);
        if (!rc && mark)
            n->st[f.start].srem = INT32_MAX;
        if (!rc)
            rc = gr_nfa_eps(n, cur, f.start, err) || gr_nfa_eps(n, f.end, cur, err) ? -1 : 0;
    } else if (rc == 0) {   /* up to max - min more, each may stop */
        int end = gr_nfa_state(n, err);
        rc = end < 0 ? -1 : gr_nfa_eps(n, cur, end, err);
        for (int i = min; rc == 0 && i < max; i++) {
            gr_frag f;
            rc = gr_emit_cset(n, &any, json, &f, err);
            if (!rc && mark)
                n->st[f.start].srem = max - i;
            if (!rc)
                rc = gr_nfa_eps(n, cur, f.start, err) || gr_nfa_eps(n, f.end, end, err) ? -1 : 0;
            cur = f.end;
        }
        cur = end;
    }
    gr_cset_free(&any);
    out->start = st;
    out->end = cur;
    return rc;
}
