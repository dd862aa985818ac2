// draft_topk.cu: specs/kernels.md §1.  Per row of logits: the K largest
// (descending, ties to the lower token id, NaN as -inf) and their
// log-probabilities logit - logsumexp(row), in one pass over the row.
//
// One block per row.  Each step every thread takes 8 consecutive logits
// (16-byte loads, several steps in flight) and
//  - folds them into its running (max, sum of exp(x - max)) for the
//    logsumexp, rescaling the sum when the max grows;
//  - offers those at or above the block's threshold T to a candidate buffer
//    in shared memory.  A candidate is a 64-bit key: the logit's
//    order-preserving 32-bit key above (V-1-id), so keys are unique and
//    their order is exactly "larger logit first, then lower id".
// When the buffer could overflow, a block-wide radix select (8-bit digits,
// value bits then id bits, stopping as soon as the digit's bucket holds
// exactly what is still needed) keeps the K largest keys and raises T to
// the smallest key it kept.  At the end the K survivors are sorted
// (bitonic, descending) and written with their log-probabilities.
#include "kdt_params.h"

#ifndef KDT_V
#error "draft_topk needs -DKDT_V"
#endif
#ifndef KDT_K
#error "draft_topk needs -DKDT_K"
#endif
#ifndef KDT_DTYPE
#error "draft_topk needs -DKDT_DTYPE (0 = f32, 1 = bf16)"
#endif

constexpr int V = KDT_V;          // vocabulary (row length)
constexpr int K = KDT_K;          // kept per row
constexpr int DTYPE = KDT_DTYPE;  // 0 f32, 1 bf16
constexpr int ESZ = DTYPE ? 2 : 4;            // bytes per logit
constexpr int THREADS = 512;
constexpr int WARPS = THREADS / 32;
constexpr int PER = 8;                        // logits per thread per step
constexpr int STEP = THREADS * PER;           // logits per block per step
constexpr int CHUNKS = PER * ESZ / 16;        // 16-byte loads per thread-step
constexpr int PREFETCH = DTYPE ? 8 : 4;       // steps in flight per thread
// Candidate buffer: room for the K kept plus one full step.
constexpr int E = (K + STEP + THREADS - 1) / THREADS;  // entries per thread
constexpr int CAP = E * THREADS;

__host__ __device__ constexpr int pow2_ceil(int x) { int p = 1; while (p < x) p <<= 1; return p; }
__host__ __device__ constexpr int bits_for(int x) { int b = 0; while ((1LL << b) <= x) b++; return b; }
constexpr int KP = pow2_ceil(K);              // bitonic sort size
// Radix digits of a key, most significant first.  bf16 values only use the
// top 16 bits of their f32 key (cand_vkey clears the next 16), so their
// digits 47..32 are skipped.  The id part V-1-id needs bits_for(V-1) bits.
constexpr int VAL_DIGITS = DTYPE ? 2 : 4;
constexpr int ID_DIGITS = (bits_for(V - 1) + 7) / 8 > 0 ? (bits_for(V - 1) + 7) / 8 : 1;
constexpr int N_DIGITS = VAL_DIGITS + ID_DIGITS;

static_assert(K >= 1 && K <= 1024 && K <= V, "1 <= K <= min(V, 1024)");
static_assert(V <= (1 << 24), "V up to 2^24");
static_assert(KP <= CAP && KP / 2 <= THREADS, "bitonic sort fits the buffer");

typedef unsigned long long u64;

__device__ __forceinline__ float
neg_inf()
{
    return __int_as_float(0xff800000);
}

__device__ __forceinline__ float
ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned
val_key(float f)
{
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The value part of a candidate key.  A bf16 logit's f32 key has low 16
// bits that follow from its sign (0 or 0xffff); they are cleared so that
// the radix select may skip those digits and its threshold (whose skipped
// bits are 0) still orders the keys of one value by id alone.
//
// x + 0.0f turns -0 into +0: the two are equal logits (ties go by id), but
// their raw keys differ.  Only candidates pay for it, not every logit.
__device__ __forceinline__ unsigned
cand_vkey(float x)
{
    const unsigned k = val_key(x + 0.0f);
    return DTYPE ? (k & 0xffff0000u) : k;
}

__device__ __forceinline__ float
key_val(unsigned k)
{
    const unsigned u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(DTYPE ? (u & 0xffff0000u) : u);
}

__device__ __forceinline__ u64
cand_key(float x, int id)
{
    return ((u64)cand_vkey(x) << 32) | (unsigned)(V - 1 - id);
}

__device__ __forceinline__ int
digit_shift(int d)
{
    return d < VAL_DIGITS ? 56 - 8 * d : 8 * (ID_DIGITS - 1 - (d - VAL_DIGITS));
}

// This lane's first slot among `c` it appends to `*counter`: one atomic
// per warp.  The whole warp must call it.
__device__ __forceinline__ int
warp_append(int c, int *counter)
{
    const int lane = threadIdx.x & 31;
    int x = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o)
            x += y;
    }
    const int total = __shfl_sync(0xffffffffu, x, 31);
    int base = 0;
    if (lane == 31 && total)
        base = atomicAdd(counter, total);
    base = __shfl_sync(0xffffffffu, base, 31);
    return base + x - c;
}

struct topk_smem {
    u64 buf[CAP];
    unsigned hist[256];
    // Appends of step s count in app[s % 3], read by every thread after
    // the step's closing barrier and zeroed by thread 0 two steps later,
    // when no thread can still be reading it: no extra barrier per step.
    int app[3];
    int kept;          // radix select's compaction counter
    int step_total;    // candidates of the current step (tight mode)
    int sel[3];        // radix select: bucket, still needed, done
    float red_m[WARPS], red_s[WARPS];
};

// Keeps exactly the K largest of buf[0..cnt) (cnt > K) in buf[0..K) and
// returns a threshold T: the kept keys are exactly those >= T.
__device__ __noinline__ u64
select_top(topk_smem &sm, int cnt)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    u64 v[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int i = tid + THREADS * e;
        v[e] = i < cnt ? sm.buf[i] : 0ull;
    }
    u64 prefix = 0, pmask = 0;
    int need = K;
    for (int d = 0; d < N_DIGITS; d++) {
        const int shift = digit_shift(d);
        for (int i = tid; i < 256; i += THREADS)
            sm.hist[i] = 0;
        if (tid == 0 && d == 0)
            sm.kept = 0; // no thread still uses the last select's count
        __syncthreads();
#pragma unroll
        for (int e = 0; e < E; e++)
            if (tid + THREADS * e < cnt && (v[e] & pmask) == prefix)
                atomicAdd(&sm.hist[(unsigned)(v[e] >> shift) & 255u], 1u);
        __syncthreads();
        if (warp == 0) {
            // Lane l holds buckets 255-8l down to 248-8l (largest first).
            unsigned c[8], sum = 0;
#pragma unroll
            for (int q = 0; q < 8; q++) {
                c[q] = sm.hist[255 - 8 * lane - q];
                sum += c[q];
            }
            unsigned incl = sum;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o)
                    incl += y;
            }
            unsigned acc = incl - sum;
            if (acc < (unsigned)need && (unsigned)need <= incl) {
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    if (acc + c[q] >= (unsigned)need) {
                        sm.sel[0] = 255 - 8 * lane - q;
                        sm.sel[1] = need - (int)acc;
                        sm.sel[2] = c[q] == (unsigned)need - acc;
                        break;
                    }
                    acc += c[q];
                }
            }
        }
        __syncthreads();
        const int bucket = sm.sel[0];
        need = sm.sel[1];
        const int done = sm.sel[2];
        prefix |= (u64)bucket << shift;
        pmask |= 255ull << shift;
        if (done)
            break;
        __syncthreads(); // sel and hist are rewritten next digit
    }
    // Keys are unique, so the keys >= prefix (low bits 0) are the K.
    int c = 0;
#pragma unroll
    for (int e = 0; e < E; e++)
        c += (tid + THREADS * e < cnt && v[e] >= prefix);
    int at = warp_append(c, &sm.kept);
#pragma unroll
    for (int e = 0; e < E; e++)
        if (tid + THREADS * e < cnt && v[e] >= prefix)
            sm.buf[at++] = v[e];
    __syncthreads();
    return prefix;
}

// Candidate mask of 8 logits (bit i: x[i], id id0 + i, valid) against T.
// The float compare with T's value is all most logits see; the exact key
// compare runs only in the (rare, once T has settled) branch.
__device__ __forceinline__ unsigned
candidates(const float *x, int id0, unsigned valid, float tval, u64 t64)
{
    unsigned m = 0;
#pragma unroll
    for (int i = 0; i < PER; i++)
        m |= (x[i] < tval ? 0u : 1u) << i;
    m &= valid;
    if (m) {
        unsigned exact = 0;
#pragma unroll
        for (int i = 0; i < PER; i++)
            if (((m >> i) & 1u) && cand_key(x[i], id0 + i) >= t64)
                exact |= 1u << i;
        m = exact;
    }
    return m;
}

struct row_state {
    float run_m, run_s; // this thread's running max and sum of exp(x - max)
    float tval;         // T's value part (a cheap first filter)
    u64 t64;            // T
    int cnt;            // entries in sm.buf as of the last barrier
    int step;           // steps done (picks sm.app[step % 3])
};

// One step: 8 logits per thread (NaN already -inf), ids id0.., `valid`.
__device__ __forceinline__ void
process(topk_smem &sm, row_state &st, float *x, int id0, unsigned valid)
{
    const float L2E = 1.4426950408889634f;
    float lm = neg_inf();
#pragma unroll
    for (int i = 0; i < PER; i++) {
        if (!((valid >> i) & 1u))
            x[i] = neg_inf();
        lm = fmaxf(lm, x[i]);
    }
    if (lm > st.run_m) {
        st.run_s *= ex2((st.run_m - lm) * L2E);
        st.run_m = lm;
    }
    if (st.run_m != neg_inf()) {
        const float mb = st.run_m * L2E;
#pragma unroll
        for (int i = 0; i < PER; i++)
            st.run_s += ex2(fmaf(x[i], L2E, -mb));
    }

    unsigned m = candidates(x, id0, valid, st.tval, st.t64);
    if (st.cnt + STEP > CAP) { // the buffer might overflow: count first
        int c = __popc(m);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            c += __shfl_xor_sync(0xffffffffu, c, o);
        if ((threadIdx.x & 31) == 0 && c)
            atomicAdd(&sm.step_total, c);
        __syncthreads();
        const int total = sm.step_total;
        __syncthreads();
        if (threadIdx.x == 0)
            sm.step_total = 0;
        if (st.cnt + total > CAP) {
            st.t64 = select_top(sm, st.cnt);
            st.tval = key_val((unsigned)(st.t64 >> 32));
            st.cnt = K;
            m = candidates(x, id0, valid, st.tval, st.t64);
        }
    }
    int *app = &sm.app[st.step % 3];
    if (threadIdx.x == 0)
        sm.app[(st.step + 1) % 3] = 0;
    if (__any_sync(0xffffffffu, m != 0u)) {
        int at = st.cnt + warp_append(__popc(m), app);
#pragma unroll
        for (int i = 0; i < PER; i++)
            if ((m >> i) & 1u)
                sm.buf[at++] = cand_key(x[i], id0 + i);
    }
    __syncthreads();
    st.cnt += *app;
    st.step++;
}

__device__ __forceinline__ void
unpack(const uint4 *c, float *x)
{
    if (DTYPE) {
        const unsigned w[4] = {c[0].x, c[0].y, c[0].z, c[0].w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            x[2 * q] = __uint_as_float(w[q] << 16);
            x[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int h = 0; h < CHUNKS; h++) {
            x[4 * h] = __uint_as_float(c[h].x);
            x[4 * h + 1] = __uint_as_float(c[h].y);
            x[4 * h + 2] = __uint_as_float(c[h].z);
            x[4 * h + 3] = __uint_as_float(c[h].w);
        }
    }
#pragma unroll
    for (int i = 0; i < PER; i++)
        x[i] = fmaxf(x[i], neg_inf()); // NaN -> -inf
}

__device__ __forceinline__ float
load_one(const unsigned char *row, int j)
{
    if (DTYPE)
        return __uint_as_float((unsigned)(*(const unsigned short *)(row + 2 * j)) << 16);
    return *(const float *)(row + 4 * j);
}

extern "C" __global__ void __launch_bounds__(THREADS)
kdt_draft_topk(kdt_draft_topk_params p)
{
    __shared__ topk_smem sm;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r = blockIdx.x;
    const unsigned char *row =
        (const unsigned char *)p.logits + (long long)r * V * ESZ;

    // Vector body: 8-logit slots from the first 16-byte boundary; the few
    // logits before it (head) and after the last slot (tail) come last.
    int head = (int)((16u - ((unsigned)(unsigned long long)row & 15u)) & 15u) / ESZ;
    head = head < V ? head : V;
    const int nslots = (V - head) / PER;
    const int tail = V - head - nslots * PER;
    const int nsteps = (nslots + THREADS - 1) / THREADS;
    const uint4 *body = (const uint4 *)(row + head * ESZ);

    if (tid == 0) {
        sm.app[0] = sm.app[1] = sm.app[2] = 0;
        sm.step_total = 0;
    }
    __syncthreads();
    row_state st = {neg_inf(), 0.0f, neg_inf(), 0ull, 0, 0};

    uint4 ring[PREFETCH][CHUNKS];
#pragma unroll
    for (int q = 0; q < PREFETCH; q++) {
        const int j = q * THREADS + tid;
#pragma unroll
        for (int h = 0; h < CHUNKS; h++)
            ring[q][h] = j < nslots ? __ldg(body + j * CHUNKS + h) : make_uint4(0, 0, 0, 0);
    }
    for (int s0 = 0; s0 < nsteps; s0 += PREFETCH) {
#pragma unroll
        for (int q = 0; q < PREFETCH; q++) {
            const int s = s0 + q;
            if (s < nsteps) { // uniform
                const int j = s * THREADS + tid;
                float x[PER];
                unpack(ring[q], x);
                const int jn = j + PREFETCH * THREADS;
#pragma unroll
                for (int h = 0; h < CHUNKS; h++)
                    if (jn < nslots)
                        ring[q][h] = __ldg(body + jn * CHUNKS + h);
                process(sm, st, x, head + j * PER, j < nslots ? 0xffu : 0u);
            }
        }
    }
    { // head and tail: at most 7 + 7 single logits
        float x[PER];
        int id = 0;
        unsigned valid = 0;
        if (tid < head) {
            id = tid;
            valid = 1;
        } else if (tid >= 8 && tid < 8 + tail) {
            id = head + nslots * PER + (tid - 8);
            valid = 1;
        }
#pragma unroll
        for (int i = 0; i < PER; i++)
            x[i] = neg_inf();
        if (valid)
            x[0] = fmaxf(load_one(row, id), neg_inf());
        process(sm, st, x, id, valid);
    }

    if (st.cnt > K)
        select_top(sm, st.cnt);

    // logsumexp of the row: combine the threads' (max, sum).
    const float L2E = 1.4426950408889634f;
    float m = st.run_m, s = st.run_s;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        const float mm = fmaxf(m, m2);
        s = (m == neg_inf() ? 0.0f : s * ex2((m - mm) * L2E)) +
            (m2 == neg_inf() ? 0.0f : s2 * ex2((m2 - mm) * L2E));
        m = mm;
    }
    if (lane == 0) {
        sm.red_m[warp] = m;
        sm.red_s[warp] = s;
    }
    // Sort the K survivors, descending, padded with 0 (below every key).
    for (int i = K + tid; i < KP; i += THREADS)
        sm.buf[i] = 0ull;
    __syncthreads();
    for (int k = 2; k <= KP; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < KP / 2; i += THREADS) {
                const int lo = 2 * j * (i / j) + (i % j), hi = lo + j;
                const u64 a = sm.buf[lo], b = sm.buf[hi];
                const bool desc = (lo & k) == 0;
                if (desc ? (a < b) : (a > b)) {
                    sm.buf[lo] = b;
                    sm.buf[hi] = a;
                }
            }
            __syncthreads();
        }
    }
    float M = neg_inf(), S = 0.0f;
    for (int w = 0; w < WARPS; w++)
        M = fmaxf(M, sm.red_m[w]);
    if (M != neg_inf())
        for (int w = 0; w < WARPS; w++)
            if (sm.red_m[w] != neg_inf())
                S += sm.red_s[w] * ex2((sm.red_m[w] - M) * L2E);
    const float log_s = logf(S);
    for (int k = tid; k < K; k += THREADS) {
        const u64 key = sm.buf[k];
        const float x = key_val((unsigned)(key >> 32));
        p.ids[(long long)r * K + k] = V - 1 - (int)(unsigned)(key & 0xffffffffu);
        p.lp[(long long)r * K + k] = M == neg_inf() ? neg_inf() : (x - M) - log_s;
    }
}
