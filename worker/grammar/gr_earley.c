/* gr_earley.c - the Earley parser over lexemes.  One set per scanned lexeme; sets are
 * pushed and popped (the mask computation tries a token and takes it back), so the parser
 * state is a stack and a pop is O(1).  Nullable nonterminals are handled as Aycock and
 * Horspool do: predicting a nullable symbol also moves the dot over it.  Each set also
 * records which lexemes may come next (the lexer's start state is built from them).
 */
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_internal.h"

static uint64_t key_of(gr_item it)
{
    return ((uint64_t)(uint32_t)it.prod << 40) ^ ((uint64_t)(uint32_t)it.dot << 28) ^ (uint64_t)(uint32_t)it.origin;
}

int gr_parser_init(gr_parser *p, const gr_grammar *g, v4_error *err)
{
    memset(p, 0, sizeof *p);
    p->cap_sets = 64;
    p->set_off = malloc(((size_t)p->cap_sets + 1) * sizeof *p->set_off);
    p->allowed = malloc((size_t)p->cap_sets * (size_t)g->lex_words * sizeof *p->allowed);
    p->cap_items = 256;
    p->items = malloc((size_t)p->cap_items * sizeof *p->items);
    p->ht_cap = 256;
    p->ht = calloc((size_t)p->ht_cap, sizeof *p->ht);
    if (!p->set_off || !p->allowed || !p->items || !p->ht) {
        gr_parser_free(p);
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    }
    p->set_off[0] = 0;
    /* set 0: the start symbol predicted */
    int32_t start = g->start;
    int rc = gr_parser_scan(p, g, &start, -1);
    if (rc == -2) {
        gr_parser_free(p);
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    }
    if (rc == -1) {
        gr_parser_free(p);
        return v4_err_set(err, V4_ERR_INTERNAL, "grammar", "the start symbol has no production");
    }
    return 0;
}

void gr_parser_free(gr_parser *p)
{
    free(p->items);
    free(p->set_off);
    free(p->allowed);
    free(p->ht);
    memset(p, 0, sizeof *p);
}

/* add it to the set being built (items from set_off[n_sets] on), unless there */
static int add(gr_parser *p, gr_item it)
{
    uint64_t k = key_of(it) + 1, m = (uint64_t)p->ht_cap - 1;
    uint64_t i = (k * 0x9E3779B97F4A7C15ull) >> 20 & m;
    for (; p->ht[i]; i = (i + 1) & m)
        if (p->ht[i] == k)
            return 0;
    int64_t in_set = p->n_items - p->set_off[p->n_sets];
    if ((in_set + 1) * 2 > p->ht_cap) {   /* grow the table and re-enter the set's items */
        int32_t nc = p->ht_cap * 2;
        uint64_t *ht = calloc((size_t)nc, sizeof *ht);
        if (!ht)
            return -2;
        free(p->ht);
        p->ht = ht;
        p->ht_cap = nc;
        m = (uint64_t)nc - 1;
        for (int64_t j = p->set_off[p->n_sets]; j < p->n_items; j++) {
            uint64_t kk = key_of(p->items[j]) + 1, x = (kk * 0x9E3779B97F4A7C15ull) >> 20 & m;
            while (p->ht[x])
                x = (x + 1) & m;
            p->ht[x] = kk;
        }
        for (i = (k * 0x9E3779B97F4A7C15ull) >> 20 & m; p->ht[i]; i = (i + 1) & m)
            ;
    }
    if (p->n_items == p->cap_items) {
        int64_t nc = p->cap_items * 2;
        gr_item *q = realloc(p->items, (size_t)nc * sizeof *q);
        if (!q)
            return -2;
        p->items = q;
        p->cap_items = nc;
    }
    p->ht[i] = k;
    p->items[p->n_items++] = it;
    return 0;
}

static int build(gr_parser *p, const gr_grammar *g, const int32_t *acc, int n, int32_t k);

/* empty the dedup table: each key of set k, latest first (a slot found by probing is
 * behind only slots filled before it, still set when it is cleared) */
static void clear_ht(gr_parser *p, int32_t k)
{
    const uint64_t m = (uint64_t)p->ht_cap - 1;
    for (int64_t j = p->n_items - 1; j >= p->set_off[k]; j--) {
        uint64_t kk = key_of(p->items[j]) + 1, i = (kk * 0x9E3779B97F4A7C15ull) >> 20 & m;
        while (p->ht[i] != kk)
            i = (i + 1) & m;
        p->ht[i] = 0;
    }
}

/* Build a new set: n >= 0: from the last set, advance every item expecting one of the
 * lexemes acc[0..n); n == -1: the first set, predicting nonterminal acc[0]. */
int gr_parser_scan(gr_parser *p, const gr_grammar *g, const int32_t *acc, int n)
{
    if (p->n_sets + 1 >= p->cap_sets) {
        int32_t nc = p->cap_sets * 2;
        int32_t *so = realloc(p->set_off, ((size_t)nc + 1) * sizeof *so);
        if (!so)
            return -2;
        p->set_off = so;
        uint64_t *al = realloc(p->allowed, (size_t)nc * (size_t)g->lex_words * sizeof *al);
        if (!al)
            return -2;
        p->allowed = al;
        p->cap_sets = nc;
    }
    const int32_t k = p->n_sets;   /* index of the new set */
    int rc = build(p, g, acc, n, k);
    if (rc == -2) {
        memset(p->ht, 0, (size_t)p->ht_cap * sizeof *p->ht);
        p->n_items = p->set_off[k];
        return -2;
    }
    clear_ht(p, k);
    if (rc == -1)
        return -1;
    p->n_sets = k + 1;
    p->set_off[k + 1] = (int32_t)p->n_items;
    return 0;
}

/* the items of set k, closed; -1 when the set would be empty */
static int build(gr_parser *p, const gr_grammar *g, const int32_t *acc, int n, int32_t k)
{
    if (n < 0) {
        int nt = acc[0] - GR_NT0;
        for (int j = 0; j < g->nt_nprods[nt]; j++)
            if (add(p, (gr_item){g->by_lhs[g->nt_prods[nt] + j], 0, 0}))
                return -2;
    } else {
        const int64_t lo = p->set_off[k - 1], hi = p->set_off[k];
        for (int64_t j = lo; j < hi; j++) {
            gr_item it = p->items[j];
            const gr_prod *pr = &g->prods[it.prod];
            if (it.dot >= pr->len)
                continue;
            int s = g->syms[pr->off + it.dot];
            if (GR_IS_NT(s))
                continue;
            for (int a = 0; a < n; a++)
                if (acc[a] == s) {
                    if (add(p, (gr_item){it.prod, it.dot + 1, it.origin}))
                        return -2;
                    break;
                }
        }
    }
    if (p->n_items == p->set_off[k])
        return -1;   /* nothing expected that lexeme: refused, nothing pushed */
    /* closure: predict and complete until nothing new */
    for (int64_t j = p->set_off[k]; j < p->n_items; j++) {
        gr_item it = p->items[j];
        const gr_prod *pr = &g->prods[it.prod];
        if (it.dot < pr->len) {
            int s = g->syms[pr->off + it.dot];
            if (!GR_IS_NT(s))
                continue;
            int nt = s - GR_NT0;
            for (int q = 0; q < g->nt_nprods[nt]; q++)
                if (add(p, (gr_item){g->by_lhs[g->nt_prods[nt] + q], 0, k}))
                    return -2;
            if (g->nullable[nt] && add(p, (gr_item){it.prod, it.dot + 1, it.origin}))
                return -2;
        } else {
            const int lhs = pr->lhs;
            const int64_t lo = p->set_off[it.origin];
            const int64_t hi = it.origin == k ? p->n_items : p->set_off[it.origin + 1];
            for (int64_t q = lo; q < hi; q++) {
                gr_item w = p->items[q];
                const gr_prod *pw = &g->prods[w.prod];
                if (w.dot < pw->len && g->syms[pw->off + w.dot] == lhs)
                    if (add(p, (gr_item){w.prod, w.dot + 1, w.origin}))
                        return -2;
            }
        }
    }
    /* the lexemes this set expects */
    uint64_t *al = p->allowed + (size_t)k * (size_t)g->lex_words;
    memset(al, 0, (size_t)g->lex_words * sizeof *al);
    for (int64_t j = p->set_off[k]; j < p->n_items; j++) {
        const gr_prod *pr = &g->prods[p->items[j].prod];
        if (p->items[j].dot < pr->len) {
            int s = g->syms[pr->off + p->items[j].dot];
            if (!GR_IS_NT(s))
                al[s >> 6] |= 1ull << (s & 63);
        }
    }
    return 0;
}

int gr_parser_accepts(const gr_parser *p, const gr_grammar *g)
{
    const int k = p->n_sets - 1;
    for (int64_t j = p->set_off[k]; j < p->set_off[k + 1]; j++) {
        const gr_item *it = &p->items[j];
        const gr_prod *pr = &g->prods[it->prod];
        if (it->origin == 0 && it->dot == pr->len && pr->lhs == g->start)
            return 1;
    }
    return 0;
}
