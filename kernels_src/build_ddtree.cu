// build_ddtree.cu: specs/kernels.md §2.  Best-first selection of each
// request's draft tree from the drafter's per-depth top-K, then the tree's
// rows: tokens, parents, depths, RoPE positions, child/sibling links,
// scores and ancestor masks, with padded rows past n_nodes.
//
// One block per request.  Warp 0 runs the spec's loop itself, so the output
// is the loop's for every input (unsorted rows, positive log-probs, NaN,
// inf), not only for well-formed ones.  The loop's candidate set holds at
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
constexpr int THREADS = 256;
constexpr int SLOTS_PER_LANE = (N_MAX + 31) / 32;

// Dynamic shared memory, in this order (src/kernel_build_ddtree.c computes
// the same size):
//   float lp[L*K]            the request's log-probs, NaN -> -inf
//   float node_score, slot_score, slot_next_lp, slot_child_lp [N_MAX]
//   int   slot_dk [N_MAX]    the slot's candidate: depth << 16 | rank
//   short parent, rank, depth, first_child, next_sibling, last_child
//         [N_MAX] each
// A slot keeps the log-probs its candidate's successors will need (its
// next sibling's, its first child's), so a step reads everything it needs
// in one round of independent shared-memory loads.
constexpr unsigned SMEM_BYTES =
    4u * (L * K) + 20u * N_MAX + ((12u * N_MAX + 15u) & ~15u);

static_assert(N_MAX <= 32767 && K <= 32767 && L <= 32767,
              "tree fields are stored as 16-bit integers");

__device__ __forceinline__ float
neg_inf()
{
    return __int_as_float(0xff800000);
}

// NaN counts as -inf (spec §2).
__device__ __forceinline__ float
canon(float x)
{
    return x != x ? neg_inf() : x;
}

// Order-preserving map of an f32 onto uint32; never 0 for a real score
// (-inf maps to 0x007fffff), so 0 marks an empty slot.
__device__ __forceinline__ unsigned
score_key(float f)
{
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned
warp_max(unsigned v)
{
#if __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, v);
#else
    for (int o = 16; o > 0; o >>= 1) {
        unsigned w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
#endif
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
                  int root, int past, const short *parent)
{
    p.token[o + i] = root;
    p.parent[o + i] = -1;
    p.depth[o + i] = 0;
    p.position[o + i] = past;
    p.first_child[o + i] = -1;
    p.next_sibling[o + i] = -1;
    if (p.score)
        p.score[o + i] = neg_inf();
    write_mask_row(p.anc_mask + (o + i) * W, i, parent, false);
}

extern "C" __global__ void __launch_bounds__(THREADS)
kdt_build_ddtree(kdt_build_ddtree_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *lps = reinterpret_cast<float *>(smem);
    float *node_score = lps + L * K;
    float *slot_score = node_score + N_MAX;
    float *slot_next_lp = slot_score + N_MAX;
    float *slot_child_lp = slot_next_lp + N_MAX;
    int *slot_dk = reinterpret_cast<int *>(slot_child_lp + N_MAX);
    short *parent = reinterpret_cast<short *>(slot_dk + N_MAX);
    short *rank = parent + N_MAX;
    short *depth = rank + N_MAX;
    short *first_child = depth + N_MAX;
    short *next_sibling = first_child + N_MAX;
    short *last_child = next_sibling + N_MAX;
    __shared__ int s_nodes;

    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < SMEM_BYTES)
        __trap(); // the launcher and this file disagree on the layout

    const int r = blockIdx.x, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const long long o = (long long)r * N_MAX;
    int B = p.budget[r];
    B = B < 0 ? 0 : (B > N_MAX - 1 ? N_MAX - 1 : B);
    int Lr = p.depth_limit ? p.depth_limit[r] : L;
    Lr = Lr < 1 ? 1 : (Lr > L ? L : Lr);
    const int root = p.root_token[r];
    const int past = p.past_len ? p.past_len[r] : 0;

    const float *lp_g = p.lp + (long long)r * L * K;
    for (int i = tid; i < L * K; i += THREADS)
        lps[i] = canon(lp_g[i]);
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
        // uniform) and writes them itself, so a lane only ever reads what
        // it wrote; the one __syncwarp orders a step's reads before its
        // writes.  Only the key registers differ between lanes.
        unsigned key[SLOTS_PER_LANE];
#pragma unroll
        for (int j = 0; j < SLOTS_PER_LANE; j++)
            key[j] = 0u;
        unsigned bkey = 0u; // this lane's best slot key (0: none)
        int bslot = -1;
        if (B > 0) { // slot 0: the candidate (1, 0, root)
            const float sc = canon(0.0f + lps[0]);
            slot_dk[0] = 1 << 16;
            slot_score[0] = sc;
            slot_next_lp[0] = K > 1 ? lps[1] : 0.0f;
            slot_child_lp[0] = L > 1 ? lps[K] : 0.0f;
            if (lane == 0) {
                key[0] = bkey = score_key(sc);
                bslot = 0;
            }
        }
        int nb = 0;
        while (nb < B) {
            const unsigned m = warp_max(bkey);
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
                ks = score_key(s_sc);
            }
            if (d < Lr) { // its first child
                n_sc = canon(sc + clp);
                kn = score_key(n_sc);
            }
            __syncwarp();
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
            slot_next_lp[s] = k + 2 < K ? lps[(d - 1) * K + k + 2] : 0.0f;
            slot_dk[n] = (d + 1) << 16;
            slot_score[n] = n_sc;
            slot_next_lp[n] = (d < L && K > 1) ? lps[d * K + 1] : 0.0f;
            slot_child_lp[n] = d + 1 < L ? lps[(d + 1) * K] : 0.0f;

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
            s_nodes = nb + 1;
    } else {
        // Rows past budget + 1 are padding whatever the loop builds.
        for (int i = B + 1 + tid - 32; i < N_MAX; i += THREADS - 32)
            write_padding_row(p, o, i, root, past, parent);
    }
    __syncthreads();

    const int n = s_nodes;
    const int *ids_g = p.ids + (long long)r * L * K;
    if (tid == 0)
        p.n_nodes[r] = n;
    for (int i = tid; i <= B; i += THREADS) {
        if (i < n) {
            const int d = depth[i];
            p.token[o + i] = i == 0 ? root : ids_g[(d - 1) * K + rank[i]];
            p.parent[o + i] = parent[i];
            p.depth[o + i] = d;
            p.position[o + i] = past + d;
            p.first_child[o + i] = first_child[i];
            p.next_sibling[o + i] = next_sibling[i];
            if (p.score)
                p.score[o + i] = node_score[i];
            write_mask_row(p.anc_mask + (o + i) * W, i, parent, true);
        } else {
            write_padding_row(p, o, i, root, past, parent);
        }
    }
}
