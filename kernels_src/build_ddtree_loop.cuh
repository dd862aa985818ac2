// build_ddtree_loop.cuh: build_ddtree's loop path (see the top of
// build_ddtree.cu), the spec's best-first loop run by one warp over
// candidate slots held in its lanes' registers.  A part of build_ddtree.cu,
// included after build_ddtree_rows.cuh (not a header of its own).

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

// The loop path (see the top of build_ddtree.cu).  Block-wide: warp 0
// runs the loop, the other warps write the rows that are padding in any
// case.
__device__ __forceinline__ void
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
