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
 * ("split") of one request, 8 warps in two groups of 4; group g owns rows
 * 32 g .. 32 g + 31.  Inside a KV tile of BN = 32 tokens:
 *  - QK: the pair of warps (2k, 2k + 1) of a group owns a row group of 16
 *    rows; each computes the partial S of those rows over its half of the
 *    576 dims from Q fragments it keeps in registers for the whole block
 *    (72 registers), and the pair swaps partials through shared memory
 *    (a pair barrier), so both hold the rows' S.
 *  - softmax: in registers, on the accumulator of S, whose layout is the
 *    A fragment of P V (as in FlashAttention-2): no P tile goes through
 *    shared memory for the warp's own rows.
 *  - PV: each warp of a group owns 128 output columns of the group's 32
 *    rows (128 registers): its own row group's P from registers, the
 *    other pair's from shared memory (a group barrier).
 * So one block barrier a tile (the KV ring) and no other block-wide
 * hand-off.  Phases: load_q (once), then per tile the refill
 * (load_kv_tile), qk_half, exchange_s, softmax_rows, exchange_p, pv_tile;
 * then the epilogue (row sums, LSE, normalised O).
 * Each KV tile comes once from global memory per block (cp.async, 16-byte
 * pieces, one tile ahead into the other of two stages).  Blocks of the
 * same request and split differ only in their rows; blockIdx.x is the
 * row tile, so they run side by side and their re-reads of a KV tile hit
 * L2: DRAM sees the KV once per request.  What bounds it (two warps a
 * scheduler, every phase latency-bound: register file full with Q and
 * O) and what was tried: docs/performance.md, verify_attn history.
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
 * kdt_verify_attn_merge combines them by their LSE.  The wgmma body can
 * instead run a row tile's splits as one thread-block cluster and merge
 * them there, through distributed shared memory (its cluster_merge).
 */
#include "kdt_limits.h"
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

/* Row m's 1 / l, what its O is normalised by: 0 for a padded row (past
 * the request's valid rows) or one that saw nothing, so it comes out as
 * zeros. */
static __device__ __forceinline__ float
va_row_inv(const va_block &b, int m, float l)
{
    return l > 0.f && m < b.valid_rows ? 1.f / l : 0.f;
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
constexpr int BM = KDT_ATTN_BM;
constexpr int BN = KDT_ATTN_BN;
constexpr int NSTAGE = KDT_ATTN_NSTAGE;
constexpr int NTHREADS = KDT_ATTN_THREADS;
constexpr int ROW_BYTES = KDT_ATTN_ROW_BYTES;
constexpr int CHUNKS = D_QK * 2 / 16;         /* 16-byte pieces of a row */
constexpr int STAGE_BYTES = BN * ROW_BYTES;
constexpr int RING_BYTES = NSTAGE * STAGE_BYTES;
constexpr int HALF = D_QK / 2;                /* dims of one QK warp */
constexpr int KSTEPS = HALF / 16;             /* its k16 steps */
constexpr int NTN = BN / 8;                   /* n8 tiles of S a warp */
constexpr int KK = BN / 16;                   /* k16 steps of PV */
constexpr int SX_OFF = RING_BYTES;            /* partial S, a slot a warp */
constexpr int PX_OFF = SX_OFF + NTHREADS * 2 * BN; /* P + alpha, a row group */
constexpr int P_BYTES = 16 * BN * 2;          /* P of one row group */
constexpr int L_OFF = PX_OFF + 4 * (P_BYTES + 256); /* the row sums */
constexpr int SMEM_BYTES = L_OFF + BM * 4;
constexpr float LAZY_RESCALE = 8.0f;          /* log2 units: P <= 256 */
constexpr int NCOL = 128;                     /* O columns of a PV warp */
constexpr int NT = NCOL / 8;                  /* their n8 tiles */

static_assert(SMEM_BYTES == KDT_ATTN_SMEM, "kdt_attn_tiles.h disagrees");
static_assert(RING_BYTES >= BM * ROW_BYTES, "Q tile is staged in the ring");
static_assert(SMEM_BYTES <= 99 * 1024, "sm_120 allows 99 KB per block");
static_assert(BM == 64 && NTHREADS == 256 && BN == 32 && NSTAGE == 2,
              "the warp roles below are 8 warps, 16-row groups, 32 tokens");
static_assert(HALF % 16 == 0 && 4 * NCOL == D_V, "576 / 512 dims");
static_assert(H >= 1 && H <= 128 && N_MAX >= 1 && N_MAX <= KDT_LIMIT_N_MAX, "range");
static_assert(PAGE >= 1 && PAGE <= 256, "range");

/* Named barriers (0 is __syncthreads): a QK pair's (ids 1..4, 64
 * threads), a group's (ids 5, 6, 128 threads). */
static __device__ __forceinline__ void
named_bar(int id, int count)
{
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
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

/* Phase 1: the block's Q tile (rows m0.., padding rows zero) through the
 * ring into this warp's A fragments, kept for the whole block: rows
 * 16 rg .. 16 rg + 15, dims HALF hd .. HALF hd + HALF - 1. */
static __device__ __forceinline__ void
load_q(uint32_t (&qa)[KSTEPS][4], const kdt_verify_attn_params &p,
       const va_block &b, uint32_t ring, int tid, int rg, int hd, int lane)
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
    const uint32_t arow = ring + (16 * rg + (lane & 15)) * ROW_BYTES
                          + (HALF * hd + 8 * (lane >> 4)) * 2;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
        kdt_ldmatrix_x4(qa[ks], arow + 32 * ks);
    __syncthreads(); /* the ring now belongs to the KV tiles */
}

/* Phase 2a, S: this warp's partial S (its 16 rows x the tile's 32 tokens,
 * four n8 tiles, four independent accumulator chains) over its half of
 * the dims, from the stage whose K lane address is `krow`. */
static __device__ __forceinline__ void
qk_half(float (&s)[NTN][4], const uint32_t (&qa)[KSTEPS][4], uint32_t krow)
{
#pragma unroll
    for (int n = 0; n < NTN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[n][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
#pragma unroll
        for (int h = 0; h < NTN / 2; ++h) {
            uint32_t kb[4];
            kdt_ldmatrix_x4(kb, krow + 16 * h * ROW_BYTES + 32 * ks);
            kdt_mma_bf16(s[2 * h], qa[ks], kb[0], kb[1]);
            kdt_mma_bf16(s[2 * h + 1], qa[ks], kb[2], kb[3]);
        }
    }
}

/* Phase 2b, the pair's exchange: this warp's partial S into its slot, the
 * partner's (same rows, other dims) added after the pair barrier.  Both
 * warps add the same two partials, so both hold the same S.  Slots are
 * [warp][n8 tile][lane][4 floats]: each float4 access is contiguous over
 * the warp. */
static __device__ __forceinline__ void
exchange_s(float (&s)[NTN][4], float *sx, int warp, int rg, int lane)
{
#pragma unroll
    for (int n = 0; n < NTN; ++n)
        *(float4 *)(sx + ((warp * NTN + n) * 32 + lane) * 4) =
            make_float4(s[n][0], s[n][1], s[n][2], s[n][3]);
    named_bar(1 + rg, 64);
#pragma unroll
    for (int n = 0; n < NTN; ++n) {
        const float4 v =
            *(const float4 *)(sx + (((warp ^ 1) * NTN + n) * 32 + lane) * 4);
        s[n][0] += v.x; s[n][1] += v.y; s[n][2] += v.z; s[n][3] += v.w;
    }
}

/* Phase 2c, the online softmax of tile t for rows row0 (hh = 0) and
 * row0 + 8 (hh = 1) of the block; this thread holds columns 8 n + c2 + e
 * of them as s[n][2 hh + e].  Scales to log2 units, masks (tail tiles
 * only), moves the lazy maximum, and leaves P (bf16) as the m16k16 A
 * fragment of the PV MMA (the accumulator layout of S is that of A) and
 * the rescale factors in alpha. */
static __device__ __forceinline__ void
softmax_rows(const float (&s)[NTN][4], uint32_t (&pa)[KK][4], float (&alpha)[2],
             float (&m_ref)[2], float (&l_part)[2], int t,
             const va_block &b, const uint32_t *__restrict__ anc, int row0,
             int c2, float scale_log2)
{
    float x[NTN][4];
#pragma unroll
    for (int n = 0; n < NTN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            x[n][e] = s[n][e] * scale_log2;
    if ((t + 1) * BN > b.past) {
        /* a tail tile: the tree's own rows, and the end of the KV */
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int node = (b.m0 + row0 + 8 * hh) / H;
            const uint32_t *mask_row = anc + min(node, N_MAX - 1) * W;
#pragma unroll
            for (int n = 0; n < NTN; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int pos = t * BN + 8 * n + c2 + e;
                    bool vis = pos < b.past;
                    if (!vis && pos < b.total && node < b.nn) {
                        const int jj = pos - b.past;
                        vis = (__ldg(mask_row + (jj >> 5)) >> (jj & 31)) & 1u;
                    }
                    if (!vis)
                        x[n][2 * hh + e] = kdt_neg_inf();
                }
        }
    }
    float p[NTN][4];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float mx = fmaxf(x[0][2 * hh], x[0][2 * hh + 1]);
#pragma unroll
        for (int n = 1; n < NTN; ++n)
            mx = fmaxf(mx, fmaxf(x[n][2 * hh], x[n][2 * hh + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        alpha[hh] = 1.f;
        if (mx > m_ref[hh] + LAZY_RESCALE) {
            alpha[hh] = kdt_exp2(m_ref[hh] - mx); /* 0 when m_ref = -inf */
            m_ref[hh] = mx;
            l_part[hh] *= alpha[hh];
        }
        /* m_ref = -inf means every x so far is -inf: p = 0, not NaN */
        const float mu = m_ref[hh] == kdt_neg_inf() ? 0.f : m_ref[hh];
#pragma unroll
        for (int n = 0; n < NTN; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                p[n][2 * hh + e] = kdt_exp2(x[n][2 * hh + e] - mu);
                l_part[hh] += p[n][2 * hh + e];
            }
    }
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        pa[kk][0] = kdt_pack_bf16x2(p[2 * kk][0], p[2 * kk][1]);
        pa[kk][1] = kdt_pack_bf16x2(p[2 * kk][2], p[2 * kk][3]);
        pa[kk][2] = kdt_pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        pa[kk][3] = kdt_pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    }
}

/* Phase 2d, the group's exchange of P: the pair's first warp publishes
 * its rows' P and alpha, and after the group barrier each warp takes the
 * other pair's (the other 16 rows of its PV). */
static __device__ __forceinline__ void
exchange_p(uint32_t (&po)[KK][4], float (&ao)[2],
           const uint32_t (&pa)[KK][4], const float (&alpha)[2],
           unsigned char *px, int g, int rg, int hd, int lane)
{
    if (hd == 0) {
#pragma unroll
        for (int kk = 0; kk < KK; ++kk)
            *(uint4 *)(px + rg * P_BYTES + (kk * 32 + lane) * 16) =
                make_uint4(pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
        *(float2 *)(px + 4 * P_BYTES + (rg * 32 + lane) * 8) =
            make_float2(alpha[0], alpha[1]);
    }
    named_bar(5 + g, 128);
    const int other = rg ^ 1;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        const uint4 v =
            *(const uint4 *)(px + other * P_BYTES + (kk * 32 + lane) * 16);
        po[kk][0] = v.x; po[kk][1] = v.y; po[kk][2] = v.z; po[kk][3] = v.w;
    }
    const float2 a =
        *(const float2 *)(px + 4 * P_BYTES + (other * 32 + lane) * 8);
    ao[0] = a.x; ao[1] = a.y;
}

/* Phase 2e, PV: O[32 rows, this warp's 128 columns] = alpha O + P V for
 * the tile whose V lane address is `vrow`; m-tile 0 is the warp's own
 * row group (P in pa), m-tile 1 the other one of its group (P in po). */
static __device__ __forceinline__ void
pv_tile(float (&o)[2][NT][4], const uint32_t (&pa)[KK][4],
        const float (&aa)[2], const uint32_t (&po)[KK][4],
        const float (&ao)[2], uint32_t vrow)
{
    if (__any_sync(0xffffffffu, aa[0] != 1.f || aa[1] != 1.f
                                || ao[0] != 1.f || ao[1] != 1.f)) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            o[0][nt][0] *= aa[0]; o[0][nt][1] *= aa[0];
            o[0][nt][2] *= aa[1]; o[0][nt][3] *= aa[1];
            o[1][nt][0] *= ao[0]; o[1][nt][1] *= ao[0];
            o[1][nt][2] *= ao[1]; o[1][nt][3] *= ao[1];
        }
    }
#pragma unroll
    for (int kk = 0; kk < KK; ++kk)
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) {
            uint32_t vb[4];
            kdt_ldmatrix_x4_trans(vb, vrow + 16 * kk * ROW_BYTES + 32 * j);
            kdt_mma_bf16(o[0][2 * j], pa[kk], vb[0], vb[1]);
            kdt_mma_bf16(o[0][2 * j + 1], pa[kk], vb[2], vb[3]);
            kdt_mma_bf16(o[1][2 * j], po[kk], vb[0], vb[1]);
            kdt_mma_bf16(o[1][2 * j + 1], po[kk], vb[2], vb[3]);
        }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
kdt_verify_attn(const kdt_verify_attn_params p)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    va_block b;
    if (!va_block_begin<BM, BN, NTHREADS>(b, p, false))
        return;
    const int t0 = b.t0, t1 = b.t1;

    const uint32_t ring = kdt_smem_addr(smem);
    float *sx = (float *)(smem + SX_OFF);
    unsigned char *px = smem + PX_OFF;
    float *l_s = (float *)(smem + L_OFF);

    const uint16_t *__restrict__ kv = p.kv_cache;
    const int32_t *__restrict__ bt = p.block_table + (int64_t)b.r * p.max_pages;
    const uint32_t *__restrict__ anc =
        p.anc_mask + (int64_t)b.r * N_MAX * W;

    /* Roles.  Group g (warps 4g .. 4g + 3) owns rows 32 g .. 32 g + 31;
     * in it, the QK pair of warps 2k, 2k + 1 owns row group rg = 2 g + k
     * (16 rows), split by dims (hd); for PV each of the group's warps
     * owns 128 columns (wi) of the group's 32 rows. */
    const int g = warp >> 2, wi = warp & 3;
    const int rg = 2 * g + (wi >> 1), hd = wi & 1;
    uint32_t qa[KSTEPS][4];
    load_q(qa, p, b, ring, tid, rg, hd, lane);

    const int row0 = 16 * rg + (lane >> 2), c2 = 2 * (lane & 3);
    const float scale_log2 = p.scale * KDT_LOG2E;
    float m_ref[2] = {kdt_neg_inf(), kdt_neg_inf()};
    float l_part[2] = {0.f, 0.f};
    float o[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                o[mt][nt][e] = 0.f;
    uint32_t pa[KK][4], po[KK][4];
    float aa[2], ao[2];

    /* lane addresses inside a stage: K as the B operand of S (tokens are
     * n, dims are k), V as the B operand of O (ldmatrix.trans: tokens are
     * k, this warp's 128 columns are n) */
    const uint32_t k_lane = ((lane & 7) + 8 * (lane >> 4)) * ROW_BYTES
                            + (HALF * hd + 8 * ((lane >> 3) & 1)) * 2;
    const uint32_t v_lane = ((lane & 7) + 8 * ((lane >> 3) & 1)) * ROW_BYTES
                            + (NCOL * wi + 8 * (lane >> 4)) * 2;
    const int ltok = tid / TPT, lcol = tid % TPT;
    const uint32_t ldst = ring + ltok * ROW_BYTES + lcol * 16;

    /*
     * Phase 2, the KV loop.  Iteration t: the block barrier (tile t
     * landed; every warp is done with tile t-1, whose stage the refill of
     * tile t+1 takes), then per warp: S of tile t, the pair's S exchange,
     * the softmax, the group's P exchange, PV of tile t.
     */
    if (t0 < t1)
        load_kv_tile(ldst, ltok, lcol, t0, b.total, kv, bt);
    kdt_cp_async_commit();
    for (int t = t0; t < t1; ++t) {
        const int it = t - t0;
        kdt_cp_async_wait<0>(); /* this thread's part of tile t */
        __syncthreads();
        if (t + 1 < t1)
            load_kv_tile(ldst + ((it + 1) % NSTAGE) * STAGE_BYTES, ltok, lcol,
                         t + 1, b.total, kv, bt);
        kdt_cp_async_commit();
        const uint32_t stage = ring + (it % NSTAGE) * STAGE_BYTES;
        float s[NTN][4];
        qk_half(s, qa, stage + k_lane);
        exchange_s(s, sx, warp, rg, lane);
        softmax_rows(s, pa, aa, m_ref, l_part, t, b, anc, row0, c2,
                     scale_log2);
        exchange_p(po, ao, pa, aa, px, g, rg, hd, lane);
        pv_tile(o, pa, aa, po, ao, stage + v_lane);
    }
    kdt_cp_async_wait<0>(); /* nothing may land after the block exits */

    /* ---- Phase 3, the epilogue: row sums, LSE, normalised O --------- */
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        float l = l_part[hh];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (hd == 0 && (lane & 3) == 0) {
            l_s[row0 + 8 * hh] = l;
            va_store_lse(p, b, b.m0 + row0 + 8 * hh, va_lse2(m_ref[hh], l));
        }
    }
    __syncthreads();

    const int col0 = NCOL * wi + c2;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = 16 * (rg ^ mt) + (lane >> 2) + 8 * hh;
            if (b.m0 + row >= ROWS)
                continue;
            const va_out d = va_row_out(p, b, b.m0 + row, l_s[row]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                va_put(d, col0 + 8 * nt, o[mt][nt][2 * hh],
                       o[mt][nt][2 * hh + 1]);
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
        va_merge_add(acc, wsum, ws_lse[srow], mx,
                     ((const float4 *)(p.workspace + srow * D_V))[tid]);
    }
    const float inv = 1.f / wsum;
    *dst = make_uint2(kdt_pack_bf16x2(acc.x * inv, acc.y * inv),
                      kdt_pack_bf16x2(acc.z * inv, acc.w * inv));
    if (p.lse && tid == 0)
        p.lse[grow] = (mx + kdt_log2(wsum)) * KDT_LN2;
}
