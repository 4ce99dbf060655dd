/* sampling.h - choosing the next token from logits: greedy, temperature, top-k,
 * top-p (nucleus), with a per-request seed.
 *
 * RNG: xoshiro256** seeded through splitmix64 from the request's 64-bit seed; each
 * draw takes the top 53 bits as a double in [0, 1).  The sampler uses only IEEE
 * double arithmetic in a fixed order plus libm exp(), so the same seed, logits and
 * binary give the same tokens on every run and machine (glibc's exp is the same
 * everywhere on one Debian release).
 *
 * Order of operations (the usual one, as in vLLM/HF): temperature 0 -> greedy
 * (argmax, lowest id on ties).  Otherwise candidates = top_k highest logits (all if
 * top_k == 0; ties to the lower id), probabilities = softmax(logit / T) over them,
 * then the smallest prefix (by descending probability) whose mass reaches top_p,
 * renormalized; one uniform draw picks by inverse CDF in that order.  A logit of -inf
 * (a token an output constraint refuses, constrain.h) is never a candidate: the
 * constraint's mask is applied to the logits before all of this.
 *
 * Ownership: v4_sampler owns its scratch arrays (sized for one vocabulary); create
 * one per sequence or per worker thread.  Thread: one thread at a time per sampler.
 */
#ifndef V4_SAMPLING_H
#define V4_SAMPLING_H

#include <stdint.h>

#include "config/error.h"

typedef struct v4_sampling_params {
    double temperature;     /* >= 0; 0 = greedy */
    double top_p;           /* (0, 1]; 1 = off */
    int top_k;              /* >= 0; 0 = off */
    uint64_t seed;
} v4_sampling_params;

typedef struct v4_sampler v4_sampler;

/* Check the parameters; the error names the field and the allowed range. */
int v4_sampling_validate(const v4_sampling_params *p, v4_error *err);
v4_sampler *v4_sampler_create(int vocab, const v4_sampling_params *p, v4_error *err);
void v4_sampler_free(v4_sampler *s);
/* Next token id from logits[vocab]. */
int v4_sample(v4_sampler *s, const float *logits);
/* Argmax with the lowest id on ties. */
int v4_argmax(const float *logits, int n);

#endif
