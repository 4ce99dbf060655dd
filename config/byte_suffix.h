/* byte_suffix.h - the size suffix of byte counts in settings ("64G", "512M", "1.5g",
 * "2TB"): K/M/G/T = 2^10..2^40, either case, then an optional B/b.  Shared by the
 * worker settings (config/worker_config.c) and V4_GPU_EXPERT_MEM
 * (kernels/cuda/slot_pool.c, a library without v4core), hence header-only.
 * Thread: any (pure).
 */
#ifndef V4_BYTE_SUFFIX_H
#define V4_BYTE_SUFFIX_H

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

#endif
