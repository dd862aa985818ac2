/* attn_new.cu: the restructured verify_attn of the third session (PV(t-1)
 * and QK(t) as one branch-free block, block-table reads a tile ahead, and
 * the KDT_ATTN_PINGPONG / KDT_ATTN_OWNS experiments).  It passes the host
 * emulator and every harness check on the H200 but measured 2-5% slower
 * than the library's kernel (kernels_src/verify_attn.cu) there
 * (tools/dev/ATTN_NOTES.md), so it is kept here, not in the library:
 * tools/dev/attn_harness.cu times it with -DKERNEL_NEW and
 * tools/dev/attn_emu.sh checks it when given this file. */
#ifndef KDT_ATTN_PINGPONG
#define KDT_ATTN_PINGPONG 0 /* 1: two 4-warp row groups half an iteration apart */
#endif
#ifndef KDT_ATTN_OWNS
#define KDT_ATTN_OWNS 0 /* 1: each QK warp keeps its own quarter of S */
#endif
/*
 * verify_attn.cu: absorbed-MLA tree attention (specs/kernels.md §3).
 *
 * One latent KV head of 576 dims (512 c_kv + 64 k_pe) is shared by every
 * query head, so all n_nodes * H query rows of a request can share each KV
 * tile: the kernel folds (node, head) into the M dimension of two GEMMs,
 * S = Q K^T (K = 576) and O = P V (V = the first 512 dims of the same
 * rows), with an online softmax between them.
 *
 * Block = BM (64; 32 as a variant) folded rows x one range of KV tiles
 * ("split") of one request, BM / 8 warps.  Roles inside a KV tile of
 * BN = 16 tokens:
 *  - QK: warp (h, q) = (warp / 4, warp % 4) computes the partial S of rows
 *    32h..32h+31 over its quarter of the 576 dims (128 c_kv dims + 16 k_pe
 *    dims), from Q fragments it keeps in registers for the whole block, and
 *    writes it to partial slot q in shared memory.
 *  - softmax: warp w owns rows 8w..8w+7: it sums the 4 partial slots,
 *    scales, applies the ancestor mask (tail tiles only), updates the row
 *    maximum and sum, writes P (bf16) and the rescale factor.
 *  - PV: warp w owns output columns NCOL*w .. (64 of them for BM = 64) of
 *    all BM rows (a BM x NCOL f32 accumulator, 128 registers) and
 *    multiplies P by its V columns.
 * The PV of tile t-1 and the QK of tile t share one phase between two
 * block barriers (independent tensor work, written as one branch-free
 * block so that the SASS scheduler interleaves their MMAs), the softmax
 * of tile t takes the other; see the loop for the exact schedule and the
 * stage ring.  KDT_ATTN_PINGPONG = 1 (an experiment, not the default)
 * splits the block into two 4-warp row groups half an iteration apart,
 * so that one group's softmax overlaps the other's MMAs; PV then gives
 * each warp 32 rows x 128 columns.  KDT_ATTN_OWNS = 1 (also an
 * experiment) keeps each QK warp's own quarter of the partial S in
 * registers (qk_store_others).
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
constexpr int BM = KDT_ATTN_BM;
constexpr int BN = KDT_ATTN_BN;
constexpr int NSTAGE = KDT_ATTN_NSTAGE;
constexpr int NTHREADS = KDT_ATTN_THREADS;
constexpr int ROW_BYTES = KDT_ATTN_ROW_BYTES;
constexpr int CHUNKS = D_QK * 2 / 16;         /* 16-byte pieces of a row */
constexpr int STAGE_BYTES = BN * ROW_BYTES;
constexpr int RING_BYTES = NSTAGE * STAGE_BYTES;
constexpr int NBUF = KDT_ATTN_NBUF;           /* 1: two barriers a tile */
constexpr int SLOT_BYTES = BM * BN * 4;       /* one partial-S slot */
constexpr int P_STRIDE = 48;                  /* 16 bf16 + pad: no conflicts */
constexpr int SBUF_BYTES = 4 * SLOT_BYTES;    /* the 4 slots of one tile */
constexpr int PBUF_BYTES = BM * P_STRIDE;
constexpr int SLOTS_OFF = RING_BYTES;
constexpr int P_OFF = SLOTS_OFF + NBUF * SBUF_BYTES;
constexpr int ALPHA_OFF = P_OFF + NBUF * PBUF_BYTES;
constexpr int L_OFF = ALPHA_OFF + NBUF * BM * 4;
constexpr int SMEM_BYTES = L_OFF + BM * 4;
constexpr float LAZY_RESCALE = 8.0f;          /* log2 units: P <= 256 */

static_assert(SMEM_BYTES == KDT_ATTN_SMEM, "kdt_attn_tiles.h disagrees");
static_assert(RING_BYTES >= BM * ROW_BYTES, "Q tile is staged in the ring");
static_assert(SMEM_BYTES <= 99 * 1024, "sm_120 allows 99 KB per block");
static_assert((BM == 64 || BM == 32) && NTHREADS == BM * 4 && BN == 16,
              "the warp roles below are written for 8 rows a warp, 16 tokens");
static_assert(NSTAGE == 4 && (NBUF == 1 || NBUF == 2), "the ring holds 4");
constexpr int NWARPS = NTHREADS / 32;
/* Ping-pong (KDT_ATTN_PINGPONG = 1, BM 64 / NBUF 1 only): warps 0-3 and
 * 4-7 are two groups of 32 rows each, a half iteration apart (see the
 * loop).  PV then splits the 512 columns among a group's 4 warps. */
constexpr bool PINGPONG = KDT_ATTN_PINGPONG != 0;
constexpr bool OWNS = KDT_ATTN_OWNS != 0;    /* see qk_store_others */
static_assert(!OWNS || (NBUF == 1 && !PINGPONG), "own quarter: NBUF 1 only");
static_assert(!PINGPONG || (BM == 64 && NBUF == 1), "ping-pong: BM 64, NBUF 1");
constexpr int PV_GROUPS = PINGPONG ? 2 : 1;   /* row groups in PV */
constexpr int NCOL = D_V * PV_GROUPS / NWARPS; /* output columns per warp */
constexpr int NT = NCOL / 8;                  /* their n8 tiles */
constexpr int MT = BM / 16 / PV_GROUPS;       /* m16 tiles a warp's PV covers */
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

/* Barrier `id` (1..15) among `count` threads (whole warps). */
static __device__ __forceinline__ void
named_bar(int id, int count)
{
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}

/* The same, returning whether `pred` was non-zero in any of them. */
static __device__ __forceinline__ int
named_bar_or(int id, int count, int pred)
{
    int r;
    asm volatile("{ .reg .pred p, q; setp.ne.s32 p, %1, 0; "
                 "bar.red.or.pred q, %2, %3, p; selp.s32 %0, 1, 0, q; }"
                 : "=r"(r) : "r"(pred), "r"(id), "r"(count) : "memory");
    return r;
}

/* The KV rows this thread copies: token `tok` of every tile, 16-byte
 * pieces col0, col0 + TPT, ... (fixed for the whole block, so a tile costs
 * one block-table read and a few cp.async per thread). */
constexpr int TPT = NTHREADS / BN;            /* threads per token */
constexpr int PIECES = (CHUNKS + TPT - 1) / TPT;

/* Where this thread's pieces of KV tile t (tokens t*BN ..) come from: the
 * source of its first piece, or NULL for a token at or past `total`
 * (zero-filled, never read: the block table may hold garbage there, and a
 * zero V row times P = 0 cannot make NaN).  Separate from the copy so that
 * the block-table read of a tile is issued one iteration before the copy
 * that needs it and its latency hides behind that iteration's MMAs. */
static __device__ __forceinline__ const uint16_t *
kv_tile_src(int tok, int col0, int t, int total,
            const uint16_t *__restrict__ kv, const int32_t *__restrict__ bt)
{
    const int pos = t * BN + tok;
    if (pos >= total)
        return nullptr;
    const int page = __ldg(bt + pos / PAGE);
    return kv + ((int64_t)page * PAGE + pos % PAGE) * D_QK + col0 * 8;
}

/* Copies this thread's pieces of a KV tile from `src` (kv_tile_src) into
 * the stage at `dst` (this thread's first piece). */
static __device__ __forceinline__ void
kv_tile_copy(uint32_t dst, int col0, const uint16_t *src,
             const uint16_t *__restrict__ kv)
{
#pragma unroll
    for (int i = 0; i < PIECES; ++i)
        if (CHUNKS % TPT == 0 || col0 + i * TPT < CHUNKS)
            kdt_cp_async16(dst + i * TPT * 16, src ? src + i * TPT * 8 : kv,
                           src ? 16 : 0);
}

static __device__ __forceinline__ void
load_kv_tile(uint32_t dst, int tok, int col0, int t, int total,
             const uint16_t *__restrict__ kv, const int32_t *__restrict__ bt)
{
    kv_tile_copy(dst, col0, kv_tile_src(tok, col0, t, total, kv, bt), kv);
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

/* The own-quarter variant (KDT_ATTN_OWNS = 1): warp w = 4 qh + qq holds,
 * in acc[qq / 2][.][2 (qq % 2) ..], the partial S of exactly the 8 rows
 * its softmax owns (rows 8w ..), so it writes only the other three
 * quarters of its slot and keeps its own in registers: the exchange moves
 * 3/4 of the bytes.  The softmax then works on the accumulator's columns,
 * 2t, 2t+1, 8+2t, 9+2t (t = lane % 4), instead of 4t .. 4t+3. */
static __device__ __forceinline__ void
qk_store_others(float *sbuf, const float acc[2][2][4], int qh, int qq,
                int lane)
{
    float *slot = sbuf + qq * (BM * BN);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                if (2 * mi + hf == qq)
                    continue; /* warp-uniform */
                const int row = 32 * qh + 16 * mi + (lane >> 2) + 8 * hf;
                const int col = 8 * nt + 2 * (lane & 3);
                *(float2 *)(slot + slot_index(row, col)) =
                    make_float2(acc[mi][nt][2 * hf], acc[mi][nt][2 * hf + 1]);
            }
}

/* This warp's own quarter of acc: columns 2t, 2t+1, 8+2t, 9+2t. */
static __device__ __forceinline__ void
qk_own(float own[4], const float acc[2][2][4], int qq)
{
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float lo = (qq & 1) ? acc[0][nt][2 + e] : acc[0][nt][e];
            const float hi = (qq & 1) ? acc[1][nt][2 + e] : acc[1][nt][e];
            own[2 * nt + e] = (qq & 2) ? hi : lo;
        }
}

/* The softmax once the partial sums of row srow are gathered: x[0], x[1]
 * are columns c0, c0+1 and x[2], x[3] columns c1, c1+1 of tile t.  Scales,
 * masks (tail tiles only), moves the lazy maximum, writes P (bf16) and
 * alpha.  Returns alpha (1 when the maximum did not move). */
template <bool CONTIG> /* c1 == c0 + 2: one 8-byte P store */
static __device__ __forceinline__ float
softmax_finish(float x[4], int c0, int c1, unsigned char *pbuf,
               float *alpha_s, int t, int srow, int lane, int past, int total,
               int nn, int snode, const uint32_t *__restrict__ mask_row,
               float scale_log2, float &m_ref, float &l_part)
{
#pragma unroll
    for (int j = 0; j < 4; ++j)
        x[j] *= scale_log2;
    if ((t + 1) * BN > past) {
        /* a tail tile: the tree's own rows, and the end of the KV */
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int pos = t * BN + (j < 2 ? c0 + j : c1 + j - 2);
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
    unsigned char *prow = pbuf + srow * P_STRIDE;
    if (CONTIG) {
        uint2 pk;
        pk.x = kdt_pack_bf16x2(pr[0], pr[1]);
        pk.y = kdt_pack_bf16x2(pr[2], pr[3]);
        *(uint2 *)(prow + c0 * 2) = pk;
    } else {
        *(uint32_t *)(prow + c0 * 2) = kdt_pack_bf16x2(pr[0], pr[1]);
        *(uint32_t *)(prow + c1 * 2) = kdt_pack_bf16x2(pr[2], pr[3]);
    }
    if ((lane & 3) == 0)
        alpha_s[srow] = alpha;
    return alpha;
}

/* Softmax of tile t for row srow, columns sc0..sc0+3: sums the 4 partial
 * slots, then softmax_finish. */
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
    return softmax_finish<true>(x, sc0, sc0 + 2, pbuf, alpha_s, t, srow,
                                lane, past, total, nn, snode, mask_row,
                                scale_log2, m_ref, l_part);
}

/* The same with this warp's own quarter from registers (KDT_ATTN_OWNS):
 * the three other slots, columns 2t, 2t+1, 8+2t, 9+2t. */
static __device__ __forceinline__ float
softmax_own(const float *sbuf, const float own[4], int qq,
            unsigned char *pbuf, float *alpha_s, int t, int srow, int lane,
            int past, int total, int nn, int snode,
            const uint32_t *__restrict__ mask_row, float scale_log2,
            float &m_ref, float &l_part)
{
    const int c0 = 2 * (lane & 3), c1 = 8 + c0;
    float x[4] = {own[0], own[1], own[2], own[3]};
#pragma unroll
    for (int d = 1; d < 4; ++d) {
        const float *slot = sbuf + ((qq + d) & 3) * (BM * BN);
        const float2 a = *(const float2 *)(slot + slot_index(srow, c0));
        const float2 b = *(const float2 *)(slot + slot_index(srow, c1));
        x[0] += a.x; x[1] += a.y; x[2] += b.x; x[3] += b.y;
    }
    return softmax_finish<false>(x, c0, c1, pbuf, alpha_s, t, srow, lane,
                                 past, total, nn, snode, mask_row, scale_log2,
                                 m_ref, l_part);
}

/* O *= alpha, row by row (the lazy maximum moved for some row). */
static __device__ __forceinline__ void
o_rescale(float o[MT][NT][4], const float *alpha_s, int lane)
{
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

/* PV: O[:, NCOL*w ..] += P V for the tile whose V rows start at `vrow`
 * (lane address), P at `p_lane` (lane address). */
static __device__ __forceinline__ void
pv_mma(float o[MT][NT][4], uint32_t p_lane, uint32_t vrow)
{
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

/* PV with the rescale first (the NBUF = 2 schedule). */
static __device__ __forceinline__ void
pv_tile(float o[MT][NT][4], uint32_t p_lane, uint32_t vrow,
        const float *alpha_s, int rescale, int lane)
{
    if (rescale)
        o_rescale(o, alpha_s, lane);
    pv_mma(o, p_lane, vrow);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 64 / BM)
kdt_verify_attn(const kdt_verify_attn_params p)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int mt = blockIdx.x, split = blockIdx.y, r = blockIdx.z;
    const int nsplit = p.num_splits;
    const int cap = p.max_pages * PAGE;

    /* Bad device-side values cannot make the kernel read outside the block
     * table or the tree: they are clamped. */
    const int past = min(max(p.past_len[r], 0), cap);
    const int nn = min(max(p.n_nodes[r], 0), N_MAX);
    const int total = min(past + nn, cap);
    const int valid_rows = nn * H;
    const int m0 = mt * BM;
    const int64_t req_row0 = (int64_t)r * ROWS;

    if (m0 >= valid_rows) {
        /* Padded rows only.  Unsplit: write o = 0, lse = -inf here; split:
         * the merge kernel writes them. */
        if (nsplit == 1) {
            const int rows = min(BM, ROWS - m0);
            uint4 *o4 = (uint4 *)(p.o + (req_row0 + m0) * D_V);
            for (int i = tid; i < rows * D_V / 8; i += NTHREADS)
                o4[i] = make_uint4(0, 0, 0, 0);
            if (p.lse && tid < rows)
                p.lse[req_row0 + m0 + tid] = kdt_neg_inf();
        }
        return;
    }

    const int ntiles = (total + BN - 1) / BN;
    const int per = (ntiles + nsplit - 1) / nsplit;
    const int t0 = min(split * per, ntiles);
    const int t1 = min(t0 + per, ntiles);

    const uint32_t ring = kdt_smem_addr(smem);
    float *slots = (float *)(smem + SLOTS_OFF);
    unsigned char *pbuf = smem + P_OFF;
    float *alpha_s = (float *)(smem + ALPHA_OFF);
    float *l_s = (float *)(smem + L_OFF);

    const uint16_t *__restrict__ kv = p.kv_cache;
    const int32_t *__restrict__ bt = p.block_table + (int64_t)r * p.max_pages;

    /* ---- Q tile -> shared (through the ring) -> registers ------------- */
    {
        const uint16_t *q = p.q + (req_row0 + m0) * D_QK;
        for (int c = tid; c < BM * CHUNKS; c += NTHREADS) {
            const int row = c / CHUNKS, col = c - row * CHUNKS;
            const bool ok = m0 + row < valid_rows;
            kdt_cp_async16(ring + row * ROW_BYTES + col * 16,
                           ok ? q + (int64_t)row * D_QK + col * 8 : q,
                           ok ? 16 : 0);
        }
        kdt_cp_async_commit();
        kdt_cp_async_wait<0>();
        __syncthreads();
    }
    const int qh = warp >> 2, qq = warp & 3;
    uint32_t qa[2][9][4];
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

    /* softmax state of row 8*warp + lane/4 (the 4 lanes of a row agree) */
    const int srow = 8 * warp + (lane >> 2);
    const int sc0 = 4 * (lane & 3);
    const int snode = (m0 + srow) / H;
    const uint32_t *mask_row =
        p.anc_mask + ((int64_t)r * N_MAX + min(snode, N_MAX - 1)) * W;
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
    /* PV: this warp's rows start at prow, its columns at pcol */
    const int prow = (warp / (NWARPS / PV_GROUPS)) * (BM / PV_GROUPS);
    const int pcol = (warp % (NWARPS / PV_GROUPS)) * NCOL;
    const uint32_t v_lane = ((lane & 7) + 8 * ((lane >> 3) & 1)) * ROW_BYTES
                            + (pcol + 8 * (lane >> 4)) * 2;
    const uint32_t p_lane = ring + P_OFF + (prow + (lane & 15)) * P_STRIDE
                            + 8 * (lane >> 4) * 2;
    const float *alpha_pv = alpha_s + prow; /* alpha of this warp's PV rows */
    const int ltok = tid / TPT, lcol = tid % TPT;
    const uint32_t ldst = ring + ltok * ROW_BYTES + lcol * 16;
    int rescale = 0;

    const uint16_t *next_src = nullptr;
    if (NBUF == 1) {
        /* Both NBUF 1 schedules start alike: the first PV (of "tile t0-1")
         * multiplies a zero P by a zeroed V stage (NSTAGE - 1, the stage
         * that PV reads first), tiles t0 and t0+1 are put in flight, and
         * the block-table entry of t0+2 is read. */
        const uint32_t vz = NSTAGE - 1;
        for (int i = tid; i < BN * (D_V / 8); i += NTHREADS)
            *(uint4 *)(smem + vz * STAGE_BYTES + (i >> 6) * ROW_BYTES
                       + (i & 63) * 16) = make_uint4(0, 0, 0, 0);
        for (int i = tid; i < BM * P_STRIDE / 16; i += NTHREADS)
            *(uint4 *)(pbuf + i * 16) = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            if (t0 + s < t1)
                load_kv_tile(ldst + s * STAGE_BYTES, ltok, lcol, t0 + s,
                             total, kv, bt);
            kdt_cp_async_commit();
        }
        next_src = kv_tile_src(ltok, lcol, t0 + 2, total, kv, bt);
        kdt_cp_async_wait<1>();
        __syncthreads(); /* tile t0 landed; P and the V stage zeroed */
    }
    if (PINGPONG) {
        /*
         * Two groups of 4 warps, A (warps 0-3, rows 0-31) and B (warps
         * 4-7, rows 32-63), each with its own partial-S slots, P rows and
         * softmax rows, sharing the KV ring.  Between two block barriers
         * Z (which publish tile t+1 and free the stage of tile t-2):
         *   A: PV(t-1) + QK(t), barrier XA (A only), softmax(t)
         *   B: softmax(t-1), barrier YB (B only), PV(t-1) + QK(t)
         * so each group's softmax runs while the other group issues MMAs
         * (one warp of each group per SM sub-partition).  The OR of the
         * rescale flags: A's at Z (for its next PV), B's at YB (for the
         * PV right after it).
         */
        const bool grp_a = warp < NWARPS / 2;
        for (int t = t0; t < t1; ++t) {
            const int it = t - t0;
            if (t + 2 < t1) {
                kv_tile_copy(ldst + ((it + 2) % NSTAGE) * STAGE_BYTES, lcol,
                             next_src, kv);
                next_src = kv_tile_src(ltok, lcol, t + 3, total, kv, bt);
            }
            kdt_cp_async_commit();
            const uint32_t vstage =
                ring + ((it + NSTAGE - 1) % NSTAGE) * STAGE_BYTES + v_lane;
            const uint32_t kstage =
                ring + (it % NSTAGE) * STAGE_BYTES + k_lane;
            float alpha = 1.f;
            if (grp_a) {
                if (rescale)
                    o_rescale(o, alpha_pv, lane);
                float acc[2][2][4];
                pv_mma(o, p_lane, vstage);
                qk_mma(acc, qa, kstage, qq);
                qk_store(slots, acc, qh, qq, lane);
                named_bar(1, NTHREADS / 2); /* XA: A's partial S */
                alpha = softmax_tile(slots, pbuf, alpha_s, t, srow, sc0, lane,
                                     past, total, nn, snode, mask_row,
                                     scale_log2, m_ref, l_part);
            } else {
                float ab = 1.f;
                if (t > t0)
                    ab = softmax_tile(slots, pbuf, alpha_s, t - 1, srow, sc0,
                                      lane, past, total, nn, snode, mask_row,
                                      scale_log2, m_ref, l_part);
                /* YB: B's P and alpha of t-1; its slots free again */
                if (named_bar_or(2, NTHREADS / 2, ab != 1.f))
                    o_rescale(o, alpha_pv, lane);
                float acc[2][2][4];
                pv_mma(o, p_lane, vstage);
                qk_mma(acc, qa, kstage, qq);
                qk_store(slots, acc, qh, qq, lane);
            }
            kdt_cp_async_wait<1>(); /* this thread's part of tile t+1 */
            /* Z: tile t+1 visible, stage of t-2 free; A's flag */
            rescale = __syncthreads_or(alpha != 1.f);
        }
        if (t1 > t0) {
            const uint32_t vstage =
                ring + ((t1 - t0 + NSTAGE - 1) % NSTAGE) * STAGE_BYTES
                + v_lane;
            if (grp_a) {
                if (rescale)
                    o_rescale(o, alpha_pv, lane);
            } else {
                const float ab =
                    softmax_tile(slots, pbuf, alpha_s, t1 - 1, srow, sc0, lane,
                                 past, total, nn, snode, mask_row, scale_log2,
                                 m_ref, l_part);
                if (named_bar_or(2, NTHREADS / 2, ab != 1.f))
                    o_rescale(o, alpha_pv, lane);
            }
            pv_mma(o, p_lane, vstage);
        }
    } else if (NBUF == 1) {
        /*
         * Iteration t: refill (tile t+2 into the stage tile t-2 left; its
         * block-table entry was read one iteration earlier), then PV of
         * tile t-1 and QK of tile t as one straight-line block of 68
         * independent-enough MMAs a warp (no branch between them, so the
         * SASS scheduler interleaves PV's 32 single MMAs with QK's four
         * 9-long accumulation chains), barrier X, softmax of tile t,
         * barrier Y (which also publishes tile t+1).  The four stages hold
         * tiles t-1 (PV), t (QK), t+1 (landed) and t+2 (in flight).  The
         * first PV (of "tile t0-1") multiplies a zero P by a zeroed V
         * stage; the last PV (of tile t1-1) follows the loop.
         */
        for (int t = t0; t < t1; ++t) {
            const int it = t - t0;
            if (t + 2 < t1) {
                kv_tile_copy(ldst + ((it + 2) % NSTAGE) * STAGE_BYTES, lcol,
                             next_src, kv);
                next_src = kv_tile_src(ltok, lcol, t + 3, total, kv, bt);
            }
            kdt_cp_async_commit();
            if (rescale)
                o_rescale(o, alpha_pv, lane);
            float acc[2][2][4];
            pv_mma(o, p_lane,
                   ring + ((it + NSTAGE - 1) % NSTAGE) * STAGE_BYTES + v_lane);
            qk_mma(acc, qa, ring + (it % NSTAGE) * STAGE_BYTES + k_lane, qq);
            float own[4];
            if (OWNS) {
                qk_store_others(slots, acc, qh, qq, lane);
                qk_own(own, acc, qq);
            } else {
                qk_store(slots, acc, qh, qq, lane);
            }
            __syncthreads(); /* X: partial S written; PV(t-1) done */
            const float alpha = OWNS
                ? softmax_own(slots, own, qq, pbuf, alpha_s, t, srow, lane,
                              past, total, nn, snode, mask_row, scale_log2,
                              m_ref, l_part)
                : softmax_tile(slots, pbuf, alpha_s, t, srow, sc0, lane,
                               past, total, nn, snode, mask_row, scale_log2,
                               m_ref, l_part);
            kdt_cp_async_wait<1>(); /* this thread's part of tile t+1 */
            /* Y: P, alpha and tile t+1 visible; the OR says whether any
             * row's reference maximum moved (else PV skips the rescale) */
            rescale = __syncthreads_or(alpha != 1.f);
        }
        if (t1 > t0) {
            if (rescale)
                o_rescale(o, alpha_pv, lane);
            pv_mma(o, p_lane,
                   ring + ((t1 - t0 + NSTAGE - 1) % NSTAGE) * STAGE_BYTES
                       + v_lane);
        }
    } else {
        /*
         * BM = 32, double-buffered partial S, P and alpha: one barrier a
         * tile.  Iteration t: refill (tile t+1 into the stage tile t-3
         * left), QK MMAs of tile t, softmax of tile t-1 (its latency hidden
         * behind those MMAs), store the partial S of t, PV of tile t-2,
         * barrier.  The stages hold tiles t-2 (PV), t-1 (V for the next
         * PV), t (QK) and t+1 (in flight).
         */
        if (t0 < t1)
            load_kv_tile(ldst, ltok, lcol, t0, total, kv, bt);
        kdt_cp_async_commit();
        kdt_cp_async_wait<0>();
        __syncthreads(); /* tile t0 landed */
        for (int t = t0; t < t1 + 2; ++t) {
            const int it = t - t0;
            if (t + 1 < t1)
                load_kv_tile(ldst + ((it + 1) % NSTAGE) * STAGE_BYTES, ltok,
                             lcol, t + 1, total, kv, bt);
            kdt_cp_async_commit();
            float acc[2][2][4];
            if (t < t1)
                qk_mma(acc, qa, ring + (it % NSTAGE) * STAGE_BYTES + k_lane,
                       qq);
            float alpha = 1.f;
            if (t > t0 && t - 1 < t1) {
                const int b = (it - 1) & 1;
                alpha = softmax_tile(slots + b * (SBUF_BYTES / 4),
                                     pbuf + b * PBUF_BYTES, alpha_s + b * BM,
                                     t - 1, srow, sc0, lane, past, total, nn,
                                     snode, mask_row, scale_log2, m_ref,
                                     l_part);
            }
            if (t < t1)
                qk_store(slots + (it & 1) * (SBUF_BYTES / 4), acc, qh, qq,
                         lane);
            if (t >= t0 + 2) {
                const int b = it & 1; /* (it - 2) & 1 */
                pv_tile(o, p_lane + b * PBUF_BYTES,
                        ring + ((it + 2) % NSTAGE) * STAGE_BYTES + v_lane,
                        alpha_s + b * BM, rescale, lane);
            }
            kdt_cp_async_wait<0>(); /* this thread's part of tile t+1 */
            /* partial S of t, P of t-1 and tile t+1 visible; the OR is
             * whether PV(t-1), next iteration, must rescale */
            rescale = __syncthreads_or(alpha != 1.f);
        }
    }
    kdt_cp_async_wait<0>(); /* nothing may land after the block exits */

    /* ---- epilogue: row sums, LSE, normalised O ---------------------- */
    l_part += __shfl_xor_sync(0xffffffffu, l_part, 1);
    l_part += __shfl_xor_sync(0xffffffffu, l_part, 2);
    if ((lane & 3) == 0) {
        l_s[srow] = l_part;
        const int m = m0 + srow;
        if (m < ROWS) {
            const float lse2 = l_part > 0.f ? m_ref + kdt_log2(l_part)
                                            : kdt_neg_inf();
            if (nsplit == 1) {
                if (p.lse)
                    p.lse[req_row0 + m] = m < valid_rows
                        ? lse2 * 0.6931471805599453f : kdt_neg_inf();
            } else {
                float *ws_lse = p.workspace
                    + (int64_t)nsplit * p.n_requests * ROWS * D_V;
                ws_lse[((int64_t)split * p.n_requests + r) * ROWS + m] = lse2;
            }
        }
    }
    __syncthreads();

#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = prow + 16 * mi + (lane >> 2) + 8 * hf;
            const int m = m0 + row;
            if (m >= ROWS)
                continue;
            const float l = l_s[row];
            float inv = l > 0.f ? 1.f / l : 0.f;
            if (m >= valid_rows)
                inv = 0.f; /* padded row: o = 0 */
            const int col0 = pcol + 2 * (lane & 3);
            if (nsplit == 1) {
                uint16_t *dst = p.o + (req_row0 + m) * D_V + col0;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    *(uint32_t *)(dst + 8 * nt) =
                        kdt_pack_bf16x2(o[mi][nt][2 * hf] * inv,
                                        o[mi][nt][2 * hf + 1] * inv);
            } else {
                float *dst = p.workspace
                    + (((int64_t)split * p.n_requests + r) * ROWS + m) * D_V
                    + col0;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    *(float2 *)(dst + 8 * nt) =
                        make_float2(o[mi][nt][2 * hf] * inv,
                                    o[mi][nt][2 * hf + 1] * inv);
            }
        }
    }
}

/*
 * Merge of the KV splits: one warp per folded row.  Split s holds the
 * row's O_s normalised by its own sum and lse_s = log2 of that sum (plus
 * its reference maximum); O = sum_s 2^(lse_s - lse) O_s with
 * lse = log2 sum_s 2^lse_s.  Padded rows get o = 0, lse = -inf.
 * Grid: ceil(R * ROWS / 4) blocks of 128 threads.
 */
extern "C" __global__ void __launch_bounds__(KDT_ATTN_MERGE_THREADS)
kdt_verify_attn_merge(const kdt_verify_attn_params p)
{
    const int lane = threadIdx.x & 31;
    const int64_t grow = (int64_t)blockIdx.x * (KDT_ATTN_MERGE_THREADS / 32)
                         + (threadIdx.x >> 5);
    const int R = p.n_requests;
    if (grow >= (int64_t)R * ROWS)
        return;
    const int r = (int)(grow / ROWS), m = (int)(grow % ROWS);
    const int nsplit = p.num_splits;
    const int nn = min(max(p.n_nodes[r], 0), N_MAX);
    uint2 *dst = (uint2 *)(p.o + grow * D_V);

    const float *ws_lse = p.workspace + (int64_t)nsplit * R * ROWS * D_V;
    float mx = kdt_neg_inf();
    if (m < nn * H)
        for (int s = lane; s < nsplit; s += 32)
            mx = fmaxf(mx, ws_lse[((int64_t)s * R + r) * ROWS + m]);
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));

    if (mx == kdt_neg_inf()) { /* padded row (or one that saw nothing) */
#pragma unroll
        for (int k = 0; k < 4; ++k)
            dst[lane + 32 * k] = make_uint2(0, 0);
        if (p.lse && lane == 0)
            p.lse[grow] = kdt_neg_inf();
        return;
    }
    float acc[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
        acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.f;
    float wsum = 0.f;
    for (int s = 0; s < nsplit; ++s) {
        const int64_t srow = ((int64_t)s * R + r) * ROWS + m;
        const float ls = ws_lse[srow];
        if (ls == kdt_neg_inf())
            continue;
        const float w = kdt_exp2(ls - mx);
        wsum += w;
        const float4 *src = (const float4 *)(p.workspace + srow * D_V);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float4 v = src[lane + 32 * k];
            acc[k][0] += w * v.x; acc[k][1] += w * v.y;
            acc[k][2] += w * v.z; acc[k][3] += w * v.w;
        }
    }
    const float inv = 1.f / wsum;
#pragma unroll
    for (int k = 0; k < 4; ++k)
        dst[lane + 32 * k] =
            make_uint2(kdt_pack_bf16x2(acc[k][0] * inv, acc[k][1] * inv),
                       kdt_pack_bf16x2(acc[k][2] * inv, acc[k][3] * inv));
    if (p.lse && lane == 0)
        p.lse[grow] = (mx + kdt_log2(wsum)) * 0.6931471805599453f;
}
