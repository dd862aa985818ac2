// draft_topk_keys.cuh: the keys, digits and shared counters of draft_topk:
// a logit's order-preserving key, its digit and threshold, and the warp
// searches over the digit histogram that raise lb and pick a bin.  A part
// of draft_topk.cu, included after its constants and topk_smem (not a
// header of its own).

// max of two pairs of bf16 (packed), NaN if either is NaN.
__device__ __forceinline__ unsigned
max2_nan(unsigned a, unsigned b)
{
    unsigned d;
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ float
max_nan(float a, float b)
{
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

// Order-preserving key of a NaN-free logit; x + 0.0f turns -0 into +0
// (the two are one logit: ties go by id).
__device__ __forceinline__ unsigned
vkey(float x)
{
    return kdt_order_key(x + 0.0f);
}

__device__ __forceinline__ int
digit(float x)
{
    return (int)(vkey(x) >> (32 - DBITS));
}

// The smallest logit of digit d: for NaN-free x, x >= thr_of(d) exactly
// when digit(x) >= d (-0 compares equal to +0, as vkey makes them).
// Digits below 7 are NaN bit patterns, which never occur: -inf is digit 7.
__device__ __forceinline__ float
thr_of(int d)
{
    if (d >= (1 << (DBITS - 1)))
        return __uint_as_float((unsigned)(d - (1 << (DBITS - 1))) << (32 - DBITS));
    if (d <= 7)
        return kdt_neg_inf();
    return __uint_as_float(~((unsigned)d << (32 - DBITS)));
}

__device__ __forceinline__ u64
ckey(float x, int id)
{
    return ((u64)(vkey(x) >> (32 - VB)) << IB) | (u64)(unsigned)(V - 1 - id);
}

// The logit of a candidate key (its value bits back to an f32).
__device__ __forceinline__ float
key_logit(u64 c)
{
    const unsigned k = (unsigned)(c >> IB) << (32 - VB);
    const unsigned u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(DTYPE ? (u & 0xffff0000u) : u);
}

__device__ __forceinline__ int
key_id(u64 c)
{
    return V - 1 - (int)(unsigned)(c & ((1ull << IB) - 1));
}

__device__ __forceinline__ unsigned
vload(const unsigned *p)
{
    return *(const volatile unsigned *)p;
}

__device__ __forceinline__ int
vload(const int *p)
{
    return *(const volatile int *)p;
}

__device__ __forceinline__ float
vload(const float *p)
{
    return *(const volatile float *)p;
}

// This lane's first slot among `c` it appends to `*counter`: one atomic
// per warp.  The whole warp must call it.
__device__ __forceinline__ int
warp_append(int c, int *counter)
{
    const int lane = threadIdx.x & 31;
    const int x = kdt_warp_prefix_sum(c, lane);
    const int total = __shfl_sync(0xffffffffu, x, 31);
    int base = 0;
    if (lane == 31 && total)
        base = atomicAdd(counter, total);
    base = __shfl_sync(0xffffffffu, base, 31);
    return base + x - c;
}

// One warp: the highest bin b in [lo, top] with sum(hist[b..top]) >= need
// (need >= 1); *above = sum(hist[b+1..top]), *at = hist[b].  Returns -1
// when there is none.  Reads may race with increments (pass 1): each count
// is read once, so the answer is consistent with the counts it saw.
__device__ __forceinline__ int
find_bin(const unsigned *hist, int top, int lo, unsigned need,
         unsigned *above, unsigned *at)
{
    const int lane = threadIdx.x & 31;
    unsigned cum = 0;
    for (int base = top; base >= lo; base -= 32) {
        const int b = base - lane;
        const unsigned c = b >= lo ? vload(hist + b) : 0u;
        const unsigned incl = kdt_warp_prefix_sum(c, lane);
        const unsigned total = __shfl_sync(0xffffffffu, incl, 31);
        if (cum + total >= need) {
            const unsigned hit = __ballot_sync(0xffffffffu, cum + incl >= need);
            const int f = __ffs(hit) - 1;
            const unsigned cf = __shfl_sync(0xffffffffu, c, f);
            const unsigned incf = __shfl_sync(0xffffffffu, incl, f);
            *above = cum + incf - cf;
            *at = cf;
            return base - f;
        }
        cum += total;
    }
    return -1;
}

// Raise lb (and thr) from the histogram as counted so far (one warp).
// thr may lag lb (a raiser that read an older lb writes it last): a lower
// thr only lets more slots reach the exact per-logit test.
__device__ __forceinline__ void
raise_lb(topk_smem &sm, int kc)
{
    // One read for the whole warp: find_bin's trip count must be uniform.
    const int lo = __shfl_sync(0xffffffffu, vload(&sm.lb), 0);
    const int top = __shfl_sync(0xffffffffu, vload(&sm.maxd), 0);
    unsigned above, at;
    const int b = find_bin(sm.hist, top, lo, (unsigned)kc, &above, &at);
    // thr is written atomically (its readers do not synchronise with the
    // raiser: any value it ever held is a valid threshold).
    if ((threadIdx.x & 31) == 0 && b > lo && atomicMax(&sm.lb, b) < b)
        atomicExch(&sm.thr, thr_of(b));
}

// Warp 0: find_bin over sm.hist into sm.sel (bin, above, at).  The block
// reads sel after its next barrier.
__device__ __forceinline__ void
select_bin(topk_smem &sm, int top, int lo, unsigned need)
{
    if ((threadIdx.x >> 5) != 0)
        return;
    unsigned above = 0, at = 0;
    const int b = find_bin(sm.hist, top, lo, need, &above, &at);
    if ((threadIdx.x & 31) == 0) {
        sm.sel[0] = b;
        sm.sel[1] = (int)above;
        sm.sel[2] = (int)at;
    }
}
