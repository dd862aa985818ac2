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

/* Two e4m3 bytes, in bits 8-15 and 24-31 of t, as a bf16x2, exactly.
 * Spread into bf16's fields (the sign, then the 7 bits of exponent and
 * mantissa 4 places lower) a byte is its value x 2^-120, subnormals
 * included (an e4m3 subnormal m 2^-9 lands on bf16's m 2^-129); one
 * fma.rn.bf16x2 by 2^120 (0x7b80) makes it the value, which bf16 holds
 * exactly.  A NaN byte (magnitude 0x7f, which the spread reads as 480)
 * gets a NaN addend instead of +0, so it stays NaN; -0 comes out +0. */
static __device__ __forceinline__ uint32_t
kdt_e4m3_hi_bytes_to_bf16x2(uint32_t t)
{
    const uint32_t mag = t & 0x7f007f00u;
    const uint32_t spread = (mag >> 4) | (t & 0x80008000u);
    /* a NaN's magnitude + 1 sets bit 15 of its half; prmt copies that bit
     * over the half (selector nibbles 8 + byte: the byte's sign) */
    uint32_t nan, r;
    asm("prmt.b32 %0, %1, 0, 0xbb99;" : "=r"(nan) : "r"(mag + 0x01000100u));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;"
        : "=r"(r) : "r"(spread), "r"(0x7b807b80u), "r"(nan));
    return r;
}

/* Four e4m3 (a word as a row holds them) as two bf16x2, exactly: bytes
 * 0, 1 into lo, bytes 2, 3 into hi; for a body that widens whole tiles.
 * 3.5 instructions an element (PRMT, LOP3, LEA.HI, VIADD, HFMA2.BF16_V2)
 * where widening to f16 and then fixing the halves up to bf16 took 7.75
 * (F2FP, then a SEL-based fix-up per half; nvcc -arch sm_90a -cubin,
 * cuobjdump -sass, 8 elements). */
static __device__ __forceinline__ void
kdt_e4m3x4_to_bf16x4(uint32_t &lo, uint32_t &hi, uint32_t x)
{
    uint32_t t0, t1;
    asm("prmt.b32 %0, %1, 0, 0x1404;" : "=r"(t0) : "r"(x)); /* 1 _ 0 _ */
    asm("prmt.b32 %0, %1, 0, 0x3424;" : "=r"(t1) : "r"(x)); /* 3 _ 2 _ */
    lo = kdt_e4m3_hi_bytes_to_bf16x2(t0);
    hi = kdt_e4m3_hi_bytes_to_bf16x2(t1);
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

#endif /* KDT_FP8_CUH */
