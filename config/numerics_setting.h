/* numerics_setting.h - the syntax of the numerics setting: V4_NUMERICS / --numerics
 * (exact | fast).
 *
 *   exact  the reference contract (kernels/backend.h "Numerics"): block partials exact,
 *          EXACT products summed in double; bit-identical to the goldens on every ISA.
 *   fast   FP32 accumulation in a fixed SIMD order (FMA); deterministic and
 *          batch-invariant (a row's result never depends on n or on the other rows of
 *          the step), held to a measured contract against exact (docs/numerics.md).
 *
 * Shared by the backends that implement the modes and by the settings that choose one.
 * Header-only.  Thread: any (pure).
 */
#ifndef V4_NUMERICS_SETTING_H
#define V4_NUMERICS_SETTING_H

#include <string.h>

typedef enum v4_numerics {
    V4_NUM_EXACT = 0,
    V4_NUM_FAST = 1,
} v4_numerics;

/* "exact" or "fast" -> *out (when out is not NULL); 0, or -1 for anything else. */
static inline int v4_parse_numerics(const char *s, v4_numerics *out)
{
    v4_numerics v;
    if (s && strcmp(s, "exact") == 0)
        v = V4_NUM_EXACT;
    else if (s && strcmp(s, "fast") == 0)
        v = V4_NUM_FAST;
    else
        return -1;
    if (out)
        *out = v;
    return 0;
}

static inline const char *v4_numerics_name(v4_numerics n)
{
    return n == V4_NUM_FAST ? "fast" : "exact";
}

#endif
