/* forward.c - one decode step of DeepSeek-V4, top to bottom (spec §5.1-5.2).
 *
 *   X[0..hc) = embed[token]                      hc identical BF16 streams
 *   for each layer:
 *       u = hc_pre(X); a = attention(RMSNorm(u)); X = hc_post(a, X)
 *       u = hc_pre(X); f = moe(RMSNorm(u));       X = hc_post(f, X)
 *   h = RMSNorm(hc_head(X)); logits = head . h   (f32)
 *
 * Each step runs a batch of rows, each a sequence at its own position (a sequence's
 * several rows, a prefill chunk, take consecutive positions: rowpos); every weight is
 * read once per step for the whole batch.  The context follows its CPU backend's ISA
 * in the attention loops too (attn_kern.h; "scalar": the reference loops).
 */
#include <stdlib.h>
#include <string.h>

#include "../cpu/cpu_backend.h"
#include "attn_kern.h"
#include "internal.h"
#include "ops.h"

uint32_t v4_checksum_bf16(const float *x, int n)
{
    uint32_t s = 0;
    for (int i = 0; i < n; i++)
        s += (uint32_t)(i + 1) * (uint32_t)v4_bf16_bits(x[i]);
    return s;
}

uint32_t v4_checksum_f32(const float *x, int n)
{
    uint32_t s = 0;
    for (int i = 0; i < n; i++)
        s += (uint32_t)(i + 1) * v4_f32_bits(x[i]);
    return s;
}

static void scratch_free(v4_scratch *s)
{
    float **f[] = {&s->X, &s->mixes, &s->pre, &s->post, &s->comb, &s->x, &s->out, &s->qa,
                   &s->q, &s->kv, &s->o, &s->z, &s->ckv, &s->csc, &s->iq, &s->iw, &s->ikv,
                   &s->isc, &s->score, &s->gate, &s->gate_next, &s->route_w, &s->ex_x, &s->ex_g, &s->ex_u,
                   &s->ex_h, &s->ex_o, &s->ex_wt, &s->y, &s->hid, &s->sh_g, &s->sh_u, &s->sh_h, &s->sh_o};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        free(*f[i]);
        *f[i] = NULL;
    }
    free(s->sel); free(s->csel); free(s->ncsel); free(s->route); free(s->ex_rows);
    free(s->rowpos); free(s->rowsel); free(s->ex_ids); free(s->ex_slot); free(s->ex_w); free(s->ex_start); free(s->ex_cnt); free(s->jobs);
    free(s->la_ids); free(s->la_mark);
    free((void *)s->cand);
}

static int scratch_alloc(v4_scratch *s, const v4_config *cfg, int B)
{
    const size_t hc = cfg->hc_mult, dim = cfg->dim, H = cfg->n_heads, hd = cfg->head_dim;
    const size_t mix = (2 + hc) * hc, K = cfg->n_act_experts, I = cfg->moe_inter;
    const size_t ih = cfg->index_n_heads, id = cfg->index_head_dim;
    int ok = 1;
#define A(p, n) ok &= ((p) = calloc((size_t)(n) + 1, sizeof *(p))) != NULL
    A(s->X, B * hc * dim); A(s->mixes, B * mix); A(s->pre, B * hc); A(s->post, B * hc);
    A(s->comb, B * hc * hc); A(s->x, B * dim); A(s->out, B * dim); A(s->y, B * dim);
    A(s->hid, B * dim); A(s->qa, B * (size_t)cfg->q_lora_rank); A(s->q, B * H * hd);
    A(s->o, B * H * hd); A(s->kv, B * hd);
    A(s->z, B * (size_t)cfg->o_groups * cfg->o_lora_rank);
    A(s->ckv, B * 2 * hd); A(s->csc, B * 2 * hd); A(s->iq, B * ih * id); A(s->iw, B * ih);
    A(s->ikv, B * 2 * id); A(s->isc, B * 2 * id);
    A(s->gate, B * (size_t)cfg->n_routed_experts); A(s->gate_next, B * (size_t)cfg->n_routed_experts);
    A(s->la_ids, cfg->n_routed_experts); A(s->la_mark, cfg->n_routed_experts);
    A(s->route, B * K); A(s->route_w, B * K);
    A(s->ex_x, B * K * dim); A(s->ex_g, B * K * I); A(s->ex_u, B * K * I);
    A(s->ex_h, B * K * I); A(s->ex_o, B * K * dim); A(s->ex_rows, B * K); A(s->ex_wt, B * K);
    A(s->sel, K + (size_t)cfg->index_topk); A(s->csel, B * (size_t)cfg->index_topk);
    A(s->ncsel, (size_t)B); A(s->rowpos, (size_t)B); A(s->rowsel, (size_t)B);
    A(s->ex_ids, cfg->n_routed_experts); A(s->ex_slot, cfg->n_routed_experts); A(s->ex_w, cfg->n_routed_experts);
    A(s->ex_start, cfg->n_routed_experts); A(s->ex_cnt, cfg->n_routed_experts);
    A(s->jobs, 2 * ((size_t)cfg->n_routed_experts + 1));
    A(s->sh_g, B * I); A(s->sh_u, B * I); A(s->sh_h, B * I); A(s->sh_o, B * dim);
#undef A
    return ok ? 0 : -1;
}

int v4_ctx_reserve(v4_ctx *c, int entries, v4_error *err)
{
    if (entries <= c->s.cap_entries)
        return 0;
    float *score = realloc(c->s.score, sizeof(float) * (size_t)entries);
    if (score)
        c->s.score = score;
    const uint16_t **cand = realloc((void *)c->s.cand, sizeof *cand * ((size_t)entries + c->w->cfg.window));
    if (cand)
        c->s.cand = cand;
    if (!score || !cand)
        return v4_err_set(err, V4_ERR_NOMEM, "v4_ctx_reserve", "out of memory for %d entries", entries);
    c->s.cap_entries = entries;
    return 0;
}

v4_ctx *v4_ctx_create(const v4_weights *w, v4_backend *be, int max_batch, v4_error *err)
{
    if (max_batch < 1) {
        v4_err_set(err, V4_ERR_INVALID, "v4_ctx_create", "max_batch must be >= 1");
        return NULL;
    }
    v4_ctx *c = calloc(1, sizeof *c);
    if (!c || scratch_alloc(&c->s, &w->cfg, max_batch) ||
        !(c->views = calloc((size_t)max_batch, sizeof *c->views))) {
        if (c) {
            scratch_free(&c->s);
            free(c);
        }
        v4_err_set(err, V4_ERR_NOMEM, "v4_ctx_create", "out of memory");
        return NULL;
    }
    c->w = w;
    c->be = be;
    c->max_batch = max_batch;
    c->lookahead = 1;
    c->fault = (v4_step_fault){.row = -1, .retryable = 0};
    c->attn = v4_attn_kern_for_isa(v4_cpu_backend_isa_asked(be));   /* not the CPU backend: auto */
    const v4_config *cfg = &w->cfg;
    v4_rope_freqs(c->freqs_swa, cfg->rope_head_dim, cfg->rope_theta, 1.0, 0, 0, 0);
    v4_rope_freqs(c->freqs_comp, cfg->rope_head_dim, cfg->compress_rope_theta, cfg->rope_factor,
                  cfg->original_seq_len, cfg->beta_fast, cfg->beta_slow);
    return c;
}

void v4_ctx_free(v4_ctx *c)
{
    if (!c)
        return;
    scratch_free(&c->s);
    free(c->views);
    free(c);
}

void v4_ctx_set_step_impl(v4_ctx *c, const v4_step_impl *impl)
{
    if (impl)
        c->impl = *impl;
    else
        memset(&c->impl, 0, sizeof c->impl);
}

int v4_ctx_admit(const v4_ctx *c, const v4_seq *s, size_t *need, size_t *avail)
{
    *need = 0;
    *avail = SIZE_MAX;
    if (!c->impl.admit || c->impl.admit(c->impl.ud, s, s->max_len, need, avail)) {
        *need = 0;
        *avail = SIZE_MAX;
        return 1;
    }
    return 0;
}

void v4_ctx_release_seq(v4_ctx *c, const v4_seq *s)
{
    if (c->impl.release && s)
        c->impl.release(c->impl.ud, s);
}

int v4_ctx_step_fault(const v4_ctx *c, v4_step_fault *f)
{
    *f = c->fault;
    return c->fault.row >= 0 ? 0 : -1;
}

const v4_config *v4_ctx_config(const v4_ctx *c) { return &c->w->cfg; }

int v4_ctx_rows_per_seq(const v4_ctx *c)
{
    if (!c->impl.step)
        return c->max_batch;
    return c->impl.rows_per_seq < 1 ? 1 : c->impl.rows_per_seq < c->max_batch ? c->impl.rows_per_seq : c->max_batch;
}

int v4_ctx_max_rows(const v4_ctx *c) { return c->max_batch; }

int v4_ctx_seq_forkable(const v4_ctx *c) { return !c->impl.step; }

const char *v4_ctx_attn_path(const v4_ctx *c) { return v4_attn_kern_name(c->attn); }

void v4_ctx_set_expert_provider(v4_ctx *c, const v4_expert_provider *p)
{
    if (p)
        c->xp = *p;
    else
        memset(&c->xp, 0, sizeof c->xp);
}

void v4_ctx_set_lookahead(v4_ctx *c, int on) { c->lookahead = on != 0; }

int v4_ctx_lookahead(const v4_ctx *c) { return c->lookahead; }

uint64_t v4_ctx_lookahead_prefetched(const v4_ctx *c) { return c->la_prefetched; }

/* Hash-routed layers: their experts follow from the token ids; tell the provider now so
 * that their loads overlap the layers before them. */
static void prefetch_hash_layers(v4_ctx *c, const int32_t *tokens, int n)
{
    const v4_config *cfg = &c->w->cfg;
    const int K = cfg->n_act_experts;
    if (!c->xp.prefetch)
        return;
    for (int l = 0; l < cfg->n_layers; l++) {
        const int32_t *tab = c->w->layers[l].tid2eid;
        if (!tab)
            continue;
        int m = 0;
        for (int b = 0; b < n; b++)
            for (int k = 0; k < K; k++) {
                int e = tab[(size_t)tokens[b] * K + k], dup = 0;
                for (int i = 0; i < m && !dup; i++)
                    dup = c->s.ex_ids[i] == e;
                if (!dup)
                    c->s.ex_ids[m++] = e;
            }
        c->xp.prefetch(c->xp.ud, l, c->s.ex_ids, m);
    }
}

static int check_inputs(v4_ctx *c, v4_seq *const *seqs, const int32_t *tokens, int n, v4_error *err)
{
    const v4_config *cfg = &c->w->cfg;
    if (n < 1 || n > c->max_batch)
        return v4_err_set(err, V4_ERR_INVALID, "v4_step", "batch of %d sequences (max %d)", n, c->max_batch);
    int need = 0;
    for (int b = 0; b < n; b++) {
        if (tokens[b] < 0 || tokens[b] >= cfg->vocab_size)
            return v4_err_set(err, V4_ERR_RANGE, "v4_step",
                              "token id %d out of range [0, %d) (batch row %d)", tokens[b], cfg->vocab_size, b);
        if (seqs[b]->w != c->w)
            return v4_err_set(err, V4_ERR_INVALID, "v4_step", "sequence %d belongs to another model", b);
        if (seqs[b]->broken)
            return v4_err_set(err, V4_ERR_INVALID, "v4_step",
                              "sequence %d is broken by an earlier failed step (reset it)", b);
        int pos = seqs[b]->pos;
        for (int j = 0; j < b; j++)
            pos += seqs[j] == seqs[b];
        if (c->impl.step && pos - seqs[b]->pos >= v4_ctx_rows_per_seq(c))
            return v4_err_set(err, V4_ERR_INVALID, "v4_step",
                              "sequence %d fills more than %d rows of one batch (row %d; the rows per sequence of "
                              "this step implementation)", b, v4_ctx_rows_per_seq(c), b);
        if (pos >= seqs[b]->max_len)
            return v4_err_set(err, V4_ERR_RANGE, "v4_step",
                              "sequence %d is full (%d positions)", b, seqs[b]->max_len);
        c->s.rowpos[b] = pos;
        if (seqs[b]->max_len > need)
            need = seqs[b]->max_len;
    }
    return v4_ctx_reserve(c, need, err);
}

static void trace_streams(v4_ctx *c, int layer, int sub, int n, v4_trace *const *tr)
{
    const v4_config *cfg = &c->w->cfg;
    const int hd = cfg->hc_mult * cfg->dim;
    for (int b = 0; b < n && tr; b++) {
        v4_trace *t = tr[b];
        if (!t)
            continue;
        const float *X = c->s.X + (size_t)b * hd;
        if (t->checksum)
            t->checksum[layer * 2 + sub] = v4_checksum_bf16(X, hd);
        if (t->streams)
            memcpy(t->streams + ((size_t)layer * 2 + sub) * hd, X, sizeof(float) * hd);
        if (t->sub_out)
            memcpy(t->sub_out + ((size_t)layer * 2 + sub) * cfg->dim, c->s.out + (size_t)b * cfg->dim,
                   sizeof(float) * cfg->dim);
        if (t->force && (!t->force_sel || t->force_sel[layer * 2 + sub]))
            memcpy(c->s.X + (size_t)b * hd, t->force + ((size_t)layer * 2 + sub) * hd, sizeof(float) * hd);
    }
}

static void norm_rows(v4_ctx *c, const float *w, int n)
{
    const v4_config *cfg = &c->w->cfg;
    for (int b = 0; b < n; b++)
        v4_rmsnorm(c->s.x + (size_t)b * cfg->dim, w, cfg->dim, cfg->norm_eps, c->s.x + (size_t)b * cfg->dim);
}

/* The LM head for the rows with want[b] (all when want is NULL): the wanted rows'
 * inputs are packed (hid), their logits computed into the first rows of logits and
 * moved to their own rows, last first (row j goes to b_j >= j, never over a row
 * still to move).  One pass over the head's weights for all wanted rows. */
static void head_rows(v4_ctx *c, int n, const int *want, float *logits)
{
    const v4_config *cfg = &c->w->cfg;
    const int dim = cfg->dim, V = cfg->vocab_size;
    if (!want) {
        v4_linear(c->be, &c->w->head, V4_LIN_BF16, n, c->s.x, dim, logits, V);
        return;
    }
    int m = 0;
    for (int b = 0; b < n; b++)
        if (want[b]) {
            c->s.rowsel[m] = b;
            memcpy(c->s.hid + (size_t)m++ * dim, c->s.x + (size_t)b * dim, sizeof(float) * dim);
        }
    if (!m)
        return;
    v4_linear(c->be, &c->w->head, V4_LIN_BF16, m, c->s.hid, dim, logits, V);
    for (int j = m - 1; j >= 0; j--)
        if (c->s.rowsel[j] != j)
            memmove(logits + (size_t)c->s.rowsel[j] * V, logits + (size_t)j * V, sizeof(float) * V);
}

/* Whether a step implementation's fault names the first row of a sequence at position
 * 0, or of any sequence for a stall (anything else is taken as a failure of the whole
 * step). */
static int fault_of_new_seq(v4_seq *const *seqs, int n, const v4_step_fault *f)
{
    if (f->row < 0 || f->row >= n || (seqs[f->row]->pos != 0 && !(f->stall && f->retryable)))
        return 0;
    for (int b = 0; b < f->row; b++)
        if (seqs[b] == seqs[f->row])
            return 0;
    return 1;
}

int v4_step(v4_ctx *c, v4_seq *const *seqs, const int32_t *tokens, int n,
            float *logits, v4_trace *const *tr, v4_error *err)
{
    return v4_step_rows(c, seqs, tokens, n, logits, NULL, tr, err);
}

int v4_step_rows(v4_ctx *c, v4_seq *const *seqs, const int32_t *tokens, int n, float *logits, const int *want,
                 v4_trace *const *tr, v4_error *err)
{
    c->fault = (v4_step_fault){.row = -1, .retryable = 0};
    if (check_inputs(c, seqs, tokens, n, err))
        return -1;
    if (c->impl.step) {
        for (int b = 0; b < n; b++)
            c->views[b] = (v4_seq_view){seqs[b], c->s.rowpos[b], seqs[b]->max_len};
        v4_step_fault f = {.row = -1, .retryable = 0};
        if (c->impl.step(c->impl.ud, c->views, tokens, n, logits, want, tr, &f, err)) {
            if (fault_of_new_seq(seqs, n, &f)) {   /* nothing ran: no sequence is broken */
                c->fault = (v4_step_fault){
                    .row = f.row, .retryable = f.retryable != 0, .stall = f.stall != 0 && f.retryable != 0};
                return -1;
            }
            for (int b = 0; b < n; b++)
                seqs[b]->broken = 1;
            return -1;
        }
        for (int b = 0; b < n; b++)
            seqs[b]->pos++;
        return 0;
    }
    const v4_weights *w = c->w;
    const v4_config *cfg = &w->cfg;
    const int hc = cfg->hc_mult, dim = cfg->dim;

    prefetch_hash_layers(c, tokens, n);
    for (int b = 0; b < n; b++) {
        const uint16_t *row = (const uint16_t *)w->embed.w + (size_t)tokens[b] * dim;
        for (int j = 0; j < hc; j++)
            for (int i = 0; i < dim; i++)
                c->s.X[((size_t)b * hc + j) * dim + i] = v4_bf16_from_bits(row[i]);
    }
    for (int l = 0; l < cfg->n_layers; l++) {
        const v4_layer_w *lw = &w->layers[l];
        v4_hc_pre(c, &lw->hc_attn_fn, lw->hc_attn_scale, lw->hc_attn_base, n);
        norm_rows(c, lw->attn_norm, n);
        v4_attention(c, l, seqs, n, tr);
        v4_hc_post(c, n);
        trace_streams(c, l, 0, n, tr);

        v4_hc_pre(c, &lw->hc_ffn_fn, lw->hc_ffn_scale, lw->hc_ffn_base, n);
        norm_rows(c, lw->ffn_norm, n);
        if (v4_moe(c, l, tokens, n, tr, err)) {
            for (int b = 0; b < n; b++)
                seqs[b]->broken = 1;
            return -1;
        }
        v4_hc_post(c, n);
        trace_streams(c, l, 1, n, tr);
    }
    v4_hc_head(c, n);
    norm_rows(c, w->norm, n);
    if (logits)
        head_rows(c, n, want, logits);
    for (int b = 0; b < n; b++) {
        if (tr && tr[b] && tr[b]->hidden)
            memcpy(tr[b]->hidden, c->s.x + (size_t)b * dim, sizeof(float) * dim);
        seqs[b]->pos++;
    }
    return 0;
}
