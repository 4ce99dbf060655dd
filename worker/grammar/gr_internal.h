/* gr_internal.h - the insides of the constraint engine (worker/grammar/), shared by its
 * files and by nothing else.  The design follows the lexer + parser split of llguidance:
 *
 *   - lexemes are regular languages over bytes, compiled into one Thompson NFA
 *     (gr_nfa.c, from regex text: gr_regex.c), determinized lazily into a DFA whose
 *     states are sets of NFA states (gr_lexer.c);
 *   - the grammar over lexemes is a context-free grammar run by an Earley parser
 *     (gr_earley.c), which says which lexemes may start at each point;
 *   - a token is allowed when its bytes can be fed to (lexer, parser) without a
 *     refusal; the mask walks the vocabulary's byte trie so shared prefixes are fed once
 *     (gr_matcher.c).
 * Compilers (JSON Schema: gr_schema*.c; regex, choice, JSON object: gr_compile.c) emit
 * lexemes and rules through gr_builder below.  docs/structured-outputs.md has the rest.
 *
 * Ownership: a gr_grammar owns everything it points to; matchers point into it.
 * Thread: a gr_grammar's lexer cache grows during matching under the grammar's mutex; the
 * vocabulary (v4g_vocab, below) is read-only once made.
 */
#ifndef V4_GR_INTERNAL_H
#define V4_GR_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "config/error.h"
#include "worker/grammar/grammar.h"

/* ------------------------------------------------------------------ limits -- */
#define GR_MAX_NFA_STATES (1 << 21)   /* a constraint over this is a compile error */
#define GR_MAX_LEXEMES 65536
#define GR_MAX_PRODS (1 << 20)
#define GR_MAX_REPEAT 4096            /* {n,m}, minLength/maxLength: larger is a compile error */
#define GR_MAX_DFA_STATES 200000      /* lexer cache entries: past this a grammar refuses */
#define GR_MASK_CACHE_BYTES (96u << 20) /* mask caches of one grammar: past this they start over */

/* ------------------------------------------------------------------- NFA -- */
/* One Thompson NFA holds every lexeme of a grammar.  A state has a list of edges
 * (byte ranges, or epsilon), and accepts at most one lexeme. */
typedef struct gr_edge {
    int32_t to, next;   /* next: the state's next edge, -1 ends */
    uint8_t lo, hi;     /* byte range; eps=1: an epsilon edge */
    uint8_t eps;
} gr_edge;

typedef struct gr_nstate {
    int32_t first;      /* first edge, -1 none */
    int32_t accept;     /* lexeme id accepted here, -1 none */
    int32_t owner;      /* the lexeme whose automaton this state is part of, -1 none */
    uint8_t role;       /* GR_ROLE_*: part of the lexeme, or of one of its vetoes */
    /* string-body marks (gr_lex_json_string, gr_lex_key_except; see gr_matcher.c's
     * str_fill): > 0 the start of one JSON-encoded character of string content, where at
     * most srem more characters may follow this one included (INT32_MAX: unbounded);
     * GR_SREM_CLOSE the state before the closing quote; GR_SREM_LIT inside a literal
     * lexeme that is a quoted string (gr_lex_bytes: a property name), after its opening
     * quote and before its closing one; 0 anything else */
    int32_t srem;
} gr_nstate;
#define GR_SREM_CLOSE (-1)
#define GR_SREM_LIT (-2)

/* A lexeme may carry vetoes: automata of texts it must not be (a JSON string that is no
 * key of a set and matches no pattern of patternProperties).  Their states ride along in
 * the lexer's state sets; the lexeme is not accepted where a veto accepts, and once a veto
 * reaches an absorbing state (every continuation is vetoed) the lexeme's own states leave
 * the set, so the lexer never offers a string that can no longer end. */
enum { GR_ROLE_MAIN = 0, GR_ROLE_VETO = 1, GR_ROLE_VETO_ABSORB = 2, GR_ROLE_VETO_ACCEPT = 3 };

typedef struct gr_nfa {
    gr_nstate *st;
    gr_edge *ed;
    int32_t n_st, cap_st, n_ed, cap_ed;
    /* gr_regex_emit records here the states of trailing "anything" parts of search-mode
     * branches (where a match, once found, stays found) when absorb_on is set */
    int absorb_on;
    /* set by the string constructors around gr_emit_any_len: mark its characters' starts
     * (gr_nstate.srem) */
    int str_mark;
    int32_t *absorb;       /* pairs [lo, hi) of state ids */
    int32_t n_absorb, cap_absorb;
} gr_nfa;

typedef struct gr_frag {  /* a piece under construction: start, and an end to patch */
    int32_t start, end;
} gr_frag;

int gr_nfa_state(gr_nfa *n, v4_error *err);                   /* new state id or -1 */
int gr_nfa_edge(gr_nfa *n, int from, int to, int lo, int hi, v4_error *err);
int gr_nfa_eps(gr_nfa *n, int from, int to, v4_error *err);
void gr_nfa_free(gr_nfa *n);

/* Code point sets: sorted, disjoint, non-adjacent ranges [lo, hi] of Unicode scalars. */
typedef struct gr_cset {
    uint32_t *r;   /* pairs lo, hi */
    int n, cap;
} gr_cset;

int gr_cset_add(gr_cset *s, uint32_t lo, uint32_t hi);   /* then gr_cset_norm */
void gr_cset_norm(gr_cset *s);
int gr_cset_negate(const gr_cset *s, gr_cset *out);
int gr_cset_copy(const gr_cset *s, gr_cset *out);
void gr_cset_free(gr_cset *s);

/* Emit a code point set as an NFA fragment.  json: the set's members JSON-encoded as
 * inside a string (raw UTF-8 where JSON allows it, the short escapes \" \\ \/ \b \f \n
 * \r \t, \u00XX for the other control characters); else plain UTF-8. */
int gr_emit_cset(gr_nfa *n, const gr_cset *s, int json, gr_frag *out, v4_error *err);
/* Emit exact bytes. */
int gr_emit_bytes(gr_nfa *n, const uint8_t *b, size_t len, gr_frag *out, v4_error *err);

/* Regex (ECMA-262 syntax, the subset JSON Schema's `pattern` uses) -> NFA fragment.
 * mode GR_RX_FULL: the whole text must match; GR_RX_SEARCH: JSON Schema's `pattern`,
 * unanchored unless ^/$ say otherwise.  json: as in gr_emit_cset.  min_len/max_len
 * (code points; max_len < 0: none) bound the match's length; with a pattern a bound
 * is a compile error for now (no intersection).  Errors name the regex offset. */
enum { GR_RX_FULL = 0, GR_RX_SEARCH = 1 };
int gr_regex_emit(gr_nfa *n, const char *src, size_t len, int mode, int json, gr_frag *out, v4_error *err);
/* Any code point sequence of min..max code points (max < 0: unbounded), JSON-encoded if json. */
int gr_emit_any_len(gr_nfa *n, int json, int min, int max, gr_frag *out, v4_error *err);

/* ---------------------------------------------------------------- builder -- */
/* Symbols: a lexeme id (0 <= s < GR_NT0) or a nonterminal (GR_NT0 + i). */
#define GR_NT0 (1 << 30)
#define GR_IS_NT(s) ((s) >= GR_NT0)

typedef struct gr_prod {   /* lhs -> syms[off .. off + len) */
    int32_t lhs, off, len;
} gr_prod;

typedef struct gr_lexdef {
    char *key;          /* dedup key (kind + source), owned */
    int32_t start;      /* NFA start state */
} gr_lexdef;

typedef struct gr_builder {
    gr_nfa nfa;
    gr_lexdef *lex;
    int32_t n_lex, cap_lex;
    gr_prod *prods;
    int32_t n_prods, cap_prods;
    int32_t *syms;
    int32_t n_syms, cap_syms;
    int32_t n_nt;
    char **nt_names;    /* n_nt hints, owned (NULL where none) */
    int32_t start;      /* start nonterminal */
    int32_t skip;       /* whitespace lexeme between lexemes (-1: none) */
    int32_t skip_max;   /* bytes in one whitespace run */
    int32_t lex_end;    /* NFA states below belong to lexemes already added */
    int32_t *gheads;    /* loop heads of unconstrained JSON string content (see gr_dstate.generic) */
    int32_t n_gheads, cap_gheads;
    /* dedup of lexemes by key: open addressing over lex ids */
    int32_t *lex_ht;
    int32_t lex_ht_cap;
} gr_builder;

void gr_builder_init(gr_builder *b);
void gr_builder_free(gr_builder *b);
/* Lexemes (deduplicated by their source): id >= 0, or -1 with err. */
int gr_lex_regex(gr_builder *b, const char *src, size_t len, int mode, int json, int min_len, int max_len,
                 v4_error *err);
int gr_lex_bytes(gr_builder *b, const char *bytes, size_t len, v4_error *err);
/* One code point of the set s (UTF-8): GBNF's terminals (gr_gbnf_emit.c). */
int gr_lex_cset(gr_builder *b, const gr_cset *s, v4_error *err);
/* A lexeme from the fragment f the caller built in b->nfa since the last lexeme was added
 * (its end gets a fresh accepting state); name: unique among the caller's lexemes. */
int gr_lex_frag(gr_builder *b, const char *name, gr_frag *f, v4_error *err);
/* A JSON string (with its quotes) whose content is none of keys[0..n) (canonical encoding). */
int gr_lex_key_except(gr_builder *b, const char *const *keys, int n, v4_error *err);
/* A JSON string matching pattern (search mode; NULL: any string) that is none of keys and
 * matches none of vetoes (search mode): patternProperties' keys and the others. */
int gr_lex_string_vetoed(gr_builder *b, const char *pattern, const char *const *keys, int nkeys,
                         const char *const *vetoes, int nvetoes, v4_error *err);
/* A quoted JSON string whose decoded content has min..max code points (max < 0: any). */
int gr_lex_json_string(gr_builder *b, int min, int max, v4_error *err);
int gr_nt(gr_builder *b, const char *hint, v4_error *err);          /* GR_NT0 + i, or -1 */
int gr_rule(gr_builder *b, int lhs, const int32_t *syms, int n, v4_error *err);
int gr_set_skip(gr_builder *b, int max_run, v4_error *err);         /* JSON whitespace */

/* ---------------------------------------------------------------- grammar -- */
typedef struct gr_dstate {   /* a lexer DFA state: a set of NFA states */
    int32_t *next;           /* [256], -2 unknown, -1 dead; allocated on first step */
    int32_t set_off, set_len;    /* into gr_lexer.sets */
    int32_t n_acc;           /* lexemes accepted here: acc_off into gr_lexer.accs */
    int32_t acc_off;
    uint8_t live;            /* some byte continues */
    /* the mask cache (gr_matcher.c), for the vocabulary cache_vocab: the tokens whose bytes
     * all stay inside the lexeme from here (allowed whatever the parser says), and the trie
     * nodes where a token leaves the lexeme (node, lexer state before it: walked in full) */
    uint32_t *inner;
    int32_t *bnd;
    int32_t n_bnd;
    /* inside unconstrained JSON string content, at a character boundary: every such state
     * of every grammar behaves alike, so its mask cache comes from the vocabulary's */
    uint8_t generic;
} gr_dstate;

typedef struct gr_lexer {
    gr_dstate *ds;
    int32_t n_ds, cap_ds;
    int32_t *sets;           /* NFA state ids of every DFA state, back to back */
    int64_t n_sets, cap_sets;
    int32_t *accs;
    int64_t n_accs, cap_accs;
    int32_t *ht;             /* set -> DFA state, open addressing */
    int64_t ht_cap;
    /* start states by allowed-lexeme set (a hash of the bitset -> DFA id list) */
    int32_t *start_ht_key_off;   /* into start_keys (words) */
    int32_t *start_ht_val;
    int64_t start_ht_cap, n_start;
    uint64_t *start_keys;
    int64_t n_start_keys, cap_start_keys;
    /* scratch for closures */
    int32_t *stack, *mark, *buf;
    int32_t mark_gen;
    size_t bytes;            /* memory held (for the cache's byte budget) */
    const void *cache_vocab; /* the vocabulary of the mask caches (one at a time) */
    size_t mask_bytes;       /* of bytes: the mask caches' share */
} gr_lexer;

struct gr_grammar {
    gr_nfa nfa;
    int32_t *coreach;        /* 1 where an accepting state is reachable */
    int32_t n_lex;
    int32_t *lex_start;      /* NFA start state of each lexeme */
    gr_prod *prods;
    int32_t n_prods;
    int32_t *syms;
    int32_t n_nt;
    int32_t start;
    int32_t skip, skip_max;
    int32_t *nt_prods;       /* per nonterminal: first prod index in by_lhs */
    int32_t *nt_nprods;
    int32_t *by_lhs;         /* prod ids grouped by lhs */
    uint8_t *nullable;       /* per nonterminal */
    int32_t lex_words;       /* uint64 words of an allowed-lexeme bitset */
    int32_t *gsets;          /* per generic loop head: its lexer set (len, states...) back to back */
    uint8_t cls[256];        /* byte classes: bytes no NFA edge range tells apart share one, and
                              * a lexer step answers for the whole class at once */
    int16_t cls_next[256];   /* the next byte of the same class, -1 ends (classes are ranges) */
    int32_t n_gsets, len_gsets;
    gr_lexer lx;
    pthread_mutex_t mu;
    size_t bytes;
};
typedef struct gr_grammar gr_grammar;

/* Freeze a builder into a grammar (takes the builder's arrays; b is left empty). */
gr_grammar *gr_grammar_build(gr_builder *b, v4_error *err);
void gr_grammar_free(gr_grammar *g);

/* 1 when the regex matches all of s (plain bytes), 0 not, -1 error (a compile-time helper). */
int gr_regex_matches(const char *rx, size_t rxlen, int mode, const char *s, size_t n, v4_error *err);

/* Lexer: the DFA state that starts one of the lexemes in allowed (bitset of n_lex bits),
 * -1 when none can start; gr_lex_next: the state after byte c (-1 dead, -3 out of memory). */
int32_t gr_lex_start(gr_grammar *g, const uint64_t *allowed);
int32_t gr_lex_step(gr_grammar *g, int32_t s, uint8_t c);
static inline int32_t gr_lex_next(gr_grammar *g, int32_t s, uint8_t c)
{
    const int32_t *nx = g->lx.ds[s].next;
    if (nx && nx[c] != -2)
        return nx[c];
    return gr_lex_step(g, s, c);
}

/* ----------------------------------------------------------------- Earley -- */
typedef struct gr_item {
    int32_t prod, dot, origin;
} gr_item;

typedef struct gr_parser {
    gr_item *items;
    int64_t n_items, cap_items;
    int32_t *set_off;        /* set k = items[set_off[k] .. set_off[k + 1]) */
    uint64_t *allowed;       /* per set: lex_words words */
    int32_t n_sets, cap_sets;
    /* scratch: dedup of the set being built */
    uint64_t *ht;
    int32_t ht_cap;
} gr_parser;

int gr_parser_init(gr_parser *p, const gr_grammar *g, v4_error *err);
void gr_parser_free(gr_parser *p);
/* Push the set after scanning one of the lexemes accepted in lexer state acc[0..n):
 * 0 ok, -1 refused (the set would be empty), -2 out of memory. */
int gr_parser_scan(gr_parser *p, const gr_grammar *g, const int32_t *acc, int n);
static inline void gr_parser_pop_to(gr_parser *p, int32_t n_sets)
{
    p->n_sets = n_sets;
    p->n_items = p->set_off[n_sets];
}
/* The last set accepts the whole input. */
int gr_parser_accepts(const gr_parser *p, const gr_grammar *g);
static inline const uint64_t *gr_parser_allowed(const gr_parser *p, const gr_grammar *g)
{
    return p->allowed + (size_t)(p->n_sets - 1) * (size_t)g->lex_words;
}

/* ------------------------------------------------------------- vocabulary -- */
/* The vocabulary (grammar.h's v4g_vocab), read-only once made, so matchers of any grammar
 * and thread read it; v4g_vocab_new (gr_matcher.c) owns and makes it. */
struct v4g_vocab {
    int32_t n, eos;
    int64_t *off;          /* token i's bytes: data[off[i] .. off[i + 1]) */
    char *data;
    uint8_t *special;
    /* the trie, preorder: node byte, depth (1 = first byte), subtree size, first token */
    int32_t n_nodes, max_depth;
    uint8_t *nb;
    uint16_t *nd;
    int32_t *nsz, *ntok;
    int32_t *dup;          /* next token with the same bytes, -1 */
    /* inside unconstrained JSON string content (gr_dstate.generic): the tokens that stay
     * inside, and the trie nodes where a token closes the string (gr_strcache.c, made once) */
    uint32_t *str_inner;
    int32_t *str_bnd, n_str_bnd;
    /* for string states of bounded or several lexemes (gr_str_fill): per token of str_inner
     * the characters it spans (one begun but unfinished included, capped at 65535); per
     * boundary the characters before its quote and a token whose bytes spell its path */
    uint16_t *str_cp;
    int32_t str_cp_max;    /* the most of str_cp */
    uint32_t *str_le;      /* per r in 0..str_cp_max: the tokens of str_inner spanning at most r
                            * characters (a bit set of n bits each); NULL where too large */
    int32_t *str_bnd_cp, *str_bnd_tok;
};

/* The generic string cache (gr_strcache.c) into v (str_inner ...; left NULL where memory
 * fails: masks then walk).  Called once by v4g_vocab_new. */
void gr_str_cache(v4g_vocab *v);
/* Lexer state s's mask cache (gr_dstate.inner, .bnd) from v's string cache when every NFA
 * state of s is marked string content (gr_nstate.srem): 1 filled, 0 not such a state (or
 * not shown alike: the caller walks), -1 out of memory.  Under g's mutex. */
int gr_str_fill(gr_grammar *g, const v4g_vocab *v, int32_t s);

#endif
