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
//   float node_score[N_MAX], slot_score[N_MAX]
//   short parent, rank, depth, slot_rank, first_child, next_sibling,
//         last_child [N_MAX] each
constexpr unsigned SMEM_BYTES =
    4u * (L * K) + 8u * N_MAX + ((14u * N_MAX + 15u) & ~15u);

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
    const short *parent, *rank, *depth, *slot_rank;
};

// Is slot a's candidate before slot b's on equal scores, i.e. is its rank
// path root..node lexicographically smaller (a prefix first)?  A slot's
// candidate is the child of rank slot_rank[s] under node s.
__device__ __noinline__ bool
cand_less(const tree_smem t, int a, int b)
{
    int ap = a, ak = t.slot_rank[a], ad = t.depth[a] + 1;
    int bp = b, bk = t.slot_rank[b], bd = t.depth[b] + 1;
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
    short *parent = reinterpret_cast<short *>(slot_score + N_MAX);
    short *rank = parent + N_MAX;
    short *depth = rank + N_MAX;
    short *slot_rank = depth + N_MAX;
    short *first_child = slot_rank + N_MAX;
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
        rank[i] = depth[i] = slot_rank[i] = 0;
    }
    if (tid == 0)
        node_score[0] = 0.0f;
    __syncthreads();

    const tree_smem t = {parent, rank, depth, slot_rank};
    if (warp == 0) {
        unsigned key[SLOTS_PER_LANE];
#pragma unroll
        for (int j = 0; j < SLOTS_PER_LANE; j++)
            key[j] = 0u;
        unsigned bkey = 0u; // this lane's best slot key (0: none)
        int bslot = -1;
        if (B > 0 && lane == 0) {
            const float sc = canon(0.0f + lps[0]);
            slot_rank[0] = 0;
            slot_score[0] = sc;
            key[0] = bkey = score_key(sc);
            bslot = 0;
        }
        __syncwarp();
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
            // Slot s's candidate becomes node n.
            const int n = nb + 1;
            const int k = slot_rank[s];
            const int d = depth[s] + 1;
            const float sc = slot_score[s];
            const float psc = node_score[s];
            unsigned ks = 0u, kn = 0u;
            float s_sc = 0.0f, n_sc = 0.0f;
            if (k + 1 < K) { // its next sibling
                s_sc = canon(psc + lps[(d - 1) * K + k + 1]);
                ks = score_key(s_sc);
            }
            if (d < Lr) { // its first child
                n_sc = canon(sc + lps[d * K]);
                kn = score_key(n_sc);
            }
            __syncwarp();
            if (lane == 0) {
                parent[n] = (short)s;
                rank[n] = (short)k;
                depth[n] = (short)d;
                node_score[n] = sc;
                const int lc = last_child[s];
                if (lc >= 0)
                    next_sibling[lc] = (short)n;
                else
                    first_child[s] = (short)n;
                last_child[s] = (short)n;
            }
            const bool own_s = lane == (s & 31), own_n = lane == (n & 31);
            if (own_s) {
                slot_rank[s] = (short)(k + 1);
                slot_score[s] = s_sc;
            }
            if (own_n) {
                slot_rank[n] = 0;
                slot_score[n] = n_sc;
            }
#pragma unroll
            for (int j = 0; j < SLOTS_PER_LANE; j++) {
                if (own_s && j == (s >> 5))
                    key[j] = ks;
                if (own_n && j == (n >> 5))
                    key[j] = kn;
            }
            __syncwarp(); // the tie-break below reads the new node
            if (own_s) { // its best was slot s: rescan
                bkey = 0u;
                bslot = -1;
#pragma unroll
                for (int j = 0; j < SLOTS_PER_LANE; j++) {
                    const unsigned kj = key[j];
                    const int sj = lane + 32 * j;
                    if (kj > bkey) {
                        bkey = kj;
                        bslot = sj;
                    } else if (kj == bkey && kj != 0u && cand_less(t, sj, bslot)) {
                        bslot = sj;
                    }
                }
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
