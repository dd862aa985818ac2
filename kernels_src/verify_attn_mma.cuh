/*
 * verify_attn_mma.cuh: verify_attn on mma.sync, the body of every target
 * but sm_90a (sm_120, and sm_90 or compute_90 on Hopper when asked for).
 * verify_attn.cu includes it when KDT_ATTN_WGMMA is 0, after the shape
 * constants, the block prelude and the epilogue's helpers both bodies
 * share; the merge kernel follows it there.  It fits the 99 KB a block
 * gets on sm_120.
 *
 * Block = BM = 64 folded rows x one split of one request, 8 warps in two
 * groups of 4; group g owns rows 32 g .. 32 g + 31.  Inside a KV tile of
 * BN = 32 tokens:
 *  - QK: warp q of a group holds Q of the group's 32 rows over a quarter
 *    of the 576 dims in registers for the whole block (72 registers), so
 *    each K fragment it reads feeds two m16 tiles (K read twice a tile
 *    per block, not four times); it computes its partial S a half tile
 *    (16 tokens) at a time.
 *  - The S exchange: the group's 32 rows are four octets of 8 rows, octet
 *    q owned by warp q; each warp puts the other octets' partials in
 *    their owners' mailboxes (shared memory, a group barrier) and adds
 *    the three it receives to its own: a reduce-scatter, so each warp
 *    ends with whole rows of S.
 *  - softmax: per row in registers (the row's 32 values on a quad of
 *    lanes), each row done once; P (bf16) and the rescale factor go to
 *    the warp's mailbox (a group barrier).
 *  - PV, transposed: O^T = V^T P^T, each warp 128 dims of the group's 32
 *    rows (128 registers); an octet of P is exactly one B fragment, read
 *    from its owner's mailbox into the registers the MMA takes.
 * So one block barrier a tile (the KV ring) and no other block-wide
 * hand-off.  Phases: load_q (once), then per tile qk_half and scatter_s
 * twice (the refill, load_kv_tile, between them), gather_s,
 * softmax_row, publish_p, pv_tile; then the epilogue (row sums, LSE,
 * normalised O, each lane's O^T pairs turned into row pairs by one
 * shuffle).
 * Each KV tile comes once from global memory per block (cp.async, 16-byte
 * pieces, one tile ahead into the other of two stages).  What bounds it
 * (two warps a scheduler, every phase latency-bound: register file full
 * with Q and O) and what was tried: docs/performance.md, its table of
 * ideas tried.
 *
 * An e4m3 cache (KV = e4m3) runs verify_attn_mma_e4m3.cuh's block
 * instead, in both arithmetics: the same roles, exchange, softmax and
 * mailboxes over rows of bytes (its plan: kdt_attn_mma_kv8_smem).
 */

constexpr int BM = KDT_ATTN_BM;
constexpr int BN = KDT_ATTN_BN;
constexpr int NSTAGE = KDT_ATTN_NSTAGE;
constexpr int NTHREADS = KDT_ATTN_THREADS;
/* The block's shared memory is a kdt_attn_mma_smem (kdt_attn_tiles.h):
 * the KV ring (rows ROW_BYTES and stages STAGE_BYTES apart), a mailbox a
 * warp (BOX bytes from BOX_OFF; kdt_attn_mma_box: its partials of S,
 * then its P with the alphas P_ALPHA bytes in), the row sums at L_OFF. */
constexpr int ROW_BYTES = sizeof(kdt_attn_mma_row);
constexpr int STAGE_BYTES = sizeof(kdt_attn_mma_stage);
constexpr int BOX = sizeof(kdt_attn_mma_box);
constexpr int BOX_OFF = KDT_OFFSETOF(kdt_attn_mma_smem, box);
constexpr int P_ALPHA = KDT_OFFSETOF(kdt_attn_mma_box, pv.alpha);
constexpr int L_OFF = KDT_OFFSETOF(kdt_attn_mma_smem, l);
constexpr int SMEM_BYTES = KDT_ATTN_SMEM;
constexpr int QDIMS = D_QK / 4;               /* dims of one QK warp */
constexpr int KSTEPS = QDIMS / 16;            /* its k16 steps */
constexpr int NTN = BN / 8;                   /* n8 tiles of S */
constexpr int NHALF = 2;                      /* QK in halves of 16 tokens */
constexpr int KK = BN / 16;                   /* k16 steps of PV */
constexpr int NCOL = 128;                     /* O columns of a PV warp */
constexpr int NDM = NCOL / 16;                /* their m16 tiles (O^T) */

static_assert(BM == 64 && NTHREADS == 256 && BN == 32 && NSTAGE == 2,
              "the warp roles below are 8 warps, 32-row groups, 32 tokens");
static_assert(NHALF == BN / 16 && KK == BN / 16 &&
                  KDT_OFFSETOF(kdt_attn_mma_box, part[1][1][1][1]) ==
                      (((1 * NHALF + 1) * 2 + 1) * 32 + 1) * 8 &&
                  KDT_OFFSETOF(kdt_attn_mma_box, pv.p[1][1]) == (32 + 1) * 8,
              "scatter_s, gather_s, publish_p and pv_tile index the "
              "mailbox as kdt_attn_mma_box lays it out");
static_assert(QDIMS % 16 == 0 && 4 * NCOL == D_V, "576 / 512 dims");

/* Named barriers (0 is __syncthreads): a group's two a tile, S (ids 1,
 * 2) and P (ids 3, 4), 128 threads each. */
static __device__ __forceinline__ void
named_bar(int id, int count)
{
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}

/* The KV rows this thread copies: token `tok` of every tile, 16-byte
 * pieces col0, col0 + TPT, ... (fixed for the whole block, so a tile costs
 * one block-table read and a few cp.async per thread). */
constexpr int TPT = NTHREADS / BN;            /* threads per token */

/* Copies KV tile t (tokens t*BN ..) of the request into the stage at
 * `dst` (this thread's first piece); tokens at or past `total` are
 * zero-filled (never read: the block table may hold garbage there, and a
 * zero V row times P = 0 cannot make NaN).  T is the cache's element:
 * uint16_t (bf16) or uint8_t (e4m3).  The request's pages are bt[bt_row
 * ..]: the table's own pointer and a block-uniform offset, not a pointer
 * to the row, which ptxas kept in two registers across the KV loop and
 * spilled at some shapes on sm_120. */
template <class T>
static __device__ __forceinline__ void
load_kv_tile(uint32_t dst, int tok, int col0, int t, int total,
             const T *__restrict__ kv, const int32_t *__restrict__ bt,
             int64_t bt_row)
{
    constexpr int EPC = 16 / sizeof(T);       /* elements a 16-byte piece */
    constexpr int NPIECE = D_QK / EPC;        /* pieces a row */
    constexpr int PIECES = (NPIECE + TPT - 1) / TPT;
    const int pos = t * BN + tok;
    int64_t row = 0; /* past the end: the cache's first row, never read */
    int bytes = 0;
    if (pos < total) {
        const int page = __ldg(bt + (bt_row + pos / PAGE));
        row = (int64_t)page * PAGE + pos % PAGE;
        bytes = 16;
    }
    /* one base for every piece: with bytes = 0 they are still addresses
     * inside row 0, and cp.async reads none of them */
    const T *src = kv + row * D_QK + col0 * EPC;
#pragma unroll
    for (int i = 0; i < PIECES; ++i)
        if (NPIECE % TPT == 0 || col0 + i * TPT < NPIECE)
            kdt_cp_async16(dst + i * TPT * 16, src + i * TPT * EPC, bytes);
}

/* The block's Q tile (bf16, rows m0.., padding rows zero) into the ring
 * (rows ROW_BYTES apart), landed and visible to the block. */
static __device__ __forceinline__ void
stage_q(const kdt_verify_attn_params &p, const va_block &b, uint32_t ring,
        int tid)
{
    const uint16_t *qp = p.q + (b.req_row0 + b.m0) * D_QK;
    for (int c = tid; c < BM * CHUNKS; c += NTHREADS) {
        const int row = c / CHUNKS, col = c - row * CHUNKS;
        const bool ok = b.m0 + row < b.valid_rows;
        kdt_cp_async16(ring + row * ROW_BYTES + col * 16,
                       ok ? qp + (int64_t)row * D_QK + col * 8 : qp,
                       ok ? 16 : 0);
    }
    kdt_cp_async_commit();
    kdt_cp_async_wait<0>();
    __syncthreads();
}

/* Phase 1: the block's Q tile through the ring into this warp's A
 * fragments, kept for the whole block: the group's two m16 tiles (rows
 * 32 g .. 32 g + 31), dims QDIMS q .. QDIMS q + QDIMS - 1. */
static __device__ __forceinline__ void
load_q(uint32_t (&qa)[2][KSTEPS][4], const kdt_verify_attn_params &p,
       const va_block &b, uint32_t ring, int tid, int g, int q, int lane)
{
    stage_q(p, b, ring, tid);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        const uint32_t arow = ring
                              + (32 * g + 16 * mt + (lane & 15)) * ROW_BYTES
                              + (QDIMS * q + 8 * (lane >> 4)) * 2;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks)
            kdt_ldmatrix_x4(qa[mt][ks], arow + 32 * ks);
    }
    __syncthreads(); /* from here the ring belongs to the KV tiles */
}

/* A half tile's S accumulators, cleared. */
static __device__ __forceinline__ void
zero_s(float (&s)[2][2][4])
{
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[mt][n][e] = 0.f;
}

/* Phase 2a, S: this warp's partial S of half h of the tile (tokens
 * 16 h .. 16 h + 15, two n8 tiles) for the group's 32 rows (two m16
 * tiles) over its quarter of the dims: four independent accumulator
 * chains, each K fragment used by both m-tiles.  `krow` is the K lane
 * address of the stage. */
static __device__ __forceinline__ void
qk_half(float (&s)[2][2][4], const uint32_t (&qa)[2][KSTEPS][4],
        uint32_t krow, int h)
{
    zero_s(s);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
        uint32_t kb[4];
        kdt_ldmatrix_x4(kb, krow + 16 * h * ROW_BYTES + 32 * ks);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            kdt_mma_bf16(s[mt][0], qa[mt][ks], kb[0], kb[1]);
            kdt_mma_bf16(s[mt][1], qa[mt][ks], kb[2], kb[3]);
        }
    }
}

/* Phase 2b, the partials out: the 32 rows of S are four octets (m-tile
 * mt, rows 8 hh ..), octet d owned by warp d of the group.  Of this
 * half's partial, warp Q keeps its own octet's 4 values a lane in `own`
 * and puts each other octet's into its owner's mailbox, in the slot of
 * this warp (source index (Q - d - 1) mod 4), as float2s straight from
 * the accumulator's register pairs ([source][half][n8 tile][lane]).  Q
 * is a template argument so that every register index is static (a
 * runtime one made ptxas predicate moves of all 16 values and spill). */
template <int Q>
static __device__ __forceinline__ void
scatter_s_q(float (&own)[2][2], const float (&s)[2][2][4], unsigned char *box,
            int h, int lane)
{
#pragma unroll
    for (int d = 0; d < 4; ++d) {
        const int mt = d >> 1, hh = d & 1;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            if (d == Q) {
                own[n][0] = s[mt][n][2 * hh];
                own[n][1] = s[mt][n][2 * hh + 1];
            } else {
                const int src = (Q - d - 1) & 3;
                *(float2 *)(box + d * BOX
                            + (((src * NHALF + h) * 2 + n) * 32 + lane) * 8)
                    = make_float2(s[mt][n][2 * hh], s[mt][n][2 * hh + 1]);
            }
        }
    }
}

static __device__ __forceinline__ void
scatter_s(float (&own)[2][2], const float (&s)[2][2][4], unsigned char *box,
          int q, int h, int lane)
{
    switch (q) {
    case 0: scatter_s_q<0>(own, s, box, h, lane); break;
    case 1: scatter_s_q<1>(own, s, box, h, lane); break;
    case 2: scatter_s_q<2>(own, s, box, h, lane); break;
    default: scatter_s_q<3>(own, s, box, h, lane); break;
    }
}

/* Phase 2c, the partials in, after the group's S barrier: the three
 * other warps' partials of this warp's octet added to its own.  Then the
 * lane holds row lane / 4 of the octet, columns 8 n + 2 (lane % 4) + e
 * as x[n][e], the whole sum over 576 dims. */
static __device__ __forceinline__ void
gather_s(float (&x)[NTN][2], const float (&own)[NHALF][2][2],
         const unsigned char *mybox, int lane)
{
#pragma unroll
    for (int h = 0; h < NHALF; ++h)
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            float2 a = make_float2(own[h][n][0], own[h][n][1]);
#pragma unroll
            for (int src = 0; src < 3; ++src) {
                const float2 v = *(const float2 *)(mybox
                    + (((src * NHALF + h) * 2 + n) * 32 + lane) * 8);
                a.x += v.x; a.y += v.y;
            }
            x[2 * h + n][0] = a.x; x[2 * h + n][1] = a.y;
        }
}

/* The thread's index read afresh: an asm volatile is never merged with
 * another read nor hoisted out of the KV loop, so what is derived from
 * it where it is used does not occupy a register across the loop (the
 * body has none to spare on sm_120: Q and O take 200 of 255). */
static __device__ __forceinline__ int
fresh_tid(void)
{
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

/* Copies KV tile t into the stage at `stage` (load_kv_tile), this
 * thread's piece (token tid / TPT, 16-byte column tid % TPT of rows ROWB
 * bytes apart) derived from a fresh %tid.x: held across the KV loop,
 * the piece's address and token were the two values ptxas spilled in the
 * e4m3 body on sm_89. */
template <int ROWB, class T>
static __device__ __forceinline__ void
load_kv_tile_at(uint32_t stage, int t, int total, const T *__restrict__ kv,
                const int32_t *__restrict__ bt, int64_t bt_row)
{
    const int tid = fresh_tid();
    const int tok = tid / TPT, col = tid % TPT;
    load_kv_tile(stage + tok * ROWB + col * 16, tok, col, t, total, kv, bt,
                 bt_row);
}

/* The block row whose softmax thread `tid` owns: row lane / 4 of octet q
 * (warp q of group g) of the group's 32 rows. */
static __device__ __forceinline__ int
softmax_row_of(int tid)
{
    const int g = tid >> 7, q = (tid >> 5) & 3, lane = tid & 31;
    return 32 * g + 16 * (q >> 1) + 8 * (q & 1) + (lane >> 2);
}

/* The mask's words are indexed from p.anc_mask by a 32-bit offset: the
 * request's rows start at r N_MAX W with r = blockIdx.z < 65535. */
static_assert(65535ull * N_MAX * W <= 0xffffffffull,
              "anc_mask offsets fit 32 bits");

/* Phase 2d, the online softmax of tile t for this lane's row of the block
 * (softmax_row_of): scales to log2 units, masks (tail tiles only), moves
 * the lazy maximum, and returns the rescale factor of the row's O; x
 * becomes P, times 2^P_SHIFT (the f16 weights of an e4m3 cache's bf16
 * arithmetic, below; the row sum is in the same units), and is added to
 * l_part unless SUM is false (the caller adds P as it rounds it).  The mask's
 * operands (the row, its node, its words in anc = p.anc_mask, the end of
 * what it may see) are computed in the tail tile that tests it, not kept
 * across the loop. */
template <int P_SHIFT = 0, bool SUM = true>
static __device__ __forceinline__ float
softmax_row(float (&x)[NTN][2], float &m_ref, float &l_part, int t,
            const va_block &b, const uint32_t *__restrict__ anc,
            float scale_log2)
{
#pragma unroll
    for (int n = 0; n < NTN; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e)
            x[n][e] *= scale_log2;
    if ((t + 1) * BN > b.past) {
        /* a tail tile: the tree's own rows, and the end of the KV.  A
         * padded row (node past the request's) sees only the prefix: its
         * end is past. */
        const int tid = fresh_tid(), c2 = 2 * (tid & 3);
        const int node = (b.m0 + softmax_row_of(tid)) / H;
        const uint32_t word0 =
            ((uint32_t)b.r * N_MAX + min(node, N_MAX - 1)) * W;
        const int end = node < b.nn ? b.total : b.past;
#pragma unroll
        for (int n = 0; n < NTN; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int pos = t * BN + 8 * n + c2 + e;
                bool vis = pos < b.past;
                if (!vis && pos < end) {
                    const int jj = pos - b.past;
                    vis = (__ldg(anc + (word0 + (jj >> 5))) >> (jj & 31))
                          & 1u;
                }
                if (!vis)
                    x[n][e] = kdt_neg_inf();
            }
    }
    float mx = fmaxf(x[0][0], x[0][1]);
#pragma unroll
    for (int n = 1; n < NTN; ++n)
        mx = fmaxf(mx, fmaxf(x[n][0], x[n][1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float alpha = 1.f;
    if (mx > m_ref + LAZY_RESCALE) {
        alpha = kdt_exp2(m_ref - mx); /* 0 when m_ref = -inf */
        m_ref = mx;
        l_part *= alpha;
    }
    /* m_ref = -inf means every x so far is -inf: p = 0, not NaN */
    float mu = m_ref == kdt_neg_inf() ? 0.f : m_ref;
    if constexpr (P_SHIFT != 0)
        mu -= (float)P_SHIFT;
#pragma unroll
    for (int n = 0; n < NTN; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            x[n][e] = kdt_exp2(x[n][e] - mu);
            if constexpr (SUM)
                l_part += x[n][e];
        }
    return alpha;
}

/* Phase 2e, P out: this warp's octet of P (its 8 rows x the tile's 32
 * tokens, bf16, or f16 when F16) as the B fragments of PV's k16 steps: for step kk the
 * lane's row lane / 4, tokens 16 kk + 2 (lane % 4) + {0, 1} (n8 tile
 * 2 kk) and + 8 (n8 tile 2 kk + 1), exactly the pairs this lane holds;
 * then its rows' alpha.  Into its own mailbox: it has read its partials,
 * and nobody else reads the mailbox before the group's P barrier. */
template <bool F16 = false>
static __device__ __forceinline__ void
publish_p(unsigned char *mybox, const float (&x)[NTN][2], float alpha,
          int lane)
{
    auto pack = [](float lo, float hi) {
        if constexpr (F16)
            return kdt_pack_f16x2(lo, hi);
        else
            return kdt_pack_bf16x2(lo, hi);
    };
#pragma unroll
    for (int kk = 0; kk < KK; ++kk)
        *(uint2 *)(mybox + (kk * 32 + lane) * 8) =
            make_uint2(pack(x[2 * kk][0], x[2 * kk][1]),
                       pack(x[2 * kk + 1][0], x[2 * kk + 1][1]));
    if ((lane & 3) == 0)
        ((float *)(mybox + P_ALPHA))[lane >> 2] = alpha;
}

/* The lazy rescale of O^T (after the group's P barrier): each octet's
 * rows by their alphas (1 on almost every tile), skipped when the whole
 * warp's are 1.  Returns whether it rescaled (the same in every lane). */
static __device__ __forceinline__ bool
rescale_o(float (&o)[NDM][4][4], const unsigned char *gbox, int lane)
{
    float2 a[4];
#pragma unroll
    for (int oc = 0; oc < 4; ++oc)
        a[oc] = *(const float2 *)(gbox + oc * BOX + P_ALPHA
                                  + 8 * (lane & 3));
    bool rescale = false;
#pragma unroll
    for (int oc = 0; oc < 4; ++oc)
        rescale |= a[oc].x != 1.f || a[oc].y != 1.f;
    if (!__any_sync(0xffffffffu, rescale))
        return false;
#pragma unroll
    for (int dm = 0; dm < NDM; ++dm)
#pragma unroll
        for (int oc = 0; oc < 4; ++oc) {
            o[dm][oc][0] *= a[oc].x; o[dm][oc][1] *= a[oc].y;
            o[dm][oc][2] *= a[oc].x; o[dm][oc][3] *= a[oc].y;
        }
    return true;
}

/* The group's four octets of P as B fragments: entry `i` (8 bytes) of
 * each mailbox's P. */
static __device__ __forceinline__ void
p_fragments(uint2 (&pb)[4], const unsigned char *gbox, int i)
{
#pragma unroll
    for (int oc = 0; oc < 4; ++oc)
        pb[oc] = *(const uint2 *)(gbox + oc * BOX + i * 8);
}

/* Phase 2f, PV, after the group's P barrier, computed transposed: O^T
 * (this warp's 128 dims x the group's 32 rows) = alpha O^T + V^T P^T.
 * V^T is the A operand (ldmatrix.trans of the stage, 16 dims x 16 tokens
 * a fragment; `vrow` is its lane address), P^T the B operand: one n8 tile
 * is one octet, so each B fragment is one 8-byte read of one warp's
 * mailbox, in the registers the MMA takes (an A fragment of P would mix
 * two warps' rows and cost moves).  o[dm][oc]: dims 16 dm .. of the
 * warp's 128, rows of octet oc; this lane holds dims lane / 4 (+ 8 in
 * [2], [3]), rows 2 (lane % 4) and + 1 ([1], [3]). */
static __device__ __forceinline__ void
pv_tile(float (&o)[NDM][4][4], const unsigned char *gbox, uint32_t vrow,
        int lane)
{
    rescale_o(o, gbox, lane);
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        uint2 pb[4];
        p_fragments(pb, gbox, kk * 32 + lane);
#pragma unroll
        for (int dm = 0; dm < NDM; ++dm) {
            uint32_t va[4];
            kdt_ldmatrix_x4_trans(va, vrow + 16 * kk * ROW_BYTES + 32 * dm);
#pragma unroll
            for (int oc = 0; oc < 4; ++oc)
                kdt_mma_bf16(o[dm][oc], va, pb[oc].x, pb[oc].y);
        }
    }
}

#include "verify_attn_mma_e4m3.cuh"

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
kdt_verify_attn(const kdt_verify_attn_params p)
{
    extern __shared__ __align__(128) unsigned char smem[];
    if constexpr (KV_E4M3) { /* verify_attn_mma_e4m3.cuh */
        va_mma_kv8(p, smem);
        return;
    }
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    va_block b;
    if (!va_block_begin<BM, BN, NTHREADS>(b, p, false))
        return;
    const int t0 = b.t0, t1 = b.t1;

    const uint32_t ring = kdt_smem_addr(smem);
    float *l_s = (float *)(smem + L_OFF);

    const uint16_t *__restrict__ kv = p.kv_cache;
    const int32_t *__restrict__ bt = p.block_table;
    const int64_t bt_row = (int64_t)b.r * p.max_pages;
    const uint32_t *__restrict__ anc = p.anc_mask;

    /* Roles.  Group g (warps 4 g .. 4 g + 3) owns rows 32 g .. 32 g + 31.
     * For S warp q of it holds Q of all 32 rows over dims QDIMS q ..; its
     * softmax owns the octet q of those rows (m-tile q / 2, rows
     * 8 (q % 2) ..); for PV it owns 128 columns (q) of the 32 rows. */
    const int g = warp >> 2, q = warp & 3;
    unsigned char *gbox = smem + BOX_OFF + 4 * g * BOX;
    unsigned char *mybox = gbox + q * BOX;
    uint32_t qa[2][KSTEPS][4];
    load_q(qa, p, b, ring, tid, g, q, lane);

    /* the cache's scale joins the logits' (docs/contract.md §3); written
     * out, not through a helper taking p, which cost the wgmma body its
     * global stores' address space (other SASS) */
    const float scale_log2 =
        (KV_E4M3 ? p.scale * p.kv_scale : p.scale) * KDT_LOG2E;
    float m_ref = kdt_neg_inf();
    float l_part = 0.f;
    float o[NDM][4][4];
#pragma unroll
    for (int dm = 0; dm < NDM; ++dm)
#pragma unroll
        for (int oc = 0; oc < 4; ++oc)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                o[dm][oc][e] = 0.f;

    /* lane addresses inside a stage: K as the B operand of S (tokens are
     * n, dims are k), V^T as the A operand of O^T (ldmatrix.trans: this
     * warp's 128 dims are m, tokens are k); both take matrices 0..3 as
     * (tokens 0-7, 8 dims), (0-7, next 8), (8-15, 8), (8-15, next 8) */
    const uint32_t k_lane = ((lane & 7) + 8 * (lane >> 4)) * ROW_BYTES
                            + (QDIMS * q + 8 * ((lane >> 3) & 1)) * 2;
    const uint32_t v_lane = ((lane & 7) + 8 * (lane >> 4)) * ROW_BYTES
                            + (NCOL * q + 8 * ((lane >> 3) & 1)) * 2;
    const int ltok = tid / TPT, lcol = tid % TPT;
    const uint32_t ldst = ring + ltok * ROW_BYTES + lcol * 16;

    /*
     * Phase 2, the KV loop.  Iteration t: the block barrier (tile t
     * landed; every warp is done with tile t-1, whose stage the refill of
     * tile t+1 takes, and with the mailboxes), then per warp: S of tile t
     * a half at a time, each half's partials out, the refill issued
     * between the halves (behind the first half's MMAs rather than in
     * front of them: 0.3-1.5% at six shapes); the group's S barrier; its
     * octet's S in, the softmax, P out; the group's P barrier; PV.
     */
    if (t0 < t1)
        load_kv_tile(ldst, ltok, lcol, t0, b.total, kv, bt, bt_row);
    kdt_cp_async_commit();
    for (int t = t0; t < t1; ++t) {
        /* unsigned on sm_120 and sm_121: ptxas then keeps the one-row
         * build (H=1, N_MAX=1) over a bf16 cache out of local memory,
         * where the signed index costs it 16 bytes a thread; signed
         * below, where the unsigned one spills 16 bytes at most sm_90
         * bf16 builds (NVRTC 13.0; sm_89 and sm_100 spill alike either way) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
        const unsigned it = (unsigned)(t - t0);
#else
        const int it = t - t0;
#endif
        kdt_cp_async_wait<0>(); /* this thread's part of tile t */
        __syncthreads();
        const uint32_t stage = ring + (it % NSTAGE) * STAGE_BYTES;
        float own[NHALF][2][2];
#pragma unroll
        for (int h = 0; h < NHALF; ++h) {
            float s[2][2][4];
            qk_half(s, qa, stage + k_lane, h);
            scatter_s(own[h], s, gbox, q, h, lane);
            if (h == 0) {
                if (t + 1 < t1)
                    load_kv_tile(ldst + ((it + 1) % NSTAGE) * STAGE_BYTES,
                                 ltok, lcol, t + 1, b.total, kv, bt, bt_row);
                kdt_cp_async_commit();
            }
        }
        named_bar(1 + g, 128);
        float x[NTN][2];
        gather_s(x, own, mybox, lane);
        const float alpha = softmax_row(x, m_ref, l_part, t, b, anc,
                                        scale_log2);
        __syncwarp(); /* every lane has read its partials */
        publish_p(mybox, x, alpha, lane);
        named_bar(3 + g, 128);
        pv_tile(o, gbox, stage + v_lane, lane);
    }
    kdt_cp_async_wait<0>(); /* nothing may land after the block exits */

    /* ---- Phase 3, the epilogue: row sums, LSE, normalised O --------- */
    {
        /* the softmax's row, from a fresh thread index: kept from the
         * prelude, it held a register through the loop */
        const int row = softmax_row_of(fresh_tid());
        float l = l_part;
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if ((lane & 3) == 0) {
            l_s[row] = l;
            va_store_lse(p, b, b.m0 + row, va_lse2(m_ref, l));
        }
    }
    __syncthreads();

    /* O^T's lane holds rows 2 (lane % 4) + {0, 1} of each octet at dims
     * lane / 4 (+ 8); one shuffle with the lane of the neighbouring dim
     * (lane ^ 4) gives each lane a pair of adjacent dims of one row: an
     * even lane / 4 keeps row 2 (lane % 4), an odd one row + 1. */
    const bool odd = (lane >> 2) & 1;
    const int col0 = NCOL * q + (lane >> 2) - odd;
#pragma unroll
    for (int oc = 0; oc < 4; ++oc) {
        const int orow = 32 * g + 8 * oc + 2 * (lane & 3) + odd;
        const va_out d = va_row_out(p, b, b.m0 + orow, l_s[orow]);
#pragma unroll
        for (int dm = 0; dm < NDM; ++dm)
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
                const float mine0 = o[dm][oc][2 * hi];
                const float mine1 = o[dm][oc][2 * hi + 1];
                const float other = __shfl_xor_sync(0xffffffffu,
                                                    odd ? mine0 : mine1, 4);
                if (b.m0 + orow < ROWS)
                    va_put(d, col0 + 16 * dm + 8 * hi, odd ? other : mine0,
                           odd ? mine1 : other);
            }
    }
}
