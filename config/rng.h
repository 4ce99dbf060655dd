/* rng.h - the project's one pseudo-random generator: xoshiro256** (Blackman & Vigna)
 * seeded through splitmix64.  Used where results must be reproducible from a seed
 * (sampling, synthetic weights).  Header-only, pure functions on caller-owned state;
 * thread: one thread per v4_rng. */
#ifndef V4_RNG_H
#define V4_RNG_H

#include <stdint.h>

typedef struct v4_rng {
    uint64_t s[4];
} v4_rng;

static inline uint64_t v4_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void v4_rng_seed(v4_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = v4_splitmix64(&seed);
}

static inline uint64_t v4_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t v4_rng_next(v4_rng *r)
{
    uint64_t *s = r->s;
    uint64_t res = v4_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = v4_rotl64(s[3], 45);
    return res;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static inline double v4_rng_unit(v4_rng *r) { return (double)(v4_rng_next(r) >> 11) * 0x1p-53; }

#endif
