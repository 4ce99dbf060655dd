/* expert_block.c - the layout of one expert block (see expert_block.h).  Thread: any. */
#include "expert_block.h"

#include <string.h>

const char *const v4_xblock_part_names[V4_XBLOCK_NPART] = {"w1.weight", "w1.scale", "w3.weight",
                                                           "w3.scale",  "w2.weight", "w2.scale"};

/* Bytes of the weights and of the scales of a [rows][cols] routed-expert matrix. */
static void part_sizes(const v4_config *cfg, int rows, int cols, size_t *w, size_t *s)
{
    if (cfg->expert_fp4) {
        *w = (size_t)rows * (size_t)cols / 2;
        *s = (size_t)rows * (size_t)(cols / 32);
    } else {
        *w = (size_t)rows * (size_t)cols;
        *s = (size_t)((rows + 127) / 128) * (size_t)((cols + 127) / 128);
    }
}

void v4_xblock_layout_of(const v4_config *cfg, v4_xblock_layout *lo)
{
    const int dims[3][2] = {{cfg->moe_inter, cfg->dim}, {cfg->moe_inter, cfg->dim}, {cfg->dim, cfg->moe_inter}};
    size_t at = 0;
    for (int m = 0; m < 3; m++) {
        part_sizes(cfg, dims[m][0], dims[m][1], &lo->len[2 * m], &lo->len[2 * m + 1]);
        for (int k = 0; k < 2; k++) {
            lo->off[2 * m + k] = at;
            at = (at + lo->len[2 * m + k] + 63) / 64 * 64;
        }
    }
    lo->used = lo->off[5] + lo->len[5];
    lo->bytes = (lo->used + V4_XBLOCK_ALIGN - 1) / V4_XBLOCK_ALIGN * V4_XBLOCK_ALIGN;
}

void v4_xblock_bind(const v4_config *cfg, const v4_xblock_layout *lo, const void *block, v4_expert_w *e)
{
    const uint8_t *b = block;
    const v4_wtype t = cfg->expert_fp4 ? V4_W_FP4 : V4_W_FP8;
    e->w1 = (v4_mat){t, cfg->moe_inter, cfg->dim, b + lo->off[0], b + lo->off[1], V4_LAYOUT_ROWMAJOR};
    e->w3 = (v4_mat){t, cfg->moe_inter, cfg->dim, b + lo->off[2], b + lo->off[3], V4_LAYOUT_ROWMAJOR};
    e->w2 = (v4_mat){t, cfg->dim, cfg->moe_inter, b + lo->off[4], b + lo->off[5], V4_LAYOUT_ROWMAJOR};
}

void v4_xblock_fill(const v4_config *cfg, const v4_xblock_layout *lo, const v4_expert_w *e, void *block)
{
    (void)cfg;
    uint8_t *b = block;
    memset(b, 0, lo->bytes);
    const v4_mat *m[3] = {&e->w1, &e->w3, &e->w2};
    for (int i = 0; i < 3; i++) {
        memcpy(b + lo->off[2 * i], m[i]->w, lo->len[2 * i]);
        memcpy(b + lo->off[2 * i + 1], m[i]->scale, lo->len[2 * i + 1]);
    }
}
