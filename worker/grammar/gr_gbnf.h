/* gr_gbnf.h - GBNF (the grammar notation llama.cpp and XGrammar read) inside the constraint
 * engine (internal to worker/grammar/): the parser (gr_gbnf.c) reads the text into
 * productions whose terminals are code point sets, and gr_gbnf_emit.c turns those sets into
 * lexemes of exactly one code point each and the productions into the builder's rules.
 * Why one code point per lexeme: the lexer (gr_lexer.c, gr_matcher.c) munches greedily and
 * never splits a lexeme again, which is exact only when no lexeme can end where another
 * parse goes on; with single code points the Earley parser decides every split itself.
 * gr_gbnf_merge.c then makes regular rules single lexemes where that is provably exact
 * (and fast: the matcher's per-lexer-state caches work inside such lexemes).
 * docs/grammar.md "GBNF" has the notation and the errors.
 * Ownership: a gb_out is the caller's (gr_gbnf_out_free); the builder is the caller's.
 * Thread: any (no state).
 */
#ifndef V4_GR_GBNF_H
#define V4_GR_GBNF_H

#include "worker/grammar/gr_internal.h"

/* Terminals in gb_out.syms are code point set indices (0 <= s < GR_NT0, into sets);
 * nonterminals are the builder's (GR_NT0 + i). */
typedef struct gb_out {
    gr_cset *sets;
    int32_t n_sets, cap_sets;
    gr_prod *prods;
    int32_t n_prods, cap_prods;
    int32_t *syms;
    int64_t n_syms, cap_syms;
} gb_out;

/* Parse text into o (nonterminals made in b, b->start set to root).  0, or -1 with err:
 * V4_ERR_INVALID, err->where "gbnf:LINE:COL" and the message starting with it. */
int gr_gbnf_parse(gr_builder *b, const char *text, size_t len, gb_out *o, v4_error *err);
/* The sets as lexemes, the productions as rules.  0, or -1 with err. */
int gr_gbnf_emit(gr_builder *b, gb_out *o, v4_error *err);
/* Regular rules that a greedy lexer provably splits as the grammar does, as lexemes
 * (gr_gbnf_merge.c; o gains rules for runs of regular symbols).  *lex_of (malloc'd, the
 * caller frees it; one entry per nonterminal of b once done): the lexeme of a merged rule,
 * -1 for the others; NULL when nothing could be analysed.  0, or -1 with err. */
int gr_gbnf_merge(gr_builder *b, gb_out *o, int32_t **lex_of, v4_error *err);
void gr_gbnf_out_free(gb_out *o);
/* Append the production lhs -> syms[0..n) (grows the arrays; no limit checks: the caller
 * applies its own).  0, or -1 on out of memory. */
int gr_gbnf_out_add(gb_out *o, int32_t lhs, const int32_t *syms, int n);

/* The whole compile: gr_gbnf_parse then gr_gbnf_emit. */
int gr_gbnf_compile(gr_builder *b, const char *text, size_t len, v4_error *err);

#endif
