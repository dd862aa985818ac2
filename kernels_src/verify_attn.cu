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
 * Two bodies share this file's contract, grid shape, block setup,
 * epilogue stores and merge kernel: on sm_90a (Hopper) the wgmma one in
 * verify_attn_wgmma.cuh (KDT_ATTN_WGMMA = 1, see kdt_attn_tiles.h); on
 * every other target the mma.sync one below, which fits the 99 KB a block
 * gets on sm_120.
 *
 * The mma.sync body.  Block = BM = 64 folded rows x one range of KV tiles
 * ("split") of one request, 8 warps.  Roles inside a KV tile of BN = 16
 * tokens:
 *  - QK: warp (h, q) = (warp / 4, warp % 4) computes the partial S of rows
 *    32h..32h+31 over its quarter of the 576 dims (128 c_kv dims + 16 k_pe
 *    dims), from Q fragments it keeps in registers for the whole block, and
 *    writes it to partial slot q in shared memory.
 *  - softmax: warp w owns rows 8w..8w+7: it sums the 4 partial slots,
 *    scales, applies the ancestor mask (tail tiles only), updates the row
 *    maximum and sum, writes P (bf16) and the rescale factor.
 *  - PV: warp w owns output columns 64 w .. 64 w + 63 of all BM rows (a
 *    BM x 64 f32 accumulator, 128 registers) and multiplies P by its V
 *    columns.
 * Phases: load_q (Q into registers, once), then per KV tile the refill
 * (load_kv_tile), PV of tile t-1 (pv_tile) beside S of tile t (qk_mma,
 * qk_store: independent tensor work between the same two block
 * barriers), the softmax of tile t (softmax_tile) between them; then the
 * epilogue (row sums, LSE, normalised O).
 * Each KV tile comes once from global memory per block (cp.async, 16-byte
 * pieces, two tiles ahead).  Blocks of the same request and split differ
 * only in their rows; blockIdx.x is the row tile, so they run side by side
 * and their re-reads of a KV tile hit L2: DRAM sees the KV once per
 * request (at H = 8, 65 rows: 9 row tiles read each tile from L2, about
 * 2 TB/s of L2 traffic at the measured 200 TFLOP/s: ncu put L2 at about
 * a quarter of its peak).
 *
 * The prefix tiles (all positions < past_len) see no mask work; only the
 * tiles that hold the tree's own rows test anc_mask.
 *
 * Softmax runs in the log2 domain with a lazy maximum: the reference
 * maximum moves only when a row's maximum grows by more than 2^8, so P
 * stays <= 256 (exact enough in bf16 and f32) and the O rescale, a pass
 * over 128 registers, is skipped on almost every tile.
 *
 * When there are too few (request, row tile) pairs to fill the GPU the host
 * splits the KV range (gridDim.y splits); each split writes its normalised
 * partial O (f32) and log2-sum-exp to the workspace, and
 * kdt_verify_attn_merge combines them by their LSE.
 */
#include "kdt_params.h"
#include "kdt_attn_tiles.h"
#include "kdt_mma.cuh"

#ifndef KDT_H
#error "verify_attn.cu needs -DKDT_H"
#endif
#ifndef KDT_PAGE
#error "verify_attn.cu needs -DKDT_PAGE"
#endif
#ifndef KDT_N_MAX
#error "verify_attn.cu needs -DKDT_N_MAX"
#endif

constexpr int H = KDT_H;
constexpr int PAGE = KDT_PAGE;
constexpr int N_MAX = KDT_N_MAX;
constexpr int W = (N_MAX + 31) / 32;          /* mask words per row */
constexpr int ROWS = N_MAX * H;               /* folded rows per request */
constexpr int D_QK = KDT_ATTN_D_QK;
constexpr int D_V = KDT_ATTN_D_V;
/* A block's request and KV range: the device-side values clamped (bad ones
 * cannot make the kernel read outside the block table or the tree), its
 * row tile (rows m0 .. m0 + BM_ - 1 of the request's folded ROWS) and its
 * split's KV tiles [t0, t1) of BN_ tokens. */
struct va_block {
    int r, split, nsplit;
    int past, nn, total, valid_rows, m0, t0, t1;
    int64_t req_row0;
};

/* Fills `b` for this block.  False when its rows are all padding: then,
 * unsplit, it has written their o = 0 and lse = -inf (split, the merge
 * kernel writes them), and the block has nothing else to do. */
template <int BM_, int BN_, int NT_>
static __device__ __forceinline__ bool
va_block_begin(va_block &b, const kdt_verify_attn_params &p)
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
    if (b.m0 >= b.valid_rows) {
        if (b.nsplit == 1) {
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

/* Row m's log-sum-exp from its reference maximum and row sum (log2
 * units): the natural-log lse when unsplit (-inf on padded rows), else the
 * split's log2 value for the merge. */
static __device__ __forceinline__ void
va_store_lse(const kdt_verify_attn_params &p, const va_block &b, int m,
             float m_ref, float l)
{
    if (m >= ROWS)
        return;
    const float lse2 = l > 0.f ? m_ref + kdt_log2(l) : kdt_neg_inf();
    if (b.nsplit == 1) {
        if (p.lse)
            p.lse[b.req_row0 + m] = m < b.valid_rows
                ? lse2 * 0.6931471805599453f : kdt_neg_inf();
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
    d.inv = l > 0.f && m < b.valid_rows ? 1.f / l : 0.f;
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

#if KDT_ATTN_WGMMA
#include "verify_attn_wgmma.cuh"
#else
constexpr int BM = KDT_ATTN_BM;
constexpr int BN = KDT_ATTN_BN;
constexpr int NSTAGE = KDT_ATTN_NSTAGE;
constexpr int NTHREADS = KDT_ATTN_THREADS;
constexpr int ROW_BYTES = KDT_ATTN_ROW_BYTES;
constexpr int CHUNKS = D_QK * 2 / 16;         /* 16-byte pieces of a row */
constexpr int STAGE_BYTES = BN * ROW_BYTES;
constexpr int RING_BYTES = NSTAGE * STAGE_BYTES;
constexpr int SLOT_BYTES = BM * BN * 4;       /* one partial-S slot */
constexpr int P_STRIDE = 48;                  /* 16 bf16 + pad: no conflicts */
constexpr int SBUF_BYTES = 4 * SLOT_BYTES;    /* the 4 slots of one tile */
constexpr int PBUF_BYTES = BM * P_STRIDE;
constexpr int SLOTS_OFF = RING_BYTES;
constexpr int P_OFF = SLOTS_OFF + SBUF_BYTES;
constexpr int ALPHA_OFF = P_OFF + PBUF_BYTES;
constexpr int L_OFF = ALPHA_OFF + BM * 4;
constexpr int SMEM_BYTES = L_OFF + BM * 4;
constexpr float LAZY_RESCALE = 8.0f;          /* log2 units: P <= 256 */

static_assert(SMEM_BYTES == KDT_ATTN_SMEM, "kdt_attn_tiles.h disagrees");
static_assert(RING_BYTES >= BM * ROW_BYTES, "Q tile is staged in the ring");
static_assert(SMEM_BYTES <= 99 * 1024, "sm_120 allows 99 KB per block");
static_assert(BM == 64 && NTHREADS == 256 && BN == 16,
              "the warp roles below are 8 warps, 8 rows a warp, 16 tokens");
static_assert(NSTAGE == 4, "the schedule keeps 4 tiles in the ring");
constexpr int NWARPS = NTHREADS / 32;
constexpr int NCOL = D_V / NWARPS;            /* output columns per warp */
constexpr int NT = NCOL / 8;                  /* their n8 tiles */
constexpr int MT = BM / 16;                   /* m16 tiles of the block */
static_assert(H >= 1 && H <= 128 && N_MAX >= 1 && N_MAX <= 1025, "range");
static_assert(PAGE >= 1 && PAGE <= 256, "range");

/* Slot element (row, col) of a BM x 16 f32 partial-S tile.  Rows are 64 B;
 * the XOR of column bit 3 by row bit 1 makes both the fragment stores
 * (4 rows x 8 columns per half warp) and the float4 row reads (2 rows per
 * quarter warp) conflict-free. */
static __device__ __forceinline__ int
slot_index(int row, int col)
{
    return row * BN + (col ^ (((row >> 1) & 1) << 3));
}

/* The KV rows this thread copies: token `tok` of every tile, 16-byte
 * pieces col0, col0 + TPT, ... (fixed for the whole block, so a tile costs
 * one block-table read and a few cp.async per thread). */
constexpr int TPT = NTHREADS / BN;            /* threads per token */
constexpr int PIECES = (CHUNKS + TPT - 1) / TPT;

/* Copies KV tile t (tokens t*BN ..) of the request into the stage at
 * `dst` (this thread's first piece); tokens at or past `total` are
 * zero-filled (never read: the block table may hold garbage there, and a
 * zero V row times P = 0 cannot make NaN). */
static __device__ __forceinline__ void
load_kv_tile(uint32_t dst, int tok, int col0, int t, int total,
             const uint16_t *__restrict__ kv, const int32_t *__restrict__ bt)
{
    const int pos = t * BN + tok;
    const uint16_t *src = kv;
    int bytes = 0;
    if (pos < total) {
        const int page = __ldg(bt + pos / PAGE);
        src = kv + ((int64_t)page * PAGE + pos % PAGE) * D_QK + col0 * 8;
        bytes = 16;
    }
#pragma unroll
    for (int i = 0; i < PIECES; ++i)
        if (CHUNKS % TPT == 0 || col0 + i * TPT < CHUNKS)
            kdt_cp_async16(dst + i * TPT * 16, src + (bytes ? i * TPT * 8 : 0),
                           bytes);
}

/* QK, the MMA half: this warp's partial S (rows 32h..32h+31, its quarter
 * q of the dims) of the tile in the stage at `krow` (lane address). */
static __device__ __forceinline__ void
qk_mma(float acc[2][2][4], const uint32_t qa[2][9][4], uint32_t krow, int qq)
{
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[mi][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < 9; ++ks) {
        const int dim = ks < 8 ? 128 * qq + 16 * ks : 512 + 16 * qq;
        uint32_t kb[4];
        kdt_ldmatrix_x4(kb, krow + dim * 2);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            kdt_mma_bf16(acc[mi][0], qa[mi][ks], kb[0], kb[1]);
            kdt_mma_bf16(acc[mi][1], qa[mi][ks], kb[2], kb[3]);
        }
    }
}

/* QK, the store half: the partial S into slot qq of `sbuf`. */
static __device__ __forceinline__ void
qk_store(float *sbuf, const float acc[2][2][4], int qh, int qq, int lane)
{
    float *slot = sbuf + qq * (BM * BN);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = 32 * qh + 16 * mi + (lane >> 2) + 8 * hf;
                const int col = 8 * nt + 2 * (lane & 3);
                *(float2 *)(slot + slot_index(row, col)) =
                    make_float2(acc[mi][nt][2 * hf], acc[mi][nt][2 * hf + 1]);
            }
}

/* Softmax of tile t for row srow, columns sc0..sc0+3: sums the 4 partial
 * slots, scales, masks (tail tiles only), moves the lazy maximum, writes P
 * (bf16) and alpha.  Returns alpha (1 when the maximum did not move). */
static __device__ __forceinline__ float
softmax_tile(const float *sbuf, unsigned char *pbuf, float *alpha_s, int t,
             int srow, int sc0, int lane, int past, int total, int nn,
             int snode, const uint32_t *__restrict__ mask_row,
             float scale_log2, float &m_ref, float &l_part)
{
    float x[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float4 v =
            *(const float4 *)(sbuf + q * (BM * BN) + slot_index(srow, sc0));
        x[0] += v.x; x[1] += v.y; x[2] += v.z; x[3] += v.w;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
        x[j] *= scale_log2;
    if ((t + 1) * BN > past) {
        /* a tail tile: the tree's own rows, and the end of the KV */
        const int pos0 = t * BN + sc0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int pos = pos0 + j;
            bool vis = pos < past;
            if (!vis && pos < total && snode < nn) {
                const int jj = pos - past;
                vis = (__ldg(mask_row + (jj >> 5)) >> (jj & 31)) & 1u;
            }
            if (!vis)
                x[j] = kdt_neg_inf();
        }
    }
    float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float alpha = 1.f;
    if (mx > m_ref + LAZY_RESCALE) {
        alpha = kdt_exp2(m_ref - mx); /* 0 when m_ref = -inf */
        m_ref = mx;
        l_part *= alpha;
    }
    /* m_ref = -inf means every x so far is -inf: p = 0, not NaN */
    const float mu = m_ref == kdt_neg_inf() ? 0.f : m_ref;
    float pr[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        pr[j] = kdt_exp2(x[j] - mu);
        l_part += pr[j];
    }
    uint2 pk;
    pk.x = kdt_pack_bf16x2(pr[0], pr[1]);
    pk.y = kdt_pack_bf16x2(pr[2], pr[3]);
    *(uint2 *)(pbuf + srow * P_STRIDE + sc0 * 2) = pk;
    if ((lane & 3) == 0)
        alpha_s[srow] = alpha;
    return alpha;
}

/* PV: O[:, NCOL*w ..] = alpha O + P V for the tile whose V rows start at
 * `vrow` (lane address), P at `p_lane` (lane address). */
static __device__ __forceinline__ void
pv_tile(float o[MT][NT][4], uint32_t p_lane, uint32_t vrow,
        const float *alpha_s, int rescale, int lane)
{
    if (rescale) {
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
            const float a0 = alpha_s[16 * mi + (lane >> 2)];
            const float a1 = alpha_s[16 * mi + (lane >> 2) + 8];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                o[mi][nt][0] *= a0; o[mi][nt][1] *= a0;
                o[mi][nt][2] *= a1; o[mi][nt][3] *= a1;
            }
        }
    }
    uint32_t pa[MT][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
        kdt_ldmatrix_x4(pa[mi], p_lane + 16 * mi * P_STRIDE);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
        uint32_t vb[4];
        kdt_ldmatrix_x4_trans(vb, vrow + 16 * j * 2);
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
            kdt_mma_bf16(o[mi][2 * j], pa[mi], vb[0], vb[1]);
            kdt_mma_bf16(o[mi][2 * j + 1], pa[mi], vb[2], vb[3]);
        }
    }
}

/* Phase 1: the block's Q tile (rows m0.., padding rows zero) through the
 * ring into this warp's A fragments, kept for the whole block: rows
 * 32 qh .. 32 qh + 31, the dims of its quarter qq (128 c_kv + 16 k_pe). */
static __device__ __forceinline__ void
load_q(uint32_t (&qa)[2][9][4], const kdt_verify_attn_params &p,
       const va_block &b, uint32_t ring, int tid, int qh, int qq, int lane)
{
    const uint16_t *q = p.q + (b.req_row0 + b.m0) * D_QK;
    for (int c = tid; c < BM * CHUNKS; c += NTHREADS) {
        const int row = c / CHUNKS, col = c - row * CHUNKS;
        const bool ok = b.m0 + row < b.valid_rows;
        kdt_cp_async16(ring + row * ROW_BYTES + col * 16,
                       ok ? q + (int64_t)row * D_QK + col * 8 : q,
                       ok ? 16 : 0);
    }
    kdt_cp_async_commit();
    kdt_cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ks = 0; ks < 9; ++ks) {
            const int dim = ks < 8 ? 128 * qq + 16 * ks : 512 + 16 * qq;
            const int row = 32 * qh + 16 * mi + (lane & 15);
            kdt_ldmatrix_x4(qa[mi][ks], ring + row * ROW_BYTES
                                            + (dim + 8 * (lane >> 4)) * 2);
        }
    }
    __syncthreads(); /* the ring now belongs to the KV tiles */
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
kdt_verify_attn(const kdt_verify_attn_params p)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    va_block b;
    if (!va_block_begin<BM, BN, NTHREADS>(b, p))
        return;
    const int past = b.past, nn = b.nn, total = b.total;
    const int t0 = b.t0, t1 = b.t1;

    const uint32_t ring = kdt_smem_addr(smem);
    float *slots = (float *)(smem + SLOTS_OFF);
    unsigned char *pbuf = smem + P_OFF;
    float *alpha_s = (float *)(smem + ALPHA_OFF);
    float *l_s = (float *)(smem + L_OFF);

    const uint16_t *__restrict__ kv = p.kv_cache;
    const int32_t *__restrict__ bt = p.block_table + (int64_t)b.r * p.max_pages;

    const int qh = warp >> 2, qq = warp & 3;
    uint32_t qa[2][9][4];
    load_q(qa, p, b, ring, tid, qh, qq, lane);

    /* softmax state of row 8*warp + lane/4 (the 4 lanes of a row agree) */
    const int srow = 8 * warp + (lane >> 2);
    const int sc0 = 4 * (lane & 3);
    const int snode = (b.m0 + srow) / H;
    const uint32_t *mask_row =
        p.anc_mask + ((int64_t)b.r * N_MAX + min(snode, N_MAX - 1)) * W;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    float m_ref = kdt_neg_inf(), l_part = 0.f;

    float o[MT][NT][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                o[mi][nt][e] = 0.f;

    /* lane addresses inside a stage: K as the B operand of S (tokens are
     * n, dims are k), V as the B operand of O (ldmatrix.trans: tokens are
     * k, this warp's NCOL columns are n); P as the A operand of O */
    const uint32_t k_lane = ((lane & 7) + 8 * (lane >> 4)) * ROW_BYTES
                            + 8 * ((lane >> 3) & 1) * 2;
    const uint32_t v_lane = ((lane & 7) + 8 * ((lane >> 3) & 1)) * ROW_BYTES
                            + (NCOL * warp + 8 * (lane >> 4)) * 2;
    const uint32_t p_lane = ring + P_OFF + (lane & 15) * P_STRIDE
                            + 8 * (lane >> 4) * 2;
    const int ltok = tid / TPT, lcol = tid % TPT;
    const uint32_t ldst = ring + ltok * ROW_BYTES + lcol * 16;
    int rescale = 0;

    /*
     * Phase 2, the KV loop.  Iteration t: refill (tile t+2 into the stage
     * tile t-2 left), PV of tile t-1 and QK of tile t (independent tensor
     * work, no barrier between them), barrier X, softmax of tile t,
     * barrier Y (which also publishes tile t+1).  The four stages hold
     * tiles t-1 (PV), t (QK), t+1 (landed) and t+2 (in flight).
     */
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        if (t0 + s < t1)
            load_kv_tile(ldst + s * STAGE_BYTES, ltok, lcol, t0 + s, total,
                         kv, bt);
        kdt_cp_async_commit();
    }
    kdt_cp_async_wait<1>();
    __syncthreads(); /* tile t0 landed */
    for (int t = t0; t <= t1; ++t) {
        const int it = t - t0;
        if (t + 2 < t1)
            load_kv_tile(ldst + ((it + 2) % NSTAGE) * STAGE_BYTES, ltok,
                         lcol, t + 2, total, kv, bt);
        kdt_cp_async_commit();
        if (t > t0)
            pv_tile(o, p_lane,
                    ring + ((it + NSTAGE - 1) % NSTAGE) * STAGE_BYTES
                        + v_lane,
                    alpha_s, rescale, lane);
        if (t == t1)
            break;
        float acc[2][2][4];
        qk_mma(acc, qa, ring + (it % NSTAGE) * STAGE_BYTES + k_lane, qq);
        qk_store(slots, acc, qh, qq, lane);
        __syncthreads(); /* X: partial S written; PV(t-1) done */
        const float alpha =
            softmax_tile(slots, pbuf, alpha_s, t, srow, sc0, lane, past,
                         total, nn, snode, mask_row, scale_log2, m_ref,
                         l_part);
        kdt_cp_async_wait<1>(); /* this thread's part of tile t+1 */
        /* Y: P, alpha and tile t+1 visible; the OR says whether any
         * row's reference maximum moved (else PV skips the rescale) */
        rescale = __syncthreads_or(alpha != 1.f);
    }
    kdt_cp_async_wait<0>(); /* nothing may land after the block exits */

    /* ---- Phase 3, the epilogue: row sums, LSE, normalised O --------- */
    l_part += __shfl_xor_sync(0xffffffffu, l_part, 1);
    l_part += __shfl_xor_sync(0xffffffffu, l_part, 2);
    if ((lane & 3) == 0) {
        l_s[srow] = l_part;
        va_store_lse(p, b, b.m0 + srow, m_ref, l_part);
    }
    __syncthreads();

#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = 16 * mi + (lane >> 2) + 8 * hf;
            if (b.m0 + row >= ROWS)
                continue;
            const va_out d = va_row_out(p, b, b.m0 + row, l_s[row]);
            const int col0 = NCOL * warp + 2 * (lane & 3);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                va_put(d, col0 + 8 * nt, o[mi][nt][2 * hf],
                       o[mi][nt][2 * hf + 1]);
        }
    }
}
#endif /* KDT_ATTN_WGMMA */

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
        const float ls = ws_lse[srow];
        const float4 v = ((const float4 *)(p.workspace + srow * D_V))[tid];
        /* a split that saw nothing of the row has lse -inf: weight 0 */
        const float w = ls == kdt_neg_inf() ? 0.f : kdt_exp2(ls - mx);
        wsum += w;
        acc.x += w * v.x; acc.y += w * v.y;
        acc.z += w * v.z; acc.w += w * v.w;
    }
    const float inv = 1.f / wsum;
    *dst = make_uint2(kdt_pack_bf16x2(acc.x * inv, acc.y * inv),
                      kdt_pack_bf16x2(acc.z * inv, acc.w * inv));
    if (p.lse && tid == 0)
        p.lse[grow] = (mx + kdt_log2(wsum)) * 0.6931471805599453f;
}
