/* sampling.h - choosing the next token from logits: logit bias, penalties, greedy,
 * temperature, min-p, top-k, top-p (nucleus), with a per-request seed; and the log
 * probabilities of the choice (docs/structured-outputs.md "Sampling fields").
 *
 * RNG: xoshiro256** seeded through splitmix64 from the request's 64-bit seed; each
 * draw takes the top 53 bits as a double in [0, 1).  The sampler uses only IEEE
 * double arithmetic in a fixed order plus libm exp() / log(), so the same seed, logits
 * and binary give the same tokens on every run and machine (glibc's exp is the same
 * everywhere on one Debian release).  With no bias, no penalty and min_p 0 the logits
 * are used as given (no copy): the tokens are bit for bit those of the plain sampler.
 *
 * Order of operations, on one row of logits (the row an output constraint already
 * masked: refused tokens are -inf, constrain.h, and stay -inf through every step):
 *   1. logit_bias: l[id] += bias (OpenAI's);
 *   2. penalties: repetition_penalty (vLLM / Hugging Face) over the prompt and the
 *      generated tokens: l > 0 -> l / r, else l * r; then frequency_penalty and
 *      presence_penalty (OpenAI's) over the generated tokens: l -= count * f +
 *      (count > 0) * p;
 *   3. (the constraint's mask: -inf; applied by the caller before, equivalent because
 *      steps 1-2 keep -inf at -inf);
 *   4. temperature 0 -> greedy: argmax of these logits, lowest id on ties; else
 *      candidates = the top_k highest (all if top_k == 0; ties to the lower id),
 *      weights = exp((l - max) / T);
 *   5. min_p drops the candidates whose probability is below min_p x the highest one's
 *      (after temperature, as vLLM); then top_p keeps the smallest prefix (descending)
 *      whose share of the remaining mass reaches top_p;
 *   6. one uniform draw picks by inverse CDF in that order.
 * Steps 1-2 work on a copy of the row, touching only the biased and the penalized ids:
 * the counts live in a sparse table (open addressing) of the ids seen, so a step costs
 * O(bias entries + distinct ids seen), not O(vocabulary), on top of the copy.
 *
 * Log probabilities (v4_sample_ex with lp): log-softmax in double over the whole row
 * after steps 1-3 and temperature (vLLM's "processed" logprobs; temperature 0 counts as
 * 1), before min_p / top_k / top_p.  A token at -inf (refused by the constraint) has
 * probability 0: it never appears among the top entries; a chosen token at -inf (only
 * when every token is refused) reports V4_LOGPROB_FLOOR (OpenAI's -9999).
 *
 * Ownership: v4_sampler owns its scratch arrays (sized for one vocabulary) and a copy
 * of the bias entries; create one per sequence.  Thread: one thread at a time per
 * sampler.
 */
#ifndef V4_SAMPLING_H
#define V4_SAMPLING_H

#include <stdint.h>

#include "config/error.h"

#define V4_TOP_LOGPROBS_MAX 20
#define V4_LOGPROB_FLOOR (-9999.0)

typedef struct v4_logit_bias {
    int32_t id;
    float bias;                 /* [-100, 100] */
} v4_logit_bias;

typedef struct v4_sampling_params {
    double temperature;     /* >= 0; 0 = greedy */
    double top_p;           /* (0, 1]; 1 = off */
    int top_k;              /* >= 0; 0 = off */
    uint64_t seed;
    /* The fields below are off when zero (a zero-initialized tail changes nothing). */
    double min_p;           /* [0, 1]; 0 = off */
    double presence_penalty, frequency_penalty;     /* [-2, 2]; 0 = off */
    double repetition_penalty;                      /* > 0, or 0 = off (1 is off too) */
    const v4_logit_bias *bias;  /* n_bias entries, ids distinct (copied by create) */
    int n_bias;
    int logprobs;           /* 1: the caller asks v4_sample_ex for log probabilities */
    int top_logprobs;       /* 0..V4_TOP_LOGPROBS_MAX alternatives per position */
} v4_sampling_params;

/* One position's log probabilities (v4_sample_ex). */
typedef struct v4_token_logprob {
    int32_t id;
    double logprob;
} v4_token_logprob;

typedef struct v4_sample_lp {
    double logprob;             /* the chosen token's */
    int n_top;                  /* <= top_logprobs (fewer when fewer tokens are allowed) */
    v4_token_logprob top[V4_TOP_LOGPROBS_MAX];  /* descending, ties to the lower id */
} v4_sample_lp;

typedef struct v4_sampler v4_sampler;

/* Check the parameters; the error names the field and the allowed range. */
int v4_sampling_validate(const v4_sampling_params *p, v4_error *err);
/* Also checks that every bias id is below vocab. */
v4_sampler *v4_sampler_create(int vocab, const v4_sampling_params *p, v4_error *err);
void v4_sampler_free(v4_sampler *s);
/* The prompt, for repetition_penalty (a no-op when it is off).  Call once, before the
 * first draw.  0, or -1 (err: out of memory). */
int v4_sampler_prompt(v4_sampler *s, const int32_t *ids, int n, v4_error *err);
/* Next token id from logits[vocab]; the token counts as generated (penalties). */
int v4_sample(v4_sampler *s, const float *logits);
/* The same, and when lp is non-NULL its log probabilities (see above).  Returns -1
 * only when the penalty table cannot grow (out of memory). */
int v4_sample_ex(v4_sampler *s, const float *logits, v4_sample_lp *lp);
/* Argmax with the lowest id on ties. */
int v4_argmax(const float *logits, int n);

#endif
