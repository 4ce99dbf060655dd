/* snapshot.c - block records of a sequence's state (see snapshot.h; docs/prefix-cache.md).
 * Thread: any (the sequence is the caller's). */
#include "snapshot.h"

#include <string.h>

#include "internal.h"

#define SNAP_MAGIC 0x56345342u   /* "BS4V" */

typedef struct snap_head {
    uint32_t magic, block, k, layers;
} snap_head;

static int gcd(int a, int b)
{
    while (b) {
        const int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The least common multiple of cfg's compression ratios (1 with none). */
static int ratio_lcm(const v4_config *cfg)
{
    int m = 1;
    for (int l = 0; l < cfg->n_layers; l++) {
        const int r = cfg->compress_ratios[l];
        if (r > 0)
            m = m / gcd(m, r) * r;
    }
    return m;
}

int v4_snap_block_len(const v4_config *cfg, int want)
{
    const int m = ratio_lcm(cfg);
    if (want < 1)
        return m;
    return (want + m - 1) / m * m;
}

/* The "previous block" rows of an overlapping compressor state: r rows of width
 * floats, kv and score (rows == 2r); 0 for a non-overlapping one. */
static size_t prev_floats(const v4_comp_state *st, int r)
{
    return st->kv && st->rows == 2 * r ? (size_t)r * (size_t)st->width : 0;
}

/* The same from the config alone (seq.c's comp_state_dims: ratio 4 overlaps, width 2d). */
static size_t prev_floats_cfg(int r, int d)
{
    return r == 4 ? (size_t)r * 2u * (size_t)d : 0;
}

size_t v4_snap_block_bytes(const v4_config *cfg, int block)
{
    if (block < 1 || block % ratio_lcm(cfg))
        return 0;
    const size_t b16 = sizeof(uint16_t);
    size_t b = sizeof(snap_head);
    for (int l = 0; l < cfg->n_layers; l++) {
        const int r = cfg->compress_ratios[l];
        b += (size_t)cfg->window * cfg->head_dim * b16;
        if (r == 0)
            continue;
        b += (size_t)(block / r) * cfg->head_dim * b16 + 2 * prev_floats_cfg(r, cfg->head_dim) * sizeof(float);
        if (r == 4)
            b += (size_t)(block / 4) * cfg->index_head_dim * b16 +
                 2 * prev_floats_cfg(4, cfg->index_head_dim) * sizeof(float);
    }
    return b;
}

static unsigned char *put(unsigned char *p, const void *src, size_t n)
{
    memcpy(p, src, n);
    return p + n;
}

static const unsigned char *get(const unsigned char *p, void *dst, size_t n)
{
    if (dst)
        memcpy(dst, p, n);
    return p + n;
}

int v4_snap_block_save(const v4_seq *s, int block, void *dst, v4_error *err)
{
    const v4_config *cfg = &s->w->cfg;
    if (!v4_snap_block_bytes(cfg, block) || s->pos < block || s->pos % block || s->broken)
        return v4_err_set(err, V4_ERR_INVALID, "v4_snap_block_save",
                          "a block record needs a sequence at a block end (position %d, block %d%s%s)", s->pos, block,
                          s->broken ? ", broken" : "",
                          v4_snap_block_bytes(cfg, block) ? "" : ", not a multiple of every compression ratio");
    const int k = s->pos / block - 1;
    const snap_head h = {SNAP_MAGIC, (uint32_t)block, (uint32_t)k, (uint32_t)cfg->n_layers};
    unsigned char *p = put(dst, &h, sizeof h);
    const size_t hd = (size_t)cfg->head_dim, id = (size_t)cfg->index_head_dim;
    for (int l = 0; l < cfg->n_layers; l++) {
        const v4_layer_state *L = &s->L[l];
        const int r = cfg->compress_ratios[l];
        p = put(p, L->win, (size_t)cfg->window * hd * sizeof *L->win);
        if (r == 0)
            continue;
        const size_t per = (size_t)(block / r);
        p = put(p, L->comp + (size_t)k * per * hd, per * hd * sizeof *L->comp);
        const size_t pf = prev_floats(&L->cs, r);
        p = put(p, L->cs.kv, pf * sizeof(float));
        p = put(p, L->cs.sc, pf * sizeof(float));
        if (r == 4) {
            const size_t per4 = (size_t)(block / 4);
            p = put(p, L->idx_keys + (size_t)k * per4 * id, per4 * id * sizeof *L->idx_keys);
            const size_t pi = prev_floats(&L->ics, 4);
            p = put(p, L->ics.kv, pi * sizeof(float));
            p = put(p, L->ics.sc, pi * sizeof(float));
        }
    }
    return 0;
}

int v4_snap_restore(v4_seq *s, int block, const void *const *recs, int nb, v4_error *err)
{
    const v4_config *cfg = &s->w->cfg;
    v4_seq_reset(s);
    if (nb < 1 || !v4_snap_block_bytes(cfg, block) || (long)nb * block > s->max_len)
        return v4_err_set(err, V4_ERR_INVALID, "v4_snap_restore",
                          "%d blocks of %d positions do not fit a sequence of %d positions (or the block is not a "
                          "multiple of every compression ratio)", nb, block, s->max_len);
    const size_t hd = (size_t)cfg->head_dim, id = (size_t)cfg->index_head_dim;
    for (int k = 0; k < nb; k++) {
        snap_head h;
        const unsigned char *p = get(recs[k], &h, sizeof h);
        if (h.magic != SNAP_MAGIC || h.block != (uint32_t)block || h.k != (uint32_t)k ||
            h.layers != (uint32_t)cfg->n_layers) {
            v4_seq_reset(s);
            return v4_err_set(err, V4_ERR_INVALID, "v4_snap_restore",
                              "record %d is not block %d of %d positions for this model", k, k, block);
        }
        const int last = k == nb - 1;   /* the end state comes from the last block only */
        for (int l = 0; l < cfg->n_layers; l++) {
            v4_layer_state *L = &s->L[l];
            const int r = cfg->compress_ratios[l];
            p = get(p, last ? L->win : NULL, (size_t)cfg->window * hd * sizeof *L->win);
            if (r == 0)
                continue;
            const size_t per = (size_t)(block / r);
            p = get(p, L->comp + (size_t)k * per * hd, per * hd * sizeof *L->comp);
            const size_t pf = prev_floats(&L->cs, r);
            p = get(p, last ? L->cs.kv : NULL, pf * sizeof(float));
            p = get(p, last ? L->cs.sc : NULL, pf * sizeof(float));
            if (last)
                L->n_comp = (int)((size_t)nb * per);
            if (r == 4) {
                const size_t per4 = (size_t)(block / 4);
                p = get(p, L->idx_keys + (size_t)k * per4 * id, per4 * id * sizeof *L->idx_keys);
                const size_t pi = prev_floats(&L->ics, 4);
                p = get(p, last ? L->ics.kv : NULL, pi * sizeof(float));
                p = get(p, last ? L->ics.sc : NULL, pi * sizeof(float));
                if (last)
                    L->n_idx = (int)((size_t)nb * per4);
            }
        }
    }
    s->pos = nb * block;
    return 0;
}
