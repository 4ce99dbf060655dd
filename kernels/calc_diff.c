/* calc_diff.c - see calc_diff.h. */
#include "calc_diff.h"

#include <math.h>

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf */
static int cls(float v)
{
    return isnan(v) ? 1 : isinf(v) ? (v > 0 ? 2 : 3) : 0;
}

void v4_diff_add(v4_diff *d, const float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int cx = cls(x[i]), cy = cls(y[i]);
        d->n++;
        if (cx || cy) {
            d->pattern_bad += cx != cy;
            continue;
        }
        d->xy += (double)x[i] * y[i];
        d->xx += (double)x[i] * x[i];
        d->yy += (double)y[i] * y[i];
    }
}

double v4_diff_value(const v4_diff *d)
{
    const double s = d->xx + d->yy;
    return s > 0 ? 1.0 - 2.0 * d->xy / s : 0.0;
}

double v4_calc_diff(const float *x, const float *y, size_t n, long *pattern_bad)
{
    v4_diff d = {0};
    v4_diff_add(&d, x, y, n);
    if (pattern_bad)
        *pattern_bad = d.pattern_bad;
    return v4_diff_value(&d);
}
