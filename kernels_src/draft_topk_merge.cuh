// draft_topk_merge.cuh: the output of draft_topk: a block's top written
// as the row's, or the S tops of a cluster merged through distributed
// shared memory (see the top of draft_topk.cu).  A part of draft_topk.cu,
// included after draft_topk_select.cuh (not a header of its own).

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

// Output k of row r: key's id and its log-probability against the row's
// max M and log-sum log_s (-inf throughout for a row of -inf).
__device__ __forceinline__ void
put_out(const kdt_draft_topk_params &p, int r, int k, u64 key, float M,
        float log_s)
{
    const float x = key_logit(key);
    p.ids[(long long)r * K + k] = key_id(key);
    p.lp[(long long)r * K + k] = M == kdt_neg_inf() ? kdt_neg_inf() : (x - M) - log_s;
}

// ---- the phases of the output ------------------------------------------

// S = 1: the block is the row, buf[0..K) the answer and buf[0] its max.
__device__ __forceinline__ void
write_row_top(const kdt_draft_topk_params &p, const topk_smem &sm, int r,
              int tid)
{
    const float M = key_logit(sm.buf[0]);
    const float log_s = logf(rescaled(sm.part_m, sm.part_s, M));
    for (int k = tid; k < K; k += THREADS)
        put_out(p, r, k, sm.buf[k], M, log_s);
}

// S > 1: merge the S chunks' tops (see the top of draft_topk.cu) and write
// the keys of rank < K that this block owns.  Every block of the cluster
// calls it.
__device__ __forceinline__ void
merge_cluster_tops(const kdt_draft_topk_params &p, topk_smem &sm, int r,
                   unsigned rank, unsigned S, int lg_s, int kc, int tid,
                   int lane, int warp)
{
    // Publish ours.
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
        if (j == 0 && k < kc && pos < K)
            put_out(p, r, pos, key, M, log_s);
    }
    KDT_DT_PHASE(13);
    cluster_wait(); // the others are done reading this block
}
