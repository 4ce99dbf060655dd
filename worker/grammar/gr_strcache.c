/* gr_strcache.c - masks inside JSON string content from one cache per vocabulary.
 * Inside a string at a character boundary, which tokens stay inside and where a token
 * closes the string depend on the vocabulary alone: gr_str_cache walks the trie once over a
 * private grammar of one plain string (the generic string cache), and every lexer state of
 * any grammar that is such string content takes its mask cache from it: the generic one
 * as it is (gr_matcher.c), the others, which the string constructors mark (gr_nstate.srem:
 * several string lexemes at once, length bounds, keys ruled out, property-name literals),
 * filtered by gr_str_fill instead of a walk of the whole trie.  docs/grammar.md ("How it
 * works": strings share one cache).
 */
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_internal.h"
#include "worker/grammar/grammar.h"

/* The generic string cache: a private grammar of one JSON string lexeme, its state after
 * the opening quote, and a walk of the trie over it.  Without it (memory) masks still work. */
void gr_str_cache(v4g_vocab *v)
{
    gr_builder b;
    gr_builder_init(&b);
    v4_error err = {0};
    int l = gr_lex_json_string(&b, 0, -1, &err);
    int st = l < 0 ? -1 : gr_nt(&b, "s", &err);
    if (st < 0 || gr_rule(&b, st, (int32_t[]){l}, 1, &err)) {
        gr_builder_free(&b);
        return;
    }
    b.start = st;
    gr_grammar *g = gr_grammar_build(&b, &err);
    gr_builder_free(&b);
    if (!g)
        return;
    uint64_t allowed[1] = {1};
    int32_t s = gr_lex_start(g, allowed);
    s = s >= 0 ? gr_lex_next(g, s, '"') : -1;
    const size_t words = ((size_t)v->n + 31) / 32;
    uint32_t *inner = s >= 0 && g->lx.ds[s].generic ? calloc(words, sizeof *inner) : NULL;
    int32_t *state = malloc(((size_t)v->max_depth + 2) * sizeof *state), *bnd = NULL, nb = 0, cap = 0;
    int32_t *chars = malloc(((size_t)v->max_depth + 2) * sizeof *chars);   /* finished, per depth */
    int32_t *bcp = NULL, *btok = NULL;
    uint16_t *cp = malloc((size_t)v->n * sizeof *cp);
    int ok = inner && state && chars && cp;
    if (ok)
        state[0] = s, chars[0] = 0;
    for (int32_t i = 0; ok && i < v->n_nodes;) {
        const int d = v->nd[i];
        const int32_t p = state[d - 1];
        const int32_t t = gr_lex_next(g, p, v->nb[i]);
        if (t == -3) {
            ok = 0;
        } else if (t >= 0 && g->lx.ds[t].live) {
            state[d] = t;
            chars[d] = chars[d - 1] + (t == s);   /* back at the loop: a character finished */
            const int32_t n = chars[d] + (t != s);
            for (int32_t k = v->ntok[i]; k >= 0; k = v->dup[k]) {
                inner[k >> 5] |= 1u << (k & 31);
                cp[k] = (uint16_t)(n < 65535 ? n : 65535);
                if (cp[k] > v->str_cp_max)
                    v->str_cp_max = cp[k];
            }
            i++;
        } else {
            if (t >= 0 || g->lx.ds[p].n_acc) {   /* the string closes: only ever from the loop state */
                if (p != s)
                    ok = 0;
                if (nb == cap) {
                    cap = cap ? cap * 2 : 256;
                    int32_t *q = realloc(bnd, (size_t)cap * sizeof *q);
                    int32_t *q2 = q ? realloc(bcp, (size_t)cap * sizeof *q2) : NULL;
                    int32_t *q3 = q2 ? realloc(btok, (size_t)cap * sizeof *q3) : NULL;
                    if (q)
                        bnd = q;
                    if (q2)
                        bcp = q2;
                    if (q3)
                        btok = q3;
                    ok = ok && q3;
                }
                if (ok) {
                    int32_t j = i;   /* the first token under i: its bytes begin with i's path */
                    while (v->ntok[j] < 0)
                        j++;
                    bcp[nb] = chars[d - 1];
                    btok[nb] = v->ntok[j];
                    bnd[nb++] = i;
                }
            }
            i += v->nsz[i];
        }
    }
    free(state);
    free(chars);
    gr_grammar_free(g);
    if (!ok) {
        free(inner);
        free(bnd), free(bcp), free(btok), free(cp);
        return;
    }
    v->str_inner = inner;
    v->str_bnd = bnd;
    v->n_str_bnd = nb;
    v->str_cp = cp;
    /* the sets by length bound, when they take at most 8 MiB (bounded strings: one copy) */
    if (((size_t)v->str_cp_max + 1) * words * sizeof *inner <= (8u << 20) &&
        (v->str_le = calloc(((size_t)v->str_cp_max + 1) * words, sizeof *inner)) != NULL) {
        for (size_t w = 0; w < words; w++)   /* each token at its own length, then accumulated */
            for (uint32_t x = inner[w]; x; x &= x - 1) {
                const int b = __builtin_ctz(x);
                v->str_le[(size_t)cp[w * 32 + (size_t)b] * words + w] |= 1u << b;
            }
        for (size_t r = 1; r <= (size_t)v->str_cp_max; r++)
            for (size_t w = 0; w < words; w++)
                v->str_le[r * words + w] |= v->str_le[(r - 1) * words + w];
    }
    v->str_bnd_cp = bcp;
    v->str_bnd_tok = btok;
}

/* The cache of lexer state s from the vocabulary's string cache, when every NFA state of
 * s is a character start of string content or the state before a closing quote (marked
 * by the string constructors: gr_nstate.srem), so s is inside one or more JSON string
 * lexemes at a character boundary: plain, length-bounded, keys ruled out.  Their contents
 * are all JSON-encoded code points one at a time, so a token that stays inside the
 * generic string stays inside s exactly when it spans no more characters than the most
 * any of them may still take (R), and a token can leave s only where it leaves the
 * generic string: at the closing quote of a boundary.  Each boundary whose prefix fits in
 * R is stepped through the lexer from s (a few bytes), which says if the quote closes one
 * of them (a boundary, with its lexer state) or none (refused).  A step that contradicts
 * this (a prefix refused, a quote that does not end the lexeme) leaves s to the full walk.
 * A quoted literal beside them (a property name, GR_SREM_LIT) adds the tokens along its
 * rest and forces its closing quote's boundary, which must be one of the cache's.
 * 1 filled, 0 not such a state, -1 out of memory. */
int gr_str_fill(gr_grammar *g, const v4g_vocab *v, int32_t s)
{
    if (!v->str_inner || !v->str_cp || g->lx.ds[s].n_acc)
        return 0;
    int64_t R = 0;
    for (int32_t k = 0; k < g->lx.ds[s].set_len; k++) {
        const gr_nstate *st = &g->nfa.st[g->lx.sets[g->lx.ds[s].set_off + k]];
        if (st->role != GR_ROLE_MAIN || st->accept >= 0 || st->srem == 0)
            return 0;
        if (st->srem > R)
            R = st->srem;
    }
    const size_t words = ((size_t)v->n + 31) / 32;
    uint32_t *in = malloc(words * sizeof *in);
    int32_t *bn = malloc(((size_t)v->n_str_bnd * 2 + 1) * sizeof *bn), nb = 0;
    uint8_t *force = calloc((size_t)v->n_str_bnd + 1, 1);   /* boundaries a literal closes */
    if (!in || !bn || !force)
        goto oom;
    if (R >= v->str_cp_max) {   /* no token spans more: all of them */
        memcpy(in, v->str_inner, words * sizeof *in);
    } else if (v->str_le) {
        memcpy(in, v->str_le + (size_t)R * words, words * sizeof *in);
    } else {
        for (size_t w = 0; w < words; w++) {
            uint32_t x = v->str_inner[w], keep = 0;
            for (; x; x &= x - 1) {
                const int b = __builtin_ctz(x);
                if (v->str_cp[w * 32 + (size_t)b] <= R)
                    keep |= 1u << b;
            }
            in[w] = keep;
        }
    }
    for (int32_t k = 0; k < g->lx.ds[s].set_len; k++) {   /* literals: the trie along their rest */
        int32_t y = g->lx.sets[g->lx.ds[s].set_off + k];
        if (g->nfa.st[y].srem != GR_SREM_LIT)
            continue;
        int32_t lo = 0, hi = v->n_nodes;   /* the children of the trie node reached */
        for (;;) {
            int32_t e1 = -1, nbyte = 0;
            for (int32_t e = g->nfa.st[y].first; e >= 0; e = g->nfa.ed[e].next)
                if (!g->nfa.ed[e].eps)
                    e1 = e, nbyte++;
            if (nbyte == 0)
                break;
            if (nbyte > 1 || g->nfa.ed[e1].lo != g->nfa.ed[e1].hi)
                goto other;
            const uint8_t c = g->nfa.ed[e1].lo;
            y = g->nfa.ed[e1].to;
            int32_t j = lo;
            while (j < hi && v->nb[j] != c)
                j += v->nsz[j];
            if (j >= hi)
                break;   /* no token goes on along the literal */
            int last = 1;   /* the closing quote: no byte edge after it */
            for (int32_t e = g->nfa.st[y].first; e >= 0 && last; e = g->nfa.ed[e].next)
                last = g->nfa.ed[e].eps;
            if (last) {   /* a boundary of the string cache, or the full walk */
                int32_t a = 0, b = v->n_str_bnd;
                while (a < b) {
                    const int32_t mid = (a + b) / 2;
                    if (v->str_bnd[mid] < j)
                        a = mid + 1;
                    else
                        b = mid;
                }
                if (c != '"' || a == v->n_str_bnd || v->str_bnd[a] != j)
                    goto other;
                force[a] = 1;
                break;
            }
            for (int32_t t = v->ntok[j]; t >= 0; t = v->dup[t])
                in[t >> 5] |= 1u << (t & 31);
            lo = j + 1;
            hi = j + v->nsz[j];
        }
    }
    for (int32_t k = 0; k < v->n_str_bnd; k++) {
        if (v->str_bnd_cp[k] > R && !force[k])
            continue;
        const int32_t i = v->str_bnd[k];
        const char *path = v->data + v->off[v->str_bnd_tok[k]];
        int32_t p = s, t;
        int gone = 0;
        for (int j = 0; j + 1 < v->nd[i] && !gone; j++) {
            t = gr_lex_next(g, p, (uint8_t)path[j]);
            if (t == -3)
                goto oom;
            if (t < 0 && v->str_bnd_cp[k] > R)   /* past the strings' reach, and off the literals' */
                gone = 1;
            else if (t < 0 || !g->lx.ds[t].live)
                goto other;
            p = t;
        }
        if (gone)
            continue;
        t = gr_lex_next(g, p, v->nb[i]);
        if (t == -3)
            goto oom;
        if (t >= 0 && g->lx.ds[t].live)
            goto other;
        if (t >= 0 || g->lx.ds[p].n_acc) {
            bn[nb++] = i;
            bn[nb++] = p;
        }
    }
    free(force);
    gr_dstate *ds = &g->lx.ds[s];
    ds->inner = in;
    ds->bnd = bn;
    ds->n_bnd = nb / 2;
    g->lx.bytes += words * sizeof *in + (size_t)nb * sizeof *bn;
    g->lx.mask_bytes += words * sizeof *in + (size_t)nb * sizeof *bn;
    return 1;
other:
    free(in);
    free(bn);
    free(force);
    return 0;
oom:
    free(in);
    free(bn);
    free(force);
    return -1;
}
