/* gr_gbnf_merge.c - GBNF's regular rules as multi-character lexemes where a greedy lexer
 * provably splits the text as the grammar does (gr_gbnf.h; docs/grammar.md "GBNF").
 *
 * With one code point per lexeme every byte of every token goes through the Earley parser,
 * and the matcher's per-lexer-state mask caches hold nothing (each code point ends a
 * lexeme).  Here a nonterminal N whose language is regular (no recursion through it but
 * its own left recursion, which is how repetitions come out of gr_gbnf.c) becomes one
 * lexeme, N ::= X, when both hold (bytes below are UTF-8 lead bytes, an over-approximation
 * of code points that is exact for ASCII):
 *   A. no other lexeme of the emitted grammar (another merged rule, or a terminal left as
 *      one code point in a rule not merged) can start with a lead byte N can start with:
 *      then wherever X is allowed, its first code point leaves X alone in the lexer;
 *   B. no byte that can follow N (anywhere in the grammar: FOLLOW over code points) can
 *      extend a complete word of N to a longer prefix of one (EXT, from a subset
 *      construction of N's automaton): then the longest match ends exactly where every
 *      parse ends N, and the byte after it starts the next lexeme.
 * With A and B the lexer's split of any prefix of a sentence is the parse's, so masks stay
 * exact; where they cannot be shown (or an automaton grows past a bound) the rule keeps
 * its one-code-point terminals.  Before that, maximal runs of two or more regular symbols
 * inside a production (`"," ws`, `("true" | "false") ws`) become rules of their own, so
 * that they can be merged too (identical runs share one rule).  A failing A rejects the
 * runs among the conflicting lexemes first, then the rules themselves; a rejected rule's
 * own parts are tried in its place.
 * Ownership: everything here is scratch; lexemes go into the builder.  Thread: any.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_gbnf.h"

#define MG_MAX_CP_STATES (1 << 17)   /* a rule's code point automaton past this: not merged */
#define MG_MAX_DFA 4096              /* subset construction states for EXT past this: not merged */
#define MG_MAX_WORK (1 << 25)       /* subset construction steps for EXT past this: not merged */
#define MG_MAX_PASSES 512            /* fixpoint passes (FIRST, FOLLOW) past this: nothing merged */

typedef struct lb {   /* a set of bytes */
    uint64_t w[4];
} lb;

static inline void lb_set(lb *s, int c)
{
    s->w[c >> 6] |= 1ull << (c & 63);
}
static inline int lb_has(const lb *s, int c)
{
    return (int)((s->w[c >> 6] >> (c & 63)) & 1);
}
static inline int lb_or(lb *d, const lb *s)   /* 1 when d grew */
{
    int ch = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t v = d->w[k] | s->w[k];
        ch |= v != d->w[k];
        d->w[k] = v;
    }
    return ch;
}
static inline int lb_meets(const lb *a, const lb *b)
{
    return ((a->w[0] & b->w[0]) | (a->w[1] & b->w[1]) | (a->w[2] & b->w[2]) | (a->w[3] & b->w[3])) != 0;
}

/* the UTF-8 lead bytes of the code points lo..hi */
static void lead_range(lb *s, uint32_t lo, uint32_t hi)
{
    static const uint32_t cut[4][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (int k = 0; k < 4; k++) {
        uint32_t a = lo > cut[k][0] ? lo : cut[k][0], b = hi < cut[k][1] ? hi : cut[k][1];
        if (a > b)
            continue;
        uint32_t la = k == 0 ? a : k == 1 ? 0xC0 | (a >> 6) : k == 2 ? 0xE0 | (a >> 12) : 0xF0 | (a >> 18);
        uint32_t lz = k == 0 ? b : k == 1 ? 0xC0 | (b >> 6) : k == 2 ? 0xE0 | (b >> 12) : 0xF0 | (b >> 18);
        for (uint32_t c = la; c <= lz && c < 256; c++)
            lb_set(s, (int)c);
    }
}

/* the code point automaton of one rule: edges labelled with a set index, -1 epsilon */
typedef struct cpa {
    int32_t *first;                     /* per state: first edge, -1 */
    int32_t n_st, cap_st;
    int32_t *to, *next, *lab;
    int32_t n_ed, cap_ed;
    int over;                           /* past MG_MAX_CP_STATES */
} cpa;

typedef struct mg {
    gr_builder *b;
    gb_out *o;
    v4_error *err;
    int32_t n_nt, root;
    int32_t *p_off, *p_list;            /* productions by lhs (NT index) */
    int8_t *reg;                        /* regular: -1 unknown, 0, 1 */
    uint8_t *onstk, *nullable, *productive, *follow_eof, *is_run, *merged, *rejected;
    int32_t *refs;
    lb *lead;                           /* per set */
    lb *first, *follow;                 /* per NT */
    cpa a;
} mg;

static int nomem(mg *m)
{
    return v4_err_set(m->err, V4_ERR_NOMEM, "gbnf", "out of memory");
}

/* ------------------------------------------------------------ grammar views -- */
static int index_prods(mg *m)
{
    free(m->p_off), free(m->p_list);
    m->p_off = calloc((size_t)m->n_nt + 1, sizeof *m->p_off);
    m->p_list = malloc((size_t)(m->o->n_prods ? m->o->n_prods : 1) * sizeof *m->p_list);
    if (!m->p_off || !m->p_list)
        return nomem(m);
    for (int32_t p = 0; p < m->o->n_prods; p++)
        m->p_off[m->o->prods[p].lhs - GR_NT0 + 1]++;
    for (int32_t n = 0; n < m->n_nt; n++)
        m->p_off[n + 1] += m->p_off[n];
    int32_t *at = malloc((size_t)m->n_nt * sizeof *at + 1);
    if (!at)
        return nomem(m);
    memcpy(at, m->p_off, (size_t)m->n_nt * sizeof *at);
    for (int32_t p = 0; p < m->o->n_prods; p++)
        m->p_list[at[m->o->prods[p].lhs - GR_NT0]++] = p;
    free(at);
    return 0;
}

/* regular: every production's nonterminals regular, its own name only first (left
 * recursion); a cycle through other rules is not */
static int regular(mg *m, int32_t n)
{
    if (n >= m->n_nt)
        return 1;   /* a run being made (make_runs): regular symbols only */
    if (m->reg[n] >= 0)
        return m->reg[n];
    if (m->onstk[n])
        return 0;
    m->onstk[n] = 1;
    int ok = 1;
    for (int32_t q = m->p_off[n]; q < m->p_off[n + 1]; q++) {
        const gr_prod *pr = &m->o->prods[m->p_list[q]];
        for (int k = 0; k < pr->len; k++) {
            int32_t s = m->o->syms[pr->off + k];
            if (!GR_IS_NT(s))
                continue;
            if (s - GR_NT0 == n) {
                if (k != 0 || pr->len < 2)
                    ok = 0;
            } else if (!regular(m, s - GR_NT0)) {
                ok = 0;
            }
        }
    }
    m->onstk[n] = 0;
    m->reg[n] = (int8_t)ok;
    return ok;
}

/* nullable, productive, FIRST (lead bytes), FOLLOW (lead bytes, end of text): fixpoints.
 * 1 when they did not settle within MG_MAX_PASSES (then nothing is merged). */
static int sets(mg *m)
{
    gb_out *o = m->o;
    memset(m->nullable, 0, (size_t)m->n_nt);
    memset(m->productive, 0, (size_t)m->n_nt);
    memset(m->follow_eof, 0, (size_t)m->n_nt);
    memset(m->first, 0, (size_t)m->n_nt * sizeof *m->first);
    memset(m->follow, 0, (size_t)m->n_nt * sizeof *m->follow);
    int ch = 1, pass = 0;
    for (; ch && pass < MG_MAX_PASSES; pass++) {
        ch = 0;
        for (int32_t p = 0; p < o->n_prods; p++) {
            const gr_prod *pr = &o->prods[p];
            int32_t l = pr->lhs - GR_NT0;
            int nul = 1, prod = 1;
            for (int k = 0; k < pr->len; k++) {
                int32_t s = o->syms[pr->off + k];
                if (GR_IS_NT(s)) {
                    if (nul)
                        ch |= lb_or(&m->first[l], &m->first[s - GR_NT0]);
                    nul &= m->nullable[s - GR_NT0];
                    prod &= m->productive[s - GR_NT0];
                } else {
                    if (nul)
                        ch |= lb_or(&m->first[l], &m->lead[s]);
                    nul = 0;
                }
            }
            if (nul && !m->nullable[l])
                m->nullable[l] = 1, ch = 1;
            if (prod && !m->productive[l])
                m->productive[l] = 1, ch = 1;
        }
    }
    if (ch)
        return 1;
    m->follow_eof[m->root] = 1;
    ch = 1;
    for (pass = 0; ch && pass < MG_MAX_PASSES; pass++) {
        ch = 0;
        for (int32_t p = o->n_prods - 1; p >= 0; p--) {
            const gr_prod *pr = &o->prods[p];
            int32_t l = pr->lhs - GR_NT0;
            lb after = m->follow[l];   /* what may follow position k: FIRST(rest) (+ FOLLOW(lhs)) */
            int eof = m->follow_eof[l];
            for (int k = pr->len - 1; k >= 0; k--) {
                int32_t s = o->syms[pr->off + k];
                if (!GR_IS_NT(s)) {
                    after = m->lead[s];
                    eof = 0;
                    continue;
                }
                int32_t j = s - GR_NT0;
                ch |= lb_or(&m->follow[j], &after);
                if (eof && !m->follow_eof[j])
                    m->follow_eof[j] = 1, ch = 1;
                if (!m->nullable[j]) {
                    after = m->first[j];
                    eof = 0;
                } else {
                    lb_or(&after, &m->first[j]);
                }
            }
        }
    }
    return ch;
}

/* ----------------------------------------------------------------- runs -- */
/* a symbol that may stand in a run: a terminal, or a regular rule that is nullable or used
 * once (a non-nullable rule used in several places is better kept as one lexeme of its own) */
static int runnable(mg *m, int32_t s)
{
    if (!GR_IS_NT(s))
        return 1;
    int32_t j = s - GR_NT0;
    return regular(m, j) && (m->nullable[j] || m->refs[j] == 1);
}

static int push_prod(mg *m, int32_t lhs, const int32_t *syms, int n)
{
    gb_out *o = m->o;
    if (o->n_prods >= GR_MAX_PRODS)
        return 1;   /* no room: the run is not made */
    return gr_gbnf_out_add(o, lhs, syms, n) ? nomem(m) : 0;
}

/* the rule of the run syms[0..n): an identical one made before, else a new one */
static int32_t run_rule(mg *m, const int32_t *syms, int n, int32_t first_run)
{
    for (int32_t p = first_run; p < m->o->n_prods; p++) {   /* runs are few: a linear look */
        const gr_prod *pr = &m->o->prods[p];
        if (pr->len == n && !memcmp(m->o->syms + pr->off, syms, (size_t)n * sizeof *syms))
            return pr->lhs;
    }
    int32_t r = gr_nt(m->b, "run", m->err);
    if (r < 0)
        return -1;
    int rc = push_prod(m, r, syms, n);
    return rc < 0 ? -1 : rc ? -2 : r;
}

/* maximal runs of two or more runnable symbols (one of them a terminal or non-nullable) in
 * every production become rules.  The run rules' productions come after first_run. */
static int make_runs(mg *m, int32_t *first_run)
{
    gb_out *o = m->o;
    const int32_t n_prods = o->n_prods;
    *first_run = n_prods;
    int32_t *tmp = NULL;
    int cap = 0, rc = 0;
    for (int32_t p = 0; !rc && p < n_prods; p++) {
        int len = o->prods[p].len;
        if (len < 2)
            continue;
        int32_t lhs = o->prods[p].lhs - GR_NT0;
        if (len > cap) {
            int32_t *q = realloc(tmp, (size_t)len * sizeof *q);
            if (!q) {
                rc = nomem(m);
                break;
            }
            tmp = q;
            cap = len;
        }
        memcpy(tmp, o->syms + o->prods[p].off, (size_t)len * sizeof *tmp);
        int out = 0;
        for (int k = 0; k < len && !rc;) {
            int e = k, solid = 0;
            while (e < len && tmp[e] != lhs + GR_NT0 && runnable(m, tmp[e])) {
                solid |= !GR_IS_NT(tmp[e]) || !m->nullable[tmp[e] - GR_NT0];
                e++;
            }
            int whole = k == 0 && e == len && m->p_off[lhs + 1] - m->p_off[lhs] == 1;
            if (e - k >= 2 && solid && !whole) {
                int32_t r = run_rule(m, tmp + k, e - k, *first_run);
                if (r == -1) {
                    rc = -1;
                    break;
                }
                if (r >= 0) {
                    o->syms[o->prods[p].off + out++] = r;
                    k = e;
                    continue;
                }
            }
            for (int j = k; j < (e > k ? e : k + 1); j++)
                o->syms[o->prods[p].off + out++] = tmp[j];
            k = e > k ? e : k + 1;
        }
        o->prods[p].len = out;
    }
    free(tmp);
    return rc;
}

/* ------------------------------------------------- a rule's code point automaton -- */
static int cp_state(cpa *a)
{
    if (a->n_st >= MG_MAX_CP_STATES) {
        a->over = 1;
        return -1;
    }
    if (a->n_st == a->cap_st) {
        int32_t nc = a->cap_st ? a->cap_st * 2 : 256;
        int32_t *p = realloc(a->first, (size_t)nc * sizeof *p);
        if (!p)
            return -2;
        a->first = p;
        a->cap_st = nc;
    }
    a->first[a->n_st] = -1;
    return a->n_st++;
}

static int cp_edge(cpa *a, int32_t from, int32_t to, int32_t lab)
{
    if (a->n_ed == a->cap_ed) {
        int32_t nc = a->cap_ed ? a->cap_ed * 2 : 256;
        int32_t *p1 = realloc(a->to, (size_t)nc * sizeof *p1);
        if (p1)
            a->to = p1;
        int32_t *p2 = p1 ? realloc(a->next, (size_t)nc * sizeof *p2) : NULL;
        if (p2)
            a->next = p2;
        int32_t *p3 = p2 ? realloc(a->lab, (size_t)nc * sizeof *p3) : NULL;
        if (!p3)
            return -2;
        a->lab = p3;
        a->cap_ed = nc;
    }
    a->to[a->n_ed] = to;
    a->lab[a->n_ed] = lab;
    a->next[a->n_ed] = a->first[from];
    a->first[from] = a->n_ed++;
    return 0;
}

static int cp_rule(mg *m, int32_t n, int32_t from, int32_t to);

/* from -> syms[0..len) -> to.  0, -1 too large, -2 out of memory */
static int cp_seq(mg *m, const int32_t *syms, int len, int32_t from, int32_t to)
{
    if (len == 0)
        return cp_edge(&m->a, from, to, -1);
    int32_t cur = from;
    for (int k = 0; k < len; k++) {
        int32_t nx = k == len - 1 ? to : cp_state(&m->a);
        if (nx < 0)
            return nx;
        int r = GR_IS_NT(syms[k]) ? cp_rule(m, syms[k] - GR_NT0, cur, nx) : cp_edge(&m->a, cur, nx, syms[k]);
        if (r)
            return r;
        cur = nx;
    }
    return 0;
}

/* the regular rule n from `from` to `to`: its productions without it, then its left
 * recursive ones as a loop on a state of its own */
static int cp_rule(mg *m, int32_t n, int32_t from, int32_t to)
{
    int rec = 0;
    for (int32_t q = m->p_off[n]; q < m->p_off[n + 1]; q++) {
        const gr_prod *pr = &m->o->prods[m->p_list[q]];
        rec |= pr->len && m->o->syms[pr->off] == n + GR_NT0;
    }
    int32_t mid = rec ? cp_state(&m->a) : to;
    if (mid < 0)
        return mid;
    for (int32_t q = m->p_off[n]; q < m->p_off[n + 1]; q++) {
        const gr_prod *pr = &m->o->prods[m->p_list[q]];
        const int32_t *s = m->o->syms + pr->off;
        int r = pr->len && s[0] == n + GR_NT0 ? cp_seq(m, s + 1, pr->len - 1, mid, mid)
                                              : cp_seq(m, s, pr->len, from, mid);
        if (r)
            return r;
    }
    return rec ? cp_edge(&m->a, mid, to, -1) : 0;
}

/* ------------------------------------------------------------------- EXT -- */
typedef struct dset {   /* subset construction: state sets back to back, a hash over them */
    int32_t *el, *off, *ht;
    int64_t n_el, cap_el;
    int32_t n, cap, ht_cap;
} dset;

static uint64_t h_set(const int32_t *s, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < n; k++)
        h = (h ^ (uint32_t)s[k]) * 1099511628211ull;
    return h;
}

/* the id of the set s[0..n) (sorted), added when new; -1 too many, -2 out of memory */
static int32_t dset_id(dset *d, const int32_t *s, int n)
{
    uint64_t i = h_set(s, n) & (uint64_t)(d->ht_cap - 1);
    for (; d->ht[i] >= 0; i = (i + 1) & (uint64_t)(d->ht_cap - 1)) {
        int32_t x = d->ht[i];
        if (d->off[x + 1] - d->off[x] == n && !memcmp(d->el + d->off[x], s, (size_t)n * sizeof *s))
            return x;
    }
    if (d->n >= MG_MAX_DFA)
        return -1;
    if (d->n_el + n > d->cap_el) {
        int64_t nc = d->cap_el ? d->cap_el : 1024;
        while (nc < d->n_el + n)
            nc *= 2;
        int32_t *p = realloc(d->el, (size_t)nc * sizeof *p);
        if (!p)
            return -2;
        d->el = p;
        d->cap_el = nc;
    }
    memcpy(d->el + d->n_el, s, (size_t)n * sizeof *s);
    d->n_el += n;
    d->off[d->n + 1] = (int32_t)d->n_el;
    d->ht[i] = d->n;
    return d->n++;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* close stk[0..n) under epsilon edges into coreachable states (mark: generation gen);
 * returns the new count, sorted */
static int closure(const cpa *a, const uint8_t *co, int32_t *mark, int32_t gen, int32_t *stk, int n)
{
    int top = 0;
    for (int k = 0; k < n; k++)
        mark[stk[k]] = gen;
    int len = n;
    while (top < len) {
        int32_t s = stk[top++];
        for (int32_t e = a->first[s]; e >= 0; e = a->next[e])
            if (a->lab[e] < 0 && co[a->to[e]] && mark[a->to[e]] != gen) {
                mark[a->to[e]] = gen;
                stk[len++] = a->to[e];
            }
    }
    qsort(stk, (size_t)len, sizeof *stk, cmp_i32);
    return len;
}

/* EXT of the automaton a (start s0, accepting fin): the lead bytes that take some complete
 * word on to a longer prefix of a word.  0, 1 too large, -1 out of memory. */
static int ext_bytes(mg *m, int32_t s0, int32_t fin, lb *ext)
{
    const cpa *a = &m->a;
    const int32_t N = a->n_st;
    memset(ext, 0, sizeof *ext);
    uint8_t *co = calloc((size_t)N, 1);
    int32_t *rfirst = malloc((size_t)N * sizeof *rfirst), *rnext = malloc((size_t)(a->n_ed + 1) * sizeof *rnext);
    int32_t *rfrom = malloc((size_t)(a->n_ed + 1) * sizeof *rfrom), *mark = calloc((size_t)N, sizeof *mark);
    int32_t *stk = malloc((size_t)N * sizeof *stk), *buf = malloc((size_t)N * sizeof *buf);
    int32_t *bpos = malloc(256 * sizeof *bpos), *blen = malloc(256 * sizeof *blen);
    int32_t *succ = NULL;
    int64_t cap_succ = 0;
    dset d = {0};
    d.ht_cap = 2 * MG_MAX_DFA;
    d.ht = malloc((size_t)d.ht_cap * sizeof *d.ht);
    d.off = calloc(MG_MAX_DFA + 1, sizeof *d.off);
    int rc = 0;
    int64_t work = 0;
    if (!co || !rfirst || !rnext || !rfrom || !mark || !stk || !buf || !bpos || !blen || !d.ht || !d.off) {
        rc = -1;
        goto out;
    }
    memset(d.ht, 0xFF, (size_t)d.ht_cap * sizeof *d.ht);
    memset(rfirst, 0xFF, (size_t)N * sizeof *rfirst);
    for (int32_t s = 0; s < N; s++)   /* reverse edges, then coreachability of fin */
        for (int32_t e = a->first[s]; e >= 0; e = a->next[e]) {
            rfrom[e] = s;
            rnext[e] = rfirst[a->to[e]];
            rfirst[a->to[e]] = e;
        }
    int top = 0;
    co[fin] = 1;
    stk[top++] = fin;
    while (top) {
        int32_t s = stk[--top];
        for (int32_t e = rfirst[s]; e >= 0; e = rnext[e])
            if (!co[rfrom[e]]) {
                co[rfrom[e]] = 1;
                stk[top++] = rfrom[e];
            }
    }
    if (!co[s0])
        goto out;   /* an empty language: nothing extends */
    int32_t gen = 1;
    stk[0] = s0;
    int n = closure(a, co, mark, gen++, stk, 1);
    if (dset_id(&d, stk, n) < 0) {
        rc = -1;
        goto out;
    }
    for (int32_t x = 0; x < d.n && !rc; x++) {
        /* successors by lead byte: the coreachable targets of labelled edges */
        int64_t ns = 0;
        memset(blen, 0, 256 * sizeof *blen);
        int is_acc = 0;
        for (int32_t k = d.off[x]; k < d.off[x + 1]; k++) {
            int32_t s = d.el[k];
            is_acc |= s == fin;
            for (int32_t e = a->first[s]; e >= 0; e = a->next[e])
                if (a->lab[e] >= 0 && co[a->to[e]])
                    for (int w = 0; w < 4; w++)
                        for (uint64_t v = m->lead[a->lab[e]].w[w]; v; v &= v - 1, work++)
                            blen[w * 64 + __builtin_ctzll(v)]++;
        }
        if (work > MG_MAX_WORK) {
            rc = 1;
            break;
        }
        for (int c = 0; c < 256; c++) {
            bpos[c] = (int32_t)ns;
            ns += blen[c];
            blen[c] = 0;
        }
        if (ns > cap_succ) {
            int32_t *p = realloc(succ, (size_t)ns * sizeof *p);
            if (!p) {
                rc = -1;
                break;
            }
            succ = p;
            cap_succ = ns;
        }
        for (int32_t k = d.off[x]; k < d.off[x + 1]; k++)
            for (int32_t e = a->first[d.el[k]]; e >= 0; e = a->next[e])
                if (a->lab[e] >= 0 && co[a->to[e]])
                    for (int w = 0; w < 4; w++)
                        for (uint64_t v = m->lead[a->lab[e]].w[w]; v; v &= v - 1) {
                            int c = w * 64 + __builtin_ctzll(v);
                            succ[bpos[c] + blen[c]++] = a->to[e];
                        }
        for (int c = 0; c < 256 && !rc; c++) {
            if (!blen[c])
                continue;
            if (is_acc)
                lb_set(ext, c);
            /* dedup the targets, close, look up */
            int m2 = 0;
            for (int k = 0; k < blen[c]; k++) {
                int32_t t = succ[bpos[c] + k];
                if (mark[t] != gen) {
                    mark[t] = gen;
                    buf[m2++] = t;
                }
            }
            gen++;
            memcpy(stk, buf, (size_t)m2 * sizeof *stk);
            n = closure(a, co, mark, gen++, stk, m2);
            work += n;
            int32_t id = dset_id(&d, stk, n);
            if (id == -1)
                rc = 1;
            else if (id < 0)
                rc = -1;
        }
    }
out:
    free(co), free(rfirst), free(rnext), free(rfrom), free(mark), free(stk), free(buf), free(bpos), free(blen);
    free(succ), free(d.el), free(d.off), free(d.ht);
    return rc;
}

/* ------------------------------------------------------------- candidates -- */
/* 1 when rule n may be one lexeme as far as B goes (regular, productive, not nullable, its
 * automaton small, FOLLOW apart from EXT); -1 out of memory */
static int mergeable(mg *m, int32_t n)
{
    if (!regular(m, n) || !m->productive[n] || m->nullable[n])
        return 0;
    m->a.n_st = m->a.n_ed = m->a.over = 0;
    int32_t s0 = cp_state(&m->a), fin = cp_state(&m->a);
    if (s0 == -2 || fin == -2)
        return -1;
    int r = cp_rule(m, n, s0, fin);
    if (r == -2)
        return -1;
    if (r || m->a.over)
        return 0;
    if (!lb_meets(&m->follow[n], &m->follow[n]))
        return 1;   /* only the end of the text follows: nothing to tell apart */
    lb ext;
    r = ext_bytes(m, s0, fin, &ext);
    if (r)
        return r < 0 ? -1 : 0;
    return !lb_meets(&ext, &m->follow[n]);
}

/* emit rule n (merged) as a lexeme into the builder: the id, or -1 */
static int emit_lexeme(mg *m, int32_t n)
{
    m->a.n_st = m->a.n_ed = m->a.over = 0;
    int32_t s0 = cp_state(&m->a), fin = cp_state(&m->a);
    if (s0 < 0 || fin < 0 || cp_rule(m, n, s0, fin) || m->a.over)
        return m->a.over ? v4_err_set(m->err, V4_ERR_RANGE, "gbnf", "a rule's automaton is too large") : nomem(m);
    gr_nfa *nfa = &m->b->nfa;
    int32_t base = nfa->n_st;
    for (int32_t s = 0; s < m->a.n_st; s++)
        if (gr_nfa_state(nfa, m->err) < 0)
            return -1;
    for (int32_t s = 0; s < m->a.n_st; s++)
        for (int32_t e = m->a.first[s]; e >= 0; e = m->a.next[e]) {
            if (m->a.lab[e] < 0) {
                if (gr_nfa_eps(nfa, base + s, base + m->a.to[e], m->err))
                    return -1;
                continue;
            }
            gr_frag f;
            if (gr_emit_cset(nfa, &m->o->sets[m->a.lab[e]], 0, &f, m->err) ||
                gr_nfa_eps(nfa, base + s, f.start, m->err) || gr_nfa_eps(nfa, f.end, base + m->a.to[e], m->err))
                return -1;
        }
    gr_frag f = {.start = base + s0, .end = base + fin};
    char key[32];
    snprintf(key, sizeof key, "gbnf-rule-%d", (int)n);
    return gr_lex_frag(m->b, key, &f, m->err);
}

/* choose the merged rules: from root, a mergeable rule not rejected is merged and not
 * entered; then condition A over the lexemes that remain; repeat until nothing conflicts */
static int choose(mg *m, int8_t *ok)
{
    int32_t *stk = malloc((size_t)m->n_nt * sizeof *stk + 1);
    uint8_t *seen = malloc((size_t)m->n_nt + 1);
    if (!stk || !seen) {
        free(stk), free(seen);
        return nomem(m);
    }
    int rc = 0;
    for (;;) {
        memset(seen, 0, (size_t)m->n_nt);
        memset(m->merged, 0, (size_t)m->n_nt);
        int top = 0;
        stk[top++] = m->root;
        seen[m->root] = 1;
        /* per lead byte: a terminal left single starts with it; the merged rule that does
         * (first seen) and whether two different ones do */
        lb single = {{0}}, multi = {{0}};
        int32_t owner[256];
        memset(owner, 0xFF, sizeof owner);
        while (top && !rc) {
            int32_t n = stk[--top];
            if (ok[n] < 0) {
                ok[n] = (int8_t)mergeable(m, n);
                if (ok[n] < 0) {
                    rc = nomem(m);
                    break;
                }
            }
            if (ok[n] && !m->rejected[n]) {
                m->merged[n] = 1;
                for (int c = 0; c < 256; c++)
                    if (lb_has(&m->first[n], c)) {
                        if (owner[c] < 0)
                            owner[c] = n;
                        else if (owner[c] != n)
                            lb_set(&multi, c);
                    }
                continue;
            }
            for (int32_t q = m->p_off[n]; q < m->p_off[n + 1]; q++) {
                const gr_prod *pr = &m->o->prods[m->p_list[q]];
                for (int k = 0; k < pr->len; k++) {
                    int32_t s = m->o->syms[pr->off + k];
                    if (!GR_IS_NT(s))
                        lb_or(&single, &m->lead[s]);
                    else if (!seen[s - GR_NT0]) {
                        seen[s - GR_NT0] = 1;
                        stk[top++] = s - GR_NT0;
                    }
                }
            }
        }
        if (rc)
            break;
        lb bad = single;
        lb_or(&bad, &multi);
        int any_run = 0, any = 0;
        for (int32_t n = 0; n < m->n_nt; n++)
            if (m->merged[n] && lb_meets(&m->first[n], &bad)) {
                any = 1;
                any_run |= m->is_run[n];
            }
        if (!any)
            break;
        for (int32_t n = 0; n < m->n_nt; n++)
            if (m->merged[n] && lb_meets(&m->first[n], &bad) && (m->is_run[n] || !any_run))
                m->rejected[n] = 1;
    }
    free(stk), free(seen);
    return rc;
}

int gr_gbnf_merge(gr_builder *b, gb_out *o, int32_t **lex_of, v4_error *err)
{
    mg m = {.b = b, .o = o, .err = err, .root = b->start - GR_NT0};
    *lex_of = NULL;
    int rc = 0;
    int32_t first_run = o->n_prods;
    m.lead = calloc((size_t)o->n_sets + 1, sizeof *m.lead);
    if (!m.lead)
        return nomem(&m);
    for (int32_t s = 0; s < o->n_sets; s++)
        for (int k = 0; k < o->sets[s].n; k++)
            lead_range(&m.lead[s], o->sets[s].r[2 * k], o->sets[s].r[2 * k + 1]);
    for (int round = 0; round < 2 && !rc; round++) {   /* 0: runs made; 1: the choice */
        m.n_nt = b->n_nt;
        size_t n = (size_t)m.n_nt + 1;
        free(m.reg), free(m.onstk), free(m.nullable), free(m.productive), free(m.follow_eof);
        free(m.refs), free(m.first), free(m.follow);
        m.reg = malloc(n), m.onstk = calloc(n, 1), m.nullable = malloc(n), m.productive = malloc(n);
        m.follow_eof = malloc(n), m.refs = calloc(n, sizeof *m.refs);
        m.first = malloc(n * sizeof *m.first), m.follow = malloc(n * sizeof *m.follow);
        if (!m.reg || !m.onstk || !m.nullable || !m.productive || !m.follow_eof || !m.refs || !m.first || !m.follow ||
            index_prods(&m)) {
            rc = nomem(&m);
            break;
        }
        memset(m.reg, 0xFF, n);
        for (int64_t k = 0; k < o->n_syms; k++)
            if (GR_IS_NT(o->syms[k]))
                m.refs[o->syms[k] - GR_NT0]++;
        if (sets(&m))
            goto out;   /* did not settle: one code point per terminal, as before */
        if (round == 0)
            rc = make_runs(&m, &first_run);
    }
    if (rc)
        goto out;
    m.is_run = calloc((size_t)m.n_nt + 1, 1);
    m.merged = calloc((size_t)m.n_nt + 1, 1);
    m.rejected = calloc((size_t)m.n_nt + 1, 1);
    int8_t *ok = malloc((size_t)m.n_nt + 1);
    *lex_of = malloc(((size_t)m.n_nt + 1) * sizeof **lex_of);
    if (!m.is_run || !m.merged || !m.rejected || !ok || !*lex_of) {
        free(ok);
        rc = nomem(&m);
        goto out;
    }
    memset(ok, 0xFF, (size_t)m.n_nt);
    for (int32_t p = first_run; p < o->n_prods; p++)
        m.is_run[o->prods[p].lhs - GR_NT0] = 1;
    rc = choose(&m, ok);
    free(ok);
    for (int32_t n = 0; n < m.n_nt; n++)
        (*lex_of)[n] = -1;
    for (int32_t n = 0; !rc && n < m.n_nt; n++)
        if (m.merged[n] && ((*lex_of)[n] = emit_lexeme(&m, n)) < 0)
            rc = -1;
out:
    if (rc) {
        free(*lex_of);
        *lex_of = NULL;
    }
    free(m.lead), free(m.reg), free(m.onstk), free(m.nullable), free(m.productive), free(m.follow_eof);
    free(m.refs), free(m.first), free(m.follow), free(m.p_off), free(m.p_list);
    free(m.is_run), free(m.merged), free(m.rejected);
    free(m.a.first), free(m.a.to), free(m.a.next), free(m.a.lab);
    return rc ? -1 : 0;
}
