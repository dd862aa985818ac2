/*
 * kdt_math.cuh: the numeric constants and small helpers that more than one
 * kernel uses, written once.  Inline PTX and intrinsics only, so that NVRTC
 * needs no CUDA header.
 *
 * The kernels work in base 2 (exp(x) = 2^(x log2 e), ln(x) = log2(x) ln 2)
 * because MUFU.EX2 and MUFU.LG2 are what the hardware has: an expf() or
 * logf() costs a multiply and a range reduction more.
 */
#ifndef KDT_MATH_CUH
#define KDT_MATH_CUH

constexpr float KDT_LOG2E = 1.4426950408889634f; /* log2(e) */
constexpr float KDT_LN2 = 0.6931471805599453f;   /* ln(2) */
constexpr float KDT_FLT_MAX = 3.40282347e38f;    /* NVRTC has no <float.h> */

static __device__ __forceinline__ float
kdt_neg_inf(void)
{
    return __int_as_float(0xff800000);
}

/* 2^x.  ex2.approx has ~2 ulp relative error (flushing denormals): the
 * kernels use it for softmax weights and exp-sums, where that is far below
 * what their outputs resolve. */
static __device__ __forceinline__ float
kdt_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ float
kdt_log2(float x)
{
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ int
kdt_imin(int a, int b)
{
    return a < b ? a : b;
}

/* x into [lo, hi] (lo <= hi): how the kernels make a per-request input
 * (a budget, a depth limit, a node count) safe to index with. */
static __device__ __forceinline__ int
kdt_clamp(int x, int lo, int hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

/* The order-preserving map of an f32's bits onto uint32: a < b as floats
 * (NaN aside) exactly when the keys compare so; -0 and +0 get different
 * keys (callers that want them equal add 0.0f first), and -inf maps to
 * 0x007fffff, so no float maps to 0. */
static __device__ __forceinline__ unsigned
kdt_order_key(float f)
{
    const unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Inclusive prefix sum of x over the lanes of a warp (lane = threadIdx.x &
 * 31).  The whole warp must call it. */
template <class T>
static __device__ __forceinline__ T
kdt_warp_prefix_sum(T x, int lane)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const T y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o)
            x += y;
    }
    return x;
}

#endif /* KDT_MATH_CUH */
