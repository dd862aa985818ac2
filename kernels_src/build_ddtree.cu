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

struct tree_smem {
    const short *parent, *rank, *depth;
    const int *slot_dk;
};

// Is slot a's candidate before slot b's on equal scores, i.e. is its rank
// path root..node lexicographically smaller (a prefix first)?  A slot's
// candidate is the child of rank slot_dk[s] & 0xffff under node s.
__device__ __forceinline__ bool
cand_less(const tree_smem t, int a, int b)
{
    int ap = a, ak = t.slot_dk[a] & 0xffff, ad = t.depth[a] + 1;
    int bp = b, bk = t.slot_dk[b] & 0xffff, bd = t.depth[b] + 1;
    const int da = ad, db = bd;
    while (ad > bd) {
        ak = t.rank[ap];
        ap = t.parent[ap];
        ad--;
    }
    while (bd > ad) {
        bk = t.rank[bp];
        bp = t.parent[bp];
        bd--;
    }
    if (ap == bp && ak == bk)
        return da < db;
    while (ap != bp) {
        ak = t.rank[ap];
        ap = t.parent[ap];
        bk = t.rank[bp];
        bp = t.parent[bp];
    }
    return ak < bk;
}

// A lane's best slot among its registers key[j] (slot lane + 32 j): the
// largest key, ties by rank path.  Four independent max / or chains rather
// than one, so its latency is about a quarter of SLOTS_PER_LANE steps.
__device__ __forceinline__ void
lane_best(const unsigned (&key)[SLOTS_PER_LANE], int lane, const tree_smem t,
          unsigned &bkey, int &bslot)
{
    unsigned m0 = 0u, m1 = 0u, m2 = 0u, m3 = 0u;
#pragma unroll
    for (int j = 0; j < SLOTS_PER_LANE; j += 4) {
        m0 = max(m0, key[j]);
        if (j + 1 < SLOTS_PER_LANE)
            m1 = max(m1, key[j + 1]);
        if (j + 2 < SLOTS_PER_LANE)
            m2 = max(m2, key[j + 2]);
        if (j + 3 < SLOTS_PER_LANE)
            m3 = max(m3, key[j + 3]);
    }
    const unsigned m = max(max(m0, m1), max(m2, m3));
    unsigned long long e0 = 0ull, e1 = 0ull, e2 = 0ull, e3 = 0ull;
#pragma unroll
    for (int j = 0; j < SLOTS_PER_LANE; j += 4) {
        e0 |= key[j] == m ? 1ull << j : 0ull;
        if (j + 1 < SLOTS_PER_LANE)
            e1 |= key[j + 1] == m ? 1ull << (j + 1) : 0ull;
        if (j + 2 < SLOTS_PER_LANE)
            e2 |= key[j + 2] == m ? 1ull << (j + 2) : 0ull;
        if (j + 3 < SLOTS_PER_LANE)
            e3 |= key[j + 3] == m ? 1ull << (j + 3) : 0ull;
    }
    unsigned long long e = (e0 | e1) | (e2 | e3);
    bkey = m;
    if (m == 0u) {
        bslot = -1;
        return;
    }
    bslot = lane + 32 * (__ffsll((long long)e) - 1);
    e &= e - 1;
    while (e) { // equal scores: the smaller rank path
        const int sj = lane + 32 * (__ffsll((long long)e) - 1);
        e &= e - 1;
        if (cand_less(t, sj, bslot))
            bslot = sj;
    }
}

// Row i of the ancestor mask: bit j set iff j is i or an ancestor of i
// (own bit only when !walk).  Ancestors have smaller indices than their
// descendants, so the words fill from the last to the first.
__device__ __forceinline__ void
write_mask_row(unsigned *row, int i, const short *parent, bool walk)
{
    int wcur = i >> 5;
    unsigned bits = 0;
    for (int j = W - 1; j > wcur; j--)
        row[j] = 0u;
    int a = i;
    for (;;) {
        const int wa = a >> 5;
        if (wa != wcur) {
            row[wcur] = bits;
            for (int j = wcur - 1; j > wa; j--)
                row[j] = 0u;
            wcur = wa;
            bits = 0;
        }
        bits |= 1u << (a & 31);
        if (!walk || a == 0)
            break;
        a = parent[a];
    }
    row[wcur] = bits;
    for (int j = wcur - 1; j >= 0; j--)
        row[j] = 0u;
}

__device__ __forceinline__ void
write_padding_row(const kdt_build_ddtree_params &p, long long o, int i,
                  int root, int past, const short *parent, unsigned *mask_row)
{
    p.token[o + i] = root;
    p.parent[o + i] = -1;
    p.depth[o + i] = 0;
    p.position[o + i] = past;
    p.first_child[o + i] = -1;
    p.next_sibling[o + i] = -1;
    if (p.score)
        p.score[o + i] = kdt_neg_inf();
    write_mask_row(mask_row, i, parent, false);
}

// The built tree, for writing its rows.
struct tree_rows {
    const short *parent, *rank, *depth, *first_child, *next_sibling;
    const float *node_score;
    const int *ids_g; // the request's ids
    long long o;      // its first row
    int n, root, past;
};

// Row i: the tree's node i, or padding; its mask into mrow.
__device__ __forceinline__ void
write_row(const kdt_build_ddtree_params &p, const tree_rows &t, int i,
          unsigned *mrow)
{
    const long long o = t.o;
    if (i < t.n) {
        const int d = t.depth[i];
        p.token[o + i] = i == 0 ? t.root : t.ids_g[(d - 1) * K + t.rank[i]];
        p.parent[o + i] = t.parent[i];
        p.depth[o + i] = d;
        p.position[o + i] = t.past + d;
        p.first_child[o + i] = t.first_child[i];
        p.next_sibling[o + i] = t.next_sibling[i];
        if (p.score)
            p.score[o + i] = t.node_score[i];
        write_mask_row(mrow, i, t.parent, true);
    } else {
        write_padding_row(p, o, i, t.root, t.past, t.parent, mrow);
    }
}

// ---- the threshold path ---------------------------------------------

struct elems {
    unsigned long long *key; // scratch: 8 bytes an element (see the layout)
    float *score;
    short *node, *coff, *cnt, *par, *rank, *dep;
};

// Exclusive prefix sum of v over the block; total gets the sum.  No
// barrier at the end: every caller passes another barrier before the next
// scan writes ws.
__device__ __forceinline__ int
block_scan(int v, int &total, int *ws)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int x = kdt_warp_prefix_sum(v, lane);
    if (lane == 31)
        ws[warp] = x;
    __syncthreads();
    int before = 0, tot = 0;
#pragma unroll
    for (int w = 0; w < THREADS / 32; w++) {
        const int s = ws[w];
        tot += s;
        before += w < warp ? s : 0;
    }
    total = tot;
    return before + x - v;
}

// How many ranks k of depth d's sorted row extend a prefix of score s to a score
// >= T: the loop's own f32 addition s + row[k], which never increases with
// k.  (NaN cannot come out: no +inf on this path; -inf >= T is false.)
// Most prefixes extend by few ranks: ranks 0..3 are tested with four
// independent loads, then it gallops (probes 7, 15, 31, ..) before the
// binary search: about 2 log2(count) loads rather than log2(K).
__device__ __forceinline__ int
count_ge(const lp_rows &lp, int d, float s, float T)
{
    constexpr int F = K < 4 ? K : 4;
    float f[F];
#pragma unroll
    for (int k = 0; k < F; k++)
        f[k] = lp_at(lp, d, k);
#pragma unroll
    for (int k = 0; k < F; k++)
        if (!(s + f[k] >= T))
            return k;
    int lo = F, b = 2 * F; // ranks < lo reach T
    while (b <= K && s + lp_at(lp, d, b - 1) >= T) {
        lo = b;
        b <<= 1;
    }
    int hi = b <= K ? b - 1 : K; // rank hi does not (or is K)
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (s + lp_at(lp, d, mid) >= T)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// All prefixes of depth <= Lr scoring >= T, level by level into e[0, n),
// each level in rank-path order (parents in order, each one's children by
// rank), and n returned -- or, when they would pass CAP, some number > CAP
// and e holds nothing usable.  Block-wide; T uniform.
__device__ int
enumerate(float T, int Lr, const lp_rows &lp, const elems e, int *ws)
{
    const int tid = threadIdx.x;
    const int c1 = count_ge(lp, 0, 0.0f, T);
    if (c1 > CAP)
        return c1;
    for (int j = tid; j < c1; j += THREADS) {
        e.score[j] = canon(0.0f + lp_at(lp, 0, j));
        e.par[j] = -1;
        e.rank[j] = (short)j;
        e.dep[j] = 1;
        e.cnt[j] = 0;
    }
    int ps = 0, pe = c1;
    for (int d = 2; d <= Lr && pe > ps; d++) {
        __syncthreads(); // level d-1 is written
        const int n = pe - ps, chunk = (n + THREADS - 1) / THREADS;
        const int b0 = kdt_imin(ps + tid * chunk, pe), b1 = kdt_imin(b0 + chunk, pe);
        int sum = 0;
        for (int q = b0; q < b1; q++) {
            const int c = count_ge(lp, d - 1, e.score[q], T);
            e.cnt[q] = (short)c;
            sum += c;
        }
        int total;
        const int ex = block_scan(sum, total, ws);
        if (pe + total > CAP)
            return pe + total;
        // Each parent names itself in its children's par (a store loop,
        // long only for the few parents with many children), so a child
        // finds its parent with one load rather than a search.
        int off = pe + ex;
        for (int q = b0; q < b1; q++) {
            const int c = e.cnt[q];
            e.coff[q] = (short)off;
            for (int i = 0; i < c; i++)
                e.par[off + i] = (short)q;
            off += c;
        }
        __syncthreads();
        for (int j = tid; j < total; j += THREADS) {
            const int at = pe + j;
            const int l = e.par[at];
            const int k = at - e.coff[l];
            e.score[at] = canon(e.score[l] + lp_at(lp, d - 1, k));
            e.rank[at] = (short)k;
            e.dep[at] = (short)d;
            e.cnt[at] = 0;
        }
        ps = pe;
        pe += total;
    }
    __syncthreads();
    return pe;
}

// Element x's rank path before element y's (x != y); a prefix first.
__device__ __forceinline__ bool
elem_less(const elems e, int x, int y)
{
    int ax = x, ay = y, dx = e.dep[x], dy = e.dep[y];
    while (dx > dy) {
        ax = e.par[ax];
        dx--;
    }
    while (dy > dx) {
        ay = e.par[ay];
        dy--;
    }
    if (ax == ay)
        return e.dep[x] < e.dep[y];
    while (e.par[ax] != e.par[ay]) {
        ax = e.par[ax];
        ay = e.par[ay];
    }
    return e.rank[ax] < e.rank[ay];
}

// The single-deviation bound: the largest bin edge T (a multiple of
// 1/SD_SCALE in (-SD_BINS/SD_SCALE, 0]) that at least B of the prefixes
// (0, .., 0, k) of depth <= Lr reach, each scored by the loop's own f32
// additions; -KDT_FLT_MAX when fewer than B of them score above
// -SD_BINS / SD_SCALE.  Since those are B distinct prefixes, count(score >= T) >= B.
// Block-wide; hist holds SD_BINS ints + L floats of scratch.
__device__ float
sd_bound(int B, int Lr, const lp_rows &lp, int *hist, int *ws)
{
    static_assert(SD_BINS == THREADS, "one bin a thread in the scan");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *spine = reinterpret_cast<float *>(hist + SD_BINS);
    __shared__ float s_T;
    hist[tid] = 0;
    if (tid == 0) {
        float sp = 0.0f; // score of (0, .., 0) at depth d
        for (int d = 0; d < Lr; d++) {
            spine[d] = sp;
            sp = canon(sp + lp_at(lp, d, 0));
        }
    }
    __syncthreads();
    // Lanes take consecutive ranks of a row, whose bins never increase, so
    // a run of equal bins adds with one atomic (its first lane's).
    const int total = Lr * K;
    for (int base = warp * 32; base < total; base += THREADS) {
        const int i = base + lane;
        int b = -1;
        if (i < total) {
            const int d = i / K;
            const float v = canon(spine[d] + lp_at(lp, d, i - d * K));
            const float f = -v * SD_SCALE; // exact: a power of two
            if (f < (float)SD_BINS)
                b = (int)f; // v <= 0, so f >= 0: truncation is floor
        }
        const int prev = __shfl_up_sync(0xffffffffu, b, 1);
        const bool edge = lane == 0 || prev != b;
        const unsigned edges = __ballot_sync(0xffffffffu, edge);
        if (edge && b >= 0) {
            const unsigned later = edges & ~(0xffffffffu >> (31 - lane));
            const int end = later ? __ffs(later) - 1 : 32;
            atomicAdd(&hist[b], end - lane);
        }
    }
    __syncthreads();
    int sum;
    const int x = hist[tid];
    const int before = block_scan(x, sum, ws);
    if (tid == 0)
        s_T = -KDT_FLT_MAX;
    __syncthreads();
    if (before < B && before + x >= B) // bins 0..tid hold >= B of them
        s_T = -(float)(tid + 1) / SD_SCALE;
    __syncthreads();
    return s_T;
}

// The order of the B best of the n >= B prefixes in e (all scoring >= T):
// a counting sort by score into RB_BINS bins over [T, 0] (a monotone
// binning: equal scores share a bin, and a later bin never holds a higher
// score), then each prefix of a bin that starts before position B counts
// the prefixes of its own bin that come before it (higher score; on equal
// scores the smaller rank path).  Its position is its bin's start plus
// that count; e.node gets position + 1 for the first B, -1 for the rest,
// and rank_inv(e)[position] the prefix, for the first B.
// A bin holds a few prefixes (more only on exact ties), so this costs a
// few passes over e and three barriers, where a bitonic sort of ~2B keys
// costs ~10k cycles of compare-exchanges.  Scratch in e.key: counts,
// starts and cursors (RB_BINS ints each) and the bins' prefixes (CAP
// shorts).  Block-wide; ends with a barrier.
constexpr int RB_BINS = CAP / 2 < 1024 ? (CAP > 1 ? CAP / 2 : 1) : 1024;
constexpr int RB_PER = (RB_BINS + THREADS - 1) / THREADS; // bins a thread
static_assert(!FAST || 12 * RB_BINS + 2 * CAP <= 8 * CAP,
              "rank_top's scratch fits the elements' scratch");
static_assert(!FAST || N_MAX <= 2 * RB_BINS,
              "the node -> prefix map fits the cursors' place");

// Where rank_top leaves the map from node - 1 to prefix (the cursors'
// place, free once the bins are filled).
__device__ __forceinline__ short *
rank_inv(const elems e)
{
    return reinterpret_cast<short *>(reinterpret_cast<int *>(e.key) +
                                     2 * RB_BINS);
}

__device__ __forceinline__ int
rb_bin(float s, float scale)
{
    return (int)fminf(-s * scale, (float)(RB_BINS - 1));
}

__device__ void
rank_top(int B, int n, float T, const elems e, int *ws)
{
    const int tid = threadIdx.x;
    int *cnt = reinterpret_cast<int *>(e.key);
    int *start = cnt + RB_BINS;
    int *cur = start + RB_BINS;
    short *order = reinterpret_cast<short *>(cur + RB_BINS);
    // s in [T, 0]: -s * scale in [0, RB_BINS] (T < 0; T = 0 means every
    // score is 0, one bin)
    const float scale = T < 0.0f ? (float)RB_BINS / -T : 0.0f;
    for (int b = tid; b < RB_BINS; b += THREADS)
        cnt[b] = 0;
    __syncthreads();
    for (int x = tid; x < n; x += THREADS)
        atomicAdd(&cnt[rb_bin(e.score[x], scale)], 1);
    __syncthreads();
    int mine[RB_PER], sum = 0;
#pragma unroll
    for (int i = 0; i < RB_PER; i++) {
        const int b = tid * RB_PER + i;
        mine[i] = b < RB_BINS ? cnt[b] : 0;
        sum += mine[i];
    }
    int total;
    int at = block_scan(sum, total, ws);
#pragma unroll
    for (int i = 0; i < RB_PER; i++) {
        const int b = tid * RB_PER + i;
        if (b < RB_BINS)
            start[b] = cur[b] = at;
        at += mine[i];
    }
    __syncthreads();
    for (int x = tid; x < n; x += THREADS) {
        const int b = rb_bin(e.score[x], scale);
        if (start[b] < B)
            order[atomicAdd(&cur[b], 1)] = (short)x;
    }
    __syncthreads();
    KDT_BD_PHASE(11);
    short *inv = rank_inv(e);
    for (int x = tid; x < n; x += THREADS) {
        const float sx = e.score[x];
        const int b = rb_bin(sx, scale), a = start[b];
        int pos = B;
        if (a < B) {
            // scores first (a tight loop), rank paths only on equal
            // scores (x itself is one of them)
            const int end = a + cnt[b];
            int higher = 0, equal = 0;
#pragma unroll 4
            for (int q = a; q < end; q++) {
                const float sy = e.score[order[q]];
                higher += sy > sx;
                equal += sy == sx;
            }
            pos = a + higher;
            if (equal > 1)
                for (int q = a; q < end; q++) {
                    const int y = order[q];
                    pos += y != x && e.score[y] == sx && elem_less(e, y, x);
                }
        }
        if (pos < B) {
            e.node[x] = (short)(pos + 1);
            inv[pos] = (short)x;
        } else {
            e.node[x] = -1;
        }
    }
    __syncthreads();
}

// The threshold path (see the top of the file).  Block-wide; true when it
// built nodes 1..B into the tree arrays (and node 0's links), false when
// the loop must run instead (then it has written only the region).
__device__ bool
threshold_path(int B, int Lr, const lp_rows &lp, const elems e, float *nsc,
               short *parent, short *rank, short *depth, short *first_child,
               short *next_sibling, int *ws)
{
    const int tid = threadIdx.x;

    // A lower bound: the single-deviation prefixes (sd_bound), in the
    // elements' scratch (unused until rank_top).
    float lo = sd_bound(B, Lr, lp, reinterpret_cast<int *>(e.key), ws);
    int lo_state = lo > -KDT_FLT_MAX ? 1 : 0; // 0 none, 1 count >= B known,
                                       // 2 count > CAP seen
    // The search keeps lo (count >= B, or > CAP when lo_state is 2) below
    // hi (count < B).  Round 1 is SD_SHIFT (more in a narrow window: see
    // SD_NARROW) above the single-deviation
    // bound (or START_T without one); after an undershoot it takes Newton
    // steps on log(count) from hi, with the slope measured on the prefixes
    // that hi's enumeration holds (counts grow about exponentially as T
    // falls), aiming inside [B, CAP] a little nearer B (less to rank);
    // after overshoots only, steps up by the log of the excess; with both
    // sides seen, secant steps inside (lo, hi), and two misses in a row on
    // one side bisect.
    float hi = 1.4e-45f; // nothing scores above 0
    bool hi_seen = false;
    float lhi = 0.0f, llo = 0.0f, slope = 1.0f;
    const float lt = logf((float)B) + 0.4f * (logf((float)CAP) - logf((float)B));
    int last = 0, same = 0, n = -1, rounds = 0;
    float T_found = 0.0f;
    for (; rounds < MAX_ROUNDS; rounds++) {
        float T;
        if (rounds == 0) {
            const float narrow = fmaxf(logf(4.0f * (float)B / (float)CAP), 0.0f);
            T = lo_state == 1 ? fminf(lo + SD_SHIFT + SD_NARROW * narrow, 0.0f)
                              : START_T;
        } else if (!hi_seen) {
            // only overshoots so far: up by the log of the excess (counts
            // grow about e-fold a nat near a tree's last score), or
            // halfway to 0
            T = lo + fminf(fmaxf(llo - lt, 0.25f), 8.0f);
            if (!(T < hi))
                T = lo > -0x1p-10f ? 0.0f : 0.5f * lo;
        } else {
            float step = (lt - lhi) / fmaxf(slope, 0.25f);
            step = fminf(fmaxf(step, 0.25f), 8.0f);
            T = hi - step;
            if (!(T < hi)) // hi so low that the step vanishes
                T = 2.0f * hi - 1.0f;
            T = fmaxf(T, -KDT_FLT_MAX);
            if (lo_state == 2) {
                // both sides seen: the secant on log(count) (lo's count is
                // where its enumeration stopped, an underestimate)
                const float w = hi - lo;
                T = hi + (lt - lhi) * (lo - hi) / fmaxf(llo - lhi, 0.25f);
                if (same >= 2)
                    T = lo + 0.5f * w;
                T = fminf(fmaxf(T, lo + 0.1f * w), hi - 0.1f * w);
                if (!(T > lo && T < hi))
                    T = lo + 0.5f * w;
            } else if (lo_state == 1 && T < lo) {
                T = lo;
            }
        }
        if (!(T >= lo && T < hi) || (lo_state == 2 && !(T > lo)))
            break; // lo and hi adjacent: ties beyond CAP
        const int c = enumerate(T, Lr, lp, e, ws);
        KDT_BD_PHASE(4 + (rounds < 5 ? rounds : 5));
        if (c > CAP) {
            lo = T;
            lo_state = 2;
            llo = logf((float)c);
            same = last == 1 ? same + 1 : 1;
            last = 1;
        } else if (c < B) {
            if (T <= -KDT_FLT_MAX)
                break; // the loop would need -inf scores
            if (lo_state == 1 && T <= lo)
                break; // cannot happen: count(lo) >= B
            hi = T;
            hi_seen = true;
            // The slope: how many of the c reach T + 1.
            int mine = 0;
            for (int i = tid; i < c; i += THREADS)
                mine += e.score[i] >= T + 1.0f;
            int c1;
            block_scan(mine, c1, ws);
            lhi = logf(c > 0 ? (float)c : 0.5f);
            slope = c > 0 ? lhi - logf(c1 > 0 ? (float)c1 : 0.5f) : 1.0f;
            same = last == 2 ? same + 1 : 1;
            last = 2;
        } else {
            n = c;
            T_found = T;
            break;
        }
    }
    if (tid == 0)
        KDT_BD_TRACE(n, rounds);
    if (n < 0)
        return false;

    KDT_BD_PHASE(10);
    // e[0, n) are all the prefixes scoring >= T, n >= B, so the loop's
    // first B nodes are among them, in the order rank_top gives.
    rank_top(B, n, T_found, e, ws);
    KDT_BD_PHASE(12);
    // The chosen set is closed under parents and elder siblings (both come
    // first in the order), so its links come from the element layout: a
    // node's first child is its first child element, its next sibling the
    // next element when that has the same parent.
    const short *inv = rank_inv(e);
    for (int nd = 1 + tid; nd <= B; nd += THREADS) {
        const int x = inv[nd - 1];
        const int pe = e.par[x];
        parent[nd] = (short)(pe < 0 ? 0 : e.node[pe]);
        rank[nd] = e.rank[x];
        depth[nd] = e.dep[x];
        nsc[nd] = e.score[x];
        first_child[nd] = e.cnt[x] > 0 ? e.node[e.coff[x]] : (short)-1;
        next_sibling[nd] =
            x + 1 < n && e.par[x + 1] == pe ? e.node[x + 1] : (short)-1;
    }
    if (tid == 0) {
        parent[0] = -1;
        rank[0] = depth[0] = 0;
        nsc[0] = 0.0f;
        first_child[0] = e.node[0];
        next_sibling[0] = -1;
    }
    return true;
}

// The loop path (see the top of the file).  Block-wide: warp 0 runs the
// loop, the other warps write the rows that are padding in any case.
__device__ void
loop_path(const kdt_build_ddtree_params &p, int B, int Lr, int root,
          int past, long long o, const lp_rows &lp, float *node_score,
          float *slot_score, float *slot_next_lp, float *slot_child_lp,
          int *slot_dk, short *parent, short *rank, short *depth,
          short *first_child, short *next_sibling, short *last_child,
          int *s_nodes)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int i = tid; i < N_MAX; i += THREADS) {
        first_child[i] = next_sibling[i] = last_child[i] = -1;
        parent[i] = -1;
        rank[i] = depth[i] = 0;
        slot_dk[i] = 0;
    }
    if (tid == 0)
        node_score[0] = 0.0f;
    __syncthreads();

    const tree_smem t = {parent, rank, depth, slot_dk};
    if (warp == 0) {
        // The loop.  Every lane computes every step's values (they are
        // uniform); lane 0 alone writes them to the shared arrays, between
        // two __syncwarp: the first orders the step's reads (every lane's,
        // cand_less included) before the writes, the second the writes
        // before the next reads.  (All lanes writing the same values would
        // work on the hardware but is a race to compute-sanitizer.)  Only
        // the key registers differ between lanes.
        // Slot keys: kdt_order_key of the candidate's score, never 0 for
        // a score (-inf included), so 0 marks an empty slot.
        unsigned key[SLOTS_PER_LANE];
#pragma unroll
        for (int j = 0; j < SLOTS_PER_LANE; j++)
            key[j] = 0u;
        unsigned bkey = 0u; // this lane's best slot key (0: none)
        int bslot = -1;
        if (B > 0) { // slot 0: the candidate (1, 0, root)
            const float sc = canon(0.0f + lp_at(lp, 0, 0));
            if (lane == 0) {
                slot_dk[0] = 1 << 16;
                slot_score[0] = sc;
                slot_next_lp[0] = K > 1 ? lp_at(lp, 0, 1) : 0.0f;
                slot_child_lp[0] = L > 1 ? lp_at(lp, 1, 0) : 0.0f;
                key[0] = bkey = kdt_order_key(sc);
                bslot = 0;
            }
        }
        __syncwarp();
        int nb = 0;
        while (nb < B) {
            const unsigned m = __reduce_max_sync(0xffffffffu, bkey);
            if (m == 0u)
                break; // no candidate left
            const unsigned tied = __ballot_sync(0xffffffffu, bkey == m);
            int s = __shfl_sync(0xffffffffu, bslot, __ffs(tied) - 1);
            unsigned rest = tied & (tied - 1);
            while (rest) { // equal scores in several lanes: rank paths
                const int l2 = __ffs(rest) - 1;
                rest &= rest - 1;
                const int s2 = __shfl_sync(0xffffffffu, bslot, l2);
                if (cand_less(t, s2, s))
                    s = s2;
            }
            // Slot s's candidate (depth d, rank k) becomes node n.
            const int n = nb + 1;
            const int dk = slot_dk[s];
            const int d = dk >> 16, k = dk & 0xffff;
            const float sc = slot_score[s];
            const float psc = node_score[s];
            const float nlp = slot_next_lp[s];
            const float clp = slot_child_lp[s];
            const int lc = last_child[s];
            unsigned ks = 0u, kn = 0u;
            float s_sc = 0.0f, n_sc = 0.0f;
            if (k + 1 < K) { // its next sibling
                s_sc = canon(psc + nlp);
                ks = kdt_order_key(s_sc);
            }
            if (d < Lr) { // its first child
                n_sc = canon(sc + clp);
                kn = kdt_order_key(n_sc);
            }
            __syncwarp();
            if (lane == 0) {
                parent[n] = (short)s;
                rank[n] = (short)k;
                depth[n] = (short)d;
                node_score[n] = sc;
                if (lc >= 0)
                    next_sibling[lc] = (short)n;
                else
                    first_child[s] = (short)n;
                last_child[s] = (short)n;
                slot_dk[s] = dk + 1;
                slot_score[s] = s_sc;
                slot_next_lp[s] = k + 2 < K ? lp_at(lp, d - 1, k + 2) : 0.0f;
                slot_dk[n] = (d + 1) << 16;
                slot_score[n] = n_sc;
                slot_next_lp[n] = (d < L && K > 1) ? lp_at(lp, d, 1) : 0.0f;
                slot_child_lp[n] = d + 1 < L ? lp_at(lp, d + 1, 0) : 0.0f;
            }
            __syncwarp();

            const bool own_s = lane == (s & 31), own_n = lane == (n & 31);
            // Bit masks rather than j == s / 32: the compiler turns the
            // latter into an indexed store, which moves key[] to local
            // memory.
            const unsigned long long sel_s = own_s ? 1ull << (s >> 5) : 0ull;
            const unsigned long long sel_n = own_n ? 1ull << (n >> 5) : 0ull;
#pragma unroll
            for (int j = 0; j < SLOTS_PER_LANE; j++) {
                key[j] = (sel_s >> j) & 1ull ? ks : key[j];
                key[j] = (sel_n >> j) & 1ull ? kn : key[j];
            }
            if (own_s) { // its best was slot s: find the next
                lane_best(key, lane, t, bkey, bslot);
            } else if (own_n && kn != 0u) {
                if (kn > bkey || (kn == bkey && cand_less(t, n, bslot))) {
                    bkey = kn;
                    bslot = n;
                }
            }
            nb = n;
        }
        if (lane == 0)
            *s_nodes = nb + 1;
    } else {
        // Rows past budget + 1 are padding whatever the loop builds.
        for (int i = B + 1 + tid - 32; i < N_MAX; i += THREADS - 32)
            write_padding_row(p, o, i, root, past, parent, p.anc_mask + (o + i) * W);
    }
    __syncthreads();
}

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
    // Ranks past KS (KS < K) are checked for the threshold path here, as
    // they stream by (tail_bad): rows d < Lr sorted non-increasing, <= 0.
    bool tail_bad = false;
    const bool vec = KS % 4 == 0 && K % 4 == 0 &&
                     (reinterpret_cast<unsigned long long>(lp_g) & 15u) == 0;
    if (vec) {
        // 16-byte loads (4 ranks of one row), all of a thread's in flight
        // at once
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
    if (tid == 0)
        s_bad = 0;
    __syncthreads();
    KDT_BD_PHASE(1);

    bool fast = false;
    if constexpr (FAST) {
        if (B > LOOP_MAX_B) {
            // Well-formed?  Every row the loop reads (d < Lr) sorted
            // non-increasing and <= 0 (-inf included; NaN is -inf now).
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
            if (bad)
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
    if (STAGE_MASKS && fast) {
        // Every row (past B too: the loop path's other warps wrote those),
        // MASK_ROWS at a time through the region.
        unsigned *stage = reinterpret_cast<unsigned *>(smem + OFF_REGION);
        unsigned *g = p.anc_mask + o * W;
        for (int c0 = 0; c0 < N_MAX; c0 += MASK_ROWS) {
            const int c1 = kdt_imin(c0 + MASK_ROWS, N_MAX);
            for (int i = c0 + tid; i < c1; i += THREADS)
                write_row(p, t, i, stage + (i - c0) * W);
            __syncthreads();
#pragma unroll 4
            for (int w = tid; w < (c1 - c0) * W; w += THREADS)
                g[(long long)c0 * W + w] = stage[w];
            if (c1 < N_MAX)
                __syncthreads(); // the chunk is copied out
        }
    } else {
        for (int i = tid; i <= B; i += THREADS)
            write_row(p, t, i, p.anc_mask + (o + i) * W);
    }
    KDT_BD_PHASE(15);
}
