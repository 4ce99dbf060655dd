/* linear_gen.h - random inputs for the weight-product tests (test_linear.c,
 * test_cuda_linear.c), header-only: a splitmix64 generator, values of a chosen binary
 * magnitude, valid e4m3 bytes (no NaN codes), E8M0 scales biased towards the ranges
 * that stress the rounding (subnormal products, 2^-69..2^-1, near 1, the extremes),
 * and activation rows with per-128-block magnitudes, zeros and tiny blocks.
 * Thread: any (the generator state is the caller's). */
#ifndef V4_LINEAR_GEN_H
#define V4_LINEAR_GEN_H

#include <math.h>
#include <stdint.h>

#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/codec.h"

typedef struct rng { uint64_t s; } rng;
static inline uint64_t rnext(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline int rint_(rng *r, int lo, int hi) { return lo + (int)(rnext(r) % (uint64_t)(hi - lo + 1)); }
static inline double runif(rng *r) { return (double)(rnext(r) >> 11) * 0x1p-53; }

/* random value with |x| in [2^(e-1), 2^e), random sign */
static inline float rval(rng *r, int e)
{
    float v = ldexpf((float)(0.5 + 0.5 * runif(r)), e);
    return (rnext(r) & 1) ? -v : v;
}

static inline uint8_t rand_e4m3(rng *r)
{
    for (;;) {
        uint8_t b = (uint8_t)rnext(r);
        if ((b & 0x7f) != 0x7f)
            return b;
    }
}

static inline uint8_t rand_e8m0(rng *r)
{
    int u = rint_(r, 0, 99);
    if (u == 0)
        return (uint8_t)rint_(r, 0, 6);                  /* 2^-127..: subnormal products */
    if (u < 88)
        return (uint8_t)rint_(r, 127 - 69, 127 - 1);     /* 2^-69 .. 2^-1 */
    if (u < 98)
        return (uint8_t)rint_(r, 122, 132);              /* near 2^0 */
    return u == 98 ? 127 - 69 : 127 - 1;                 /* the extremes */
}

/* Activations: bf16 values, per 128-block a random magnitude, wide spread inside the
 * block, some exact zeros, some all-zero and some tiny blocks (amax < 1e-4). */
static inline void rand_acts(rng *r, float *x, int cols, int bf16)
{
    for (int b = 0; b < (cols + 127) / 128; b++) {
        int kind = rint_(r, 0, 9);
        int e = rint_(r, -12, 12);
        for (int j = b * 128; j < b * 128 + 128 && j < cols; j++) {
            float v;
            if (kind == 0)
                v = 0.0f;                                    /* all-zero block */
            else if (kind == 1)
                v = rval(r, rint_(r, -40, -15));             /* tiny: amax clamp */
            else if (rint_(r, 0, 15) == 0)
                v = (rnext(r) & 1) ? -0.0f : 0.0f;           /* exact zeros */
            else
                v = rval(r, e - rint_(r, 0, 14));
            x[j] = bf16 ? v4_bf16(v) : v;
        }
    }
}

/* nw random BF16 (uint16 bits) or F32 weights, about 1 in 21 exactly zero, the rest of
 * magnitude 2^-21..2^3 (malloc'd; NULL on allocation failure). */
static inline void *rand_dense_weights(rng *r, v4_wtype t, size_t nw)
{
    void *w = malloc(nw * (t == V4_W_BF16 ? 2 : 4));
    for (size_t i = 0; w && i < nw; i++) {
        int zero = rint_(r, 0, 20) == 0;
        if (t == V4_W_BF16)
            ((uint16_t *)w)[i] = zero ? 0 : v4_bf16_bits(rval(r, rint_(r, -20, 3)));
        else
            ((float *)w)[i] = zero ? 0.0f : rval(r, rint_(r, -20, 3));
    }
    return w;
}

#endif
