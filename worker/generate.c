/* generate.c - see generate.h. */
#include <stdlib.h>
#include <time.h>

#include "generate.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void v4_gen_result_free(v4_gen_result *res)
{
    free(res->tokens);
    res->tokens = NULL;
    res->n_tokens = 0;
}

/* One forward step of seq; adds its routing to req->expert_counts when asked. */
typedef struct step_obs {
    v4_trace tr;
    v4_trace *ptr;
    const v4_config *cfg;
    uint32_t *counts;
} step_obs;

static int step(v4_ctx *ctx, v4_seq *seq, int32_t token, float *logits, step_obs *o, v4_error *err)
{
    if (v4_step(ctx, &seq, &token, 1, logits, o->counts ? &o->ptr : NULL, err))
        return -1;
    if (o->counts) {
        const int K = o->cfg->n_act_experts, E = o->cfg->n_routed_experts;
        for (int l = 0; l < o->cfg->n_layers; l++)
            for (int k = 0; k < K; k++) {
                int32_t id = o->tr.route_ids[l * K + k];
                if (id >= 0 && id < E)
                    o->counts[(size_t)l * E + id]++;
            }
    }
    return 0;
}

int v4_generate(v4_ctx *ctx, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                v4_emit_fn emit, void *ud, v4_gen_result *res, v4_error *err)
{
    const v4_config *cfg = v4_ctx_config(ctx);
    int rc = -1;
    float *logits = malloc(sizeof(float) * (size_t)cfg->vocab_size);
    res->tokens = malloc(sizeof(int32_t) * ((size_t)req->max_tokens + 1));
    res->n_tokens = 0;
    res->finish_reason = "length";
    res->prefill_s = res->decode_s = 0;
    v4_sampler *smp = NULL;
    v4_stop *stop = NULL;
    v4_tok_stream *ts = NULL;
    step_obs obs = {.cfg = cfg, .counts = req->expert_counts};
    obs.ptr = &obs.tr;
    if (obs.counts) {   /* the trace's route ids and weights come together */
        obs.tr.route_ids = malloc(sizeof(int32_t) * (size_t)cfg->n_layers * (size_t)cfg->n_act_experts);
        obs.tr.route_w = malloc(sizeof(float) * (size_t)cfg->n_layers * (size_t)cfg->n_act_experts);
    }
    if (!logits || !res->tokens || (obs.counts && (!obs.tr.route_ids || !obs.tr.route_w))) {
        v4_err_set(err, V4_ERR_NOMEM, "generate", "out of memory");
        goto done;
    }
    if (req->n_prompt < 1) {
        v4_err_set(err, V4_ERR_INVALID, "prompt", "the prompt has no tokens");
        goto done;
    }
    if (v4_seq_pos(seq) != 0 || req->n_prompt + req->max_tokens > v4_seq_capacity(seq)) {
        v4_err_set(err, V4_ERR_RANGE, "prompt", "prompt (%d tokens) + max_tokens (%d) exceed the context of %d",
                   req->n_prompt, req->max_tokens, v4_seq_capacity(seq));
        goto done;
    }
    if (!(smp = v4_sampler_create(cfg->vocab_size, &req->sampling, err)))
        goto done;
    if (tok && (!(stop = v4_stop_create(req->stops, req->n_stops, err)) ||
                !(ts = v4_tok_stream_new(tok, V4_TOK_SKIP_SPECIAL, err))))
        goto done;

    double t0 = now_s();
    for (int p = 0; p < req->n_prompt; p++) {
        if (req->cancel && req->cancel(req->cancel_ud)) {
            v4_err_set(err, V4_ERR_INVALID, "cancel", "generation cancelled during the prompt");
            goto done;
        }
        if (step(ctx, seq, req->prompt[p], p + 1 == req->n_prompt ? logits : NULL, &obs, err))
            goto done;
    }
    double t1 = now_s();
    res->prefill_s = t1 - t0;
    int stopped = 0;
    while (res->n_tokens < req->max_tokens && !stopped) {
        int32_t next = v4_sample(smp, logits);
        res->tokens[res->n_tokens++] = next;
        if (next == req->eos_id) {
            res->finish_reason = "stop";
            break;
        }
        if (ts) {
            const char *text;
            size_t len;
            if (v4_tok_stream_feed(ts, next, &text, &len, err))
                goto done;
            int r = v4_stop_feed(stop, text, len, emit, ud);
            if (r < 0) {
                v4_err_set(err, V4_ERR_NOMEM, "generate", "out of memory");
                goto done;
            }
            if (r) {
                res->finish_reason = "stop";
                stopped = 1;
                break;
            }
        }
        if (res->n_tokens < req->max_tokens && req->cancel && req->cancel(req->cancel_ud)) {
            v4_err_set(err, V4_ERR_INVALID, "cancel", "generation cancelled after %d tokens", res->n_tokens);
            goto done;
        }
        if (res->n_tokens < req->max_tokens && step(ctx, seq, next, logits, &obs, err))
            goto done;
    }
    if (ts && !stopped) {
        const char *text;
        size_t len;
        v4_tok_stream_flush(ts, &text, &len);
        if (v4_stop_feed(stop, text, len, emit, ud) == 1)
            res->finish_reason = "stop";
        else
            v4_stop_flush(stop, emit, ud);
    }
    res->decode_s = now_s() - t1;
    rc = 0;
done:
    free(obs.tr.route_ids);
    free(obs.tr.route_w);
    free(logits);
    v4_sampler_free(smp);
    v4_stop_free(stop);
    v4_tok_stream_free(ts);
    if (rc)
        v4_gen_result_free(res);
    return rc;
}
