/* moe.c - the mixture-of-experts sub-layer (spec §5.6).
 *
 * Router: z = gate . x in f32, s = sqrt(softplus(z)).  Hash layers take the experts
 * from tid2eid[token]; the others the top-k of s + bias (the bias only selects).
 * Weights = s[sel] / sum(s[sel]) * routed_scaling_factor.
 * Expert e: g = w1 x, u = w3 x (BF16), u clamped to +-limit and g to <= limit,
 * h = silu(g) * u * weight, out = w2 bf16(h).  The sub-layer output is the f32 sum of
 * the routed experts in ascending expert id, then the shared expert, rounded to BF16.
 *
 * Batching: each expert's weights are read once per step for all sequences routed to
 * it (gathered rows), and all experts of the layer go to the backend as one list per
 * phase (v4_linear_many: w1/w3 of every expert, then w2 of every expert), so the CPU
 * backend runs a layer's experts in two parallel sections.  The ascending-id order
 * per sequence is kept because rows are gathered in ascending expert id.
 */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "ops.h"

float v4_sqrt_softplus(float z)
{
    float sp = z > 20.0f ? z : (float)log1p(exp((double)z));
    return (float)sqrt((double)sp);
}

void v4_moe_route(float *z, int E, int K, const float *bias, const int32_t *hash_row, float route_scale, int *sel,
                  float *wt)
{
    float biased[1024];
    for (int e = 0; e < E; e++)
        z[e] = v4_sqrt_softplus(z[e]);         /* z now holds the scores s */
    if (hash_row) {
        for (int k = 0; k < K; k++)
            sel[k] = hash_row[k];
    } else {
        for (int e = 0; e < E; e++)
            biased[e] = z[e] + bias[e];
        v4_topk(biased, E, K, sel);
    }
    double sum = 0.0;
    for (int k = 0; k < K; k++)
        sum += z[sel[k]];
    float fs = (float)sum;
    for (int k = 0; k < K; k++)
        wt[k] = (z[sel[k]] / fs) * route_scale;
}

/* The relative gap between the k-th selected biased score and the best unselected one
 * (v4_trace.route_gap); s holds the scores, sel the K selected ids. */
static float route_gap(const float *s, const float *bias, int E, int K, const int *sel)
{
    float kth = INFINITY, next = -INFINITY;
    for (int k = 0; k < K; k++)
        kth = fminf(kth, s[sel[k]] + bias[sel[k]]);
    for (int e = 0; e < E; e++) {
        int in = 0;
        for (int k = 0; k < K && !in; k++)
            in = sel[k] == e;
        if (!in)
            next = fmaxf(next, s[e] + bias[e]);
    }
    if (next == -INFINITY)
        return INFINITY;       /* every expert is selected */
    return (float)(((double)kth - next) / fmax(fabs((double)kth), 1e-30));
}

static void route(v4_ctx *c, int layer, int b, int32_t token, v4_trace *t)
{
    const v4_config *cfg = &c->w->cfg;
    const v4_layer_w *lw = &c->w->layers[layer];
    const int E = cfg->n_routed_experts, K = cfg->n_act_experts;
    int *sel = c->s.route + (size_t)b * K;
    float *wt = c->s.route_w + (size_t)b * K;
    v4_moe_route(c->s.gate + (size_t)b * E, E, K, lw->gate_bias, lw->tid2eid ? lw->tid2eid + (size_t)token * K : NULL,
                 cfg->route_scale, sel, wt);
    if (t && t->route_ids)
        for (int k = 0; k < K; k++) {
            t->route_ids[layer * K + k] = sel[k];
            t->route_w[layer * K + k] = wt[k];
        }
    if (t && t->route_gap)
        t->route_gap[layer] = lw->tid2eid ? -1.0f : route_gap(c->s.gate + (size_t)b * E, lw->gate_bias, E, K, sel);
}

void v4_swiglu(const float *g, const float *u, int I, float lim, const float *wt, float *h)
{
    for (int i = 0; i < I; i++) {
        float gi = g[i], ui = u[i];
        if (lim > 0.0f) {
            if (ui > lim) ui = lim;
            if (ui < -lim) ui = -lim;
            if (gi > lim) gi = lim;
        }
        float v = v4_siluf(gi) * ui;
        if (wt)
            v = wt[0] * v;
        h[i] = v4_bf16(v);
    }
}

/* Appends the w1 and w3 products of one expert (m rows of x -> g, u) to jobs. */
static int up_jobs(v4_lin_job *jobs, int nj, const v4_expert_w *ex, int m, const float *x, int dim, float *g,
                   float *u, int I)
{
    jobs[nj++] = (v4_lin_job){&ex->w1, V4_LIN_QUANT, m, x, dim, g, I};
    jobs[nj++] = (v4_lin_job){&ex->w3, V4_LIN_QUANT, m, x, dim, u, I};
    return nj;
}

/* The experts of this layer's batch: the weights' own, or the provider's (acquired for
 * the distinct ids used, ascending; ex_slot maps an id to its acquired matrices). */
static int acquire_experts(v4_ctx *c, int layer, int n, v4_error *err)
{
    const v4_config *cfg = &c->w->cfg;
    v4_scratch *S = &c->s;
    const int E = cfg->n_routed_experts, K = cfg->n_act_experts;
    for (int e = 0; e < E; e++)
        S->ex_slot[e] = -1;
    for (int i = 0; i < n * K; i++)
        S->ex_slot[S->route[i]] = 0;
    int m = 0;
    for (int e = 0; e < E; e++)
        if (!S->ex_slot[e]) {
            S->ex_slot[e] = m;
            S->ex_ids[m++] = e;
        }
    S->n_ex = m;
    return c->xp.acquire(c->xp.ud, layer, S->ex_ids, m, S->ex_w, err);
}

/* The router look-ahead (model.h: v4_ctx_set_lookahead): layer + 1's router on this
 * layer's input x, each row's selection by v4_moe_route (the router's own rule, its
 * weights unused), the union ascending.  Returns the number of ids in S->la_ids; 0 when it does not apply
 * (off, no prefetch, last layer, next layer hash-routed). */
static int lookahead(v4_ctx *c, int layer, int n)
{
    const v4_config *cfg = &c->w->cfg;
    v4_scratch *S = &c->s;
    const int E = cfg->n_routed_experts, K = cfg->n_act_experts;
    if (!c->lookahead || !c->xp.prefetch || layer + 1 >= cfg->n_layers || c->w->layers[layer + 1].tid2eid)
        return 0;
    const v4_layer_w *nw = &c->w->layers[layer + 1];
    v4_linear(c->be, &nw->gate, V4_LIN_EXACT, n, S->x, cfg->dim, S->gate_next, E);
    memset(S->la_mark, 0, sizeof(int) * (size_t)E);
    int sel[1024];
    float wt[1024];
    for (int b = 0; b < n; b++) {
        v4_moe_route(S->gate_next + (size_t)b * E, E, K, nw->gate_bias, NULL, cfg->route_scale, sel, wt);
        for (int k = 0; k < K; k++)
            S->la_mark[sel[k]] = 1;
    }
    int m = 0;
    for (int e = 0; e < E; e++)
        if (S->la_mark[e])
            S->la_ids[m++] = e;
    return m;
}

/* Every expert of the layer (routed ones on their gathered rows, and the shared one
 * on all rows) in two backend calls: w1 and w3 of all, SwiGLU, then w2 of all.  Rows
 * are gathered per expert in ascending id, batch order within; the sums into y keep
 * that order, so each sequence adds its experts in ascending id as the rule says. */
int v4_moe(v4_ctx *c, int layer, const int32_t *tokens, int n, v4_trace *const *tr, v4_error *err)
{
    const v4_config *cfg = &c->w->cfg;
    const v4_layer_w *lw = &c->w->layers[layer];
    v4_scratch *S = &c->s;
    const int dim = cfg->dim, E = cfg->n_routed_experts, K = cfg->n_act_experts, I = cfg->moe_inter;
    const float lim = cfg->swiglu_limit;

    v4_linear(c->be, &lw->gate, V4_LIN_EXACT, n, S->x, dim, S->gate, E);
    for (int b = 0; b < n; b++)
        route(c, layer, b, tokens[b], tr ? tr[b] : NULL);
    const int provided = c->xp.acquire != NULL;
    if (provided && acquire_experts(c, layer, n, err))
        return -1;
    const int nla = provided ? lookahead(c, layer, n) : 0;
    if (nla) {   /* after this layer's acquire: its own loads go first */
        c->xp.prefetch(c->xp.ud, layer + 1, S->la_ids, nla);
        c->la_prefetched += (uint64_t)nla;
    }

    int m = 0, nj = 0;
    for (int e = 0; e < E; e++) {
        S->ex_start[e] = m;
        for (int b = 0; b < n; b++)
            for (int k = 0; k < K; k++)
                if (S->route[b * K + k] == e) {
                    S->ex_rows[m] = b;
                    S->ex_wt[m] = S->route_w[b * K + k];
                    memcpy(S->ex_x + (size_t)m * dim, S->x + (size_t)b * dim, sizeof(float) * dim);
                    m++;
                }
        S->ex_cnt[e] = m - S->ex_start[e];
    }
#define EXPERT(e) (provided ? &S->ex_w[S->ex_slot[e]] : &lw->experts[e])
    for (int e = 0; e < E; e++)
        if (S->ex_cnt[e]) {
            const size_t r0 = (size_t)S->ex_start[e];
            nj = up_jobs(S->jobs, nj, EXPERT(e), S->ex_cnt[e], S->ex_x + r0 * dim, dim, S->ex_g + r0 * I,
                         S->ex_u + r0 * I, I);
        }
    nj = up_jobs(S->jobs, nj, &lw->shared, n, S->x, dim, S->sh_g, S->sh_u, I);
    v4_linear_many(c->be, S->jobs, nj);

    for (int r = 0; r < m; r++)
        v4_swiglu(S->ex_g + (size_t)r * I, S->ex_u + (size_t)r * I, I, lim, S->ex_wt + r, S->ex_h + (size_t)r * I);
    for (int b = 0; b < n; b++)
        v4_swiglu(S->sh_g + (size_t)b * I, S->sh_u + (size_t)b * I, I, lim, NULL, S->sh_h + (size_t)b * I);

    nj = 0;
    for (int e = 0; e < E; e++)
        if (S->ex_cnt[e]) {
            const size_t r0 = (size_t)S->ex_start[e];
            S->jobs[nj++] = (v4_lin_job){&EXPERT(e)->w2, V4_LIN_QUANT, S->ex_cnt[e], S->ex_h + r0 * I, I,
                                         S->ex_o + r0 * dim, dim};
        }
#undef EXPERT
    S->jobs[nj++] = (v4_lin_job){&lw->shared.w2, V4_LIN_QUANT, n, S->sh_h, I, S->sh_o, dim};
    v4_linear_many(c->be, S->jobs, nj);
    if (provided)
        c->xp.release(c->xp.ud, layer, S->ex_ids, S->n_ex);

    memset(S->y, 0, sizeof(float) * (size_t)n * dim);
    for (int r = 0; r < m; r++) {
        float *y = S->y + (size_t)S->ex_rows[r] * dim;
        const float *o = S->ex_o + (size_t)r * dim;
        for (int i = 0; i < dim; i++)
            y[i] = y[i] + o[i];
    }
    for (int b = 0; b < n; b++)
        for (int i = 0; i < dim; i++)
            S->out[(size_t)b * dim + i] = v4_bf16(S->y[(size_t)b * dim + i] + S->sh_o[(size_t)b * dim + i]);
    return 0;
}
