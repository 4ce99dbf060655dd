/* gr_lexer.c - a grammar frozen from its builder, and its lexer: the NFA of every lexeme
 * determinized lazily.  A DFA state is the set of NFA states reached (after epsilon
 * closure, keeping only states with byte edges or an accept, and only states from which
 * an accept is still reachable, so every DFA state can still finish a lexeme).  Its 256
 * successors are computed on first use, for a whole byte class at once (bytes that no
 * edge range of the NFA tells apart), and cached; start states are cached per set of
 * allowed lexemes.  The caches belong to the grammar and grow under its mutex.
 */
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_internal.h"

static int grow64(void **p, int64_t *cap, int64_t need, size_t el)
{
    if (need <= *cap)
        return 0;
    int64_t nc = *cap ? *cap : 256;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * el);
    if (!q)
        return -1;
    *p = q;
    *cap = nc;
    return 0;
}

/* ----------------------------------------------------------------- freeze -- */
static int prods_by_lhs(gr_grammar *g, v4_error *err)
{
    g->nt_prods = calloc((size_t)g->n_nt + 1, sizeof *g->nt_prods);
    g->nt_nprods = calloc((size_t)g->n_nt + 1, sizeof *g->nt_nprods);
    g->by_lhs = malloc(((size_t)g->n_prods + 1) * sizeof *g->by_lhs);
    g->nullable = calloc((size_t)g->n_nt + 1, 1);
    if (!g->nt_prods || !g->nt_nprods || !g->by_lhs || !g->nullable)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    for (int p = 0; p < g->n_prods; p++)
        g->nt_nprods[g->prods[p].lhs - GR_NT0]++;
    int off = 0;
    for (int i = 0; i < g->n_nt; i++) {
        g->nt_prods[i] = off;
        off += g->nt_nprods[i];
        g->nt_nprods[i] = 0;
    }
    for (int p = 0; p < g->n_prods; p++) {
        int i = g->prods[p].lhs - GR_NT0;
        g->by_lhs[g->nt_prods[i] + g->nt_nprods[i]++] = p;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int p = 0; p < g->n_prods; p++) {
            int i = g->prods[p].lhs - GR_NT0, all = 1;
            if (g->nullable[i])
                continue;
            for (int k = 0; k < g->prods[p].len && all; k++) {
                int s = g->syms[g->prods[p].off + k];
                all = GR_IS_NT(s) && g->nullable[s - GR_NT0];
            }
            if (all) {
                g->nullable[i] = 1;
                changed = 1;
            }
        }
    }
    return 0;
}

/* Drop every production that can derive no text: one naming a lexeme no text matches, or
 * a nonterminal none of whose productions can (a schema false, an enum with no value of
 * the allowed type, ...).  What remains can always be finished, so the matcher never
 * leads into a dead end.  The start symbol itself unproductive: the constraint admits no
 * text, a compile error. */
static int prune(gr_grammar *g, v4_error *err)
{
    uint8_t *ok = calloc((size_t)g->n_nt + 1, 1);
    if (!ok)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    for (int changed = 1; changed;) {
        changed = 0;
        for (int p = 0; p < g->n_prods; p++) {
            int i = g->prods[p].lhs - GR_NT0, all = 1;
            if (ok[i])
                continue;
            for (int k = 0; k < g->prods[p].len && all; k++) {
                int s = g->syms[g->prods[p].off + k];
                all = GR_IS_NT(s) ? ok[s - GR_NT0] : g->coreach[g->lex_start[s]];
            }
            if (all)
                ok[i] = changed = 1;
        }
    }
    if (!ok[g->start - GR_NT0]) {
        free(ok);
        return v4_err_set(err, V4_ERR_INVALID, "grammar", "the constraint admits no text at all");
    }
    int w = 0;
    for (int p = 0; p < g->n_prods; p++) {
        int all = ok[g->prods[p].lhs - GR_NT0];
        for (int k = 0; k < g->prods[p].len && all; k++) {
            int s = g->syms[g->prods[p].off + k];
            all = GR_IS_NT(s) ? ok[s - GR_NT0] : g->coreach[g->lex_start[s]];
        }
        if (all)
            g->prods[w++] = g->prods[p];
    }
    g->n_prods = w;
    free(ok);
    return 0;
}

/* coreach[s]: an accepting state is reachable from s (reverse search over all edges) */
static int trim(gr_grammar *g, v4_error *err)
{
    int32_t n = g->nfa.n_st;
    int32_t *rhead = malloc((size_t)n * sizeof *rhead), *rnext = malloc((size_t)g->nfa.n_ed * sizeof *rnext),
            *rfrom = malloc((size_t)g->nfa.n_ed * sizeof *rfrom), *stack = malloc((size_t)n * sizeof *stack);
    g->coreach = calloc((size_t)n, sizeof *g->coreach);
    if (!rhead || !rnext || !rfrom || !stack || !g->coreach) {
        free(rhead), free(rnext), free(rfrom), free(stack);
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    }
    memset(rhead, 0xFF, (size_t)n * sizeof *rhead);
    for (int32_t s = 0; s < n; s++)
        for (int32_t e = g->nfa.st[s].first; e >= 0; e = g->nfa.ed[e].next) {
            int32_t t = g->nfa.ed[e].to;
            rfrom[e] = s;
            rnext[e] = rhead[t];
            rhead[t] = e;
        }
    int sp = 0;
    for (int32_t s = 0; s < n; s++)
        if (g->nfa.st[s].accept >= 0 || g->nfa.st[s].role == GR_ROLE_VETO_ACCEPT) {
            g->coreach[s] = 1;
            stack[sp++] = s;
        }
    while (sp) {
        int32_t t = stack[--sp];
        for (int32_t e = rhead[t]; e >= 0; e = rnext[e])
            if (!g->coreach[rfrom[e]]) {
                g->coreach[rfrom[e]] = 1;
                stack[sp++] = rfrom[e];
            }
    }
    free(rhead), free(rnext), free(rfrom), free(stack);
    return 0;
}

static void closure(gr_grammar *g, int32_t s0, int *n);
static void new_gen(gr_lexer *lx, int32_t n_st);
static int cmp_i32(const void *a, const void *b);

/* g->cls: a new class starts at every edge range's lo and just past its hi */
static void byte_classes(gr_grammar *g)
{
    uint8_t cut[257] = {0};
    for (int32_t e = 0; e < g->nfa.n_ed; e++)
        if (!g->nfa.ed[e].eps) {
            cut[g->nfa.ed[e].lo] = 1;
            cut[g->nfa.ed[e].hi + 1] = 1;
        }
    int k = 0;
    for (int c = 0; c < 256; c++) {
        k += c > 0 && cut[c];
        g->cls[c] = (uint8_t)k;   /* at most 256 classes: k < 256 */
    }
    for (int c = 0; c < 256; c++)
        g->cls_next[c] = (int16_t)(c < 255 && !cut[c + 1] ? c + 1 : -1);
}

/* the lexer set of each generic loop head (gr_dstate.generic), sorted, for intern() */
static int generic_sets(gr_grammar *g, const gr_builder *b, v4_error *err)
{
    for (int h = 0; h < b->n_gheads; h++) {
        new_gen(&g->lx, g->nfa.n_st);
        int n = 0;
        closure(g, b->gheads[h], &n);
        qsort(g->lx.buf, (size_t)n, sizeof *g->lx.buf, cmp_i32);
        int32_t *q = realloc(g->gsets, ((size_t)g->len_gsets + (size_t)n + 1) * sizeof *q);
        if (!q)
            return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        g->gsets = q;
        q[g->len_gsets] = n;
        memcpy(q + g->len_gsets + 1, g->lx.buf, (size_t)n * sizeof *q);
        g->len_gsets += n + 1;
        g->n_gsets++;
    }
    return 0;
}

gr_grammar *gr_grammar_build(gr_builder *b, v4_error *err)
{
    if (b->start < 0) {
        v4_err_set(err, V4_ERR_INTERNAL, "grammar", "no start symbol");
        return NULL;
    }
    gr_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        return NULL;
    }
    g->nfa = b->nfa;
    memset(&b->nfa, 0, sizeof b->nfa);
    g->n_lex = b->n_lex;
    g->lex_start = malloc(((size_t)b->n_lex + 1) * sizeof *g->lex_start);
    if (g->lex_start)
        for (int i = 0; i < b->n_lex; i++)
            g->lex_start[i] = b->lex[i].start;
    g->prods = b->prods;
    g->n_prods = b->n_prods;
    g->syms = b->syms;
    g->n_nt = b->n_nt;
    g->start = b->start;
    g->skip = b->skip;
    g->skip_max = b->skip_max;
    b->prods = NULL;
    b->syms = NULL;
    b->n_prods = b->cap_prods = b->n_syms = b->cap_syms = 0;
    g->lex_words = (g->n_lex + 63) / 64;
    pthread_mutex_init(&g->mu, NULL);
    if (!g->lex_start) {
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        gr_grammar_free(g);
        return NULL;
    }
    if (trim(g, err) || prune(g, err) || prods_by_lhs(g, err)) {
        gr_grammar_free(g);
        return NULL;
    }
    gr_lexer *lx = &g->lx;
    lx->stack = malloc((size_t)g->nfa.n_st * sizeof *lx->stack);
    lx->mark = calloc((size_t)g->nfa.n_st, sizeof *lx->mark);
    lx->buf = malloc((size_t)g->nfa.n_st * sizeof *lx->buf);
    if (!lx->stack || !lx->mark || !lx->buf) {
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        gr_grammar_free(g);
        return NULL;
    }
    byte_classes(g);
    if (generic_sets(g, b, err)) {
        gr_grammar_free(g);
        return NULL;
    }
    g->bytes = (size_t)g->nfa.n_st * (sizeof(gr_nstate) + 16) + (size_t)g->nfa.n_ed * sizeof(gr_edge) +
               (size_t)g->n_prods * sizeof(gr_prod) + (size_t)g->n_nt * 16;
    return g;
}

void gr_grammar_free(gr_grammar *g)
{
    if (!g)
        return;
    gr_nfa_free(&g->nfa);
    free(g->coreach);
    free(g->lex_start);
    free(g->prods);
    free(g->syms);
    free(g->nt_prods);
    free(g->nt_nprods);
    free(g->by_lhs);
    free(g->nullable);
    free(g->gsets);
    gr_lexer *lx = &g->lx;
    for (int i = 0; i < lx->n_ds; i++) {
        free(lx->ds[i].next);
        free(lx->ds[i].inner);
        free(lx->ds[i].bnd);
    }
    free(lx->ds);
    free(lx->sets);
    free(lx->accs);
    free(lx->ht);
    free(lx->start_ht_key_off);
    free(lx->start_ht_val);
    free(lx->start_keys);
    free(lx->stack);
    free(lx->mark);
    free(lx->buf);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ------------------------------------------------------------------- DFA -- */
static uint64_t hash_set(const int32_t *s, int n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)s[i]) * 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 29);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* push s and its epsilon closure into lx->buf[*n] (important, co-reachable states only) */
static void closure(gr_grammar *g, int32_t s0, int *n)
{
    gr_lexer *lx = &g->lx;
    if (!g->coreach[s0] || lx->mark[s0] == lx->mark_gen)
        return;
    int sp = 0;
    lx->mark[s0] = lx->mark_gen;
    lx->stack[sp++] = s0;
    while (sp) {
        int32_t s = lx->stack[--sp];
        int important = g->nfa.st[s].accept >= 0 || g->nfa.st[s].role == GR_ROLE_VETO_ACCEPT;
        for (int32_t e = g->nfa.st[s].first; e >= 0; e = g->nfa.ed[e].next) {
            const gr_edge *ed = &g->nfa.ed[e];
            if (!ed->eps) {
                important = 1;
                continue;
            }
            if (g->coreach[ed->to] && lx->mark[ed->to] != lx->mark_gen) {
                lx->mark[ed->to] = lx->mark_gen;
                lx->stack[sp++] = ed->to;
            }
        }
        if (important)
            lx->buf[(*n)++] = s;
    }
}

static void new_gen(gr_lexer *lx, int32_t n_st)
{
    if (++lx->mark_gen == INT32_MAX) {
        memset(lx->mark, 0, (size_t)n_st * sizeof *lx->mark);
        lx->mark_gen = 1;
    }
}

/* the DFA state of the set lx->buf[0..n) (sorted here), interned; -1 none, -3 no memory */
/* The vetoes of lx->buf[0..n): a lexeme whose veto absorbed (every continuation is
 * vetoed) loses its states; veto states of a lexeme with none of its own left go too.
 * Returns the new n. */
static int filter_vetoes(gr_grammar *g, int n)
{
    gr_lexer *lx = &g->lx;
    int32_t dead[64], alive[64];
    int nd = 0, na = 0, any_veto = 0;
    for (int i = 0; i < n; i++) {
        const gr_nstate *st = &g->nfa.st[lx->buf[i]];
        any_veto |= st->role != GR_ROLE_MAIN;
        if (st->role == GR_ROLE_VETO_ABSORB && nd < 64) {
            int seen = 0;
            for (int k = 0; k < nd && !seen; k++)
                seen = dead[k] == st->owner;
            if (!seen)
                dead[nd++] = st->owner;
        }
    }
    if (!any_veto)
        return n;
    for (int i = 0; i < n; i++) {   /* owners that keep states of their own */
        const gr_nstate *st = &g->nfa.st[lx->buf[i]];
        int is_dead = 0;
        for (int k = 0; k < nd && !is_dead; k++)
            is_dead = dead[k] == st->owner;
        if (st->role == GR_ROLE_MAIN && !is_dead && na < 64) {
            int seen = 0;
            for (int k = 0; k < na && !seen; k++)
                seen = alive[k] == st->owner;
            if (!seen)
                alive[na++] = st->owner;
        }
    }
    int w = 0;
    for (int i = 0; i < n; i++) {
        const gr_nstate *st = &g->nfa.st[lx->buf[i]];
        int keep = 1;
        if (st->owner >= 0) {
            int ok = 0;
            for (int k = 0; k < na && !ok; k++)
                ok = alive[k] == st->owner;
            int has_veto = 0;   /* owners without vetoes are never touched */
            for (int k = 0; k < nd && !has_veto; k++)
                has_veto = dead[k] == st->owner;
            keep = ok || (!has_veto && st->role == GR_ROLE_MAIN);
        }
        if (keep)
            lx->buf[w++] = lx->buf[i];
    }
    return w;
}

static int32_t intern(gr_grammar *g, int n)
{
    gr_lexer *lx = &g->lx;
    n = filter_vetoes(g, n);
    if (n == 0)
        return -1;
    qsort(lx->buf, (size_t)n, sizeof *lx->buf, cmp_i32);
    uint64_t h = hash_set(lx->buf, n);
    if (lx->ht_cap) {
        for (uint64_t i = h & (uint64_t)(lx->ht_cap - 1);; i = (i + 1) & (uint64_t)(lx->ht_cap - 1)) {
            int32_t d = lx->ht[i];
            if (d < 0)
                break;
            if (lx->ds[d].set_len == n && !memcmp(lx->sets + lx->ds[d].set_off, lx->buf, (size_t)n * sizeof *lx->buf))
                return d;
        }
    }
    if (lx->n_ds >= GR_MAX_DFA_STATES)
        return -3;
    if ((int64_t)(lx->n_ds + 1) * 2 > lx->ht_cap) {   /* rehash */
        int64_t nc = lx->ht_cap ? lx->ht_cap * 2 : 1024;
        int32_t *ht = malloc((size_t)nc * sizeof *ht);
        if (!ht)
            return -3;
        memset(ht, 0xFF, (size_t)nc * sizeof *ht);
        for (int32_t d = 0; d < lx->n_ds; d++) {
            uint64_t i = hash_set(lx->sets + lx->ds[d].set_off, lx->ds[d].set_len) & (uint64_t)(nc - 1);
            while (ht[i] >= 0)
                i = (i + 1) & (uint64_t)(nc - 1);
            ht[i] = d;
        }
        free(lx->ht);
        lx->ht = ht;
        lx->ht_cap = nc;
    }
    int64_t cap_ds = lx->cap_ds;
    if (grow64((void **)&lx->ds, &cap_ds, lx->n_ds + 1, sizeof *lx->ds) ||
        grow64((void **)&lx->sets, &lx->cap_sets, lx->n_sets + n, sizeof *lx->sets) ||
        grow64((void **)&lx->accs, &lx->cap_accs, lx->n_accs + n, sizeof *lx->accs))
        return -3;
    lx->cap_ds = (int32_t)cap_ds;
    int32_t d = lx->n_ds++;
    gr_dstate *ds = &lx->ds[d];
    memset(ds, 0, sizeof *ds);
    ds->set_off = (int32_t)lx->n_sets;
    ds->set_len = n;
    memcpy(lx->sets + lx->n_sets, lx->buf, (size_t)n * sizeof *lx->buf);
    lx->n_sets += n;
    ds->acc_off = (int32_t)lx->n_accs;
    for (int i = 0; i < n; i++) {
        const gr_nstate *st = &g->nfa.st[lx->buf[i]];
        if (st->accept >= 0) {
            int dup = 0;
            for (int k = 0; k < ds->n_acc && !dup; k++)
                dup = lx->accs[ds->acc_off + k] == st->accept;
            for (int k = 0; k < n && !dup; k++) {   /* vetoed here */
                const gr_nstate *v = &g->nfa.st[lx->buf[k]];
                dup = v->role == GR_ROLE_VETO_ACCEPT && v->owner == st->accept;
            }
            if (!dup)
                lx->accs[ds->acc_off + ds->n_acc++] = st->accept;
        }
        if (st->role != GR_ROLE_MAIN)
            continue;
        for (int32_t e = st->first; e >= 0 && !ds->live; e = g->nfa.ed[e].next)
            ds->live = !g->nfa.ed[e].eps && g->coreach[g->nfa.ed[e].to];
    }
    lx->n_accs += ds->n_acc;
    for (int32_t o = 0, k = 0; k < g->n_gsets && !ds->generic; k++, o += g->gsets[o] + 1)
        ds->generic = g->gsets[o] == n && !memcmp(g->gsets + o + 1, lx->buf, (size_t)n * sizeof *lx->buf);
    uint64_t i = h & (uint64_t)(lx->ht_cap - 1);
    while (lx->ht[i] >= 0)
        i = (i + 1) & (uint64_t)(lx->ht_cap - 1);
    lx->ht[i] = d;
    lx->bytes += sizeof *ds + (size_t)n * 8 + 64;
    return d;
}

int32_t gr_lex_step(gr_grammar *g, int32_t s, uint8_t c)
{
    gr_lexer *lx = &g->lx;
    if (!lx->ds[s].next) {
        int32_t *nx = malloc(256 * sizeof *nx);
        if (!nx)
            return -3;
        for (int k = 0; k < 256; k++)
            nx[k] = -2;
        lx->ds[s].next = nx;
        lx->bytes += 256 * sizeof *nx;
    }
    new_gen(lx, g->nfa.n_st);
    int n = 0;
    const int32_t off = lx->ds[s].set_off, len = lx->ds[s].set_len;
    for (int i = 0; i < len; i++) {
        int32_t st = lx->sets[off + i];
        for (int32_t e = g->nfa.st[st].first; e >= 0; e = g->nfa.ed[e].next) {
            const gr_edge *ed = &g->nfa.ed[e];
            if (!ed->eps && c >= ed->lo && c <= ed->hi)
                closure(g, ed->to, &n);
        }
    }
    int32_t d = intern(g, n);   /* may move lx->ds */
    if (d == -3)
        return -3;
    int32_t *nx = lx->ds[s].next;
    int b = c;   /* every byte of c's class (a range) goes where c goes */
    while (b > 0 && g->cls[b - 1] == g->cls[c])
        b--;
    for (; b >= 0; b = g->cls_next[b])
        nx[b] = d;
    return d;
}

static uint64_t hash_words(const uint64_t *w, int n)
{
    uint64_t h = 0x243F6A8885A308D3ull;
    for (int i = 0; i < n; i++)
        h = (h ^ w[i]) * 0x9E3779B97F4A7C15ull, h ^= h >> 31;
    return h;
}

int32_t gr_lex_start(gr_grammar *g, const uint64_t *allowed)
{
    gr_lexer *lx = &g->lx;
    const int W = g->lex_words;
    uint64_t h = hash_words(allowed, W);
    if (lx->start_ht_cap) {
        for (uint64_t i = h & (uint64_t)(lx->start_ht_cap - 1);; i = (i + 1) & (uint64_t)(lx->start_ht_cap - 1)) {
            int32_t ko = lx->start_ht_key_off[i];
            if (ko < 0)
                break;
            if (!memcmp(lx->start_keys + ko, allowed, (size_t)W * 8))
                return lx->start_ht_val[i];
        }
    }
    new_gen(lx, g->nfa.n_st);
    int n = 0;
    for (int w = 0; w < W; w++)
        for (uint64_t bits = allowed[w]; bits; bits &= bits - 1) {
            int l = w * 64 + __builtin_ctzll(bits);
            if (l < g->n_lex)
                closure(g, g->lex_start[l], &n);
        }
    int32_t d = intern(g, n);
    if (d == -3)
        return -3;
    /* remember it */
    if ((lx->n_start + 1) * 2 > lx->start_ht_cap) {
        int64_t nc = lx->start_ht_cap ? lx->start_ht_cap * 2 : 256;
        int32_t *ko = malloc((size_t)nc * sizeof *ko), *kv = malloc((size_t)nc * sizeof *kv);
        if (!ko || !kv) {
            free(ko), free(kv);
            return d;
        }
        memset(ko, 0xFF, (size_t)nc * sizeof *ko);
        for (int64_t i = 0; i < lx->start_ht_cap; i++) {
            if (lx->start_ht_key_off[i] < 0)
                continue;
            uint64_t j = hash_words(lx->start_keys + lx->start_ht_key_off[i], W) & (uint64_t)(nc - 1);
            while (ko[j] >= 0)
                j = (j + 1) & (uint64_t)(nc - 1);
            ko[j] = lx->start_ht_key_off[i];
            kv[j] = lx->start_ht_val[i];
        }
        free(lx->start_ht_key_off);
        free(lx->start_ht_val);
        lx->start_ht_key_off = ko;
        lx->start_ht_val = kv;
        lx->start_ht_cap = nc;
    }
    if (lx->n_start_keys + W > INT32_MAX ||
        grow64((void **)&lx->start_keys, &lx->cap_start_keys, lx->n_start_keys + W, sizeof *lx->start_keys))
        return d;
    int32_t ko = (int32_t)lx->n_start_keys;
    memcpy(lx->start_keys + ko, allowed, (size_t)W * 8);
    lx->n_start_keys += W;
    uint64_t i = h & (uint64_t)(lx->start_ht_cap - 1);
    while (lx->start_ht_key_off[i] >= 0)
        i = (i + 1) & (uint64_t)(lx->start_ht_cap - 1);
    lx->start_ht_key_off[i] = ko;
    lx->start_ht_val[i] = d;
    lx->n_start++;
    lx->bytes += (size_t)W * 8 + 16;
    return d;
}

/* 1 when regex rx (mode as gr_regex_emit, plain bytes) matches all of s[0..n), 0 when not,
 * -1 on error: a throwaway grammar of one lexeme, stepped byte by byte. */
int gr_regex_matches(const char *rx, size_t rxlen, int mode, const char *s, size_t n, v4_error *err)
{
    gr_builder b;
    gr_builder_init(&b);
    int l = gr_lex_regex(&b, rx, rxlen, mode, 0, 0, -1, err);
    int st = l < 0 ? -1 : gr_nt(&b, "match", err);
    if (st < 0 || gr_rule(&b, st, (int32_t[]){l}, 1, err)) {
        gr_builder_free(&b);
        return -1;
    }
    b.start = st;
    v4_error quiet = {0};
    gr_grammar *g = gr_grammar_build(&b, &quiet);   /* a regex matching nothing: no grammar */
    gr_builder_free(&b);
    if (!g)
        return quiet.code == V4_ERR_INVALID ? 0 : v4_err_set(err, quiet.code, "regex", "%s", quiet.msg);
    uint64_t allowed[1] = {1};
    int32_t d = gr_lex_start(g, allowed);
    for (size_t i = 0; d >= 0 && i < n; i++)
        d = gr_lex_next(g, d, (uint8_t)s[i]);
    int r = d >= 0 && g->lx.ds[d].n_acc > 0;
    gr_grammar_free(g);
    return r;
}
