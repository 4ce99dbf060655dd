/* generate.c - see generate.h.  The request's whole logic lives in the state machine
 * (v4_gen_*); v4_generate is its one-sequence driver.
 * Thread: the caller's thread. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "constrain.h"
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
    free(res->lp.logprob);
    free(res->lp.top_id);
    free(res->lp.top_lp);
    free(res->lp.top_n);
    memset(&res->lp, 0, sizeof res->lp);
}

/* One position's log probabilities onto lp (grown by doubling).  0, or -1 (no memory). */
static int lp_push(v4_gen_logprobs *lp, const v4_sample_lp *one)
{
    if (lp->n == lp->cap) {
        const size_t cap = lp->cap ? (size_t)lp->cap * 2 : 64, w = (size_t)(lp->stride > 0 ? lp->stride : 1);
        double *a = realloc(lp->logprob, sizeof *a * cap);
        if (a)
            lp->logprob = a;
        int32_t *b = a ? realloc(lp->top_id, sizeof *b * cap * w) : NULL;
        if (b)
            lp->top_id = b;
        double *c = b ? realloc(lp->top_lp, sizeof *c * cap * w) : NULL;
        if (c)
            lp->top_lp = c;
        unsigned char *d = c ? realloc(lp->top_n, cap) : NULL;
        if (!d)
            return -1;
        lp->top_n = d;
        lp->cap = (int)cap;
    }
    const size_t at = (size_t)lp->n * (size_t)lp->stride;
    lp->logprob[lp->n] = one->logprob;
    lp->top_n[lp->n] = (unsigned char)one->n_top;
    for (int i = 0; i < one->n_top && i < lp->stride; i++) {
        lp->top_id[at + (size_t)i] = one->top[i].id;
        lp->top_lp[at + (size_t)i] = one->top[i].logprob;
    }
    lp->n++;
    return 0;
}

struct v4_gen_state {
    const v4_config *cfg;
    const v4_gen_request *req;
    v4_seq *seq;
    v4_emit_fn emit;
    void *ud;
    v4_sampler *smp;
    v4_stop *stop;
    v4_tok_stream *ts;
    v4_constrain *cons;         /* borrowed: the output constraint (NULL: free text) */
    int cap;                    /* most rows of one step (the prefill chunk) */
    v4_trace *tr;               /* [cap] per row of a step: route ids / weights when counting */
    int32_t *s_tok;             /* [cap] v4_gen_step_alone's rows */
    v4_trace **s_tr;
    v4_seq **s_seq;
    int *s_want;
    int fed;                    /* positions forwarded (prompt then decode) */
    int32_t next;               /* the last sampled token (decode input) */
    int done, stopped;          /* stopped: by a stop string (no flush) */
    double t0, t1;
    v4_gen_result res;
};

void v4_gen_free(v4_gen_state *g)
{
    if (!g)
        return;
    for (int k = 0; g->tr && k < g->cap; k++) {
        free(g->tr[k].route_ids);
        free(g->tr[k].route_w);
    }
    free(g->tr);
    free(g->s_tok);
    free(g->s_tr);
    free(g->s_seq);
    free(g->s_want);
    v4_sampler_free(g->smp);
    v4_stop_free(g->stop);
    v4_tok_stream_free(g->ts);
    v4_gen_result_free(&g->res);
    free(g);
}

/* v4_gen_begin on a sequence at position `at` (0, or the prompt's end for a fork). */
static v4_gen_state *begin_at(const v4_config *cfg, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                              v4_emit_fn emit, void *ud, int at, v4_error *err)
{
    v4_gen_state *g = calloc(1, sizeof *g);
    if (!g) {
        v4_err_set(err, V4_ERR_NOMEM, "generate", "out of memory");
        return NULL;
    }
    g->cfg = cfg;
    g->req = req;
    g->seq = seq;
    g->emit = emit;
    g->ud = ud;
    g->res.finish_reason = "length";
    g->res.tokens = malloc(sizeof(int32_t) * ((size_t)(req->max_tokens > 0 ? req->max_tokens : 0) + 1));
    g->cap = req->max_rows <= 0 ? V4_GEN_CHUNK : req->max_rows < V4_GEN_CHUNK_MAX ? req->max_rows : V4_GEN_CHUNK_MAX;
    g->tr = calloc((size_t)g->cap, sizeof *g->tr);
    g->s_tok = malloc(sizeof *g->s_tok * (size_t)g->cap);
    g->s_tr = malloc(sizeof *g->s_tr * (size_t)g->cap);
    g->s_seq = malloc(sizeof *g->s_seq * (size_t)g->cap);
    g->s_want = malloc(sizeof *g->s_want * (size_t)g->cap);
    int traces_ok = g->tr && g->s_tok && g->s_tr && g->s_seq && g->s_want;
    for (int k = 0; traces_ok && k < g->cap && req->expert_counts; k++) {   /* route ids and weights come together */
        g->tr[k].route_ids = malloc(sizeof(int32_t) * (size_t)cfg->n_layers * (size_t)cfg->n_act_experts);
        g->tr[k].route_w = malloc(sizeof(float) * (size_t)cfg->n_layers * (size_t)cfg->n_act_experts);
        traces_ok &= g->tr[k].route_ids && g->tr[k].route_w;
    }
    if (!g->res.tokens || !traces_ok) {
        v4_err_set(err, V4_ERR_NOMEM, "generate", "out of memory");
        goto fail;
    }
    if (req->n_prompt < 1) {
        v4_err_set(err, V4_ERR_INVALID, "prompt", "the prompt has no tokens");
        goto fail;
    }
    if (v4_seq_pos(seq) != at || req->n_prompt + req->max_tokens > v4_seq_capacity(seq)) {
        v4_err_set(err, V4_ERR_RANGE, "prompt", "prompt (%d tokens) + max_tokens (%d) exceed the context of %d",
                   req->n_prompt, req->max_tokens, v4_seq_capacity(seq));
        goto fail;
    }
    if (!(g->smp = v4_sampler_create(cfg->vocab_size, &req->sampling, err)) ||
        v4_sampler_prompt(g->smp, req->prompt, req->n_prompt, err))
        goto fail;
    g->res.lp.stride = req->sampling.logprobs ? req->sampling.top_logprobs : 0;
    if (tok && (!(g->stop = v4_stop_create(req->stops, req->n_stops, err)) ||
                !(g->ts = v4_tok_stream_new(tok, V4_TOK_SKIP_SPECIAL, err))))
        goto fail;
    g->t0 = now_s();
    return g;
fail:
    v4_gen_free(g);
    return NULL;
}

v4_gen_state *v4_gen_begin(const v4_config *cfg, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                           v4_emit_fn emit, void *ud, v4_error *err)
{
    return begin_at(cfg, seq, tok, req, emit, ud, 0, err);
}

v4_gen_state *v4_gen_begin_at(const v4_config *cfg, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                              int at, v4_emit_fn emit, void *ud, v4_error *err)
{
    if (at < 0 || at >= req->n_prompt) {
        v4_err_set(err, V4_ERR_INVALID, "prompt", "a generation may resume inside its prompt only (position %d of %d)",
                   at, req->n_prompt);
        return NULL;
    }
    v4_gen_state *g = begin_at(cfg, seq, tok, req, emit, ud, at, err);
    if (g)
        g->fed = at;
    return g;
}

v4_gen_state *v4_gen_begin_forked(const v4_config *cfg, v4_seq *seq, const v4_tokenizer *tok,
                                  const v4_gen_request *req, struct v4_constrain *cons, const float *logits,
                                  v4_emit_fn emit, void *ud, v4_error *err)
{
    v4_gen_state *g = begin_at(cfg, seq, tok, req, emit, ud, req->n_prompt, err);
    if (!g)
        return NULL;
    g->cons = cons;
    g->fed = req->n_prompt - 1;   /* the prompt's last row is the fork's: accept it */
    if (req->expert_counts)        /* its routes were counted by the original (ids -1: none) */
        memset(g->tr[0].route_ids, 0xFF, sizeof(int32_t) * (size_t)cfg->n_layers * (size_t)cfg->n_act_experts);
    if (v4_gen_accept_row(g, 0, logits, err)) {
        v4_gen_free(g);
        return NULL;
    }
    return g;
}

void v4_gen_set_constraint(v4_gen_state *g, v4_constrain *c)
{
    g->cons = c;
}

v4_constrain *v4_gen_constraint(const v4_gen_state *g)
{
    return g->cons;
}

int v4_gen_capacity(const v4_gen_state *g)
{
    return g->cap;
}

int v4_gen_done(const v4_gen_state *g)
{
    return g->done;
}

int v4_gen_poll_cancel(v4_gen_state *g, v4_error *err)
{
    if (!g->req->cancel || !g->req->cancel(g->req->cancel_ud))
        return 0;
    if (g->fed < g->req->n_prompt)
        v4_err_set(err, V4_ERR_INVALID, "cancel", "generation cancelled during the prompt");
    else
        v4_err_set(err, V4_ERR_INVALID, "cancel", "generation cancelled after %d tokens", g->res.n_tokens);
    return 1;
}

int32_t v4_gen_input(const v4_gen_state *g, int *want_logits)
{
    const int np = g->req->n_prompt;
    if (want_logits)
        *want_logits = g->fed + 1 >= np;
    return g->fed < np ? g->req->prompt[g->fed] : g->next;
}

v4_trace *v4_gen_trace(v4_gen_state *g)
{
    return g->req->expert_counts ? &g->tr[0] : NULL;
}

int v4_gen_rows(v4_gen_state *g, int max_rows, int32_t *tokens, v4_trace **traces, int *want)
{
    const int np = g->req->n_prompt, left = np - g->fed, B = g->req->snap_block;
    int rows = left >= 2 ? left : 1;
    if (rows > max_rows)
        rows = max_rows;
    if (B > 0 && left >= 2) {   /* a chunk ends at the next block end inside the prompt */
        const int end = (g->fed / B + 1) * B;
        if (end <= np && rows > end - g->fed)
            rows = end - g->fed;
    }
    if (rows > g->cap)
        rows = g->cap;
    if (rows < 1)
        rows = 1;
    for (int k = 0; k < rows; k++) {
        const int p = g->fed + k;
        tokens[k] = p < np ? g->req->prompt[p] : g->next;
        traces[k] = g->req->expert_counts ? &g->tr[k] : NULL;
        want[k] = p + 1 >= np;
    }
    return rows;
}

v4_seq *v4_gen_seq(const v4_gen_state *g)
{
    return g->seq;
}

int v4_gen_forwarded(const v4_gen_state *g)
{
    return g->fed;
}

/* Add the routing of row k of the last step to the request's counters. */
static void count_routes(v4_gen_state *g, int k)
{
    uint32_t *counts = g->req->expert_counts;
    if (!counts)
        return;
    const int K = g->cfg->n_act_experts, E = g->cfg->n_routed_experts;
    for (int l = 0; l < g->cfg->n_layers; l++)
        for (int i = 0; i < K; i++) {
            int32_t id = g->tr[k].route_ids[l * K + i];
            if (id >= 0 && id < E)
                counts[(size_t)l * E + id]++;
        }
}

int v4_gen_accept(v4_gen_state *g, const float *logits, v4_error *err)
{
    return v4_gen_accept_row(g, 0, logits, err);
}

int v4_gen_accept_row(v4_gen_state *g, int k, const float *logits, v4_error *err)
{
    const v4_gen_request *req = g->req;
    count_routes(g, k);
    g->fed++;
    if (req->on_block && req->snap_block > 0 && g->fed <= req->n_prompt && g->fed % req->snap_block == 0 &&
        v4_seq_pos(g->seq) == g->fed)
        req->on_block(req->block_ud, g->seq, g->fed);
    if (g->fed < req->n_prompt)
        return 0;
    if (g->fed == req->n_prompt)
        g->t1 = now_s();
    if (g->res.n_tokens >= req->max_tokens) {   /* max_tokens 0: the prompt only */
        g->done = 1;
        return 0;
    }
    if (!logits) {
        v4_err_set(err, V4_ERR_INVALID, "generate", "no logits for position %d", g->fed - 1);
        return -1;
    }
    /* The constraint's mask (disallowed tokens -inf) goes on the row's logits here, after
     * the forward step produced them and BEFORE temperature / top-k / top-p; the sampled
     * token is committed to the matcher (EOS is sampled only where the answer is complete). */
    const float *l = logits;
    if (g->cons && !(l = v4_constrain_apply(g->cons, logits, err)))
        return -1;
    v4_sample_lp one, *lp = req->sampling.logprobs ? &one : NULL;
    int32_t next = v4_sample_ex(g->smp, l, lp);
    if (next < 0 || (lp && lp_push(&g->res.lp, lp))) {
        v4_err_set(err, V4_ERR_NOMEM, "generate", "out of memory");
        return -1;
    }
    if (g->cons && v4_constrain_commit(g->cons, next, err))
        return -1;
    g->res.tokens[g->res.n_tokens++] = next;
    if (req->generated)
        ++*req->generated;
    g->next = next;
    if (next == req->eos_id) {
        g->res.finish_reason = "stop";
        g->done = 1;
        return 0;
    }
    if (g->ts) {
        const char *text;
        size_t len;
        if (v4_tok_stream_feed(g->ts, next, &text, &len, err))
            return -1;
        int r = v4_stop_feed(g->stop, text, len, g->emit, g->ud);
        if (r < 0) {
            v4_err_set(err, V4_ERR_NOMEM, "generate", "out of memory");
            return -1;
        }
        if (r) {
            g->res.finish_reason = "stop";
            g->stopped = g->done = 1;
            return 0;
        }
    }
    if (g->res.n_tokens >= req->max_tokens)
        g->done = 1;
    return 0;
}

void v4_gen_end(v4_gen_state *g, v4_gen_result *res)
{
    if (g->ts && !g->stopped) {
        const char *text;
        size_t len;
        v4_tok_stream_flush(g->ts, &text, &len);
        if (v4_stop_feed(g->stop, text, len, g->emit, g->ud) == 1)
            g->res.finish_reason = "stop";
        else
            v4_stop_flush(g->stop, g->emit, g->ud);
    }
    double t2 = now_s();
    if (!g->t1)
        g->t1 = t2;
    g->res.prefill_s = g->t1 - g->t0;
    g->res.decode_s = t2 - g->t1;
    g->res.unknown_ids = g->ts ? (int)v4_tok_stream_unknown(g->ts) : 0;
    *res = g->res;
    g->res.tokens = NULL;
    g->res.n_tokens = 0;
    memset(&g->res.lp, 0, sizeof g->res.lp);
}

int v4_gen_step_alone(v4_gen_state *g, v4_ctx *ctx, int max_rows, float *logits, v4_error *err)
{
    int32_t *tokens = g->s_tok;
    v4_trace **traces = g->s_tr;
    v4_seq **seqs = g->s_seq;
    int *want = g->s_want, any = 0;
    const int lim = v4_ctx_rows_per_seq(ctx) < max_rows ? v4_ctx_rows_per_seq(ctx) : max_rows;
    const int rows = v4_gen_rows(g, lim, tokens, traces, want);
    for (int k = 0; k < rows; k++) {
        seqs[k] = g->seq;
        any |= want[k];
    }
    const int V = g->cfg->vocab_size;
    if (v4_step_rows(ctx, seqs, tokens, rows, any ? logits : NULL, want, g->req->expert_counts ? traces : NULL, err))
        return -1;
    for (int k = 0; k < rows; k++)
        if (v4_gen_accept_row(g, k, want[k] ? logits + (size_t)k * V : NULL, err))
            return -1;
    return 0;
}

int v4_generate(v4_ctx *ctx, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                v4_emit_fn emit, void *ud, v4_gen_result *res, v4_error *err)
{
    return v4_generate_under(ctx, seq, tok, req, NULL, emit, ud, res, err);
}

int v4_generate_under(v4_ctx *ctx, v4_seq *seq, const v4_tokenizer *tok, const v4_gen_request *req,
                      struct v4_constrain *cons, v4_emit_fn emit, void *ud, v4_gen_result *res, v4_error *err)
{
    const v4_config *cfg = v4_ctx_config(ctx);
    res->tokens = NULL;
    res->n_tokens = 0;
    memset(&res->lp, 0, sizeof res->lp);
    res->finish_reason = "length";
    res->prefill_s = res->decode_s = 0;
    res->unknown_ids = 0;
    v4_gen_state *g = v4_gen_begin(cfg, seq, tok, req, emit, ud, err);
    float *logits = g ? malloc(sizeof(float) * (size_t)cfg->vocab_size * (size_t)g->cap) : NULL;
    if (g && !logits) {
        v4_err_set(err, V4_ERR_NOMEM, "generate", "out of memory");
        v4_gen_free(g);
        return -1;
    }
    int rc = g ? 0 : -1;
    if (g && cons)
        v4_gen_set_constraint(g, cons);
    const int max_rows = g ? g->cap : 1;
    while (g && !v4_gen_done(g))
        if (v4_gen_poll_cancel(g, err) || v4_gen_step_alone(g, ctx, max_rows, logits, err)) {
            rc = -1;
            break;
        }
    if (!rc)
        v4_gen_end(g, res);
    v4_gen_free(g);
    free(logits);
    return rc;
}
