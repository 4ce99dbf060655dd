/* test_expert_block.c - the expert block layout (cache/expert_block.h) on the golden
 * tiny checkpoint: parts 64-byte aligned, non-overlapping, the block a multiple of
 * 4096 holding exactly the expert's bytes; fill -> bind round-trips every routed
 * expert of every layer byte for byte (weights and scales), padding zeroed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_block.h"
#include "cache/model_files.h"
#include "testutil.h"

static int same_mat(const v4_mat *a, const v4_mat *b, size_t wlen, size_t slen)
{
    return a->type == b->type && a->rows == b->rows && a->cols == b->cols && a->layout == b->layout &&
           !memcmp(a->w, b->w, wlen) && !memcmp(a->scale, b->scale, slen);
}

int main(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/golden/tiny/model", t_env("V4_TEST_DATA", "tests/data"));
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(dir, &m, &err)) {
        fprintf(stderr, "%s: %s: %s\n", dir, err.where, err.msg);
        return 1;
    }
    const v4_config *c = &m.cfg;
    v4_xblock_layout lo;
    v4_xblock_layout_of(c, &lo);
    size_t sum = 0;
    for (int i = 0; i < V4_XBLOCK_NPART; i++) {
        CHECK(lo.off[i] % 64 == 0, "part %d at %zu is 64-byte aligned", i, lo.off[i]);
        CHECK(i == 0 || lo.off[i] >= lo.off[i - 1] + lo.len[i - 1], "part %d does not overlap", i);
        sum += lo.len[i];
    }
    CHECK(sum == v4_expert_bytes(&m.w.layers[0].experts[0]), "parts hold the expert's %llu bytes (%zu)",
          (unsigned long long)v4_expert_bytes(&m.w.layers[0].experts[0]), sum);
    CHECK(lo.bytes % V4_XBLOCK_ALIGN == 0 && lo.bytes >= lo.used && lo.bytes - lo.used < V4_XBLOCK_ALIGN,
          "block %zu bytes, %zu used", lo.bytes, lo.used);
    uint8_t *blk = aligned_alloc(V4_XBLOCK_ALIGN, lo.bytes);
    int bad = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int e = 0; e < c->n_routed_experts; e++) {
            const v4_expert_w *src = &m.w.layers[l].experts[e];
            memset(blk, 0xA5, lo.bytes);
            v4_xblock_fill(c, &lo, src, blk);
            v4_expert_w got;
            v4_xblock_bind(c, &lo, blk, &got);
            bad += !same_mat(&got.w1, &src->w1, lo.len[0], lo.len[1]) ||
                   !same_mat(&got.w3, &src->w3, lo.len[2], lo.len[3]) ||
                   !same_mat(&got.w2, &src->w2, lo.len[4], lo.len[5]);
            for (size_t i = lo.used; i < lo.bytes; i++)
                bad += blk[i] != 0;
        }
    CHECK(bad == 0, "%d mismatches over %d experts", bad, c->n_layers * c->n_routed_experts);
    free(blk);
    v4_model_close(&m);
    TEST_DONE();
}
