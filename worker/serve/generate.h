/* generate.h - one request's generation: prompt ids in, sampled tokens out, streamed
 * as text; as a per-request state machine (v4_gen_state) that a batched driver steps
 * together with other requests, and as the one-request loop v4_generate over it.
 *
 * The prompt is fed in chunks of up to the request's max_rows positions (default
 * V4_GEN_CHUNK; the runner picks it per backend, step_rows.h) per forward step (rows of
 * one v4_step: one pass over the weights for the chunk, results identical to feeding
 * one position at a time; the last position alone when one remains), then
 * each step samples the next token (sampling.h), feeds it back, and, when a tokenizer
 * is given, decodes it incrementally (complete UTF-8 only) through the stop-string
 * matcher (stop.h) into the caller's emit callback.  Generation ends on the EOS id
 * (finish "stop"), on a stop string (finish "stop", the stop text is not emitted), or
 * after max_tokens (finish "length").  The EOS token itself is neither emitted nor
 * counted in the text; it is counted in the generated tokens.  An optional cancel
 * callback, polled before every forward step, aborts the run (error, where "cancel").
 * Under an output constraint (v4_gen_set_constraint, constrain.h) every sampled token
 * first has the constraint's mask applied to its logits (refused tokens -inf, before
 * temperature / top-k / top-p) and is then committed to the matcher; EOS is allowed only
 * where the constraint accepts, so "stop" by EOS means a complete answer, and "length"
 * means max_tokens came first.
 * Expert routing is counted per (layer, expert) when the caller asks (expert_counts):
 * the worker's utilization telemetry and the result's `experts` figures.
 *
 *
 * State machine (every driver, one request or many, runs the same sampling / stop /
 * detokenize code through it):
 *   g = v4_gen_begin(cfg, seq, tok, req, emit, ud)    checks the request, makes the
 *                                                       sampler, stop matcher, stream
 *   while (!v4_gen_done(g)) {
 *       v4_gen_poll_cancel(g)                           the request's cancel hook
 *       rows = v4_gen_rows(g, max, toks, trs, want)     a prefill chunk, or the one input
 *       v4_step(ctx, {seq x rows}, toks, logits, trs)   (alone or batched with others)
 *       v4_gen_accept_row(g, k, want[k] ? logits[k] : NULL) for k < rows, in order:
 *                                                       count routes, sample, stream
 *   }
 * (v4_gen_input / v4_gen_trace / v4_gen_accept are the one-row forms; v4_gen_step_alone
 * is one such step for a request alone in its context.)
 *   v4_gen_end(g, res)                                  flush text, hand the result over
 * A request whose step failed is simply freed (v4_gen_free) after the error.
 *
 * Log probabilities: with req->sampling.logprobs each sampled token's log probability
 * (and its top_logprobs alternatives) is kept in the result (v4_gen_logprobs).
 *
 * Ownership: the result's token and log-probability arrays are malloc'd (v4_gen_result_free).  The model,
 * context, tokenizer, sequence and request (with its prompt and stops) are borrowed
 * and must outlive the state (so must its constraint).  v4_gen_state owns its sampler,
 * stop matcher, token stream, token array and trace buffers (v4_gen_free).
 * Thread: the caller's thread; one request at a time per context.
 */
#ifndef V4_GENERATE_H
#define V4_GENERATE_H

#include <stdint.h>

#include "kernels/v4/model.h"
#include "sampling.h"
#include "stop.h"
#include "worker/tokenizer/tokenizer.h"

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
    /* The most prompt positions one forward step carries for this request (a prefill
     * chunk; the context's rows limit it too): 0 = V4_GEN_CHUNK, 1 = one position per
     * step, at most V4_GEN_CHUNK_MAX.  The results do not depend on it.  The state
     * holds per-row buffers for this many rows; callers that step the state
     * themselves may pass a lower limit to v4_gen_rows / v4_gen_step_alone. */
    int max_rows;
    /* Optional: one more for every token sampled (a live count across generations:
     * task_run.h v4_runner_generated); NULL = not counted. */
    long long *generated;
    /* Optional (prefix caching, docs/prefix-cache.md): snap_block > 0 keeps every prefill
     * chunk inside one block of snap_block positions (a chunk ends at each block end
     * within the prompt), and once the step that reached a block end p <= n_prompt is
     * accepted (the sequence at position p), on_block(block_ud, seq, p) is called. */
    int snap_block;
    void (*on_block)(void *ud, v4_seq *seq, int pos);
    void *block_ud;
} v4_gen_request;

/* Log probabilities of the generated tokens (sampling.h: the processed distribution),
 * when the request's sampling.logprobs is 1: position i is tokens[i]; its alternatives
 * are top_id / top_lp[i * stride .. + top_n[i]] (stride = sampling.top_logprobs).
 * All NULL / 0 when not asked.  malloc'd, freed by v4_gen_result_free. */
typedef struct v4_gen_logprobs {
    int n, cap, stride;
    double *logprob;
    int32_t *top_id;
    double *top_lp;
    unsigned char *top_n;
} v4_gen_logprobs;

typedef struct v4_gen_result {
    int32_t *tokens;            /* generated ids (including a final EOS) */
    int n_tokens;
    v4_gen_logprobs lp;
    const char *finish_reason;  /* "stop" | "length" */
    double prefill_s, decode_s; /* wall time of the prompt and of the generated tokens */
    int unknown_ids;            /* generated ids with no token (past the tokenizer's
                                 * vocabulary, inside the model's): no text, no error */
} v4_gen_result;

/* tok may be NULL (no text: emit is not called).  seq must be fresh (position 0) and
 * have room for n_prompt + max_tokens positions. */
int v4_generate(v4_ctx *ctx, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                v4_emit_fn emit, void *ud, v4_gen_result *res, v4_error *err);
/* v4_generate under an output constraint (constrain.h; borrowed; NULL: free text). */
struct v4_constrain;
int v4_generate_under(v4_ctx *ctx, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                      struct v4_constrain *cons, v4_emit_fn emit, void *ud, v4_gen_result *res, v4_error *err);
void v4_gen_result_free(v4_gen_result *res);

typedef struct v4_gen_state v4_gen_state;

/* Prompt positions one step carries for one request (a prefill chunk) when the
 * request does not say (max_rows 0), and the most it may ask for. */
#define V4_GEN_CHUNK 16
#define V4_GEN_CHUNK_MAX 4096
/* The rows of one step the state holds buffers for (the request's max_rows, within
 * 1..V4_GEN_CHUNK_MAX): the logits given to v4_gen_step_alone have room for them. */
int v4_gen_capacity(const v4_gen_state *g);

/* NULL (err filled) on a bad request: empty prompt, seq not fresh or too small. */
v4_gen_state *v4_gen_begin(const v4_config *cfg, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                           v4_emit_fn emit, void *ud, v4_error *err);
/* v4_gen_begin for a sequence that already holds the prompt's first `at` positions
 * (restored from the prefix cache: position at, 0 <= at < n_prompt): the generation
 * forwards the rest.  The sampler still sees the whole prompt (penalties). */
v4_gen_state *v4_gen_begin_at(const v4_config *cfg, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                              int at, v4_emit_fn emit, void *ud, v4_error *err);
/* A state for one more answer from a prompt another state prefilled (several answers
 * from one prefill, choices.h): seq is a copy of that state's sequence right after its
 * prompt (position n_prompt: v4_seq_fork), logits the prompt's last position's (what
 * the original sampled its first token from), cons this answer's own constraint state
 * (fresh; borrowed as by v4_gen_set_constraint; NULL: free text).  The first token is
 * sampled here with this request's sampler (its own seed); the state may already be
 * done (EOS, max_tokens 1).  Its prefill time is ~0 and the prompt's routes are not
 * counted again.  NULL (err filled) as v4_gen_begin, or when that first token fails. */
v4_gen_state *v4_gen_begin_forked(const v4_config *cfg, v4_seq *seq, const v4_tokenizer *tok,
                                  const v4_gen_request *req, struct v4_constrain *cons, const float *logits,
                                  v4_emit_fn emit, void *ud, v4_error *err);
/* Decode under c (constrain.h; borrowed, must outlive the state; NULL: free text).  Set
 * it before the first v4_gen_accept. */
void v4_gen_set_constraint(v4_gen_state *g, struct v4_constrain *c);
/* The constraint set by v4_gen_set_constraint (NULL: none): the executor prepares its
 * next mask while the step runs (mask_ahead.h). */
struct v4_constrain *v4_gen_constraint(const v4_gen_state *g);
/* 1 when generation ended (v4_gen_end next), 0 while it wants forward steps. */
int v4_gen_done(const v4_gen_state *g);
/* The request's cancel hook (call before every forward step): non-zero = cancelled,
 * err filled (where "cancel"); the caller frees the state. */
int v4_gen_poll_cancel(v4_gen_state *g, v4_error *err);
/* The token to feed next (a prompt token or the last sampled one); *want_logits is 1
 * when v4_gen_accept needs this step's logits (last prompt position and decode). */
int32_t v4_gen_input(const v4_gen_state *g, int *want_logits);
/* The trace to hand v4_step for this request (NULL when routes are not counted). */
v4_trace *v4_gen_trace(v4_gen_state *g);
v4_seq *v4_gen_seq(const v4_gen_state *g);
/* Positions forwarded so far (prompt and decode). */
int v4_gen_forwarded(const v4_gen_state *g);
/* After the forward step of v4_gen_input(): counts the routes, and when logits are
 * given samples the next token and streams it.  0, or -1 (err filled). */
int v4_gen_accept(v4_gen_state *g, const float *logits, v4_error *err);
/* The rows for the next step, at most max_rows (>= 1; at most v4_gen_capacity):
 * the next prompt positions while two or more remain, else the one input of
 * v4_gen_input.  Fills tokens[k], traces[k] (NULL when routes are not counted) and
 * want[k] (whether row k's logits are needed) for k < the returned row count.  The
 * caller feeds them as consecutive rows of one v4_step for this request's sequence. */
int v4_gen_rows(v4_gen_state *g, int max_rows, int32_t *tokens, v4_trace **traces, int *want);
/* v4_gen_accept for row k of the last v4_gen_rows, called for k = 0, 1, ... in order. */
int v4_gen_accept_row(v4_gen_state *g, int k, const float *logits, v4_error *err);
/* One forward step of this request alone in ctx (its rows, at most max_rows and what
 * ctx allows, then accept): logits has room for v4_gen_capacity(g) rows.  0, or -1
 * (err filled). */
int v4_gen_step_alone(v4_gen_state *g, v4_ctx *ctx, int max_rows, float *logits, v4_error *err);
/* Flushes held text and moves the result into res (the state keeps nothing). */
void v4_gen_end(v4_gen_state *g, v4_gen_result *res);
void v4_gen_free(v4_gen_state *g);

#endif
