/* seq.c - per-sequence decode state (window rings, compressed KV, indexer keys,
 * compressor state).  Everything is sized up front from max_len, so a running
 * sequence never allocates; v4_seq_reset returns it to position 0 without freeing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void comp_state_reset(v4_comp_state *st)
{
    size_t n = (size_t)st->rows * st->width;
    for (size_t i = 0; i < n; i++) {
        st->kv[i] = 0.0f;
        st->sc[i] = -INFINITY;
    }
}

static int comp_state_init(v4_comp_state *st, const v4_compressor_w *cw)
{
    int c = cw->overlap ? 2 : 1;
    st->rows = c * cw->ratio;
    st->width = c * cw->dim;
    size_t n = (size_t)st->rows * st->width;
    st->kv = malloc(n * sizeof(float));
    st->sc = malloc(n * sizeof(float));
    if (!st->kv || !st->sc)
        return -1;
    comp_state_reset(st);
    return 0;
}

v4_seq *v4_seq_create(const v4_weights *w, int max_len, v4_error *err)
{
    const v4_config *cfg = &w->cfg;
    if (max_len < 1) {
        v4_err_set(err, V4_ERR_INVALID, "v4_seq_create", "max_len must be >= 1 (got %d)", max_len);
        return NULL;
    }
    v4_seq *s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->w = w;
    s->max_len = max_len;
    s->L = calloc((size_t)cfg->n_layers, sizeof *s->L);
    if (!s->L)
        goto oom;
    for (int l = 0; l < cfg->n_layers; l++) {
        v4_layer_state *L = &s->L[l];
        const v4_layer_w *lw = &w->layers[l];
        L->win = calloc((size_t)cfg->window * cfg->head_dim, sizeof(float));
        if (!L->win)
            goto oom;
        if (lw->ratio == 0)
            continue;
        L->cap = max_len / lw->ratio + 1;
        L->comp = calloc((size_t)L->cap * cfg->head_dim, sizeof(float));
        if (!L->comp || comp_state_init(&L->cs, &lw->comp))
            goto oom;
        if (lw->ratio == 4) {
            L->idx_keys = calloc((size_t)L->cap * cfg->index_head_dim, sizeof(float));
            if (!L->idx_keys || comp_state_init(&L->ics, &lw->idx_comp))
                goto oom;
        }
    }
    return s;
oom:
    v4_seq_free(s);
    v4_err_set(err, V4_ERR_NOMEM, "v4_seq_create", "out of memory for a sequence of %d tokens", max_len);
    return NULL;
}

void v4_seq_reset(v4_seq *s)
{
    const v4_config *cfg = &s->w->cfg;
    s->pos = 0;
    s->broken = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        v4_layer_state *L = &s->L[l];
        memset(L->win, 0, sizeof(float) * (size_t)cfg->window * cfg->head_dim);
        L->n_comp = L->n_idx = 0;
        if (L->cs.kv)
            comp_state_reset(&L->cs);
        if (L->ics.kv)
            comp_state_reset(&L->ics);
    }
}

void v4_seq_free(v4_seq *s)
{
    if (!s)
        return;
    if (s->L) {
        for (int l = 0; l < s->w->cfg.n_layers; l++) {
            v4_layer_state *L = &s->L[l];
            free(L->win); free(L->comp); free(L->idx_keys);
            free(L->cs.kv); free(L->cs.sc); free(L->ics.kv); free(L->ics.sc);
        }
        free(s->L);
    }
    free(s);
}

int v4_seq_pos(const v4_seq *s) { return s->pos; }
int v4_seq_capacity(const v4_seq *s) { return s->max_len; }

const float *v4_seq_window(const v4_seq *s, int layer) { return s->L[layer].win; }

const float *v4_seq_compressed(const v4_seq *s, int layer, int *n)
{
    *n = s->L[layer].n_comp;
    return s->L[layer].comp;
}

const float *v4_seq_index_keys(const v4_seq *s, int layer, int *n)
{
    *n = s->L[layer].n_idx;
    return s->L[layer].idx_keys;
}
