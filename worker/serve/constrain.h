/* constrain.h - decoding under a constraint (docs/structured-outputs.md): the constraint
 * engine's vocabulary made from a tokenizer (shared by the runner and by `v4fleet
 * grammar-check` / `grammar-bench`), and one sequence's constraint state, which the
 * generation state machine (generate.c, run by both executors) consults for every token
 * it samples:
 *
 *   logits = v4_constrain_apply(s, logits)   every token the constraint refuses -> -inf,
 *                                             BEFORE temperature / top-k / top-p
 *   token  = v4_sample(logits)
 *   v4_constrain_commit(s, token)            the matcher takes it (EOS included)
 *
 * The end-of-sequence token is allowed only where the constraint accepts (the engine's
 * mask says so), so an answer that ends on EOS is complete; ids past the tokenizer's
 * vocabulary (a model's logits may be wider) are never allowed.  Thinking mode: with
 * end_think >= 0 the state starts in the reasoning phase, where every token but EOS is
 * allowed; the sampled end_think token (`</think>`) switches the constraint on, and it
 * governs the answer from the next token.  With end_think < 0 the constraint governs
 * from the first token.
 *
 * Ownership: v4_grammar_vocab returns a vocab the caller frees (v4g_vocab_free) after
 * every state made from it.  v4_constrain_new takes its own reference on the constraint
 * and borrows the vocab; v4_constrain_free releases both it and its buffers.  The
 * logits returned by v4_constrain_apply live in the state (until the next call).
 * Thread: a vocab may be shared by any threads; one state is used by one thread at a
 * time (the executor's thread).
 */
#ifndef V4_CONSTRAIN_H
#define V4_CONSTRAIN_H

#include <stdint.h>

#include "config/error.h"
#include "worker/grammar/grammar.h"
#include "worker/tokenizer/tokenizer.h"

/* The engine's vocabulary of t: token id -> its bytes, special tokens never allowed
 * inside a constraint, eos the end token (allowed where the constraint accepts; pass
 * v4_tok_eos(t), or the model's when the tokenizer names none; -1 none). */
v4g_vocab *v4_grammar_vocab(const v4_tokenizer *t, int32_t eos, v4_error *err);

typedef struct v4_constrain v4_constrain;

/* n_logits: the width of a logits row (the model's vocabulary).  NULL with err on
 * allocation failure. */
v4_constrain *v4_constrain_new(v4g_constraint *c, const v4g_vocab *v, int n_logits, int32_t eos, int32_t end_think,
                               v4_error *err);
void v4_constrain_free(v4_constrain *s);
/* logits[n_logits] with every refused token at -inf (a copy in the state).  NULL with
 * err (where "constraint") when the constraint allows no token at all (a dead end:
 * the vocabulary cannot spell what it requires) or the engine fails. */
const float *v4_constrain_apply(v4_constrain *s, const float *logits, v4_error *err);
/* Compute the mask for the next token now, so that the next v4_constrain_apply only
 * applies it (the continuous executor does this on its mask thread while the step's
 * forward pass runs: mask_ahead.h).  Any thread, while no other call on s runs; a
 * no-op in the reasoning phase or when the mask is ready.  An engine failure is kept
 * and returned by that v4_constrain_apply. */
void v4_constrain_prepare(v4_constrain *s);
/* The sampled token.  0, or -1 with err (where "constraint"): a token the mask did not
 * allow, or an engine error. */
int v4_constrain_commit(v4_constrain *s, int32_t token, v4_error *err);
/* 1 once the constraint governs (always, without a reasoning phase). */
int v4_constrain_active(const v4_constrain *s);
/* Tokens committed under the constraint (the answer's tokens, EOS included). */
long v4_constrain_tokens(const v4_constrain *s);

#endif
