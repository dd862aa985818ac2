// draft_topk.cu: docs/contract.md §1.  Per row of logits: the K largest
// (descending, ties to the lower token id, NaN as -inf) and their
// log-probabilities logit - logsumexp(row).
//
// Blocks of 512 threads; a row is split over a thread-block cluster of S
// blocks (S = 1, 2, 4 or 8, chosen by the host at launch: enough blocks to
// fill the GPU when there are few rows, one block per row when there are
// many).  Block `rank` of the cluster takes the rank-th chunk of the row,
// finds the chunk's K largest (sorted) and its (max, sum of exp(x - max)),
// and the blocks merge through distributed shared memory (below).  No
// workspace, one launch.
//
// Keys.  A logit x (NaN -> -inf, -0 -> +0) has the order-preserving key
// vkey(x) (32 bits; a bf16 logit only uses the top 16).  Its candidate key
// is c = (value bits << IB) | (V-1-id): unique per element, and c order is
// exactly "larger logit first, then lower id".  The top 12 bits of c (the
// top 12 of vkey: sign, exponent, 3 mantissa bits) are its "digit".
//
// Pass 1 (the only DRAM read).  Each thread streams its 8-logit slots
// (16-byte loads, PREFETCH slots in flight).  The common slot costs about
// five instructions a logit: the slot's maximum (packed bf16x2 max, NaN
// propagating), two compares, and per logit the exp-sum (unpack, FFMA,
// MUFU.EX2, FADD) against the thread's reference (a lazy maximum: see
// LAZY).  Two rare paths:
//  - the slot's maximum is over the reference's limit, or is NaN: the
//    slot is sanitised (NaN -> -inf) and folded, moving the reference;
//  - the slot's maximum reaches the block's threshold `thr` (the smallest
//    logit of digit `lb`): its logits of digit >= lb are counted in a
//    shared 4096-bin digit histogram and their keys appended to a shared
//    buffer, by the lanes that hold them (two shared atomics a key).
// lb is raised as the histogram fills: every RESCAN steps a warp that
// finds at least KC/8 keys appended since the last raise began scans the
// histogram down from the top digit and sets lb to the highest bin b with
// at least KC counted logits at digits >= b (KC = min(K, chunk length)).
// That is always a valid lower bound for the KC-th largest digit (counts
// only grow; a stale read only undercounts), and every logit of digit >=
// the final lb has been counted and appended, because lb never exceeded the
// final value.  The first slot of every thread seeds lb: the KC-th largest
// slot maximum is at most the KC-th largest logit, so a histogram of the
// 512 slot maxima gives a valid lb before anything is appended.
//
// Slot mode (SLOTS: bf16 and K <= 64, the drafter's case).  A candidate
// slot is appended whole (its 16 bytes and its first id, SCAP = 1536
// slots in the candidate buffer) and counted once, at the digit of its
// maximum: ~40 instructions a warp for a candidate step against ~120 for
// appending keys one by one.  The histogram then counts slots, and the
// same argument holds: KC slots whose maxima have digit >= b hold KC
// distinct logits of digit >= b, and a slot holding a logit of digit >=
// the final lb has a maximum that passed every thr, so it was staged.
// After pass 1, each thread takes its staged slots into registers.  The
// final lb is usually the threshold digit itself (the KC-th largest slot
// maximum's digit is the KC-th largest logit's, unless a slot holds two
// of the top), so the staged logits of digit >= lb, at least KC of them
// and all of the chunk's, are the candidates: no exact count.  Only when
// they overflow the buffer (flat rows) are the bins [lb, maxd] recounted
// exactly from the staged slots' logits (or, when more than SCAP slots
// were staged, from the chunk read again), and the selection below goes
// on as in key mode.
//
// Then: the exact histogram at digits >= lb gives the threshold digit tb
// (A logits above it, E in it, A < KC <= A + E).  If the buffer did not
// overflow, its keys (or staged logits) of digit >= tb (A + E of them) are
// the candidates.
// Otherwise (ties or flat rows) the chunk is read again (L2): while A + E
// exceeds the buffer, a histogram pass narrows the threshold by the next
// 12 bits of c (value bits, then id bits), and a last pass collects the
// keys >= the threshold.  When the candidates are many (> 256 and > 2
// KC: a coarse bin, or a long chunk), the exact histogram of their digits
// gives tb (in slot mode) and the E keys of digit tb are narrowed by
// their next 8 bits (a 256-bin histogram in shared memory), leaving ~KC
// keys.  The <= CAP candidates are sorted, descending: up to 256 by rank
// (each key's place is the number of keys above it, counted by a few
// threads a key), more by a bitonic sort.  The first KC are the chunk's
// top.
//
// Merge (S > 1).  Each block publishes its top (K keys, zero-padded; 0 is
// below every real key) and its (max, sum) in its shared memory; after a
// cluster barrier every block copies the S lists into its own buffer
// (S * K <= CAP, the host's rule) and ranks its own keys: the global rank
// of key c is its index in its list plus, for every other list, the number
// of keys above c (binary search; keys are unique).  Keys of rank < K are
// written by the block that owns them, so every output is written once.
// Every block computes the row's logsumexp from the same S pairs in the
// same order, so all write the same value.  A second cluster barrier keeps
// every block's shared memory alive until the others have read it.
//
// Slots past the chunk's end read as -inf (no per-logit validity test).
//
// Cost (SASS, sm_90, V = 163840, K = 64, bf16): the common step is 73
// instructions a warp for 8 logits a lane (26 of them the exp-sum), a
// candidate step ~40 more in slot mode; MUFU (16 exp/clk/SM) is not the
// bound.  R = 1 (15 rows, S = 8: 120 blocks) is latency-bound (prologue,
// barriers, merge); R = 64 (960 rows, S = 1: 3.6 waves of 264 blocks)
// is issue-bound at 2 blocks an SM.  K = 1024 usually overflows the
// buffer (~7k keys pass lb) and pays one more read of the chunk (from L2)
// and a 2048-key sort.
#include "kdt_draft_topk_plan.h"
#include "kdt_limits.h"
#include "kdt_math.cuh"
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
constexpr int THREADS = KDT_DT_THREADS;
constexpr int WARPS = THREADS / 32;
constexpr int PER = 8;                        // logits per slot
constexpr int CHUNKS = PER * ESZ / 16;        // 16-byte loads per slot
// Slots in flight per thread: 48 KB (bf16) / 64 KB (f32) per block; 8
// bf16 slots spill at the 64 registers that two blocks per SM allow.
constexpr int PREFETCH = DTYPE ? 6 : 4;
constexpr int DBITS = KDT_DT_DIGIT_BITS;      // digit width
constexpr int NBINS = 1 << DBITS;
constexpr int CAP = KDT_DT_CAP;               // candidate buffer (power of 2)
constexpr int PT = CAP / THREADS;             // buffer entries per thread
constexpr int RESCAN = 4;                     // a warp raises lb every 4th step
// Slot mode (bf16, K <= 64): pass 1 appends whole candidate slots, not
// keys (see the top of the file); SCAP slots of 16 bytes and their
// metadata fill the candidate buffer, SPT per thread at the selection.
constexpr bool SLOTS = DTYPE == 1 && K <= 64;
constexpr int SCAP = 1536;
constexpr int SPT = SCAP / THREADS;
// Candidates sorted by rank (n^2 compares over the block) up to this many;
// a bitonic sort above.
constexpr int RANK_SORT_MAX = 256;
static_assert(RANK_SORT_MAX <= THREADS, "a thread (at least) a key");

__host__ __device__ constexpr int bits_for(int x) { int b = 0; while ((1LL << b) <= x) b++; return b; }
constexpr int VB = DTYPE ? 16 : 32;           // value bits of a key
constexpr int IB = bits_for(V - 1);           // id bits (V-1-id)
constexpr int W = VB + IB;                    // candidate key width
constexpr int DSHIFT = W - DBITS;             // digit = c >> DSHIFT
constexpr int RB = DSHIFT < 8 ? DSHIFT : 8;   // bits of the narrowing below tb

static_assert(K >= 1 && K <= KDT_LIMIT_K && K <= V, "1 <= K <= min(V, K's limit)");
static_assert(V <= KDT_LIMIT_V, "ids fit 24 bits (slot mode's metadata)");
static_assert(K <= CAP && W <= 64, "candidate buffer and key width");

typedef unsigned long long u64;

// A hook for the development tools, empty in the library: phase marks for
// tools/dev/dt_phases.cu (thread 0 of each block records the time at each
// numbered point).
#ifndef KDT_DT_PHASE
#define KDT_DT_PHASE(i) ((void)0)
#endif

struct topk_smem {
    u64 buf[CAP];          // candidate keys; at the merge, every block's top
    unsigned hist[NBINS];  // digit histogram; after selection, this block's
                           // top K keys (u64, K <= 1024: 8 KB of its 16)
    int cnt;               // appends to buf (may exceed CAP: overflow)
    int lb;                // lower bound on the KC-th largest digit
    float thr;             // a logit below it has digit < lb (see thr_of)
    int maxd;              // >= every counted digit
    int nlb, kept, kept2;  // compaction counters
    int rdone;             // cnt when the last lb raise began
    int sel[4];            // threshold search result: bin, above, at
    float red_m[WARPS], red_s[WARPS];
    float part_m, part_s;  // this block's chunk: max, sum of exp(x - max)
};
// The dynamic shared memory the launcher gives a block.
constexpr int SMEM_BYTES = KDT_DT_SMEM;
static_assert(sizeof(topk_smem) <= SMEM_BYTES, "the plan holds topk_smem");
static_assert(K * 8 <= NBINS * 4, "the top K keys fit in the histogram");
static_assert(SCAP * 20 <= CAP * 8 && SCAP % THREADS == 0,
              "slot mode: the staged slots and their metadata fill buf");
// The most blocks the launcher's split (kdt_dt_split) gives a row of this
// shape, on any device: their tops fit buf at the merge, and every chunk
// holds a logit.
constexpr int S_MOST = (int)kdt_dt_split(KDT_DT_MAX_SPLIT, 1ll << 40, 1, V, K);
static_assert(S_MOST * K <= CAP &&
                  (S_MOST - 1) * ((((V + S_MOST - 1) / S_MOST) + 7) & ~7) < V,
              "the split keeps S * K <= CAP and no chunk empty");

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

// Thread-block cluster (sm_90+): this block's rank and the cluster size
// (1 and 0 when launched without a cluster).
__device__ __forceinline__ unsigned
cluster_size()
{
    unsigned r;
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ unsigned
cluster_rank()
{
    unsigned r;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Every thread of every block of the cluster must call both.  The
// release costs a GPU-scope memory barrier (MEMBAR.ALL.GPU on sm_90).
__device__ __forceinline__ void
cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

// An arrive that publishes nothing: only "this block is past here".
__device__ __forceinline__ void
cluster_arrive_relaxed()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

__device__ __forceinline__ void
cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The shared-memory address `p` of this block, in block `rank`.
__device__ __forceinline__ unsigned
cluster_map(const void *p, unsigned rank)
{
    unsigned a, d;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
        : "=r"(a) : "l"(p));
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(rank));
    return d;
}

__device__ __forceinline__ u64
cluster_load_u64(unsigned addr)
{
    u64 v;
    asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ float
cluster_load_f32(unsigned addr)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
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

// Compare-exchange pair i of a bitonic step (distance j, block size k,
// both powers of two): descending where the block's k bit is 0.
__device__ __forceinline__ void
bitonic_step(u64 *buf, int i, int j, int k)
{
    const int lo = ((i & ~(j - 1)) << 1) | (i & (j - 1)), hi = lo + j;
    const u64 a = buf[lo], b = buf[hi];
    const bool desc = (lo & k) == 0;
    if (desc ? (a < b) : (a > b)) {
        buf[lo] = b;
        buf[hi] = a;
    }
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

// The RB bits of key c below its digit.
__device__ __forceinline__ int
sub_digit(u64 c)
{
    return (int)(c >> (DSHIFT - RB)) & ((1 << RB) - 1);
}

// Keys > c in a descending list of K unique keys (zero-padded): the
// length of its prefix above c, by fixed halving steps (K is a constant),
// so the searches of the S lists are independent chains that interleave.
__host__ __device__ constexpr int top_pow2(int x) { return x <= 1 ? 1 : 2 * top_pow2(x / 2); }
constexpr int K_POW2 = top_pow2(K); // the largest power of two <= K

__device__ __forceinline__ int
count_above(const u64 *list, u64 c)
{
    int pos = 0;
#pragma unroll
    for (int step = K_POW2; step > 0; step >>= 1)
        if (pos + step <= K && list[pos + step - 1] > c)
            pos += step;
    return pos;
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
kdt_draft_topk(kdt_draft_topk_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    topk_smem &sm = *reinterpret_cast<topk_smem *>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned S = cluster_size() ? cluster_size() : 1u;
    const unsigned rank = S > 1 ? cluster_rank() : 0u;
    const int lg_s = __ffs((int)S) - 1; // S is a power of two
    const int r = (int)(blockIdx.x >> lg_s);
    KDT_DT_PHASE(0);

    // This block's chunk of row r: [c0, c0 + n), chunk starts a multiple
    // of 8 logits apart (the host keeps every chunk non-empty).
    row_layout L;
    {
        const int per = (((V + (int)S - 1) >> lg_s) + 7) & ~7;
        const int c0 = kdt_imin(V, (int)rank * per);
        L.base = c0;
        L.n = kdt_imin(V - c0, per);
        L.row = (const unsigned char *)p.logits + ((long long)r * V + c0) * ESZ;
        int head = (int)((16u - ((unsigned)(unsigned long long)L.row & 15u)) & 15u) / ESZ;
        L.head = head < L.n ? head : L.n;
        L.nslots = (L.n - L.head) / PER;
        L.tail = L.n - L.head - L.nslots * PER;
        L.nsteps = (L.nslots + THREADS - 1) / THREADS;
        L.body = (const uint4 *)(L.row + L.head * ESZ);
    }
    const int kc = kdt_imin(K, L.n); // this chunk's top: KC keys

    // Loads first: slot tid (step 0) and steps 1..PREFETCH.
    uint4 first[CHUNKS];
#pragma unroll
    for (int h = 0; h < CHUNKS; h++)
        first[h] = tid < L.nslots ? __ldg(L.body + tid * CHUNKS + h) : neg_slot();
    uint4 ring[PREFETCH][CHUNKS];
#pragma unroll
    for (int q = 0; q < PREFETCH; q++) {
        const int j = (1 + q) * THREADS + tid;
#pragma unroll
        for (int h = 0; h < CHUNKS; h++)
            ring[q][h] = j < L.nslots ? __ldg(L.body + j * CHUNKS + h) : neg_slot();
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
    KDT_DT_PHASE(1);
    row_state st = {kdt_neg_inf(), 0.0f, __int_as_float(0x7fffffff)};

    // Step 0 seeds lb from the slot maxima (see the top of the file), then
    // counts and appends the slot's logits at or above it.
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

    KDT_DT_PHASE(2);
    // The rest of the chunk: no barrier.  Loop-carried counters only (the
    // compiler would rebuild values derived from the layout every step):
    // `left` steps remain, the refill slot exists while `ahead` > 0 and
    // the slot being folded while `ahead` > -PREFETCH * THREADS.
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
    KDT_DT_PHASE(3);
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

    // This chunk's (max, sum): combine the threads' (max, sum).
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
    __syncthreads();
    KDT_DT_PHASE(4);

    // The chunk's (max, sum) from the warps' pairs, one a lane (not a
    // serial loop), by the last warp: the staged slots below sit in the
    // first warps' registers, so it is the one with nothing else to do.
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

    // Slot mode: each thread takes its staged slots into registers (few
    // are staged, ~KC ln(steps): whole warps past them skip the work).
    uint4 sw[SLOTS ? SPT : 1];
    int smeta[SLOTS ? SPT : 1];
    const int nsl = sm.cnt;
    if (SLOTS && nsl <= SCAP) {
        const uint4 *slots = reinterpret_cast<const uint4 *>(sm.buf);
        const int *meta = reinterpret_cast<const int *>(slots + SCAP);
#pragma unroll
        for (int k = 0; k < SPT; k++) {
            const int e = tid + THREADS * k;
            smeta[k] = 0; // no valid logit
            if (e < nsl) {
                sw[k] = slots[e];
                smeta[k] = meta[e];
            }
        }
    }
    // This thread's staged logits of digit >= d, a bit each; their count.
    auto slot_bits = [&](int d, unsigned *bits) {
        int c = 0;
#pragma unroll
        for (int k = 0; k < SPT; k++) {
            bits[k] = 0;
            if (__any_sync(0xffffffffu, tid + THREADS * k < nsl)) {
#pragma unroll
                for (int i = 0; i < PER; i++)
                    if (((smeta[k] >> (24 + i)) & 1) && digit(slot_logit(sw[k], i)) >= d)
                        bits[k] |= 1u << i;
                c += __popc(bits[k]);
            }
        }
        return c;
    };
    // Those logits as keys, from buf[at] on.
    auto slot_write = [&](const unsigned *bits, int at) {
#pragma unroll
        for (int k = 0; k < SPT; k++)
            if (bits[k])
#pragma unroll
                for (int i = 0; i < PER; i++)
                    if ((bits[k] >> i) & 1)
                        sm.buf[at++] = ckey(slot_logit(sw[k], i), (smeta[k] & 0xffffff) + i);
    };

    int n = 0;     // candidates in buf[0..n), the KC largest among them
    int from = -1; // buf holds exactly the chunk's keys of digit >= from
    bool fast = false; // from = lb, taken without the exact histogram
    // Slot mode, the common case: every logit of digit >= lb is in a
    // staged slot, and lb is usually the threshold digit itself (the
    // KC-th largest slot maximum's digit), so the staged logits of digit
    // >= lb are the candidates, with no exact recount: ~KC of them.
    if (SLOTS && nsl <= SCAP && kc > 0) {
        const int lb = sm.lb;
        unsigned bits[SPT];
        const int at = warp_append(slot_bits(lb, bits), &sm.nlb);
        __syncthreads(); // every slot is in registers; nlb is final
        n = sm.nlb;
        if (n <= CAP) { // block-uniform
            slot_write(bits, at);
            from = lb;
            fast = true;
        }
    }
    KDT_DT_PHASE(5);

    // Otherwise: the threshold digit tb from the exact histogram at digits
    // >= lb (in slot mode the histogram counted slots: count the staged
    // slots' logits of digit >= lb instead, or the chunk's, from L2, when
    // more slots were staged than the buffer holds).
    if (from < 0) { // block-uniform
        if (SLOTS) {
            const int lb = sm.lb, top = sm.maxd;
            for (int i = lb + tid; i <= top; i += THREADS)
                sm.hist[i] = 0;
            __syncthreads();
            if (nsl <= SCAP) {
#pragma unroll
                for (int k = 0; k < SPT; k++)
                    if (tid + THREADS * k < nsl)
#pragma unroll
                        for (int i = 0; i < PER; i++)
                            if ((smeta[k] >> (24 + i)) & 1) {
                                const int d = digit(slot_logit(sw[k], i));
                                if (d >= lb)
                                    atomicAdd(&sm.hist[d], 1u);
                            }
            } else {
                for_row(L, [&](const float *x, int id0, unsigned valid) {
#pragma unroll
                    for (int i = 0; i < PER; i++)
                        if (((valid >> i) & 1u) && digit(x[i]) >= lb)
                            atomicAdd(&sm.hist[digit(x[i])], 1u);
                });
            }
            __syncthreads();
        }
        // tb is exact: every logit of digit >= lb (and tb >= lb) was
        // counted.
        select_bin(sm, sm.maxd, sm.lb, (unsigned)kc);
        __syncthreads();
    }
    KDT_DT_PHASE(6);
    if (from >= 0 || kc == 0) {
        // done above (kc = 0: no candidates)
    } else if (SLOTS && nsl <= SCAP && sm.sel[1] + sm.sel[2] <= CAP) {
        // Keep the staged logits of digit >= tb (A + E of them) as keys.
        unsigned bits[SPT];
        const int at = warp_append(slot_bits(sm.sel[0], bits), &sm.kept);
        slot_write(bits, at);
        n = sm.sel[1] + sm.sel[2];
        from = sm.sel[0];
    } else if (!SLOTS && sm.cnt <= CAP) {
        // Keep the buffered keys of digit >= tb: A + E of them.
        const int tb = sm.sel[0], cnt = sm.cnt;
        n = sm.sel[1] + sm.sel[2];
        from = tb;
        u64 v[PT];
#pragma unroll
        for (int e = 0; e < PT; e++) {
            const int i = tid + THREADS * e;
            v[e] = i < cnt ? sm.buf[i] : 0ull;
        }
        __syncthreads();
        int c = 0;
#pragma unroll
        for (int e = 0; e < PT; e++)
            c += tid + THREADS * e < cnt && (int)(v[e] >> DSHIFT) >= tb;
        int at = warp_append(c, &sm.kept);
#pragma unroll
        for (int e = 0; e < PT; e++)
            if (tid + THREADS * e < cnt && (int)(v[e] >> DSHIFT) >= tb)
                sm.buf[at++] = v[e];
    } else {
        // Overflow: narrow the threshold over the chunk (12 bits of c per
        // pass) until at most CAP keys reach it, then collect them.
        int bits = DBITS;                 // resolved top bits of c
        u64 prefix = (u64)sm.sel[0];      // their value
        int need = kc - sm.sel[1];        // still needed among the prefix
        n = kc - need + sm.sel[2];        // keys with top bits >= prefix
        while (n > CAP) {
            const int d = W - bits < DBITS ? W - bits : DBITS;
            const int hi = W - bits, lo = hi - d;
            __syncthreads(); // hist and sel are rewritten
            for (int i = tid; i < NBINS; i += THREADS)
                sm.hist[i] = 0;
            __syncthreads();
            for_row(L, [&](const float *x, int id0, unsigned valid) {
#pragma unroll
                for (int i = 0; i < PER; i++)
                    if ((valid >> i) & 1u) {
                        const u64 c = ckey(x[i], id0 + i);
                        if ((c >> hi) == prefix)
                            atomicAdd(&sm.hist[(int)(c >> lo) & ((1 << d) - 1)], 1u);
                    }
            });
            __syncthreads();
            select_bin(sm, (1 << d) - 1, 0, (unsigned)need);
            __syncthreads();
            prefix = (prefix << d) | (u64)sm.sel[0];
            bits += d;
            need -= sm.sel[1];
            n = kc - need + sm.sel[2];
        }
        const u64 thr = prefix << (W - bits);
        for_row(L, [&](const float *x, int id0, unsigned valid) {
            unsigned m = 0;
#pragma unroll
            for (int i = 0; i < PER; i++)
                if (((valid >> i) & 1u) && ckey(x[i], id0 + i) >= thr)
                    m |= 1u << i;
            if (__any_sync(0xffffffffu, m != 0u)) {
                int at = warp_append(__popc(m), &sm.kept);
#pragma unroll
                for (int i = 0; i < PER; i++)
                    if ((m >> i) & 1u)
                        sm.buf[at++] = ckey(x[i], id0 + i);
            }
        });
    }

    KDT_DT_PHASE(7);
    // Too many candidates for the rank sort, and more than twice KC (a
    // coarse bin, or a long chunk): narrow them in shared memory, no
    // re-read.  tb and A (the keys above tb) come from the keys' digit
    // histogram when buf holds the digits >= lb; then the E keys of digit
    // tb are narrowed by their next RB bits (an RB-bit histogram), leaving
    // ~KC keys to sort.
    if (RB > 0 && from >= 0 && n > RANK_SORT_MAX && n > 2 * kc) { // uniform
        __syncthreads(); // the compaction's keys are in buf
        u64 v[PT];
#pragma unroll
        for (int e = 0; e < PT; e++) {
            const int i = tid + THREADS * e;
            v[e] = i < n ? sm.buf[i] : 0ull;
        }
        if (fast) {
            // tb and A of the keys in buf.
            const int top = sm.maxd;
            for (int i = from + tid; i <= top; i += THREADS)
                sm.hist[i] = 0;
            __syncthreads();
#pragma unroll
            for (int e = 0; e < PT; e++)
                if (tid + THREADS * e < n)
                    atomicAdd(&sm.hist[(int)(v[e] >> DSHIFT)], 1u);
            __syncthreads();
            select_bin(sm, top, from, (unsigned)kc);
        }
        __syncthreads(); // sel is final; the digit histogram is read
        const int tb = sm.sel[0], A = sm.sel[1];
        for (int i = tid; i < (1 << RB); i += THREADS)
            sm.hist[i] = 0;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < PT; e++)
            if (tid + THREADS * e < n && (int)(v[e] >> DSHIFT) == tb)
                atomicAdd(&sm.hist[sub_digit(v[e])], 1u);
        __syncthreads();
        select_bin(sm, (1 << RB) - 1, 0, (unsigned)(kc - A));
        __syncthreads();
        const int b2 = sm.sel[0];
        const int n2 = A + sm.sel[1] + sm.sel[2];
        int c = 0;
#pragma unroll
        for (int e = 0; e < PT; e++) {
            const int d = (int)(v[e] >> DSHIFT);
            c += tid + THREADS * e < n && (d > tb || (d == tb && sub_digit(v[e]) >= b2));
        }
        int at = warp_append(c, &sm.kept2);
#pragma unroll
        for (int e = 0; e < PT; e++) {
            const int d = (int)(v[e] >> DSHIFT);
            if (tid + THREADS * e < n && (d > tb || (d == tb && sub_digit(v[e]) >= b2)))
                sm.buf[at++] = v[e];
        }
        n = n2;
    }

    KDT_DT_PHASE(8);
    // Sort the n candidates, descending.  Few (the drafter's case): by
    // rank, each key's place being the number of keys above it (keys are
    // unique), G threads a key; a handful of loads and compares a thread
    // and two barriers, against ~log2(n)^2/2 dependent steps of a bitonic
    // sort run by the few warps that n keys give work.
    __syncthreads();
    if (n <= RANK_SORT_MAX) { // block-uniform
        int g = 1;
        while (g < 32 && g * 2 * n <= THREADS)
            g <<= 1;
        const int i = tid / g, sub = tid & (g - 1); // n <= THREADS / g
        u64 key = 0;
        int above = 0;
        if (i < n) {
            key = sm.buf[i];
#pragma unroll 4
            for (int j = sub; j < n; j += g)
                above += sm.buf[j] > key;
        }
        for (int o = 1; o < g; o <<= 1) // the g lanes of a key: one warp
            above += __shfl_xor_sync(0xffffffffu, above, o);
        __syncthreads();
        if (i < n && sub == 0)
            sm.buf[above] = key;
        __syncthreads();
    } else {
        // Bitonic, padded with 0 (below every key: the smallest real
        // one, -inf at id V-1, is 0x007f... << IB).
        int P = 1;
        while (P < n)
            P <<= 1;
        for (int i = n + tid; i < P; i += THREADS)
            sm.buf[i] = 0ull;
        __syncthreads();
        // A step of distance j >= 64 touches the whole buffer (block
        // barrier); the steps of distance <= 32 that follow stay inside
        // 64-key segments, one per warp (pairs i..i+31 of a 32-aligned
        // run), so they need only __syncwarp: a sort of P keys has about
        // log2(P)^2/2 steps but only ~log2(P/64)^2/2 block barriers.  Up
        // to k = 64 every step stays in its warp's segment, so the block
        // barrier comes only before a step of distance >= 64 and at the
        // end.
        for (int k = 2; k <= P; k <<= 1) {
            int j = k >> 1;
            for (; j >= 64; j >>= 1) {
                for (int i = tid; i < P / 2; i += THREADS)
                    bitonic_step(sm.buf, i, j, k);
                __syncthreads();
            }
            for (int base = warp * 32; base < P / 2; base += THREADS) {
                const int i = base + lane;
                for (int jj = j; jj > 0; jj >>= 1) {
                    if (i < P / 2)
                        bitonic_step(sm.buf, i, jj, k);
                    __syncwarp();
                }
            }
            if (k >= 64 || k == P)
                __syncthreads();
        }
    }

    KDT_DT_PHASE(9);
    if (S == 1) {
        // The block is the row: buf[0..K) is the answer, buf[0] its max.
        const float M = key_logit(sm.buf[0]);
        const float log_s = logf(rescaled(sm.part_m, sm.part_s, M));
        for (int k = tid; k < K; k += THREADS) {
            const u64 key = sm.buf[k];
            const float x = key_logit(key);
            p.ids[(long long)r * K + k] = key_id(key);
            p.lp[(long long)r * K + k] = M == kdt_neg_inf() ? kdt_neg_inf() : (x - M) - log_s;
        }
        KDT_DT_PHASE(14);
        return;
    }

    // Merge the S chunks' tops (see the top of the file).  Publish ours.
    u64 *top = reinterpret_cast<u64 *>(sm.hist);
    for (int k = tid; k < K; k += THREADS)
        top[k] = k < kc ? sm.buf[k] : 0ull;
    __syncthreads();
    KDT_DT_PHASE(10);
    cluster_arrive();
    cluster_wait();
    KDT_DT_PHASE(11);
    // Every list into buf[j * K ..].  Warp 0, lane j < S: chunk j's
    // (max, sum) and first key; the row's max M is the best first key
    // (chunks are never empty, so no list is all padding), and log of
    // the row's sum goes beside it.  Every block reduces the same S pairs
    // in the same lane order, so all write the same log-probs.
    for (int i = tid; i < (int)S * K; i += THREADS) {
        const unsigned j = (unsigned)(i / K);
        sm.buf[i] = j == rank ? top[i % K] : cluster_load_u64(cluster_map(top + i % K, j));
    }
    if (warp == 0) {
        float m = kdt_neg_inf(), s = 0.0f, first = kdt_neg_inf();
        if (lane < (int)S) {
            const unsigned j = (unsigned)lane;
            m = cluster_load_f32(cluster_map(&sm.part_m, j));
            s = cluster_load_f32(cluster_map(&sm.part_s, j));
            first = key_logit(j == rank ? top[0] : cluster_load_u64(cluster_map(top, j)));
        }
        float M;
        const float T = warp_pairs_sum(m, s, first, &M);
        if (lane == 0) { // part_m and part_s are still being read
            sm.red_m[0] = M;
            sm.red_s[0] = logf(T);
        }
    }
    __syncthreads();
    KDT_DT_PHASE(12);
    // This block is done reading the others: its remote loads have
    // returned (their values are in buf), so nothing needs releasing.
    cluster_arrive_relaxed();
    // A key's rank: its index in its list plus, for every other list,
    // the keys above it there (a binary search; keys are unique).  S
    // lanes a key, one list each, so the searches run side by side.
    const float M = sm.red_m[0], log_s = sm.red_s[0];
    const int j = tid & ((int)S - 1);
    for (int k0 = 0; k0 < kc; k0 += THREADS / (int)S) { // uniform
        const int k = k0 + (tid >> lg_s);
        const u64 key = k < kc ? sm.buf[rank * K + k] : 0ull;
        int c = k < kc && j != (int)rank ? count_above(sm.buf + j * K, key) : 0;
        for (int o = 1; o < (int)S; o <<= 1) // S lanes of one warp
            c += __shfl_xor_sync(0xffffffffu, c, o);
        const int pos = k + c;
        if (j == 0 && k < kc && pos < K) {
            const float x = key_logit(key);
            p.ids[(long long)r * K + pos] = key_id(key);
            p.lp[(long long)r * K + pos] = M == kdt_neg_inf() ? kdt_neg_inf() : (x - M) - log_s;
        }
    }
    KDT_DT_PHASE(13);
    cluster_wait(); // the others are done reading this block
    KDT_DT_PHASE(14);
}
