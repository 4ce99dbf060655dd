/* byte_suffix.h - the size suffix of byte counts in settings ("64G", "512M", "1.5g",
 * "2TB"): K/M/G/T = 2^10..2^40, either case, then an optional B/b; and the syntax of a
 * budget that may also be a percentage ("85%", V4_GPU_EXPERT_MEM).  Shared by the
 * worker settings (config/worker_config.c) and kernels/cuda/slot_pool.c (a library
 * without v4core), hence header-only.
 * Thread: any (pure).
 */
#ifndef V4_BYTE_SUFFIX_H
#define V4_BYTE_SUFFIX_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* The multiplier of the suffix at *end (1 without one); *end moves past it. */
static inline double v4_byte_suffix(char **end)
{
    double mul = 1;
    switch (**end) {
    case 'K': case 'k': mul = 1024.0; (*end)++; break;
    case 'M': case 'm': mul = 1048576.0; (*end)++; break;
    case 'G': case 'g': mul = 1073741824.0; (*end)++; break;
    case 'T': case 't': mul = 1099511627776.0; (*end)++; break;
    default: break;
    }
    if (**end == 'B' || **end == 'b')
        (*end)++;
    return mul;
}

/* A budget: bytes ("12G", "512M", "4096") or "P%" of total (0 < P <= 100) -> *bytes
 * (not rounded; may be 0: the caller decides).  0, or -1 on bad syntax or a value of
 * 9e18 bytes or more. */
static inline int v4_parse_budget(const char *s, uint64_t total, double *bytes)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    if (errno || end == s || !(x >= 0))
        return -1;
    if (*end == '%') {
        if (end[1] || !(x > 0 && x <= 100))
            return -1;
        *bytes = (double)total * x / 100.0;
    } else {
        *bytes = x * v4_byte_suffix(&end);
        if (*end)
            return -1;
    }
    return *bytes < 9.0e18 ? 0 : -1;
}

#endif
