/*
 * ref/ref_math.h: the number helpers every CPU reference shares, written
 * once, as kernels_src/kdt_math.cuh is for the kernels: bf16 <-> f32,
 * e4m3 <-> f32, the order-preserving f32 key, NaN counted as -inf.  Static inline, so that
 * each ref/<kernel>.c compiles and links alone (the Python tests build one
 * file; tools/dev's emulator harnesses name the files they link).  C and
 * C++.
 */
#ifndef KDT_REF_MATH_H
#define KDT_REF_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* bf16 -> f32: bf16 is the upper half of an f32, so exact. */
static inline float
ref_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f32 -> bf16, rounded to nearest even; NaN stays NaN (a quiet one). */
static inline uint16_t
ref_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* FP8 e4m3 (OCP E4M3FN, torch.float8_e4m3fn: a sign, 4 exponent bits of
 * bias 7, 3 mantissa bits; no infinities, S.1111.111 is NaN, the largest
 * finite value 448, the smallest subnormal 2^-9) -> f32, exactly, from the
 * format's definition. */
static inline float
ref_e4m3_to_f32(uint8_t b)
{
    int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
    if (exp == 15 && man == 7)
        return NAN;
    /* subnormal: man * 2^-9; normal: (8 + man) * 2^(exp - 10) */
    float mag = exp ? ldexpf((float)(8 + man), exp - 10)
                    : ldexpf((float)man, -9);
    return sign ? -mag : mag;
}

/* f32 -> e4m3, rounded to nearest even and saturated to +-448 (PTX's
 * cvt.rn.satfinite: infinities too); NaN gives 0x7f.  A search over the
 * 127 magnitudes: obviously right, not fast. */
static inline uint8_t
ref_f32_to_e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    uint8_t best = 0;
    for (uint8_t c = 1; c <= 0x7e; ++c) {
        float d = fabsf(ref_e4m3_to_f32(c) - a);
        float db = fabsf(ref_e4m3_to_f32(best) - a);
        /* a tie goes to the even mantissa */
        if (d < db || (d == db && (c & 1) == 0 && (best & 1)))
            best = c;
    }
    if (a > 448.f) /* past the largest value everything saturates to it */
        best = 0x7e;
    return (uint8_t)(sign | best);
}

/* The order-preserving map of an f32 onto uint32 that the kernels use:
 * a < b  <=>  key(a) < key(b) for non-NaN values (-0 sorts just below +0,
 * which never matters: scores and logits are canonicalised first). */
static inline uint32_t
ref_f32_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* NaN counts as -inf (docs/contract.md §1, §2): logits, log-probs, and a
 * score that comes out NaN (only +inf + -inf can). */
static inline float
ref_canon(float x)
{
    return isnan(x) ? -INFINITY : x;
}

#endif /* KDT_REF_MATH_H */
