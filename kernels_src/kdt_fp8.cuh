/*
 * kdt_fp8.cuh: the FP8 (OCP E4M3FN, torch.float8_e4m3fn) conversions the
 * kernels share: widening e4m3 exactly, rounding f32 to e4m3, and the
 * per-row quantization of docs/contract.md §3 ("An FP8 (e4m3) cache and
 * the two arithmetics").  Inline PTX of sm_89 and later (cvt to and from
 * e4m3x2) and plain integer code, so that NVRTC needs no CUDA header.
 *
 * Packing: a 32-bit word of four e4m3 holds element 0 in bits 0-7 (the
 * order of a row in memory and of an mma.sync 8-bit fragment); a pair of
 * 16-bit values holds element 0 in bits 0-15.
 */
#ifndef KDT_FP8_CUH
#define KDT_FP8_CUH

#include "kdt_params.h"

/* The largest finite e4m3 value: a quantized row's maximum maps to it. */
constexpr float KDT_E4M3_MAX = 448.f;

/* Four e4m3 (a word as a row holds them) as two f16x2, exactly: bytes 0,
 * 1 into lo, bytes 2, 3 into hi.  The halves go through PTX's vector
 * unpack, which ptxas turns into a register-half operand of the
 * conversion (a C shift for the high half cost a SHF on sm_89, sm_90 and
 * sm_120). */
static __device__ __forceinline__ void
kdt_e4m3x4_to_f16x4(uint32_t &lo, uint32_t &hi, uint32_t x)
{
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2;"
        " cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }"
        : "=r"(lo), "=r"(hi) : "r"(x));
}

/* An f16x2 as two f32, exactly: lo from bits 0-15. */
static __device__ __forceinline__ void
kdt_f16x2_to_f32x2(float &lo, float &hi, uint32_t x)
{
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2;"
        " cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
        : "=f"(lo), "=f"(hi) : "r"(x));
}

/* The sum of the four e4m3 values of a word, in f32 and exact: each is a
 * multiple of 2^-9 below 2^9 (e4m3's subnormal step, and 448), so any
 * sum of up to 2^5 of them takes at most 23 significant bits. */
static __device__ __forceinline__ float
kdt_e4m3x4_sum(uint32_t x)
{
    uint32_t lo, hi;
    kdt_e4m3x4_to_f16x4(lo, hi, x);
    float a, b, c, d;
    kdt_f16x2_to_f32x2(a, b, lo);
    kdt_f16x2_to_f32x2(c, d, hi);
    return (a + b) + (c + d);
}

/*
 * An e4m3 cache in bf16 arithmetic (docs/contract.md §3, MATH = bf16):
 * both bodies widen the cache to f16 (one cvt for two elements, where
 * bf16 takes four integer operations more: e4m3's subnormals and NaN)
 * and run f16 tensor cores.  Each Q row is multiplied by the power of two
 * that brings its max |q| into [2^14, 2^15), where f16 holds every bf16
 * value of the row exactly down to 2^-31 of that maximum, and the
 * logits' factor takes the power back.
 */

/* The exponent k of the power of two 2^k that brings a row's max |q|
 * (amax) into [2^14, 2^15): amax is in [2^(e - 127), 2^(e - 126)) for its
 * biased exponent e.  At most 126 (a row of zeros, or one whose maximum
 * is below 2^-112, gets 2^126), at least -114 (infinity, NaN), so 2^k and
 * 2^-k are normal f32. */
static __device__ __forceinline__ int
kdt_q16_row_exp(float amax)
{
    const int e = (int)((__float_as_uint(amax) >> 23) & 0xffu);
    return min(141 - e, 126);
}

/* 2^k for k in [-126, 127]. */
static __device__ __forceinline__ float
kdt_pow2f(int k)
{
    return __uint_as_float((uint32_t)(127 + k) << 23);
}

/* Two f32 rounded to e4m3 (to nearest even, saturated to +-448: PTX's
 * cvt.rn.satfinite; NaN gives NaN), lo into bits 0-7. */
static __device__ __forceinline__ uint16_t
kdt_e4m3x2_from_f32(float lo, float hi)
{
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
        : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Four f32 rounded to e4m3, element 0 (x0) into bits 0-7. */
static __device__ __forceinline__ uint32_t
kdt_e4m3x4_from_f32(float x0, float x1, float x2, float x3)
{
    return kdt_e4m3x2_from_f32(x0, x1)
           | (uint32_t)kdt_e4m3x2_from_f32(x2, x3) << 16;
}

/*
 * The quantization of one row (docs/contract.md §3): with a = max |x| over
 * the row, element x becomes e4m3(x * (448 / a)), the product in f32, and
 * is worth a / 448 times that.  A row of zeros (a = 0) stays zeros; a NaN
 * in the row (a NaN) makes its elements and its value NaN, as it would
 * the unquantized row's.
 */

/* What a row's elements are multiplied by before rounding: 448 / a. */
static __device__ __forceinline__ float
kdt_e4m3_quant_scale(float amax)
{
    return amax > 0.f ? KDT_E4M3_MAX / amax : 0.f;
}

/* What one unit of a quantized row is worth: a / 448. */
static __device__ __forceinline__ float
kdt_e4m3_dequant_scale(float amax)
{
    return amax / KDT_E4M3_MAX;
}

/* Four consecutive elements of a row, quantized with its scale s. */
static __device__ __forceinline__ uint32_t
kdt_e4m3x4_quantize(float x0, float x1, float x2, float x3, float s)
{
    return kdt_e4m3x4_from_f32(x0 * s, x1 * s, x2 * s, x3 * s);
}

/* The row maximum in bits: max(m, |lo|, |hi|) of a bf16x2 word, as the
 * magnitude's bit pattern (bf16 magnitudes order as their bits, NaN above
 * infinity, so a NaN in the row wins); __uint_as_float(m << 16) is a. */
static __device__ __forceinline__ uint32_t
kdt_bf16x2_absmax_bits(uint32_t m, uint32_t w)
{
    return max(m, max(w & 0x7fffu, (w >> 16) & 0x7fffu));
}

/* The same over eight bf16 (a 16-byte piece of a row). */
static __device__ __forceinline__ uint32_t
kdt_bf16x8_absmax_bits(uint32_t m, uint4 w)
{
    m = kdt_bf16x2_absmax_bits(m, w.x);
    m = kdt_bf16x2_absmax_bits(m, w.y);
    m = kdt_bf16x2_absmax_bits(m, w.z);
    return kdt_bf16x2_absmax_bits(m, w.w);
}

/* The maximum of m over the four lanes of a quad (lanes 4 i .. 4 i + 3:
 * the four threads that share a row). */
static __device__ __forceinline__ uint32_t
kdt_quad_max(uint32_t m)
{
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
    return max(m, __shfl_xor_sync(0xffffffffu, m, 2));
}

#endif /* KDT_FP8_CUH */
