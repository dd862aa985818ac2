/*
 * ref/ref_math.h: the number helpers every CPU reference shares, written
 * once, as kernels_src/kdt_math.cuh is for the kernels: bf16 <-> f32, the
 * order-preserving f32 key, NaN counted as -inf.  Static inline, so that
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
