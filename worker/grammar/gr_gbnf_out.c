/* gr_gbnf_out.c - the GBNF front end's production list (gb_out, gr_gbnf.h): one appender
 * for the parser (gr_gbnf.c) and the lexeme merger (gr_gbnf_merge.c), a leaf both call.
 * docs/grammar.md "GBNF".  Thread: the caller's (one gb_out per compile). */
#include <stdlib.h>
#include <string.h>

#include "gr_gbnf.h"

int gr_gbnf_out_add(gb_out *o, int32_t lhs, const int32_t *syms, int n)
{
    if (o->n_prods == o->cap_prods) {
        int32_t nc = o->cap_prods ? o->cap_prods * 2 : 64;
        gr_prod *p = realloc(o->prods, (size_t)nc * sizeof *p);
        if (!p)
            return -1;
        o->prods = p;
        o->cap_prods = nc;
    }
    if (o->n_syms + n > o->cap_syms) {
        int64_t nc = o->cap_syms ? o->cap_syms : 256;
        while (nc < o->n_syms + n)
            nc *= 2;
        int32_t *p = realloc(o->syms, (size_t)nc * sizeof *p);
        if (!p)
            return -1;
        o->syms = p;
        o->cap_syms = nc;
    }
    o->prods[o->n_prods++] = (gr_prod){.lhs = lhs, .off = (int32_t)o->n_syms, .len = n};
    if (n)
        memcpy(o->syms + o->n_syms, syms, (size_t)n * sizeof *syms);
    o->n_syms += n;
    return 0;
}
