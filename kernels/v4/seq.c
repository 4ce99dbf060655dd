/* seq.c - per-sequence decode state (window rings, compressed KV, indexer keys,
 * compressor state).  Everything is sized up front from max_len, so a running
 * sequence never allocates; v4_seq_reset returns it to position 0 without freeing.
 *
 * The window ring, the compressed entries and the indexer keys are BF16 like the
 * reference's caches (spec §5.3 step 8, §5.4, §5.5: every entry is bf16 by
 * construction): stored as uint16_t bits (2 bytes a value instead of 4), read by the
 * attention / indexer loops with an exact conversion to float.  The compressor's
 * running state (the last c*r tokens' projections and scores) is FP32 in the spec and
 * stays float. */
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

/* The compressor state of a layer of ratio r with d channels: rows, width. */
static void comp_state_dims(int r, int d, int *rows, int *width)
{
    const int c = r == 4 ? 2 : 1;   /* ratio 4 overlaps (v4_compressor_w.overlap) */
    *rows = c * r;
    *width = c * d;
}

static int comp_state_init(v4_comp_state *st, const v4_compressor_w *cw, size_t *bytes)
{
    comp_state_dims(cw->ratio, cw->dim, &st->rows, &st->width);
    size_t n = (size_t)st->rows * st->width;
    st->kv = malloc(n * sizeof(float));
    st->sc = malloc(n * sizeof(float));
    if (!st->kv || !st->sc)
        return -1;
    *bytes += 2 * n * sizeof(float);
    comp_state_reset(st);
    return 0;
}

/* Entries of a layer's compressed cache (and indexer keys) for max_len tokens. */
static int comp_cap(int max_len, int ratio) { return max_len / ratio + 1; }

size_t v4_seq_bytes_for(const v4_config *cfg, int max_len)
{
    if (max_len < 1)
        return 0;
    const size_t b16 = sizeof(uint16_t);
    size_t b = sizeof(struct v4_seq) + (size_t)cfg->n_layers * sizeof(v4_layer_state);
    for (int l = 0; l < cfg->n_layers; l++) {
        const int r = cfg->compress_ratios[l];
        int rows, width;
        b += (size_t)cfg->window * cfg->head_dim * b16;
        if (r == 0)
            continue;
        const size_t cap = (size_t)comp_cap(max_len, r);
        b += cap * cfg->head_dim * b16;
        comp_state_dims(r, cfg->head_dim, &rows, &width);
        b += 2 * (size_t)rows * width * sizeof(float);
        if (r == 4) {
            b += cap * cfg->index_head_dim * b16;
            comp_state_dims(4, cfg->index_head_dim, &rows, &width);
            b += 2 * (size_t)rows * width * sizeof(float);
        }
    }
    return b;
}

size_t v4_seq_bytes(const v4_seq *s) { return s ? s->bytes : 0; }

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
    s->bytes = sizeof *s + (size_t)cfg->n_layers * sizeof *s->L;
    for (int l = 0; l < cfg->n_layers; l++) {
        v4_layer_state *L = &s->L[l];
        const v4_layer_w *lw = &w->layers[l];
        const size_t nwin = (size_t)cfg->window * cfg->head_dim;
        L->win = calloc(nwin, sizeof *L->win);
        if (!L->win)
            goto oom;
        s->bytes += nwin * sizeof *L->win;
        if (lw->ratio == 0)
            continue;
        L->cap = comp_cap(max_len, lw->ratio);
        L->comp = calloc((size_t)L->cap * cfg->head_dim, sizeof *L->comp);
        if (!L->comp || comp_state_init(&L->cs, &lw->comp, &s->bytes))
            goto oom;
        s->bytes += (size_t)L->cap * cfg->head_dim * sizeof *L->comp;
        if (lw->ratio == 4) {
            L->idx_keys = calloc((size_t)L->cap * cfg->index_head_dim, sizeof *L->idx_keys);
            if (!L->idx_keys || comp_state_init(&L->ics, &lw->idx_comp, &s->bytes))
                goto oom;
            s->bytes += (size_t)L->cap * cfg->index_head_dim * sizeof *L->idx_keys;
        }
    }
    return s;
oom:
    v4_seq_free(s);
    v4_err_set(err, V4_ERR_NOMEM, "v4_seq_create", "out of memory for a sequence of %d tokens (%zu bytes)", max_len,
               v4_seq_bytes_for(cfg, max_len));
    return NULL;
}

void v4_seq_reset(v4_seq *s)
{
    const v4_config *cfg = &s->w->cfg;
    s->pos = 0;
    s->broken = 0;
    s->inexact = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        v4_layer_state *L = &s->L[l];
        memset(L->win, 0, sizeof *L->win * (size_t)cfg->window * cfg->head_dim);
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
long v4_seq_inexact(const v4_seq *s) { return s->inexact; }

const uint16_t *v4_seq_window(const v4_seq *s, int layer) { return s->L[layer].win; }

const uint16_t *v4_seq_compressed(const v4_seq *s, int layer, int *n)
{
    *n = s->L[layer].n_comp;
    return s->L[layer].comp;
}

const uint16_t *v4_seq_index_keys(const v4_seq *s, int layer, int *n)
{
    *n = s->L[layer].n_idx;
    return s->L[layer].idx_keys;
}

/* The fork (model.h v4_seq_copy_from): every cache and the compressor states, written
 * part included (the window ring whole: its slots are positions mod window). */
static void comp_state_copy(v4_comp_state *d, const v4_comp_state *s)
{
    if (!s->kv)
        return;
    const size_t n = (size_t)s->rows * s->width;
    memcpy(d->kv, s->kv, n * sizeof *d->kv);
    memcpy(d->sc, s->sc, n * sizeof *d->sc);
}

int v4_seq_copy_from(v4_seq *dst, const v4_seq *src, v4_error *err)
{
    if (dst == src)
        return 0;
    if (dst->w != src->w || dst->max_len != src->max_len) {
        v4_err_set(err, V4_ERR_INVALID, "v4_seq_copy_from",
                   "the copy needs a sequence of the same weights and capacity (%d positions, got %d%s)", src->max_len,
                   dst->max_len, dst->w != src->w ? ", other weights" : "");
        return -1;
    }
    const v4_config *cfg = &src->w->cfg;
    dst->pos = src->pos;
    dst->broken = src->broken;
    dst->inexact = src->inexact;
    for (int l = 0; l < cfg->n_layers; l++) {
        v4_layer_state *d = &dst->L[l];
        const v4_layer_state *s = &src->L[l];
        memcpy(d->win, s->win, sizeof *d->win * (size_t)cfg->window * cfg->head_dim);
        d->n_comp = s->n_comp;
        d->n_idx = s->n_idx;
        if (s->comp)
            memcpy(d->comp, s->comp, sizeof *d->comp * (size_t)s->n_comp * cfg->head_dim);
        if (s->idx_keys)
            memcpy(d->idx_keys, s->idx_keys, sizeof *d->idx_keys * (size_t)s->n_idx * cfg->index_head_dim);
        comp_state_copy(&d->cs, &s->cs);
        comp_state_copy(&d->ics, &s->ics);
    }
    return 0;
}

v4_seq *v4_seq_fork(const v4_seq *src, v4_error *err)
{
    v4_seq *s = v4_seq_create(src->w, src->max_len, err);
    if (s && v4_seq_copy_from(s, src, err)) {
        v4_seq_free(s);
        return NULL;
    }
    return s;
}
