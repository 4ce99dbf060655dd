/* weights.c - release what a v4_weights owns (see weights.h). */
#include <stdlib.h>

#include "weights.h"

void v4_weights_free(v4_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    if (w->layers)
        for (int l = 0; l < w->cfg.n_layers; l++)
            free(w->layers[l].experts);
    free(w->layers);
    w->owned = NULL;
    w->layers = NULL;
    w->n_owned = w->cap_owned = 0;
}

uint64_t v4_mat_bytes(const v4_mat *m)
{
    uint64_t n = (uint64_t)m->rows * (uint64_t)m->cols;
    switch (m->type) {
    case V4_W_FP8:
        return n + (uint64_t)((m->rows + 127) / 128) * (uint64_t)((m->cols + 127) / 128);
    case V4_W_FP4:
        return n / 2 + n / 32;
    case V4_W_BF16:
        return 2 * n;
    case V4_W_F32:
        return 4 * n;
    }
    return 0;
}

uint64_t v4_expert_bytes(const v4_expert_w *e)
{
    return v4_mat_bytes(&e->w1) + v4_mat_bytes(&e->w3) + v4_mat_bytes(&e->w2);
}

uint64_t v4_step_trunk_bytes(const v4_weights *w)
{
    const v4_config *cfg = &w->cfg;
    uint64_t b = 2ull * (uint64_t)cfg->dim;               /* one embedding row */
    b += v4_mat_bytes(&w->head) + v4_mat_bytes(&w->hc_head_fn);
    for (int l = 0; l < cfg->n_layers; l++) {
        const v4_layer_w *lw = &w->layers[l];
        const v4_mat *mats[] = {&lw->hc_attn_fn, &lw->hc_ffn_fn, &lw->wq_a, &lw->wq_b, &lw->wkv,
                                &lw->wo_a, &lw->wo_b, &lw->gate};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            b += v4_mat_bytes(mats[i]);
        b += v4_expert_bytes(&lw->shared);
        if (lw->ratio)
            b += v4_mat_bytes(&lw->comp.wkv) + v4_mat_bytes(&lw->comp.wgate);
        if (lw->ratio == 4)
            b += v4_mat_bytes(&lw->idx_wq_b) + v4_mat_bytes(&lw->idx_weights_proj) +
                 v4_mat_bytes(&lw->idx_comp.wkv) + v4_mat_bytes(&lw->idx_comp.wgate);
    }
    return b;
}
