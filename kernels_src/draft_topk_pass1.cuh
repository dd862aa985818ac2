// draft_topk_pass1.cuh: pass 1 of draft_topk, the only DRAM read (see the
// top of draft_topk.cu): the exp-sum against a lazy reference, the keys
// or slots that reach thr, the chunk's layout and re-reads, and the
// phases the kernel runs them in.  A part of draft_topk.cu, included
// after draft_topk_keys.cuh (not a header of its own).

// Lazy reference (natural-log units): a thread's exp-sum is kept relative
// to a reference r, a logit it has seen, and r moves only when a slot's
// maximum exceeds r + LAZY, so the common slot compares its maximum with
// one limit and every term is at most e^11 ~ 2^16 (2^24 logits sum to at
// most 2^40: no overflow).  The row's true maximum is subtracted at the
// end (it is the best key's logit), as the spec says.
constexpr float LAZY = 11.0f;

struct row_state {
    float run_m; // the reference r (-inf until a finite logit is seen)
    float run_s; // sum of exp(x - r) over this thread's logits
    float lim;   // r + LAZY; +inf when r is; NaN (every test fails) at -inf
};

// The rare fold: the slot holds NaN, a logit above the limit, or the
// thread has no reference yet.  x[] -> NaN-free (invalid entries are -inf
// already); returns its max.
__device__ __forceinline__ float
fold_slow(row_state &st, float *x)
{
#pragma unroll
    for (int i = 0; i < PER; i++)
        x[i] = fmaxf(x[i], kdt_neg_inf()); // NaN -> -inf
    float lm = x[0];
#pragma unroll
    for (int i = 1; i < PER; i++)
        lm = fmaxf(lm, x[i]);
    if (lm > st.run_m && !(lm <= st.lim)) {
        st.run_s *= kdt_exp2((st.run_m - lm) * KDT_LOG2E);
        st.run_m = lm;
        st.lim = lm + LAZY; // +inf stays +inf
    }
    if (st.run_m != kdt_neg_inf()) {
        const float mb = st.run_m * KDT_LOG2E;
#pragma unroll
        for (int i = 0; i < PER; i++)
            st.run_s += kdt_exp2(fmaf(x[i], KDT_LOG2E, -mb));
    }
    return lm;
}

// One slot of pass 1: x[] as loaded (may hold NaN; invalid entries -inf),
// m its maximum with NaN propagated.  Folds x into the running (reference,
// sum) and returns the slot's NaN-free maximum.
__device__ __forceinline__ float
fold(row_state &st, float *x, float m)
{
    if (!(m <= st.lim))
        return fold_slow(st, x);
    // Common case: no NaN, every logit at most the limit (the reference
    // is finite or +inf, never -inf).
    const float mb = st.run_m * KDT_LOG2E;
#pragma unroll
    for (int i = 0; i < PER; i++)
        st.run_s += kdt_exp2(fmaf(x[i], KDT_LOG2E, -mb));
    return m;
}

// Count and append the logits of x[] (NaN-free; ids id0 + i, `valid`
// bits) that reach thr (thr_of of some lb ever set, so every logit of
// digit >= the final lb is among them; the few below it only add counts
// to bins under lb, which no search reads).  lm: their max.  Per lane,
// no warp collective: only the lanes holding a candidate run it, and
// there are few (~K ln(steps) a chunk), so two shared atomics a candidate
// cost less than a warp-wide prefix sum on every step some lane has one.
__device__ __forceinline__ void
keep(topk_smem &sm, const float *x, int id0, unsigned valid, float lm, float thr)
{
    atomicMax(&sm.maxd, digit(lm));
#pragma unroll
    for (int i = 0; i < PER; i++)
        if (((valid >> i) & 1u) && x[i] >= thr) {
            const u64 c = ckey(x[i], id0 + i);
            const int at = atomicAdd(&sm.cnt, 1);
            if (at < CAP)
                sm.buf[at] = c;
            atomicAdd(&sm.hist[(int)(c >> DSHIFT)], 1u);
        }
}

// Logit e of a bf16 slot's words, NaN -> -inf.
__device__ __forceinline__ float
slot_logit(const uint4 &w, int e)
{
    const unsigned v = e < 2 ? w.x : e < 4 ? w.y : e < 6 ? w.z : w.w;
    return fmaxf(__uint_as_float((e & 1) ? (v & 0xffff0000u) : (v << 16)), kdt_neg_inf());
}

// Slot mode: append this lane's slot (w[] as loaded, NaN and -0
// possible; ids id0 + i; vmask its valid logits; lm its NaN-free maximum)
// to the staged slots, and count it once, at the digit of its maximum
// (`count`: step 0's seeding already did; lm NaN: the slot holds NaN).
// Per lane, no collective.
__device__ __forceinline__ void
stage(topk_smem &sm, const uint4 *w, int id0, unsigned vmask, float lm, bool count)
{
    uint4 *slots = reinterpret_cast<uint4 *>(sm.buf);
    int *meta = reinterpret_cast<int *>(slots + SCAP);
    const int at = atomicAdd(&sm.cnt, 1);
    if (at < SCAP) {
        slots[at] = w[0];
        meta[at] = id0 | (int)(vmask << 24); // id0 < 2^24
    }
    if (count) {
        if (lm != lm) { // NaN in the slot: its NaN-free maximum
            lm = kdt_neg_inf();
#pragma unroll
            for (int i = 0; i < PER; i++)
                if ((vmask >> i) & 1u)
                    lm = fmaxf(lm, slot_logit(w[0], i));
        }
        const int d = digit(lm);
        atomicAdd(&sm.hist[d], 1u);
        // maxd only grows: a covered digit skips the atomic.
        if (d > vload(&sm.maxd))
            atomicMax(&sm.maxd, d);
    }
}

// x[] from a slot's 16-byte pieces (NaN kept: fold sanitises the rare
// slots that hold one), and the slot's maximum with NaN propagated.
__device__ __forceinline__ float
unpack(const uint4 *c, float *x)
{
    if (DTYPE) {
        const unsigned w[4] = {c[0].x, c[0].y, c[0].z, c[0].w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            x[2 * q] = __uint_as_float(w[q] << 16);
            x[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
        }
        const unsigned m2 = max2_nan(max2_nan(w[0], w[1]), max2_nan(w[2], w[3]));
        return max_nan(__uint_as_float(m2 << 16), __uint_as_float(m2 & 0xffff0000u));
    }
#pragma unroll
    for (int h = 0; h < CHUNKS; h++) {
        x[4 * h] = __uint_as_float(c[h].x);
        x[4 * h + 1] = __uint_as_float(c[h].y);
        x[4 * h + 2] = __uint_as_float(c[h].z);
        x[4 * h + 3] = __uint_as_float(c[h].w);
    }
    float m = max_nan(max_nan(x[0], x[1]), max_nan(x[2], x[3]));
    const float m2 = max_nan(max_nan(x[4], x[5]), max_nan(x[6], x[7]));
    return max_nan(m, m2);
}

// 16 bytes of -inf logits: what a slot past the chunk reads as.
__device__ __forceinline__ uint4
neg_slot()
{
    const unsigned w = DTYPE ? 0xff80ff80u : 0xff800000u;
    return make_uint4(w, w, w, w);
}

// x[] of a slot re-read after pass 1: NaN -> -inf.
__device__ __forceinline__ void
unpack_clean(const uint4 *c, float *x)
{
    (void)unpack(c, x);
#pragma unroll
    for (int i = 0; i < PER; i++)
        x[i] = fmaxf(x[i], kdt_neg_inf());
}

__device__ __forceinline__ float
load_one(const unsigned char *row, int j)
{
    if (DTYPE)
        return __uint_as_float((unsigned)(*(const unsigned short *)(row + 2 * j)) << 16);
    return *(const float *)(row + 4 * j);
}

// Where a chunk's logits are: 8-logit slots from the first 16-byte
// boundary; the few logits before it (head) and after the last slot
// (tail).  Ids are base + index in the chunk.
struct row_layout {
    const unsigned char *row;
    const uint4 *body;
    int base, n, head, nslots, tail, nsteps;
};

// The head-and-tail "slot" of thread tid (at most 7 + 7 single logits,
// one per thread): x[0] (NaN-free) and its id, valid 0 or 1.
__device__ __forceinline__ unsigned
edge_slot(const row_layout &L, float *x, int *id)
{
    const int tid = threadIdx.x;
    unsigned valid = 0;
    int j = 0;
    if (tid < L.head) {
        j = tid;
        valid = 1;
    } else if (tid >= 8 && tid < 8 + L.tail) {
        j = L.head + L.nslots * PER + (tid - 8);
        valid = 1;
    }
    *id = L.base + j;
#pragma unroll
    for (int i = 0; i < PER; i++)
        x[i] = kdt_neg_inf();
    if (valid)
        x[0] = fmaxf(load_one(L.row, j), kdt_neg_inf());
    return valid;
}

// Re-read the whole chunk (L2 when it is still there): f(x, id0, valid)
// per slot, warp-uniform, x[] NaN-free.
template <class F>
__device__ __forceinline__ void
for_row(const row_layout &L, F f)
{
    const int tid = threadIdx.x;
    constexpr int U = 2;
    for (int s0 = 0; s0 < L.nsteps; s0 += U) {
        uint4 v[U][CHUNKS];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = (s0 + u) * THREADS + tid;
#pragma unroll
            for (int h = 0; h < CHUNKS; h++)
                v[u][h] = j < L.nslots ? __ldg(L.body + j * CHUNKS + h) : neg_slot();
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (s0 + u < L.nsteps) { // uniform
                const int j = (s0 + u) * THREADS + tid;
                float x[PER];
                unpack_clean(v[u], x);
                const unsigned valid = j < L.nslots ? 0xffu : 0u;
                if (!valid)
#pragma unroll
                    for (int i = 0; i < PER; i++)
                        x[i] = kdt_neg_inf();
                f(x, L.base + L.head + j * PER, valid);
            }
        }
    }
    float x[PER];
    int id;
    const unsigned valid = edge_slot(L, x, &id);
    f(x, id, valid);
}

// sum * e^(ref - M): a (reference, sum) pair moved to the row's max M
// (ref <= M: a reference is a logit of the row).  0 for ref = -inf.
__device__ __forceinline__ float
rescaled(float ref, float sum, float M)
{
    return ref == kdt_neg_inf() ? 0.0f : sum * kdt_exp2((ref - M) * KDT_LOG2E);
}

// One (reference, sum) pair a lane of a warp, and x a lane: *M gets the
// warp's largest x (a reference's upper bound, the max), the return the
// pairs' sum moved to it.  Every lane gets the same, in the same order.
__device__ __forceinline__ float
warp_pairs_sum(float ref, float sum, float x, float *M)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    float T = rescaled(ref, sum, x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        T += __shfl_xor_sync(0xffffffffu, T, o);
    *M = x;
    return T;
}

// ---- the phases of pass 1 ----------------------------------------------

// This block's chunk of row r into L: [c0, c0 + n), chunk starts a
// multiple of 8 logits apart (the launcher's split keeps every chunk
// non-empty), and where its 16-byte slots begin.
__device__ __forceinline__ void
chunk_layout(row_layout &L, const void *logits, int r, unsigned rank,
             unsigned S, int lg_s)
{
    const int per = (((V + (int)S - 1) >> lg_s) + 7) & ~7;
    const int c0 = kdt_imin(V, (int)rank * per);
    L.base = c0;
    L.n = kdt_imin(V - c0, per);
    L.row = (const unsigned char *)logits + ((long long)r * V + c0) * ESZ;
    int head = (int)((16u - ((unsigned)(unsigned long long)L.row & 15u)) & 15u) / ESZ;
    L.head = head < L.n ? head : L.n;
    L.nslots = (L.n - L.head) / PER;
    L.tail = L.n - L.head - L.nslots * PER;
    L.nsteps = (L.nslots + THREADS - 1) / THREADS;
    L.body = (const uint4 *)(L.row + L.head * ESZ);
}

// The loads first, so that DRAM is busy while the block sets up: slot tid
// (step 0) into first[], steps 1..PREFETCH into ring[].  Then the
// histogram and the counters are cleared; a barrier publishes them.
__device__ __forceinline__ void
start_pass1(topk_smem &sm, row_layout L, int nslots, uint4 (&first)[CHUNKS],
            uint4 (&ring)[PREFETCH][CHUNKS], int tid)
{
#pragma unroll
    for (int h = 0; h < CHUNKS; h++)
        first[h] = tid < nslots ? __ldg(L.body + tid * CHUNKS + h) : neg_slot();
#pragma unroll
    for (int q = 0; q < PREFETCH; q++) {
        const int j = (1 + q) * THREADS + tid;
#pragma unroll
        for (int h = 0; h < CHUNKS; h++)
            ring[q][h] = j < nslots ? __ldg(L.body + j * CHUNKS + h) : neg_slot();
    }
    for (int i = tid; i < NBINS; i += THREADS)
        sm.hist[i] = 0;
    if (tid == 0) {
        sm.cnt = 0;
        sm.lb = 0;
        sm.thr = kdt_neg_inf();
        sm.maxd = digit(kdt_neg_inf()); // the lowest digit a logit can have
        sm.nlb = 0;
        sm.kept = 0;
        sm.kept2 = 0;
        sm.rdone = 0;
    }
    __syncthreads();
}

// Step 0 seeds lb from the slot maxima (see the top of draft_topk.cu),
// then counts and appends the slot's logits at or above it.
__device__ __forceinline__ void
seed_step(topk_smem &sm, row_state &st, row_layout L,
          const uint4 (&first)[CHUNKS], int kc, int tid, int lane, int warp)
{
    float x[PER];
    const unsigned valid = tid < L.nslots ? 0xffu : 0u;
    const float lm = fold(st, x, unpack(first, x));
    if (valid)
        atomicAdd(&sm.hist[digit(lm)], 1u);
    // One atomic a warp on maxd (512 on one address serialise).
    const unsigned dmax = __reduce_max_sync(0xffffffffu, valid ? (unsigned)digit(lm) : 0u);
    if (lane == 0 && dmax)
        atomicMax(&sm.maxd, (int)dmax);
    __syncthreads();
    if (warp == 0)
        raise_lb(sm, kc);
    __syncthreads();
    if (SLOTS) {
        // The seed counts are slot counts already: the candidates'
        // stay, the others are under lb.
        if (valid && lm >= sm.thr)
            stage(sm, first, L.base + L.head + tid * PER, valid, lm, false);
    } else {
        if (valid)
            atomicAdd(&sm.hist[digit(lm)], ~0u); // -1 (mod 2^32): unseed
        __syncthreads();
        if (valid && lm >= sm.thr)
            keep(sm, x, L.base + L.head + tid * PER, valid, lm, sm.thr);
    }
}

// The rest of the chunk's slots, PREFETCH in flight a thread: each is
// folded into the exp-sum and, when it reaches thr, counted and appended
// (or staged); no barrier.  Loop-carried counters only (the compiler
// would rebuild values derived from the layout every step): `left` steps
// remain, the refill slot exists while `ahead` > 0 and the slot being
// folded while `ahead` > -PREFETCH * THREADS.
__device__ __forceinline__ void
stream_steps(topk_smem &sm, row_state &st, row_layout L,
             uint4 (&ring)[PREFETCH][CHUNKS], int kc, int tid, int lane,
             int warp)
{
    const uint4 *next = L.body + (long long)((1 + PREFETCH) * THREADS + tid) * CHUNKS;
    int ahead = L.nslots - ((1 + PREFETCH) * THREADS + tid);
    int id0 = L.base + L.head + (THREADS + tid) * PER;
    int tick = 1 + warp; // s + warp
    const int gap = (kc + 7) >> 3;
    for (int left = L.nsteps - 1; left > 0; left -= PREFETCH) {
#pragma unroll
        for (int q = 0; q < PREFETCH; q++) {
            if (q < left) { // uniform
                float x[PER];
                const bool in = ahead > -PREFETCH * THREADS;
                if (SLOTS) {
                    // Stage before the fold: ring[q] is reloaded
                    // before the exp-sum needs its registers.  A slot
                    // holding NaN (m is NaN) is staged whatever its
                    // other logits: rare, and harmless.
                    const float m = unpack(ring[q], x);
                    const float thr = vload(&sm.thr);
                    if (in && !(m < thr))
                        stage(sm, ring[q], id0, 0xffu, m, true);
#pragma unroll
                    for (int h = 0; h < CHUNKS; h++)
                        ring[q][h] = ahead > 0 ? __ldg(next + h) : neg_slot();
                    fold(st, x, m);
                } else {
                    const float lm = fold(st, x, unpack(ring[q], x));
#pragma unroll
                    for (int h = 0; h < CHUNKS; h++)
                        ring[q][h] = ahead > 0 ? __ldg(next + h) : neg_slot();
                    const float thr = vload(&sm.thr);
                    if (in && lm >= thr)
                        keep(sm, x, id0, 0xffu, lm, thr);
                }
                next += THREADS * CHUNKS;
                ahead -= THREADS;
                id0 += THREADS * PER;
                // A warp raises lb every RESCAN steps, and only when
                // `gap` keys were appended since the last raise began
                // (a scan of unchanged counts finds nothing new; a
                // few keys rarely lift a bin to KC).
                if ((tick + q) % RESCAN == 0) {
                    const int c = vload(&sm.cnt);
                    if (__shfl_sync(0xffffffffu, c - vload(&sm.rdone) >= gap, 0)) {
                        if (lane == 0) // atomic: others read it
                            atomicExch(&sm.rdone, c);
                        raise_lb(sm, kc);
                    }
                }
            }
        }
        tick += PREFETCH;
    }
}

// The chunk's head and tail logits (edge_slot), folded and kept like a
// slot's.
__device__ __forceinline__ void
edge_step(topk_smem &sm, row_state &st, row_layout L)
{
    float x[PER];
    int id;
    const unsigned valid = edge_slot(L, x, &id);
    const float lm = fold(st, x, x[0]);
    const float thr = vload(&sm.thr);
    if (valid && lm >= thr) {
        if (SLOTS) {
            const unsigned b = __float_as_uint(x[0]) >> 16; // logit 0
            const uint4 w = make_uint4(b, b, b, b);
            stage(sm, &w, id, valid, lm, true);
        } else {
            keep(sm, x, id, valid, lm, thr);
        }
    }
}

// This warp's (max, sum) from its threads' into red_m, red_s; the block's
// next barrier publishes them.
__device__ __forceinline__ void
warp_exp_sum(topk_smem &sm, const row_state &st, int lane, int warp)
{
    float m = st.run_m, s = st.run_s;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        const float mm = fmaxf(m, m2);
        s = rescaled(m, s, mm) + rescaled(m2, s2, mm);
        m = mm;
    }
    if (lane == 0) {
        sm.red_m[warp] = m;
        sm.red_s[warp] = s;
    }
}

// The chunk's (max, sum) from the warps' pairs into part_m, part_s, one a
// lane (not a serial loop), by the last warp: the staged slots sit in the
// first warps' registers, so it is the one with nothing else to do.
__device__ __forceinline__ void
chunk_exp_sum(topk_smem &sm, int lane, int warp)
{
    if (warp == WARPS - 1) {
        const float m = lane < WARPS ? sm.red_m[lane] : kdt_neg_inf();
        const float t = lane < WARPS ? sm.red_s[lane] : 0.0f;
        float M;
        const float T = warp_pairs_sum(m, t, m, &M);
        if (lane == 0) {
            sm.part_m = M;
            sm.part_s = T;
        }
    }
}
