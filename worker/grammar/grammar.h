/* grammar.h - v4fleet's constraint engine: the one public header of worker/grammar/.
 *
 * A constraint (a JSON Schema, any JSON object, a regex, a choice of strings, a GBNF
 * context-free grammar) is compiled
 * once into a v4g_constraint; each sequence decoding under it holds a v4g_matcher that
 * says which tokens may come next (a bit mask over the vocabulary) and takes the token
 * that was sampled.  The engine knows the vocabulary as token id -> bytes and nothing of
 * the model.  What is supported, what fails to compile and why: docs/structured-outputs.md.
 *
 * Ownership: v4g_vocab_new copies what it is given; the caller frees it with
 * v4g_vocab_free after every matcher made from it is freed.  v4g_compile returns a
 * constraint with one reference (v4g_constraint_unref drops it); a matcher holds its own
 * reference.  Errors go to the caller's v4_error (config/error.h): code, message, and in
 * `where` the JSON pointer, regex offset or GBNF "gbnf:LINE:COLUMN" at fault.
 * Threads: a vocab and a constraint may be shared by any threads (a constraint's lexer
 * cache grows under its own lock); one matcher is used by one thread at a time.
 */
#ifndef V4_GRAMMAR_H
#define V4_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "config/error.h"

typedef struct v4g_vocab v4g_vocab;
typedef struct v4g_constraint v4g_constraint;
typedef struct v4g_matcher v4g_matcher;

/* token_bytes(ctx, id, &len): the bytes of token id; special(ctx, id): 1 for a special
 * token (never allowed inside a constraint).  eos: the end token (allowed only where the
 * constraint accepts; -1 none). */
typedef const char *(*v4g_token_bytes_fn)(void *ctx, int32_t id, size_t *len);
typedef int (*v4g_token_special_fn)(void *ctx, int32_t id);
v4g_vocab *v4g_vocab_new(int32_t n_tokens, v4g_token_bytes_fn bytes, v4g_token_special_fn special, void *ctx,
                         int32_t eos, v4_error *err);
void v4g_vocab_free(v4g_vocab *v);
int32_t v4g_vocab_size(const v4g_vocab *v);

typedef enum v4g_kind {
    V4G_JSON_SCHEMA,   /* text: a JSON Schema (draft 2020-12 / 7 keywords, docs) */
    V4G_JSON_OBJECT,   /* any JSON object (OpenAI's json_object); text ignored */
    V4G_REGEX,         /* text: an ECMA-262 regex the whole output must match */
    V4G_CHOICE,        /* text: a JSON array of strings; the output is one of them */
    V4G_GRAMMAR,       /* text: a GBNF grammar (llama.cpp's notation) from its rule `root`
                        * (docs/grammar.md "GBNF"; errors: "gbnf:LINE:COL: ...") */
} v4g_kind;

typedef struct v4g_opts {
    int compact;       /* 1: no whitespace between JSON tokens; 0: bounded runs (default) */
    int ws_max;        /* bytes in one whitespace run (default 8) */
} v4g_opts;

/* Compile; NULL with err filled (V4_ERR_INVALID: the constraint is malformed or uses what
 * the engine cannot enforce; err->where names the keyword's JSON pointer). */
v4g_constraint *v4g_compile(v4g_kind kind, const char *text, size_t len, const v4g_opts *opts, v4_error *err);
v4g_constraint *v4g_constraint_ref(v4g_constraint *c);
void v4g_constraint_unref(v4g_constraint *c);
size_t v4g_constraint_bytes(const v4g_constraint *c);   /* memory held, caches included */

v4g_matcher *v4g_matcher_new(v4g_constraint *c, const v4g_vocab *v, v4_error *err);
v4g_matcher *v4g_matcher_fork(const v4g_matcher *m, v4_error *err);   /* same state, own copy */
void v4g_matcher_free(v4g_matcher *m);

/* The allowed tokens: bit i of bits[i / 32] (v4g_vocab_size bits).  0, or -1 with err. */
int v4g_matcher_mask(v4g_matcher *m, uint32_t *bits, v4_error *err);
/* Take a token: 0 taken, 1 refused (the state is unchanged), -1 error (err). */
int v4g_matcher_commit(v4g_matcher *m, int32_t token, v4_error *err);
/* Feed raw bytes: 0 all taken, 1 refused at byte *at (state as before that byte). */
int v4g_matcher_feed(v4g_matcher *m, const char *bytes, size_t len, size_t *at, v4_error *err);
int v4g_matcher_accepting(v4g_matcher *m);   /* the text so far is a complete answer */
int v4g_matcher_finished(const v4g_matcher *m);   /* EOS was taken */

/* 1 when JSON Schema's `pattern` rx (ECMA-262, unanchored) matches the UTF-8 text s[0..n),
 * 0 when not, -1 when rx is not a regex the engine takes (err).  Any thread. */
int v4g_pattern_matches(const char *rx, size_t rxlen, const char *s, size_t n, v4_error *err);

/* ------------------------------------------------------------------ cache -- */
/* Compiled constraints by their text (callers pass a canonical text, e.g. a schema written
 * compactly), least recently used out past max_bytes.  Any thread; one lock inside.
 * v4g_cache_get returns a reference the caller unrefs; *hit says whether it was cached.
 * A constraint that does not compile is not kept (err says why). */
typedef struct v4g_cache v4g_cache;
typedef struct v4g_cache_figs {
    size_t bytes, entries;
    uint64_t hits, misses;
} v4g_cache_figs;
v4g_cache *v4g_cache_new(size_t max_bytes);
void v4g_cache_free(v4g_cache *c);
v4g_constraint *v4g_cache_get(v4g_cache *c, v4g_kind kind, const char *text, size_t len, const v4g_opts *opts,
                              int *hit, v4_error *err);
void v4g_cache_stats(v4g_cache *c, v4g_cache_figs *figs);

#endif
