/* numcheck.h - the measures of `v4fleet numerics-check` (the fast numerics mode held
 * to its contract against the exact mode; docs/numerics.md):
 *   - calc_diff as DeepGEMM defines it, 1 - 2<x,y> / (|x|^2 + |y|^2), summed in double
 *     over a whole tensor (several calls add to one measure), with the NaN/Inf pattern
 *     of the two sides compared element by element;
 *   - KL(p || q) of two logit rows (softmax in double), the top-1/top-2 margin,
 *     Jaccard similarity of two id sets, quantiles;
 *   - the per-kernel check: every product of a model's matrices (by weight type and
 *     mode) on identical inputs through two backends.
 * Ownership: plain values and caller-owned arrays; nothing is kept.
 * Thread: any; the functions share no state (v4nc_kernels uses the backends given).
 */
#ifndef V4_NUMCHECK_H
#define V4_NUMCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "config/error.h"
#include "kernels/backend.h"
#include "kernels/calc_diff.h"
#include "kernels/v4/weights.h"

/* KL(softmax(p) || softmax(q)) over V logits, in double; +inf when q gives no mass
 * where p has some; NaN when a row holds NaN. */
double v4nc_kl(const float *p, const float *q, int V);
/* Index of the largest logit (lowest index on ties) and the gap to the second. */
int v4nc_top2(const float *x, int V, double *margin);
/* |a & b| / |a | b| of two sets of ids (duplicates count once); 1 when both are empty. */
double v4nc_jaccard(const int32_t *a, int na, const int32_t *b, int nb);
/* The q-quantile (0..1, nearest rank) of v[0..n); sorts v.  0 when n == 0. */
double v4nc_quantile(double *v, int n, double q);

/* One row of the per-kernel table: the products of one weight type in one mode. */
typedef struct v4nc_kernel_row {
    const char *type, *mode;  /* "FP8", "FP4", "BF16", "F32"; "quant", "bf16" or "exact" (backend.h modes) */
    int matrices;             /* products checked */
    double worst;             /* largest calc_diff among them */
    char worst_at[48];        /* which matrix ("layer 3 wq_b", "head") */
    long pattern_bad;         /* NaN/Inf mismatches summed over them */
} v4nc_kernel_row;

/* Every matrix of w the decode path multiplies (per layer: mHC, attention, compressor,
 * indexer, router, shared expert, the first and last routed expert; the head and
 * hc_head), each on the same `rows` rows of activations (deterministic pseudo-random,
 * bf16, per-128-block magnitudes 2^-6..2^4) through ref and cand in the decode path's
 * mode.  Fills out[0..*n_out) (at most max rows; one per type/mode pair seen).
 * Fails (V4_ERR_NOMEM) only when buffers cannot be allocated. */
int v4nc_kernels(const v4_weights *w, v4_backend *ref, v4_backend *cand, int rows, v4nc_kernel_row *out, int max,
                 int *n_out, v4_error *err);

#endif
