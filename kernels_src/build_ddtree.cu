// build_ddtree.cu: docs/contract.md §2.  Best-first selection of each
// request's draft tree from the drafter's per-depth top-K, then the tree's
// rows: tokens, parents, depths, RoPE positions, child/sibling links,
// scores and ancestor masks, with padded rows past n_nodes.
//
// One block per request, two ways to select the nodes; both give the
// loop's output bit for bit.
//
// The threshold path (well-formed input: every row the loop reads sorted
// non-increasing after NaN -> -inf, every log-prob <= 0; budget above
// LOOP_MAX_B).  Then a node's successors never score higher than it (a
// child adds a log-prob <= 0, a sibling adds a smaller one, and f32
// addition is monotone), so the loop emits the prefixes in the global
// order (score descending, rank path ascending, a prefix before its
// extensions) and its result is the first B of that order.  The block
// searches a threshold T with B <= count(score >= T) <= CAP, enumerating
// the prefixes that reach T level by level (a prefix's children that do
// are a rank prefix of its row: one search, each score the very f32
// addition the loop makes).  The first T comes from the single-deviation
// prefixes (0, .., 0, k) (sd_bound), later ones from Newton steps on
// log(count).  Then the first B of that set by (score, rank path) come
// from a counting sort by score and a count within each score bin
// (rank_top).  When no such finite T is found (-inf scores needed, fewer
// prefixes than B, more ties at one score than CAP allows, or too many
// rounds), it falls back to:
//
// The loop (every other input).  Warp 0 runs the spec's loop itself, so
// the output is the loop's for every input (unsorted rows, positive
// log-probs, NaN, inf).  The loop's candidate set holds at
// most one candidate per built node (its next child: the first child when
// the node is built, the next sibling when a child is taken), so candidate
// "slot" s belongs to node s.  Slots are spread over the warp's lanes
// (slot s in lane s % 32, register s / 32) as order-preserving 32-bit keys
// of their scores; a step is a warp max (redux.sync), a ballot for ties
// (broken by comparing rank paths, walking the parents in shared memory),
// two slot updates and one lane's rescan of its registers.  No block-wide
// barrier sits on the loop's path.  Meanwhile the other warps write the
// rows that are padding whatever the loop does (past budget + 1); after it
// the whole block writes the tree's rows.
#include "kdt_build_ddtree_plan.h"
#include "kdt_limits.h"
#include "kdt_math.cuh"
#include "kdt_params.h"

#ifndef KDT_L
#error "build_ddtree needs -DKDT_L"
#endif
#ifndef KDT_K
#error "build_ddtree needs -DKDT_K"
#endif
#ifndef KDT_N_MAX
#error "build_ddtree needs -DKDT_N_MAX"
#endif

constexpr int L = KDT_L;          // draft depths
constexpr int K = KDT_K;          // candidates per depth
constexpr int N_MAX = KDT_N_MAX;  // rows per tree, root included
constexpr int W = (N_MAX + 31) / 32;   // mask words per row
constexpr int THREADS = KDT_BD_THREADS;
constexpr int SLOTS_PER_LANE = (N_MAX + 31) / 32;
constexpr int LOOP_MAX_B = KDT_BD_LOOP_MAX_B; // the loop up to this budget

// Shared memory: the layout in kdt_build_ddtree_plan.h, which the
// launcher reads too.  A loop slot keeps the log-probs its candidate's
// successors will need (its next sibling's, its first child's), so a step
// reads everything it needs in one round of independent shared-memory
// loads.  Ranks past KS (KS < K) are read from global memory (L2), with
// the same NaN -> -inf, so both paths see the same values; a tree reaches
// past rank 511 of a row only where the row is nearly flat.
constexpr int KS = (int)kdt_bd_ks(L, K, N_MAX);
constexpr unsigned OFF_NODE = (unsigned)kdt_bd_off_node(L, KS);
constexpr unsigned OFF_SHORT = (unsigned)kdt_bd_off_short(L, KS, N_MAX);
constexpr unsigned OFF_REGION = (unsigned)kdt_bd_off_region(L, KS, N_MAX);
constexpr int CAP = (int)kdt_bd_cap(L, KS, N_MAX);
constexpr bool FAST = kdt_bd_fast(L, N_MAX, CAP);
constexpr unsigned REGION_BYTES = (unsigned)kdt_bd_region_bytes(L, K, N_MAX);
constexpr unsigned SMEM_BYTES = (unsigned)kdt_bd_smem_bytes(L, K, N_MAX);
static_assert(OFF_REGION + REGION_BYTES == SMEM_BYTES, "one layout");
static_assert(SMEM_BYTES <= KDT_BD_SMEM_LIMIT,
              "every allowed shape fits sm_120's 99 KiB");

// The first threshold, when it can be had, comes from the single-deviation
// prefixes (0, .., 0, k): the B-th best of their scores, binned at
// 1/SD_SCALE (SD_BINS bins below 0), is a threshold that at least B
// prefixes reach.  The full count there is a few times B (prefixes that
// deviate twice or more come on top), so round 1 aims SD_SHIFT above it.
// On kdtree-bench's input this takes the search from 2.0-2.2 rounds (15-16
// levels at B = 512) to 1.0-1.5 (7-12 levels); see docs/performance.md.
constexpr int SD_BINS = KDT_BD_SD_BINS;
constexpr float SD_SCALE = 16.0f;
constexpr float SD_SHIFT = 0.5f;
// A window [B, CAP] narrower than 4 B (B = 1024 in 2048 elements) wants a
// count nearer B, so round 1 aims SD_NARROW ln(4 B / CAP) higher still.
// On the bench's B = 1024 requests (host emulator, 10 of them; CAP = 2 B)
// a first shift of 0.5, 1.0, 1.5, 2.0 and 3.0 took 3.4, 2.7, 2.0, 1.7 and
// 1.8 rounds (72, 68, 63, 64 and 71 barriers); 1.5 = 0.5 + 1.44 ln 2.
// B = 64 and 512 (CAP >= 4 B) are unchanged.
constexpr float SD_NARROW = 1.44f;

// After the threshold path the region is free: the ancestor masks are
// built there (a thread a row, odd row stride: no bank conflicts) and
// copied out by consecutive threads, rather than each thread storing its
// row's W words W*4 bytes apart from its neighbours' (a sector a word),
// MASK_ROWS rows at a time (all of them up to N_MAX = 513; 372 of 1025).
constexpr bool STAGE_MASKS = FAST;
constexpr int MASK_ROWS =
    REGION_BYTES / (4u * W) < (unsigned)N_MAX ? (int)(REGION_BYTES / (4u * W)) : N_MAX;
static_assert(!STAGE_MASKS || MASK_ROWS >= 32 || MASK_ROWS == N_MAX,
              "a useful chunk of rows");
// Rounds of the threshold search before giving up (the loop takes over),
// and its first threshold: above a typical tree's last score (a drafter's
// trees of 64 to 1024 nodes end near -5 to -9), so the first round is
// cheap and measures the slope of the count.
constexpr int MAX_ROUNDS = 12;
constexpr float START_T = -4.0f;

static_assert(L >= 1 && L <= KDT_LIMIT_L && K >= 1 && K <= KDT_LIMIT_K &&
                  L * K <= KDT_LIMIT_LK && N_MAX >= 1 &&
                  N_MAX <= KDT_LIMIT_N_MAX,
              "the registry's ranges");
static_assert(KDT_LIMIT_N_MAX <= 32767 && KDT_LIMIT_K <= 32767 &&
                  KDT_LIMIT_L <= 32767,
              "tree fields are stored as 16-bit integers");

// Hooks for the development tools, empty in the library: phase marks for
// tools/dev/bd_phases.cu (thread 0 records clock64 at each numbered
// point), and the threshold search's outcome (the prefixes it found or
// -1, its rounds less one) for the host emulator's statistics
// (tools/dev/emu/t_build.cc, t_bench.cc).
#ifndef KDT_BD_PHASE
#define KDT_BD_PHASE(i) ((void)0)
#endif
#ifndef KDT_BD_TRACE
#define KDT_BD_TRACE(n, rounds) ((void)0)
#endif

// NaN counts as -inf (spec §2).
__device__ __forceinline__ float
canon(float x)
{
    return x != x ? kdt_neg_inf() : x;
}

// The request's log-probs, NaN -> -inf: rank k of depth d's row (d, k
// from 0).  The first KS ranks of each row are in shared memory; the rest
// (KS < K only) are read from global memory, canonicalised the same way.
struct lp_rows {
    const float *s; // shared: L rows of KS
    const float *g; // global: L rows of K, as the caller gave them
};

__device__ __forceinline__ float
lp_at(const lp_rows &lp, int d, int k)
{
    if (KS == K || k < KS)
        return lp.s[d * KS + k];
    return canon(__ldg(lp.g + d * K + k));
}

#include "build_ddtree_rows.cuh"
#include "build_ddtree_threshold.cuh"
#include "build_ddtree_loop.cuh"

// The request's log-probs into shared memory, NaN -> -inf: the first KS
// ranks of each row (lp_at reads the rest from global memory).  Ranks past
// KS (KS < K) are checked for the threshold path here, as they stream by:
// true when a row d < Lr is not sorted non-increasing or not <= 0 there.
// vec: 16-byte loads (4 ranks of one row), all of a thread's in flight at
// once, where the rows' alignment allows.
__device__ __forceinline__ bool
stage_lp_rows(float *lps, const float *lp_g, int Lr, bool vec, int tid)
{
    bool tail_bad = false;
    if (vec) {
        const uint4 *g4 = reinterpret_cast<const uint4 *>(lp_g);
        uint4 *s4 = reinterpret_cast<uint4 *>(lps);
#pragma unroll 4
        for (int i = tid; i < L * K / 4; i += THREADS) {
            const int d = 4 * i / K, k = 4 * i - d * K;
            const uint4 v = g4[i];
            const float x0 = canon(__uint_as_float(v.x)), x1 = canon(__uint_as_float(v.y));
            const float x2 = canon(__uint_as_float(v.z)), x3 = canon(__uint_as_float(v.w));
            if (KS == K || k < KS) {
                s4[(d * KS + k) / 4] = make_uint4(__float_as_uint(x0), __float_as_uint(x1),
                                                  __float_as_uint(x2), __float_as_uint(x3));
            } else if (d < Lr) {
                // the next rank: the neighbour's load, from L1 or L2
                const float x4 = k + 4 < K ? canon(__ldg(lp_g + d * K + k + 4)) : x3;
                tail_bad |= !(x0 <= 0.0f) || !(x1 <= x0) || !(x2 <= x1) ||
                            !(x3 <= x2) || !(x4 <= x3);
            }
        }
    } else {
#pragma unroll 4
        for (int i = tid; i < L * KS; i += THREADS)
            lps[i] = canon(lp_g[i / KS * K + i % KS]);
    }
    return tail_bad;
}

// Are the rows the loop reads (d < Lr) sorted non-increasing and <= 0
// (-inf included; NaN is -inf now), as far as this thread's share of them
// shows?  Then the threshold path gives the loop's output.  tail_bad:
// stage_lp_rows's verdict on the ranks past KS (vec); without vec, those
// are read here from global memory.
__device__ __forceinline__ bool
rows_well_formed(const lp_rows &lp, const float *lps, int Lr, bool tail_bad,
                 bool vec, int tid)
{
    bool bad = false;
    for (int i = tid; i < Lr * KS; i += THREADS) {
        const int d = i / KS, k = i - d * KS;
        const float v = lps[i];
        bad |= !(v <= 0.0f);
        if (k + 1 < K)
            bad |= !(lp_at(lp, d, k + 1) <= v);
    }
    bad |= tail_bad;
    constexpr int KT = KS < K ? K - KS : 1; // ranks past KS a row
    if (KS < K && !vec) // those ranks, from global memory
        for (int i = tid; i < Lr * KT; i += THREADS) {
            const int d = i / KT, k = KS + i - d * KT;
            const float v = lp_at(lp, d, k);
            bad |= !(v <= 0.0f);
            if (k + 1 < K)
                bad |= !(lp_at(lp, d, k + 1) <= v);
        }
    return !bad;
}

// The phases in order (see the top of the file): the log-probs staged,
// the threshold path where the input is well-formed, else the loop, then
// the rows; KDT_BD_PHASE(i) marks the points tools/dev/bd_phases.cu times.
// The 1: ptxas, left to choose, capped this kernel at 48-64 registers and
// spilled (a block an SM is all the shapes need: one request a block).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
kdt_build_ddtree(kdt_build_ddtree_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *lps = reinterpret_cast<float *>(smem);
    float *node_score = reinterpret_cast<float *>(smem + OFF_NODE);
    short *parent = reinterpret_cast<short *>(smem + OFF_SHORT);
    short *rank = parent + N_MAX;
    short *depth = rank + N_MAX;
    short *first_child = depth + N_MAX;
    short *next_sibling = first_child + N_MAX;
    short *last_child = next_sibling + N_MAX;
    float *slot_score = reinterpret_cast<float *>(smem + OFF_REGION);
    float *slot_next_lp = slot_score + N_MAX;
    float *slot_child_lp = slot_next_lp + N_MAX;
    int *slot_dk = reinterpret_cast<int *>(slot_child_lp + N_MAX);
    __shared__ int s_nodes, s_bad;
    __shared__ int s_ws[THREADS / 32];

    const int r = blockIdx.x, tid = threadIdx.x;
    const long long o = (long long)r * N_MAX;
    int B = p.budget[r];
    B = B < 0 ? 0 : (B > N_MAX - 1 ? N_MAX - 1 : B);
    int Lr = p.depth_limit ? p.depth_limit[r] : L;
    Lr = Lr < 1 ? 1 : (Lr > L ? L : Lr);
    const int root = p.root_token[r];
    const int past = p.past_len ? p.past_len[r] : 0;

    const float *lp_g = p.lp + (long long)r * L * K;
    const lp_rows lp = {lps, lp_g};
    KDT_BD_PHASE(0);
    const bool vec = KS % 4 == 0 && K % 4 == 0 &&
                     (reinterpret_cast<unsigned long long>(lp_g) & 15u) == 0;
    const bool tail_bad = stage_lp_rows(lps, lp_g, Lr, vec, tid);
    if (tid == 0)
        s_bad = 0;
    __syncthreads();
    KDT_BD_PHASE(1);

    bool fast = false;
    if constexpr (FAST) {
        if (B > LOOP_MAX_B) {
            if (!rows_well_formed(lp, lps, Lr, tail_bad, vec, tid))
                s_bad = 1;
            __syncthreads();
            KDT_BD_PHASE(2);
            if (!s_bad) {
                unsigned char *rg = smem + OFF_REGION;
                const elems e = {
                    reinterpret_cast<unsigned long long *>(rg),
                    reinterpret_cast<float *>(rg + 8u * CAP),
                    reinterpret_cast<short *>(rg + 12u * CAP),
                    reinterpret_cast<short *>(rg + 14u * CAP),
                    reinterpret_cast<short *>(rg + 16u * CAP),
                    reinterpret_cast<short *>(rg + 18u * CAP),
                    reinterpret_cast<short *>(rg + 20u * CAP),
                    reinterpret_cast<short *>(rg + 22u * CAP)};
                fast = threshold_path(B, Lr, lp, e, node_score, parent,
                                      rank, depth, first_child,
                                      next_sibling, s_ws);
            }
        }
    }
    if (fast) {
        KDT_BD_PHASE(13);
        if (tid == 0)
            s_nodes = B + 1;
        __syncthreads(); // the region's elements are read; s_nodes is set
        KDT_BD_PHASE(14);
    } else {
        loop_path(p, B, Lr, root, past, o, lp, node_score, slot_score,
                  slot_next_lp, slot_child_lp, slot_dk, parent, rank, depth,
                  first_child, next_sibling, last_child, &s_nodes);
    }

    const int n = s_nodes;
    const int *ids_g = p.ids + (long long)r * L * K;
    if (tid == 0)
        p.n_nodes[r] = n;
    const tree_rows t = {parent, rank, depth, first_child, next_sibling,
                         node_score, ids_g, o, n, root, past};
    if (STAGE_MASKS && fast)
        write_rows_staged(p, t, reinterpret_cast<unsigned *>(smem + OFF_REGION),
                          tid);
    else
        write_rows_direct(p, t, B, tid);
    KDT_BD_PHASE(15);
}
