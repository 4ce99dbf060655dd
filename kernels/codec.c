/* codec.c - rounding encoders for e4m3 and e2m1 (see codec.h).
 *
 * Both use the same exact method: find the spacing of representable values around
 * |x| (a power of two), scale |x| to an integer grid with ldexp (exact), round with
 * nearbyint (the default rounding mode is nearest-even), and scale back.
 */
#include "codec.h"

static float round_grid(float ax, int min_exp, int mant_bits, float maxv)
{
    if (!(ax == ax))
        return ax;
    if (ax >= maxv)
        return maxv;
    int e;
    (void)frexpf(ax, &e);           /* ax = f * 2^e, f in [0.5, 1) -> floor(log2 ax) = e-1 */
    int lg = e - 1;
    if (lg < min_exp)
        lg = min_exp;               /* subnormal range shares the smallest normal spacing */
    int step = lg - mant_bits;      /* spacing = 2^step */
    float q = nearbyintf(ldexpf(ax, -step));
    float r = ldexpf(q, step);
    return r > maxv ? maxv : r;
}

float v4_e4m3_round(float x)
{
    float r = round_grid(fabsf(x), -6, 3, 448.0f);
    return signbit(x) ? -r : r;
}

uint8_t v4_e4m3_encode(float x)
{
    float r = v4_e4m3_round(x);
    uint8_t s = signbit(r) ? 0x80 : 0;
    float a = fabsf(r);
    if (!(a == a))
        return 0x7f;
    if (a == 0.0f)
        return s;
    int e;
    float f = frexpf(a, &e);        /* a = f*2^e */
    int lg = e - 1;
    if (lg < -6)                    /* subnormal: m * 2^-9 */
        return (uint8_t)(s | (uint8_t)ldexpf(a, 9));
    int m = (int)ldexpf(f * 2.0f - 1.0f, 3);
    return (uint8_t)(s | (uint8_t)((lg + 7) << 3) | (uint8_t)m);
}

float v4_e2m1_round(float x)
{
    float r = round_grid(fabsf(x), 0, 1, 6.0f);
    return signbit(x) ? -r : r;
}

unsigned v4_e2m1_encode(float x)
{
    float r = v4_e2m1_round(x);
    unsigned s = signbit(r) ? 8u : 0u;
    float a = fabsf(r);
    static const float tab[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    for (unsigned i = 0; i < 8; i++)
        if (tab[i] == a)
            return s | i;
    return s | 7u;
}
