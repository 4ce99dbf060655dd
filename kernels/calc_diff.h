/* calc_diff.h - the numerics contract's distance between a reference tensor and a
 * candidate: DeepGEMM's calc_diff, 1 - 2<x,y> / (|x|^2 + |y|^2), summed in double
 * (0 = identical, ~1e-6 = a few bf16 ulps of noise), plus the pairs whose NaN/Inf
 * pattern differs.  One definition for the fast-mode self-test (kernels/cuda/cuda_lt.cu),
 * `v4fleet numerics-check` (worker/tools/numcheck*.c) and the tests.
 *
 * Ownership: v4_diff is a plain value the caller owns.  Thread: any (pure functions
 * over the caller's memory).
 */
#ifndef V4_CALC_DIFF_H
#define V4_CALC_DIFF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct v4_diff {
    double xy, xx, yy;
    long n;             /* element pairs seen */
    long pattern_bad;   /* pairs where one side is NaN (or +-Inf) and the other is not the same */
} v4_diff;

/* Add n pairs (x = reference, y = candidate).  Pairs that are not both finite are left
 * out of the sums (a matching NaN/Inf is no error; a mismatch counts in pattern_bad). */
void v4_diff_add(v4_diff *d, const float *x, const float *y, size_t n);
/* calc_diff of what was added; 0 when both sides are all zero. */
double v4_diff_value(const v4_diff *d);
/* One call: calc_diff of x[0..n) against y[0..n); *pattern_bad (may be NULL) = the
 * NaN/Inf mismatches. */
double v4_calc_diff(const float *x, const float *y, size_t n, long *pattern_bad);

#ifdef __cplusplus
}
#endif

#endif
