/*
 * verify_attn.cu: absorbed-MLA tree attention.  The contract (inputs,
 * outputs, limits, the mask and the split workspace): docs/contract.md
 * §3, verify_attn.
 *
 * One latent KV head of 576 dims (512 c_kv + 64 k_pe) is shared by every
 * query head, so all n_nodes * H query rows of a request can share each KV
 * tile: the kernel folds (node, head) into the M dimension of two GEMMs,
 * S = Q K^T (K = 576) and O = P V (V = the first 512 dims of the same
 * rows), with an online softmax between them.
 *
 * Two bodies, each a file of its own, compute that: on sm_90a (Hopper)
 * the wgmma body of verify_attn_wgmma.cuh (KDT_ATTN_WGMMA = 1, see
 * kdt_attn_tiles.h); on every other target the mma.sync body of
 * verify_attn_mma.cuh, which fits the 99 KB a block gets on sm_120.  This
 * file holds what they share: the shape constants, the block prelude
 * (va_block_begin), the epilogue's helpers (va_store_lse, va_row_out,
 * va_put) and the merge kernel.
 *
 * What both bodies do alike:
 *  - A block is 64 folded rows (a row tile) x one range of KV tiles (a
 *    "split") of one request.  Blocks of the same request and split
 *    differ only in their rows; blockIdx.x is the row tile, so they run
 *    side by side and their re-reads of a KV tile hit L2: DRAM sees the
 *    KV once per request.
 *  - The prefix tiles (all positions < past_len) see no mask work; only
 *    the tiles that hold the tree's own rows test anc_mask.
 *  - Softmax runs in the log2 domain with a lazy maximum: the reference
 *    maximum moves only when a row's maximum grows by more than 2^8
 *    (LAZY_RESCALE), so P stays <= 256 (exact enough in bf16 and f32) and
 *    the O rescale, a pass over the accumulator, is skipped on almost
 *    every tile.
 *  - The cache is bf16 or FP8 e4m3 (KV), its scale (kv_scale, 1 for bf16)
 *    applied to the logits' scale and to each row's output, never to the
 *    elements (docs/contract.md §3).
 *  - When there are too few (request, row tile) pairs to fill the GPU the
 *    host splits the KV range (gridDim.y splits); each split writes its
 *    normalised partial O (f32) and log2-sum-exp to the workspace, and
 *    kdt_verify_attn_merge combines them by their LSE.  The wgmma body can
 *    instead run a row tile's splits as one thread-block cluster and merge
 *    them there, through distributed shared memory (its cluster_merge).
 */
#include "kdt_limits.h"
#include "kdt_params.h"
#include "kdt_attn_tiles.h"
#include "kdt_mma.cuh"
#include "kdt_fp8.cuh"

#ifndef KDT_H
#error "verify_attn.cu needs -DKDT_H"
#endif
#ifndef KDT_PAGE
#error "verify_attn.cu needs -DKDT_PAGE"
#endif
#ifndef KDT_N_MAX
#error "verify_attn.cu needs -DKDT_N_MAX"
#endif
/* KV and MATH are optional in shape strings, bf16 (0) by default
 * (src/kernels/verify_attn.c); the host passes them always, the
 * development harnesses of the bf16 kernel need not. */
#ifndef KDT_KV
#define KDT_KV 0
#endif
#ifndef KDT_MATH
#define KDT_MATH 0
#endif

constexpr int H = KDT_H;
constexpr int PAGE = KDT_PAGE;
constexpr int N_MAX = KDT_N_MAX;
constexpr bool KV_E4M3 = KDT_KV == 1;         /* else bf16 */
constexpr bool MATH_E4M3 = KDT_MATH == 1;     /* else bf16 */
constexpr int W = (N_MAX + 31) / 32;          /* mask words per row */
constexpr int ROWS = N_MAX * H;               /* folded rows per request */
constexpr int D_QK = KDT_ATTN_D_QK;
constexpr int D_V = KDT_ATTN_D_V;
constexpr int CHUNKS = D_QK * 2 / 16;         /* 16-byte pieces of a row */
constexpr float LAZY_RESCALE = 8.0f;          /* log2 units: P <= 256 */

static_assert(H >= 1 && H <= 128 && N_MAX >= 1 && N_MAX <= KDT_LIMIT_N_MAX,
              "range");
static_assert(PAGE >= 1 && PAGE <= 256, "range");
static_assert((KDT_KV == 0 || KDT_KV == 1) && (KDT_MATH == 0 || KDT_MATH == 1),
              "KV and MATH are 0 (bf16) or 1 (e4m3)");
static_assert(!MATH_E4M3 || KV_E4M3, "MATH=e4m3 reads an e4m3 cache");
#if KDT_KV == 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "an e4m3 cache needs sm_89 or newer (FP8 cvt and mma)"
#endif

/* A block's request and KV range: the device-side values clamped (bad ones
 * cannot make the kernel read outside the block table or the tree), its
 * row tile (rows m0 .. m0 + BM_ - 1 of the request's folded ROWS) and its
 * split's KV tiles [t0, t1) of BN_ tokens. */
struct va_block {
    int r, split, nsplit;
    int past, nn, total, valid_rows, m0, t0, t1;
    int64_t req_row0;
    float out_scale; /* what a row's O is scaled by: the cache's scale */
};

/* Fills `b` for this block.  False when its rows are all padding: then,
 * unsplit or as split 0 of a cluster (`clustered`: the wgmma body's
 * in-cluster merge), it has written their o = 0 and lse = -inf (split
 * through the workspace, the merge kernel writes them), and the block has
 * nothing else to do. */
template <int BM_, int BN_, int NT_>
static __device__ __forceinline__ bool
va_block_begin(va_block &b, const kdt_verify_attn_params &p, bool clustered)
{
    const int cap = p.max_pages * PAGE;
    b.r = blockIdx.z;
    b.split = blockIdx.y;
    b.nsplit = p.num_splits;
    b.past = min(max(p.past_len[b.r], 0), cap);
    b.nn = min(max(p.n_nodes[b.r], 0), N_MAX);
    b.total = min(b.past + b.nn, cap);
    b.valid_rows = b.nn * H;
    b.m0 = blockIdx.x * BM_;
    b.req_row0 = (int64_t)b.r * ROWS;
    b.out_scale = KV_E4M3 ? p.kv_scale : 1.f;
    if (b.m0 >= b.valid_rows) {
        if (b.nsplit == 1 || (clustered && b.split == 0)) {
            const int rows = min(BM_, ROWS - b.m0);
            uint4 *o4 = (uint4 *)(p.o + (b.req_row0 + b.m0) * D_V);
            for (int i = threadIdx.x; i < rows * D_V / 8; i += NT_)
                o4[i] = make_uint4(0, 0, 0, 0);
            if (p.lse && (int)threadIdx.x < rows)
                p.lse[b.req_row0 + b.m0 + threadIdx.x] = kdt_neg_inf();
        }
        return false;
    }
    const int ntiles = (b.total + BN_ - 1) / BN_;
    const int per = (ntiles + b.nsplit - 1) / b.nsplit;
    b.t0 = min(b.split * per, ntiles);
    b.t1 = min(b.t0 + per, ntiles);
    return true;
}

/* A row's log2-sum-exp from its reference maximum and row sum (log2
 * units): -inf for a row that saw nothing. */
static __device__ __forceinline__ float
va_lse2(float m_ref, float l)
{
    return l > 0.f ? m_ref + kdt_log2(l) : kdt_neg_inf();
}

/* Row m's kv_scale / l, what its O is normalised (and dequantized) by:
 * 0 for a padded row (past the request's valid rows) or one that saw
 * nothing, so it comes out as zeros. */
static __device__ __forceinline__ float
va_row_inv(const va_block &b, int m, float l)
{
    /* a literal 1 for bf16: 1 / l is a reciprocal, where even a 1 read
     * from b made ptxas emit a full division (other SASS) */
    const float s = KV_E4M3 ? b.out_scale : 1.f;
    return l > 0.f && m < b.valid_rows ? s / l : 0.f;
}

/* Row m's log2-sum-exp lse2 (va_lse2): the natural-log lse when unsplit
 * (-inf on padded rows), else the split's log2 value for the merge. */
static __device__ __forceinline__ void
va_store_lse(const kdt_verify_attn_params &p, const va_block &b, int m,
             float lse2)
{
    if (m >= ROWS)
        return;
    if (b.nsplit == 1) {
        if (p.lse)
            p.lse[b.req_row0 + m] = m < b.valid_rows
                ? lse2 * KDT_LN2 : kdt_neg_inf();
    } else {
        float *ws_lse = p.workspace
            + (int64_t)b.nsplit * p.n_requests * ROWS * D_V;
        ws_lse[((int64_t)b.split * p.n_requests + b.r) * ROWS + m] = lse2;
    }
}

/* Where row m's normalised O goes: bf16 into o when unsplit, f32 into the
 * split's partial in the workspace otherwise; and its 1 / l (0 for a
 * padded row, or one that saw nothing). */
struct va_out {
    uint16_t *o;
    float *ws;
    float inv;
};

static __device__ __forceinline__ va_out
va_row_out(const kdt_verify_attn_params &p, const va_block &b, int m, float l)
{
    va_out d;
    d.inv = va_row_inv(b, m, l);
    d.o = NULL;
    d.ws = NULL;
    if (b.nsplit == 1)
        d.o = p.o + (b.req_row0 + m) * D_V;
    else
        d.ws = p.workspace
            + (((int64_t)b.split * p.n_requests + b.r) * ROWS + m) * D_V;
    return d;
}

/* Columns col, col + 1 of that row, from the unnormalised accumulator. */
static __device__ __forceinline__ void
va_put(const va_out &d, int col, float x0, float x1)
{
    if (d.ws)
        *(float2 *)(d.ws + col) = make_float2(x0 * d.inv, x1 * d.inv);
    else
        *(uint32_t *)(d.o + col) = kdt_pack_bf16x2(x0 * d.inv, x1 * d.inv);
}

/* One split's share of a merged row (the merge kernel's, and the wgmma
 * body's in-cluster merge): its partial v weighted by 2^(ls - mx), 0 for
 * a split that saw nothing of the row (ls = -inf), into acc and wsum. */
static __device__ __forceinline__ void
va_merge_add(float4 &acc, float &wsum, float ls, float mx, const float4 &v)
{
    const float w = ls == kdt_neg_inf() ? 0.f : kdt_exp2(ls - mx);
    wsum += w;
    acc.x += w * v.x; acc.y += w * v.y;
    acc.z += w * v.z; acc.w += w * v.w;
}

#if KDT_ATTN_WGMMA
#include "verify_attn_wgmma.cuh"
#else
#include "verify_attn_mma.cuh"
#endif

/*
 * Merge of the KV splits: one block per folded row (grid: ROWS x R), a
 * thread per 4 of its 512 columns.  Split s holds the row's O_s normalised
 * by its own sum and lse_s = log2 of that sum (plus its reference
 * maximum); O = sum_s 2^(lse_s - lse) O_s with lse = log2 sum_s 2^lse_s.
 * Padded rows get o = 0, lse = -inf.  The splits' reads are independent,
 * so a thread has several in flight (the merge is latency-bound: its
 * partials were just written and sit in L2).
 */
extern "C" __global__ void __launch_bounds__(KDT_ATTN_MERGE_THREADS)
kdt_verify_attn_merge(const kdt_verify_attn_params p)
{
    static_assert(KDT_ATTN_MERGE_THREADS * 4 == D_V, "a thread per float4");
    const int tid = threadIdx.x;
    const int m = blockIdx.x, r = blockIdx.y;
    const int R = p.n_requests;
    const int nsplit = p.num_splits;
    const int nn = min(max(p.n_nodes[r], 0), N_MAX);
    const int64_t grow = (int64_t)r * ROWS + m;
    uint2 *dst = (uint2 *)(p.o + grow * D_V) + tid;

    const float *ws_lse = p.workspace + (int64_t)nsplit * R * ROWS * D_V;
    float mx = kdt_neg_inf();
    if (m < nn * H)
        for (int s = 0; s < nsplit; ++s)
            mx = fmaxf(mx, ws_lse[((int64_t)s * R + r) * ROWS + m]);
    if (mx == kdt_neg_inf()) { /* padded row (or one that saw nothing) */
        *dst = make_uint2(0, 0);
        if (p.lse && tid == 0)
            p.lse[grow] = kdt_neg_inf();
        return;
    }
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float wsum = 0.f;
#pragma unroll 4
    for (int s = 0; s < nsplit; ++s) {
        const int64_t srow = ((int64_t)s * R + r) * ROWS + m;
        va_merge_add(acc, wsum, ws_lse[srow], mx,
                     ((const float4 *)(p.workspace + srow * D_V))[tid]);
    }
    const float inv = 1.f / wsum;
    *dst = make_uint2(kdt_pack_bf16x2(acc.x * inv, acc.y * inv),
                      kdt_pack_bf16x2(acc.z * inv, acc.w * inv));
    if (p.lse && tid == 0)
        p.lse[grow] = (mx + kdt_log2(wsum)) * KDT_LN2;
}
