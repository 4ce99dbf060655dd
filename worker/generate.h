/* generate.h - one request's generation loop: prompt ids in, sampled tokens out,
 * streamed as text.
 *
 * The prompt is fed one position at a time (prefill through the decode path), then
 * each step samples the next token (sampling.h), feeds it back, and, when a tokenizer
 * is given, decodes it incrementally (complete UTF-8 only) through the stop-string
 * matcher (stop.h) into the caller's emit callback.  Generation ends on the EOS id
 * (finish "stop"), on a stop string (finish "stop", the stop text is not emitted), or
 * after max_tokens (finish "length").  The EOS token itself is neither emitted nor
 * counted in the text; it is counted in the generated tokens.  An optional cancel
 * callback, polled before every forward step, aborts the run (error, where "cancel").
 * Expert routing is counted per (layer, expert) when the caller asks (expert_counts):
 * the worker's utilization telemetry and the result's `experts` figures.
 *
 * Ownership: the result's token array is malloc'd (v4_gen_result_free).  The model,
 * context, tokenizer and sequence are borrowed.
 * Thread: the caller's thread; one request at a time per context.
 */
#ifndef V4_GENERATE_H
#define V4_GENERATE_H

#include <stdint.h>

#include "../kernels/v4/model.h"
#include "sampling.h"
#include "stop.h"
#include "tokenizer.h"

typedef struct v4_gen_request {
    const int32_t *prompt;
    int n_prompt;
    int max_tokens;
    v4_sampling_params sampling;
    int32_t eos_id;             /* -1: never stop on a token */
    const char *const *stops;   /* stop strings (matched on decoded text) */
    int n_stops;
    /* Optional: polled before every step; non-zero aborts the run with an error whose
     * where is "cancel" (deadlines, shutdown).  NULL = never. */
    int (*cancel)(void *ud);
    void *cancel_ud;
    /* Optional: [n_layers * n_routed_experts] counters; every forward step adds 1 to
     * each (layer, expert) its token was routed to (learned and hash layers alike).
     * The caller zeroes it; NULL = not collected. */
    uint32_t *expert_counts;
} v4_gen_request;

typedef struct v4_gen_result {
    int32_t *tokens;            /* generated ids (including a final EOS) */
    int n_tokens;
    const char *finish_reason;  /* "stop" | "length" */
    double prefill_s, decode_s; /* wall time of the prompt and of the generated tokens */
} v4_gen_result;

/* tok may be NULL (no text: emit is not called).  seq must be fresh (position 0) and
 * have room for n_prompt + max_tokens positions. */
int v4_generate(v4_ctx *ctx, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                v4_emit_fn emit, void *ud, v4_gen_result *res, v4_error *err);
void v4_gen_result_free(v4_gen_result *res);

#endif
