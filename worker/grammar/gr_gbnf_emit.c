/* gr_gbnf_emit.c - GBNF's terminals (code point sets, from gr_gbnf.c) as lexemes of one
 * code point each, and its productions as the builder's rules (gr_gbnf.h says why one code
 * point per lexeme).
 *
 * Sets may overlap ('a' in a literal and in [a-z]); the lexer then accepts both lexemes at
 * once and the parser advances every item expecting either.  The matcher takes at most
 * GB_MAX_OVERLAP lexemes ending together (gr_matcher.c end_lexeme), so when some code point
 * lies in more sets than that, the sets are split into disjoint atoms (the code points
 * that lie in exactly the same sets), each atom a lexeme and each set a nonterminal with
 * one alternative per atom it holds.  Rules that gr_gbnf_merge.c makes lexemes get one
 * production, N ::= the lexeme, instead of their own.  docs/grammar.md "GBNF".
 */
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_gbnf.h"

#define GB_MAX_OVERLAP 16   /* = the acc[16] of gr_matcher.c's end_lexeme */

typedef struct ev {
    uint32_t at;            /* a set's range starts (in = 1) or ends (in = 0, at = hi + 1) here */
    int32_t set;
    int32_t in;
} ev;

static int cmp_ev(const void *a, const void *b)
{
    const ev *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at ? 1 : x->in - y->in;   /* ends first */
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int nomem(v4_error *err)
{
    return v4_err_set(err, V4_ERR_NOMEM, "gbnf", "out of memory");
}

/* The events of every set's ranges, sorted; *n_out of them. */
static ev *events(const gb_out *o, int64_t *n_out)
{
    int64_t n = 0;
    for (int32_t s = 0; s < o->n_sets; s++)
        n += 2 * o->sets[s].n;
    ev *e = malloc((size_t)(n ? n : 1) * sizeof *e);
    if (!e)
        return NULL;
    n = 0;
    for (int32_t s = 0; s < o->n_sets; s++)
        for (int k = 0; k < o->sets[s].n; k++) {
            e[n++] = (ev){o->sets[s].r[2 * k], s, 1};
            e[n++] = (ev){o->sets[s].r[2 * k + 1] + 1, s, 0};
        }
    qsort(e, (size_t)n, sizeof *e, cmp_ev);
    *n_out = n;
    return e;
}

/* map[s]: the lexeme of set s (the sets used as they are) */
static int direct(gr_builder *b, const gb_out *o, int32_t *map, v4_error *err)
{
    for (int32_t s = 0; s < o->n_sets; s++)
        if ((map[s] = gr_lex_cset(b, &o->sets[s], err)) < 0)
            return -1;
    return 0;
}

/* map[s]: a nonterminal with one alternative per atom of set s */
static int atoms(gr_builder *b, const gb_out *o, const ev *e, int64_t n_ev, int32_t *map, v4_error *err)
{
    int32_t *act = malloc((size_t)o->n_sets * sizeof *act), *pos = malloc((size_t)o->n_sets * sizeof *pos);
    int32_t *sig = malloc((size_t)o->n_sets * sizeof *sig);
    /* atoms: their signature (the sets holding them, sorted) and their code points */
    int32_t n_at = 0, cap_at = 0, *sig_off = NULL, *sig_len = NULL, *sigs = NULL;
    int64_t n_sigs = 0, cap_sigs = 0;
    gr_cset *cps = NULL;
    int rc = act && pos && sig ? 0 : nomem(err), n_act = 0;
    for (int64_t k = 0; !rc && k < n_ev; k++) {
        if (e[k].in) {
            pos[e[k].set] = n_act;
            act[n_act++] = e[k].set;
        } else {   /* swap-remove */
            int32_t p = pos[e[k].set], last = act[--n_act];
            act[p] = last;
            pos[last] = p;
        }
        if (!n_act || (k + 1 < n_ev && e[k + 1].at == e[k].at))
            continue;   /* nothing here, or more events at this point first */
        uint32_t lo = e[k].at, hi = k + 1 < n_ev ? e[k + 1].at - 1 : 0x10FFFF;
        memcpy(sig, act, (size_t)n_act * sizeof *sig);
        qsort(sig, (size_t)n_act, sizeof *sig, cmp_i32);
        int32_t a = 0;   /* a known atom with this signature (linear: atoms are few) */
        for (; a < n_at; a++)
            if (sig_len[a] == n_act && !memcmp(sigs + sig_off[a], sig, (size_t)n_act * sizeof *sig))
                break;
        if (a == n_at) {
            if (n_at == cap_at) {
                int32_t nc = cap_at ? cap_at * 2 : 32;
                int32_t *p1 = realloc(sig_off, (size_t)nc * sizeof *p1);
                int32_t *p2 = p1 ? realloc(sig_len, (size_t)nc * sizeof *p2) : NULL;
                gr_cset *p3 = p2 ? realloc(cps, (size_t)nc * sizeof *p3) : NULL;
                sig_off = p1 ? p1 : sig_off;
                sig_len = p2 ? p2 : sig_len;
                cps = p3 ? p3 : cps;
                if (!p3) {
                    rc = nomem(err);
                    break;
                }
                cap_at = nc;
            }
            if (n_sigs + n_act > cap_sigs) {
                int64_t nc = cap_sigs ? cap_sigs : 256;
                while (nc < n_sigs + n_act)
                    nc *= 2;
                int32_t *p = realloc(sigs, (size_t)nc * sizeof *p);
                if (!p) {
                    rc = nomem(err);
                    break;
                }
                sigs = p;
                cap_sigs = nc;
            }
            memcpy(sigs + n_sigs, sig, (size_t)n_act * sizeof *sig);
            sig_off[n_at] = (int32_t)n_sigs;
            sig_len[n_at] = n_act;
            memset(&cps[n_at], 0, sizeof *cps);
            n_sigs += n_act;
            n_at++;
        }
        if (gr_cset_add(&cps[a], lo, hi))
            rc = nomem(err);
    }
    for (int32_t s = 0; !rc && s < o->n_sets; s++)
        if ((map[s] = gr_nt(b, "class", err)) < 0)
            rc = -1;
    for (int32_t a = 0; !rc && a < n_at; a++) {
        gr_cset_norm(&cps[a]);
        int l = gr_lex_cset(b, &cps[a], err);
        for (int32_t k = 0; l >= 0 && !rc && k < sig_len[a]; k++)
            rc = gr_rule(b, map[sigs[sig_off[a] + k]], (int32_t[]){l}, 1, err);
        rc = rc || l < 0 ? -1 : 0;
    }
    for (int32_t a = 0; a < n_at; a++)
        gr_cset_free(&cps[a]);
    free(cps), free(sig_off), free(sig_len), free(sigs), free(act), free(pos), free(sig);
    return rc;
}

int gr_gbnf_emit(gr_builder *b, gb_out *o, v4_error *err)
{
    int64_t n_ev = 0;
    ev *e = events(o, &n_ev);
    int32_t *map = malloc((size_t)(o->n_sets + 1) * sizeof *map);
    if (!e || !map) {
        free(e), free(map);
        return nomem(err);
    }
    int depth = 0, most = 0;   /* the most sets one code point lies in */
    for (int64_t k = 0; k < n_ev; k++) {
        depth += e[k].in ? 1 : -1;
        if (depth > most)
            most = depth;
    }
    int rc = most <= GB_MAX_OVERLAP ? direct(b, o, map, err) : atoms(b, o, e, n_ev, map, err);
    free(e);
    int32_t *lex_of = NULL;   /* merged rules (gr_gbnf_merge.c): N ::= its lexeme */
    rc = rc || gr_gbnf_merge(b, o, &lex_of, err);
    for (int32_t n = 0; !rc && lex_of && n < b->n_nt; n++)
        if (lex_of[n] >= 0)
            rc = gr_rule(b, GR_NT0 + n, &lex_of[n], 1, err);
    int32_t *tmp = NULL;
    int cap = 0;
    for (int32_t p = 0; !rc && p < o->n_prods; p++) {
        const gr_prod *pr = &o->prods[p];
        if (lex_of && lex_of[pr->lhs - GR_NT0] >= 0)
            continue;   /* inside the lexeme */
        if (pr->len > cap) {
            int32_t *q = realloc(tmp, (size_t)pr->len * sizeof *q);
            if (!q) {
                rc = nomem(err);
                break;
            }
            tmp = q;
            cap = pr->len;
        }
        for (int k = 0; k < pr->len; k++) {
            int32_t s = o->syms[pr->off + k];
            tmp[k] = GR_IS_NT(s) ? s : map[s];
        }
        rc = gr_rule(b, pr->lhs, tmp, pr->len, err);
    }
    free(tmp);
    free(map);
    free(lex_of);
    return rc ? -1 : 0;
}
