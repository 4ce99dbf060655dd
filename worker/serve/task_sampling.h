/* task_sampling.h - the OpenAI / vLLM sampling fields of a task beyond temperature,
 * top_p, top_k and seed (those are task_packet.c's): logit_bias, presence_penalty,
 * frequency_penalty, repetition_penalty, min_p, logprobs, top_logprobs.  The same code
 * reads task packets and the body of OpenAI batch lines (worker/tools/batch_input.c
 * copies these fields into the task it builds).  Ranges (docs/structured-outputs.md
 * "Sampling fields"; what they do: worker/serve/sampling.h):
 *   logit_bias          {"<token id>": bias in [-100, 100], ...}, ids decimal, at most
 *                       V4_TASK_MAX_LOGIT_BIAS entries (ids past the model's vocabulary
 *                       are refused when the task starts: invalid_field)
 *   presence_penalty    [-2, 2], default 0
 *   frequency_penalty   [-2, 2], default 0
 *   repetition_penalty  > 0 (at most 1e6), default 1
 *   min_p               [0, 1], default 0
 *   logprobs            true | false (default)
 *   top_logprobs        0..20 (default 0); > 0 needs logprobs true
 * null counts as absent.  A bad value is invalid_field naming the field and the range
 * (where "logit_bias.<key>" for one entry).
 *
 * Ownership: v4_task_sampling owns its bias array (v4_task_sampling_free).  Thread: any.
 */
#ifndef V4_TASK_SAMPLING_H
#define V4_TASK_SAMPLING_H

#include <jansson.h>

#include "sampling.h"
#include "task_error.h"

#define V4_TASK_MAX_LOGIT_BIAS 4096

typedef struct v4_task_sampling {
    double presence_penalty, frequency_penalty;
    double repetition_penalty;      /* 0 until set: the default 1 (v4_task_sampling_apply) */
    double min_p;
    v4_logit_bias *bias;            /* malloc'd, in the request's key order */
    int n_bias;
    int logprobs, top_logprobs;
} v4_task_sampling;

/* 1 if k is one of this file's fields. */
int v4_task_sampling_field(const char *k);
/* Read field k (one of them) with value v into s.  0, or -1 with e (invalid_field). */
int v4_task_sampling_parse(const char *k, json_t *v, v4_task_sampling *s, v4_task_error *e);
/* After every field: the checks across fields (top_logprobs needs logprobs). */
int v4_task_sampling_check(const v4_task_sampling *s, v4_task_error *e);
/* Copy s into the sampler's parameters (p keeps borrowing s's bias array). */
void v4_task_sampling_apply(const v4_task_sampling *s, v4_sampling_params *p);
void v4_task_sampling_free(v4_task_sampling *s);

#endif
