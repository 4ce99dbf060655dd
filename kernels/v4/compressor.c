/* compressor.c - gated pooling of r consecutive tokens into one KV entry (spec §5.4).
 *
 * Every token's projections (kv, gate score + the position bias ape[pos % r]) are
 * kept in a small state; when a block of r tokens completes, each channel takes a
 * softmax over the block's scores and pools the kv values.  Ratio 4 (CSA) overlaps:
 * the first half of the channels pools the previous block, the second half the
 * current one (2r candidates per channel).  The pooled vector is RMS-normed, its last
 * rope dims get RoPE at the block's first position, and it is quantize-dequantized
 * like the reference: FP8 on the non-rope dims (main KV), or Hadamard + FP4 on the
 * whole vector (indexer keys, rotate=1).
 */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "ops.h"

void v4_comp_pool(const float *kv, const float *sc, int W, int r, int d, int overlap, float *e)
{
    const int nrows = overlap ? 2 * r : r;
    float p[512];
    for (int ch = 0; ch < d; ch++) {
        /* candidate i: (row, column) in the state */
        float mx = -INFINITY;
        for (int i = 0; i < nrows; i++) {
            int col = (overlap && i >= r) ? d + ch : ch;
            float g = sc[(size_t)i * W + col];
            if (g > mx)
                mx = g;
        }
        double sum = 0.0;
        for (int i = 0; i < nrows; i++) {
            int col = (overlap && i >= r) ? d + ch : ch;
            p[i] = v4_expf(sc[(size_t)i * W + col] - mx);
            sum += p[i];
        }
        float fs = (float)sum;
        double acc = 0.0;
        for (int i = 0; i < nrows; i++) {
            int col = (overlap && i >= r) ? d + ch : ch;
            float pi = p[i] / fs;
            acc += (double)(kv[(size_t)i * W + col] * pi);
        }
        e[ch] = v4_bf16((float)acc);
    }
}

int v4_compressor_step(const v4_compressor_w *cw, v4_comp_state *st, int pos,
                       const float *kvp, const float *sc, const float *freqs,
                       int rope_dim, float eps, int rotate, float *out)
{
    const int r = cw->ratio, d = cw->dim, W = st->width;
    const int row = (cw->overlap ? r : 0) + pos % r;
    const float *ape = cw->ape + (size_t)(pos % r) * W;
    for (int i = 0; i < W; i++) {
        st->kv[(size_t)row * W + i] = kvp[i];
        st->sc[(size_t)row * W + i] = sc[i] + ape[i];
    }
    if ((pos + 1) % r != 0)
        return 0;

    float e[1024];
    v4_comp_pool(st->kv, st->sc, W, r, d, cw->overlap, e);
    if (cw->overlap) {   /* the current block becomes the "previous" one */
        memcpy(st->kv, st->kv + (size_t)r * W, sizeof(float) * (size_t)r * W);
        memcpy(st->sc, st->sc + (size_t)r * W, sizeof(float) * (size_t)r * W);
    }
    v4_rmsnorm(e, cw->norm, d, eps, out);
    v4_rope(out + d - rope_dim, rope_dim / 2, freqs, pos + 1 - r, 0);
    if (rotate) {
        v4_hadamard(out, d);
        v4_fp4_sim(out, d, 32);
    } else {
        v4_fp8_sim(out, d - rope_dim, 64);
    }
    return 1;
}
