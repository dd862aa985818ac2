/*
 * verify_attn_mma_e4m3.cuh: the mma.sync body over an e4m3 cache (KV =
 * e4m3), in both arithmetics of docs/contract.md §3.  verify_attn_mma.cuh
 * includes it after its own phases, which it shares: the roles (two
 * groups of four warps, Q in registers, O^T 128 dims a warp), the S
 * exchange (scatter_s, gather_s), the softmax (softmax_row), the mailboxes
 * and the one block barrier a tile.  What differs:
 *
 *  - The ring (kdt_attn_mma_kv8_smem) holds KV rows of 576 bytes: a tile is
 *    half a bf16 one, so four of them fit where two did, and the loads run
 *    three tiles ahead (load_kv_tile<uint8_t>).
 *  - Fragments are read with ldmatrix on bytes: a K matrix (8 tokens x 16
 *    bytes) gives a lane 4 consecutive dims of one token, which is an
 *    8-bit B fragment as it is, or two f16 ones after widening; a V^T
 *    matrix (ldmatrix.trans) gives a lane 2 dims of 2 tokens, which one
 *    byte permute per register turns into the A fragments of O^T.  The
 *    order of the dims inside a k-step is the mma's business only as long
 *    as Q follows it: Q is loaded once, in that order.
 *  - O^T's lane holds dims 2 (lane / 4) and + 1 of two rows (the V^T
 *    fragments put dim 2 g in fragment row g and 2 g + 1 in row g + 8),
 *    so the epilogue writes pairs with no shuffle.
 *  - Q arrives bf16 (staged as for bf16), and each row's max |q| is taken
 *    once (four threads a row) for the conversion below.
 *
 * MATH = bf16 (mode a): e4m3 widened exactly to f16, not bf16, and f16
 * tensor cores.  One cvt widens two e4m3 to f16; to bf16 they take four
 * integer operations more (e4m3's subnormals and NaN: kdt_fp8.cuh), in
 * the inner loop of a body whose every phase is latency-bound, or a pass
 * through a bf16 stage that the 99 KB cannot hold beside four e4m3 ones
 * (or two, with the mailboxes) and that costs a second barrier a tile.
 * The f16 operands lose nothing against bf16's: each Q row is scaled by
 * a power of two that brings its max |q| into [2^14, 2^15)
 * (kdt_q16_row_exp, kdt_fp8.cuh), where f16 holds every bf16 value
 * exactly down to 2^-31 of the row's maximum (below that, within 2^-39
 * of it), and the logits' factor takes the power back; P goes out scaled
 * by 2^7 (at most 2^15 < 65504), so f16 keeps 11 significant bits of
 * every weight down to 2^-21 (bf16 keeps 8).
 * The registers are bf16's: Q 72, O^T 128.
 *
 * MATH = e4m3 (mode b): each Q row quantized with its own scale (448 /
 * max |q|, kdt_fp8.cuh), m16n8k32 e4m3 MMAs for S and for P V, P rounded
 * to e4m3 (at most 256, the lazy maximum's bound, so never saturated).
 * Q takes 40 registers, not 72.  A warp's 144 dims are 4.5 k32 steps:
 * each warp takes 128 dims of c_kv (4 steps, both n8 tiles of a half) and
 * one of the two k_pe steps for one n8 tile (warp q: k_pe step q / 2, n8
 * tile q % 2), so each half of a tile is 18 MMAs on every warp and the
 * exchange sums S over all 576 dims.  The FP8 mma.sync of sm_89 does
 * not add in f32 (docs/contract.md §3), so P V's MMAs each sum their step
 * from zero, added to O^T in f32.  The row sum l is what the contract
 * asks (the rounded weights): each softmax lane adds its 8 rounded
 * weights in f32 (exactly: kdt_e4m3x4_sum), rescaled with the row as
 * mode a's sum is.
 */

constexpr int ROW8 = sizeof(kdt_attn_mma_kv8_row);
constexpr int STAGE8 = sizeof(kdt_attn_mma_kv8_stage);
constexpr int NSTAGE8 = KDT_ATTN_KV8_NSTAGE;
constexpr int AHEAD8 = NSTAGE8 - 1;           /* tiles in flight */
constexpr int BOX_OFF8 = KDT_OFFSETOF(kdt_attn_mma_kv8_smem, box);
constexpr int L_OFF8 = KDT_OFFSETOF(kdt_attn_mma_kv8_smem, l);
constexpr int SMEM8_BYTES = KDT_ATTN_KV8_SMEM;
constexpr int P16_SHIFT = 7;                  /* mode a: P times 2^7 */
constexpr int QSTEPS16 = QDIMS / 16;          /* mode a: k16 steps, 9 */
constexpr int CKV_STEPS = NCOL / 32;          /* mode b: c_kv k32 steps */
constexpr int QSTEPS8 = CKV_STEPS + 1;        /* and one of k_pe */
constexpr int QSTEPS = MATH_E4M3 ? QSTEPS8 : QSTEPS16;

static_assert(KDT_OFFSETOF(kdt_attn_mma_kv8_smem, ring) == 0 &&
                  KDT_OFFSETOF(kdt_attn_mma_kv8_smem, box) ==
                      sizeof(((kdt_attn_mma_kv8_smem *)0)->ring) &&
                  NSTAGE8 >= 2,
              "the ring first (Q is read at its offsets), then the boxes");
static_assert(4 * NCOL + 2 * 32 == D_QK && QDIMS == 9 * 16,
              "mode b: 4 x 128 c_kv dims and two k32 steps of k_pe");

/* Dims d .. d + 3 of a staged bf16 Q row, as four f32. */
static __device__ __forceinline__ void
q_dims4(float (&x)[4], const unsigned char *qrow, int d)
{
    const uint2 w = *(const uint2 *)(qrow + 2 * d);
    x[0] = __uint_as_float(w.x << 16);
    x[1] = __uint_as_float(w.x & 0xffff0000u);
    x[2] = __uint_as_float(w.y << 16);
    x[3] = __uint_as_float(w.y & 0xffff0000u);
}

/* An A register of Q for the arithmetic: dims d .. d + 3 of row `qrow`
 * (scaled by s), as two f16 (mode a: the k16 fragment's k 2 (lane % 4)
 * and + 1 take dims d, d + 1, and k + 8, + 9 dims d + 2, d + 3, in two
 * registers, lo and hi) or four e4m3 (mode b: one register, in lo). */
static __device__ __forceinline__ void
q_frag(uint32_t &lo, uint32_t &hi, const unsigned char *qrow, int d, float s)
{
    float x[4];
    q_dims4(x, qrow, d);
    if constexpr (MATH_E4M3) {
        lo = kdt_e4m3x4_quantize(x[0], x[1], x[2], x[3], s);
    } else {
        lo = kdt_pack_f16x2(x[0] * s, x[1] * s);
        hi = kdt_pack_f16x2(x[2] * s, x[3] * s);
    }
}

/* What a Q row's elements are multiplied by before conversion, and what
 * its logits are then multiplied by (times scale_log2) to be the
 * contract's. */
static __device__ __forceinline__ float
q_row_scale(float amax)
{
    if constexpr (MATH_E4M3)
        return kdt_e4m3_quant_scale(amax);
    else
        return kdt_pow2f(kdt_q16_row_exp(amax));
}

static __device__ __forceinline__ float
q_row_logit_factor(float amax)
{
    if constexpr (MATH_E4M3)
        return kdt_e4m3_dequant_scale(amax);
    else
        return kdt_pow2f(-kdt_q16_row_exp(amax));
}

/* Phase 1 (e4m3 cache): the bf16 Q tile through the ring (stage_q), each
 * row's max |q| (four threads a row, a quarter of its dims each) into
 * l_s, this warp's A fragments in the arithmetic's operand type, kept for
 * the whole block, and the logits' factor (log2 units) of the row this
 * lane's softmax owns (`row`).  Mode a: chunks 9 q .. 9 q + 8 of 16 dims,
 * a k16 step each.  Mode b: steps 0-3 the c_kv dims 128 q .., two chunks
 * a k32 step; step 4 the k_pe step q / 2 (dims 512 + 32 (q / 2) ..). */
static __device__ __forceinline__ void
load_q8(uint32_t (&qa)[2][QSTEPS][4], float &row_fac,
        const kdt_verify_attn_params &p, const va_block &b,
        unsigned char *smem, float *l_s, int tid, int g, int q, int lane,
        int row, float scale_log2)
{
    stage_q(p, b, kdt_smem_addr(smem), tid);
    {
        const int r = tid >> 2, part = tid & 3;
        const uint4 *src =
            (const uint4 *)(smem + r * ROW_BYTES + part * QDIMS * 2);
        uint32_t m = 0;
#pragma unroll 6
        for (int i = 0; i < QDIMS * 2 / 16; ++i)
            m = kdt_bf16x8_absmax_bits(m, src[i]);
        m = kdt_quad_max(m);
        if (part == 0)
            l_s[r] = __uint_as_float(m << 16);
    }
    __syncthreads();
    const int c4 = 4 * (lane & 3);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        const int r0 = 32 * g + 16 * mt + (lane >> 2), r1 = r0 + 8;
        const unsigned char *q0 = smem + r0 * ROW_BYTES;
        const unsigned char *q1 = smem + r1 * ROW_BYTES;
        const float s0 = q_row_scale(l_s[r0]), s1 = q_row_scale(l_s[r1]);
#pragma unroll
        for (int ks = 0; ks < QSTEPS; ++ks) {
            uint32_t (&a)[4] = qa[mt][ks];
            if constexpr (MATH_E4M3) {
                const int d = ks < CKV_STEPS ? NCOL * q + 32 * ks + c4
                                             : D_V + 32 * (q >> 1) + c4;
                uint32_t unused;
                q_frag(a[0], unused, q0, d, s0);
                q_frag(a[1], unused, q1, d, s1);
                q_frag(a[2], unused, q0, d + 16, s0);
                q_frag(a[3], unused, q1, d + 16, s1);
            } else {
                const int d = QDIMS * q + 16 * ks + c4;
                q_frag(a[0], a[2], q0, d, s0);
                q_frag(a[1], a[3], q1, d, s1);
            }
        }
    }
    row_fac = scale_log2 * q_row_logit_factor(l_s[row]);
    __syncthreads(); /* from here the ring belongs to the KV tiles */
}

/* Phase 2a, mode a: as qk_half, over f16 fragments widened from the
 * stage's e4m3 (`krow`: this lane's K address; an ldmatrix.x4 covers two
 * k16 steps of both n8 tiles, the ninth step an x2). */
static __device__ __forceinline__ void
qk16_half(float (&s)[2][2][4], const uint32_t (&qa)[2][QSTEPS][4],
          uint32_t krow, int h)
{
    zero_s(s);
#pragma unroll
    for (int j = 0; j < QSTEPS16; j += 2) {
        /* [n8 tile + 2 (step - j)]: tokens 8 n .. of the half, dims of
         * chunk 9 q + step, 4 (lane % 4) .. of them in this lane */
        uint32_t kb[4];
        if (j + 1 < QSTEPS16)
            kdt_ldmatrix_x4(kb, krow + 16 * h * ROW8 + 16 * j);
        else
            kdt_ldmatrix_x2(kb, krow + 16 * h * ROW8 + 16 * j);
#pragma unroll
        for (int jj = 0; jj < 2 && j + jj < QSTEPS16; ++jj) {
            uint32_t kf[2][2];
            kdt_e4m3x4_to_f16x4(kf[0][0], kf[0][1], kb[2 * jj]);
            kdt_e4m3x4_to_f16x4(kf[1][0], kf[1][1], kb[2 * jj + 1]);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                kdt_mma_f16(s[mt][0], qa[mt][j + jj], kf[0][0], kf[0][1]);
                kdt_mma_f16(s[mt][1], qa[mt][j + jj], kf[1][0], kf[1][1]);
            }
        }
    }
}

/* Phase 2a, mode b: as qk_half, e4m3 (`krow`: this lane's K address for
 * the c_kv steps, two chunks a k32 step; `kxrow`: for the k_pe step, n8
 * tile NX of the half, the static q % 2 so that the accumulator index
 * is). */
template <int NX>
static __device__ __forceinline__ void
qk8_half(float (&s)[2][2][4], const uint32_t (&qa)[2][QSTEPS][4],
         uint32_t krow, uint32_t kxrow, int h)
{
    zero_s(s);
#pragma unroll
    for (int ks = 0; ks < CKV_STEPS; ++ks) {
        uint32_t kb[4]; /* (n8 0, k 0-15), (1, 0-15), (0, 16-31), (1, ..) */
        kdt_ldmatrix_x4(kb, krow + 16 * h * ROW8 + 32 * ks);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            kdt_mma_e4m3(s[mt][0], qa[mt][ks], kb[0], kb[2]);
            kdt_mma_e4m3(s[mt][1], qa[mt][ks], kb[1], kb[3]);
        }
    }
    uint32_t kx[2];
    kdt_ldmatrix_x2(kx, kxrow + 16 * h * ROW8);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
        kdt_mma_e4m3(s[mt][NX], qa[mt][CKV_STEPS], kx[0], kx[1]);
}

/* Phase 2e, mode b, P out: this lane's row of its octet (P <= 256, no
 * saturation) as the k32 B fragment, in the token order the V^T
 * fragments take (pv8_tile): b0 = tokens 2 (lane % 4) + {0, 1, 8, 9}, b1
 * = those + 16, exactly the values this lane holds; and the rows' alpha.
 * Returns b0, b1: the row sum adds the weights as they are rounded. */
static __device__ __forceinline__ uint2
publish_p8(unsigned char *mybox, const float (&x)[NTN][2], float alpha,
           int lane)
{
    const uint2 pw =
        make_uint2(kdt_e4m3x4_from_f32(x[0][0], x[0][1], x[1][0], x[1][1]),
                   kdt_e4m3x4_from_f32(x[2][0], x[2][1], x[3][0], x[3][1]));
    *(uint2 *)(mybox + lane * 8) = pw;
    /* alpha's slot: from a fresh lane index on sm_120 and newer, where
     * CUDA 12.9's NVRTC otherwise held its address across the KV loop and
     * spilled it (8 bytes a thread at every H >= 2); from the lane below,
     * where the fresh index is what sm_89's spills */
    if ((lane & 3) == 0)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
        ((float *)(mybox + P_ALPHA))[(fresh_tid() & 31) >> 2] = alpha;
#else
        ((float *)(mybox + P_ALPHA))[lane >> 2] = alpha;
#endif
    return pw;
}

/* Phase 2f, mode a: as pv_tile, with the V^T fragments widened to f16
 * (`vrow`: this lane's address; an ldmatrix.x2.trans, from lanes 0-15's,
 * covers one k16 step of a dm tile).  A register of it holds tokens t,
 * t + 1 (t = 2 (lane % 4), + 8 in the second matrix) at dims 2 g, 2 g + 1
 * (g = lane / 4) as bytes (t, 2g), (t, 2g+1), (t+1, 2g), (t+1, 2g+1):
 * permuted to (t, 2g), (t+1, 2g) | (t, 2g+1), (t+1, 2g+1) it widens to
 * the A registers of fragment rows g (dim 2 g) and g + 8 (dim 2 g + 1). */
static __device__ __forceinline__ void
pv16_tile(float (&o)[NDM][4][4], const unsigned char *gbox, uint32_t vrow,
          int lane)
{
    rescale_o(o, gbox, lane);
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        uint2 pb[4];
        p_fragments(pb, gbox, kk * 32 + lane);
#pragma unroll
        for (int jp = 0; jp < NDM / 2; ++jp) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                /* (tokens 16 kk + 0-7, chunk 2 jp + hh), (+ 8-15, the
                 * same chunk) of the warp's 8: one chunk at a time (an
                 * x4 of both held two registers more through the
                 * widening, and NVRTC 13.2 spilled on sm_120) */
                uint32_t r[2], va[4];
                kdt_ldmatrix_x2_trans(r, vrow + 16 * kk * ROW8
                                             + 16 * (2 * jp + hh));
                kdt_e4m3x4_to_f16x4(va[0], va[1],
                                    __byte_perm(r[0], 0, 0x3120));
                kdt_e4m3x4_to_f16x4(va[2], va[3],
                                    __byte_perm(r[1], 0, 0x3120));
#pragma unroll
                for (int oc = 0; oc < 4; ++oc)
                    kdt_mma_f16(o[2 * jp + hh][oc], va, pb[oc].x, pb[oc].y);
            }
        }
    }
}

/* Phase 2f, mode b: as pv_tile, one k32 step for the whole tile.  The
 * ldmatrix.x4.trans of a dm tile's chunk, tokens 0-7, 8-15, 16-23,
 * 24-31, gives a lane (tokens t, t + 1 at dims 2 g, 2 g + 1) per matrix;
 * byte permutes gather dim 2 g (fragment row g) and dim 2 g + 1 (row g +
 * 8) of tokens t, t + 1, t + 8, t + 9 (k 4 (lane % 4) ..) and of those +
 * 16: the token order of publish_p8's B fragments.  Each MMA sums its
 * step from zero and f32 adds it to O^T (kdt_mma_e4m3_z): an FP8
 * accumulator carried across the range would drop the late products
 * beside the early ones' sum (docs/contract.md §3). */
static __device__ __forceinline__ void
pv8_tile(float (&o)[NDM][4][4], const unsigned char *gbox, uint32_t vrow,
         int lane)
{
    rescale_o(o, gbox, lane);
    uint2 pb[4];
    p_fragments(pb, gbox, lane);
#pragma unroll
    for (int dm = 0; dm < NDM; ++dm) {
        uint32_t r[4], va[4];
        kdt_ldmatrix_x4_trans(r, vrow + 16 * dm);
        va[0] = __byte_perm(r[0], r[1], 0x6420);
        va[1] = __byte_perm(r[0], r[1], 0x7531);
        va[2] = __byte_perm(r[2], r[3], 0x6420);
        va[3] = __byte_perm(r[2], r[3], 0x7531);
#pragma unroll
        for (int oc = 0; oc < 4; ++oc) {
            float d[4];
            kdt_mma_e4m3_z(d, va, pb[oc].x, pb[oc].y);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                o[dm][oc][e] += d[e];
        }
    }
}

/* Where tile t goes in the ring: stage t % NSTAGE8, by the tile's own
 * index (t >= 0), so that the loop holds no count from its first tile. */
static __device__ __forceinline__ uint32_t
va_stage8(int t)
{
    return ((unsigned)t % NSTAGE8) * STAGE8;
}

/*
 * The block over an e4m3 cache: kdt_verify_attn's body when KV = e4m3,
 * its loop and barriers as the bf16 one's (see there), the ring four
 * stages deep: iteration t waits for tile t (AHEAD8 - 1 newer groups may
 * stay in flight), and between the halves of S refills the stage of tile
 * t - 1 (every warp is past it: the block barrier) with tile t + AHEAD8.
 */
static __device__ __forceinline__ void
va_mma_kv8(const kdt_verify_attn_params &p, unsigned char *smem)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    va_block b;
    if (!va_block_begin<BM, BN, NTHREADS>(b, p, false))
        return;
    const int t0 = b.t0, t1 = b.t1;

    const uint32_t ring = kdt_smem_addr(smem);
    float *l_s = (float *)(smem + L_OFF8);
    /* the cache's bytes (kdt_params.h types the pointer as bf16's) */
    const uint8_t *__restrict__ kv = (const uint8_t *)p.kv_cache;
    const int32_t *__restrict__ bt = p.block_table;
    const int64_t bt_row = (int64_t)b.r * p.max_pages;
    const uint32_t *__restrict__ anc = p.anc_mask;

    const int g = warp >> 2, q = warp & 3;
    unsigned char *gbox = smem + BOX_OFF8 + 4 * g * BOX;
    unsigned char *mybox = gbox + q * BOX;
    const int row = softmax_row_of(tid);
    const int c2 = 2 * (lane & 3);
    const float scale_log2 = p.scale * p.kv_scale * KDT_LOG2E;
    uint32_t qa[2][QSTEPS][4];
    float row_fac;
    load_q8(qa, row_fac, p, b, smem, l_s, tid, g, q, lane, row, scale_log2);

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

    /* lane addresses inside a stage: K as matrices (tokens 0-7, chunk c),
     * (8-15, c), (0-7, c + 1), (8-15, c + 1) from the warp's first chunk
     * (9 q in mode a, 8 q in mode b); mode b's k_pe step (n8 tile q % 2:
     * tokens 8 (q % 2) .., chunks 32 + 2 (q / 2) and + 1); V^T from the
     * warp's 128 dims, mode a as K's matrices, mode b tokens 0-31 of one
     * chunk */
    const int lpair = (lane & 7) + 8 * ((lane >> 3) & 1);
    const uint32_t k_lane = lpair * ROW8 + 16 * (lane >> 4)
                            + (MATH_E4M3 ? NCOL * q : QDIMS * q);
    const uint32_t kx_lane = ((lane & 7) + 8 * (q & 1)) * ROW8
                             + D_V + 32 * (q >> 1) + 16 * ((lane >> 3) & 1);
    const uint32_t v_lane = MATH_E4M3 ? lane * ROW8 + NCOL * q
                                      : lpair * ROW8 + 16 * (lane >> 4)
                                            + NCOL * q;

#pragma unroll
    for (int i = 0; i < AHEAD8; ++i) {
        if (t0 + i < t1)
            load_kv_tile_at<ROW8>(ring + va_stage8(t0 + i), t0 + i, b.total,
                                  kv, bt, bt_row);
        kdt_cp_async_commit();
    }
    for (int t = t0; t < t1; ++t) {
        kdt_cp_async_wait<AHEAD8 - 1>(); /* this thread's part of tile t */
        __syncthreads();
        const uint32_t stage = ring + va_stage8(t);
        float own[NHALF][2][2];
#pragma unroll
        for (int h = 0; h < NHALF; ++h) {
            float s[2][2][4];
            if constexpr (MATH_E4M3) {
                if (q & 1)
                    qk8_half<1>(s, qa, stage + k_lane, stage + kx_lane, h);
                else
                    qk8_half<0>(s, qa, stage + k_lane, stage + kx_lane, h);
            } else {
                qk16_half(s, qa, stage + k_lane, h);
            }
            scatter_s(own[h], s, gbox, q, h, lane);
            if (h == 0) {
                if (t + AHEAD8 < t1)
                    load_kv_tile_at<ROW8>(
                        ring + va_stage8(t + AHEAD8), t + AHEAD8,
                        b.total, kv, bt, bt_row);
                kdt_cp_async_commit();
            }
        }
        named_bar(1 + g, 128);
        float x[NTN][2];
        gather_s(x, own, mybox, lane);
        const float alpha = softmax_row<MATH_E4M3 ? 0 : P16_SHIFT,
                                        !MATH_E4M3>(x, m_ref, l_part, t, b,
                                                    anc, row_fac);
        __syncwarp(); /* every lane has read its partials */
        if constexpr (MATH_E4M3) {
            const uint2 pw = publish_p8(mybox, x, alpha, lane);
            /* mode b's row sum: the weights as P V takes them */
            l_part += kdt_e4m3x4_sum(pw.x) + kdt_e4m3x4_sum(pw.y);
            named_bar(3 + g, 128);
            pv8_tile(o, gbox, stage + v_lane, lane);
        } else {
            publish_p<true>(mybox, x, alpha, lane);
            named_bar(3 + g, 128);
            pv16_tile(o, gbox, stage + v_lane, lane);
        }
    }
    kdt_cp_async_wait<0>(); /* nothing may land after the block exits */

    /* ---- Phase 3, the epilogue: row sums, LSE, normalised O --------- */
    {
        /* the softmax's row from a fresh thread index: kept from the
         * prelude, it held a register through the loop, which ptxas
         * then spilled on sm_120 */
        const int row_e = softmax_row_of(fresh_tid());
        float l = l_part;
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if ((lane & 3) == 0) {
            l_s[row_e] = l;
            /* mode a: l and the weights are 2^P16_SHIFT times the row's */
            va_store_lse(p, b, b.m0 + row_e,
                         va_lse2(m_ref - (float)(MATH_E4M3 ? 0 : P16_SHIFT),
                                 l));
        }
    }
    __syncthreads();

    /* O^T's lane holds dims 2 g, 2 g + 1 (g = lane / 4) of each of its
     * chunks for rows 2 (lane % 4) (elements 0, 2) and + 1 (1, 3) of each
     * octet: a pair of adjacent dims of two rows. */
    const int col0 = NCOL * q + 2 * (lane >> 2);
#pragma unroll
    for (int oc = 0; oc < 4; ++oc)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int orow = 32 * g + 8 * oc + c2 + i;
            if (b.m0 + orow >= ROWS)
                continue;
            const va_out d = va_row_out(p, b, b.m0 + orow, l_s[orow]);
#pragma unroll
            for (int dm = 0; dm < NDM; ++dm)
                va_put(d, col0 + 16 * dm, o[dm][oc][i], o[dm][oc][2 + i]);
        }
}
