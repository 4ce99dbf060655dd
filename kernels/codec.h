/* codec.h - the number formats of DeepSeek-V4 checkpoints and activations.
 *
 * bf16: round-to-nearest-even from float32, kept in float storage (v4_bf16) or as
 *       bits (v4_bf16_bits / v4_bf16_from_bits).
 * e4m3 (float8_e4m3fn): 1-4-3, bias 7, max 448, no inf, 0x7f/0xff NaN, subnormals m*2^-9.
 * e2m1 (FP4): codes 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6; 8..15 the negatives.
 * e8m0: 2^(b-127), 0xff NaN.
 * Encoders round to nearest even and saturate (callers clamp first).
 *
 * All functions are pure; thread: any.
 */
#ifndef V4_CODEC_H
#define V4_CODEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t v4_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float v4_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* bf16 bits of f (round to nearest even; NaN stays NaN). */
static inline uint16_t v4_bf16_bits(float f)
{
    uint32_t u = v4_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float v4_bf16_from_bits(uint16_t b) { return v4_f32_from_bits((uint32_t)b << 16); }
/* f rounded to the nearest bf16 value, as a float. */
static inline float v4_bf16(float f) { return v4_bf16_from_bits(v4_bf16_bits(f)); }

/* e4m3fn byte -> float (exact). */
static inline float v4_e4m3_to_f32(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), e - 10);
    return s ? -v : v;
}
/* Nearest-even e4m3 value of x (|x| <= 448 expected; saturates), returned as float. */
float v4_e4m3_round(float x);
/* Nearest-even e4m3 byte of x (saturating). */
uint8_t v4_e4m3_encode(float x);

/* e2m1 nibble -> float. */
static inline float v4_e2m1_to_f32(unsigned code)
{
    static const float tab[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f,
                                  -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
    return tab[code & 15];
}
/* Nearest-even e2m1 value of x (saturates at +-6). */
float v4_e2m1_round(float x);
unsigned v4_e2m1_encode(float x);

/* e8m0 byte -> 2^(b-127) (exact, including 2^-127 as a subnormal float). */
static inline float v4_e8m0_to_f32(uint8_t b)
{
    if (b == 0xff)
        return NAN;
    return ldexpf(1.0f, (int)b - 127);
}

/* 2^ceil(log2(t)) for a positive normal float t, from its bits (exponent - 127,
 * +1 if the mantissa is non-zero).  Returns the exponent. */
static inline int v4_ceil_log2_bits(float t)
{
    uint32_t u = v4_f32_bits(t);
    int e = (int)((u >> 23) & 0xff) - 127;
    if (u & 0x7fffffu)
        e += 1;
    return e;
}

#endif
