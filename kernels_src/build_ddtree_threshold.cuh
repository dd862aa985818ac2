// build_ddtree_threshold.cuh: build_ddtree's threshold path (see the top
// of build_ddtree.cu): the prefixes that reach a threshold T enumerated
// level by level, the search for T, and the ranking of the first B.  A
// part of build_ddtree.cu, included after its constants (not a header of
// its own).

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
// and e holds nothing usable.  Block-wide; T uniform.  Not forced inline
// (NVVM inlines it anyway): forced, with the other phases, it changes how
// the threshold path's shared-memory loads are vectorised.
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
__device__ __forceinline__ float
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

__device__ __forceinline__ void
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

// The threshold path (see the top of build_ddtree.cu).  Block-wide; true
// when it built nodes 1..B into the tree arrays (and node 0's links),
// false when the loop must run instead (then it has written only the
// region).
__device__ __forceinline__ bool
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
