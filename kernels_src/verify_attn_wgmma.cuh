/*
 * verify_attn_wgmma.cuh: verify_attn on Hopper's warpgroup MMA, the body
 * of sm_90a (and compute_90a): the library's target on compute
 * capability 9.0, H100 / H200.  verify_attn.cu includes it when
 * KDT_ATTN_WGMMA is 1, in place of verify_attn_mma.cuh, after the shape
 * constants, the block prelude and the epilogue's helpers both bodies
 * share; the merge kernel follows it there.  Same contract
 * (docs/contract.md §3, verify_attn), same grid shape (row tile, split,
 * request), same workspace.
 *
 * Why a second body: mma.sync issues at most ~640 TFLOP/s on an H200
 * (tools/dev/mma_peak.cu), and its operands pass through registers, so a
 * 576/512-wide MLA tile costs more shared-memory bandwidth and register
 * file than the tensor pipe can use; the mma.sync body reaches 20-26% of
 * 989 TFLOP/s (docs/performance.md).  wgmma reads both operands from
 * shared memory itself, and Hopper lets a block have 227 KB of it, so the
 * whole 64-row Q tile and two 64-token KV tiles stay resident.  sm_120
 * (99 KB, no wgmma) keeps the mma.sync body.
 *
 * Block = 64 folded rows x one KV split of one request, two warpgroups:
 *  - WG0: S = Q K^T for a 64-token tile (36 k16 steps of m64n64k16), the
 *    online softmax (ancestor mask on tail tiles only), the per-row
 *    rescale factor and P (bf16) into shared memory, P in two halves of
 *    32 tokens: O[:, 0:256] += P V of the first half is issued before
 *    the second half's exponentials, so the tensor pipe has work while
 *    WG0 computes them.
 *  - WG1: loads the next KV tile (cp.async, one tile ahead into the other
 *    stage; the block-table entries a tile before that), then
 *    O[:, 256:512] += P V as each half of P is published, publishing the
 *    next tile while that PV runs (so WG0's S of it queues behind the
 *    PV).
 *  - Over an e4m3 cache in bf16 arithmetic a third warpgroup, WG2 (the
 *    producer, on 72 registers a thread; setmaxnreg gives the math
 *    warpgroups the rest, 216), loads the tiles in WG1's place: through
 *    registers, widened to f16 on the way (kv8_store), each into its
 *    stage once both math warpgroups have handed back the tile two
 *    before it; WG1 does its P V alone.
 * Phases: tail_words_load (WG0: the tail tiles' mask words, before any
 * cp.async), load_q_and_first_tile (and q_to_f16 over an e4m3 cache);
 * then the KV loop, one function a warpgroup: wg0_softmax_loop
 * (tail_bits_pack, then per tile qk_issue (S), mask_tail (from
 * registers), softmax_max and, a half of P at a time, softmax_p_half
 * and pv_issue, then pv_finish) beside
 * wg1_load_pv_loop (per tile kv_rows / load_kv_tile, pv_issue of each
 * half / pv_finish) and, over an e4m3 cache in bf16 arithmetic,
 * wg2_widen_loop (kv8_page / kv8_fetch / kv8_store); then the
 * epilogue (row sums, LSE, normalised O: store_o, through shared memory
 * in whole lines, when the block is unsplit), or, when the row tile's splits were launched as one cluster,
 * cluster_merge (the splits merged through distributed shared memory: no
 * workspace, no merge kernel).
 * Named barriers pair every hand-off (full/empty of each KV stage, of P),
 * each one waited before its producer can reach it again.  What bounds
 * it (the tensor pipe idles through the softmax, and two stages are all
 * that fit beside Q) and what was tried: docs/performance.md, its table
 * of ideas tried.
 *
 * Shared memory, a kdt_attn_wg_smem (kdt_attn_tiles.h) from one
 * 1024-byte-aligned base: Q 64 x 576 bf16 (f16 over an e4m3 cache, as
 * are the stages and P), two KV stages of 64 x 576 (after the loop, the
 * epilogue's O), P 64 x 64, alpha[64], l[64], q_unscale[64].  Every
 * operand tile is stored as wgmma's 128-byte-swizzled K-major layout: the
 * 576 columns in nine 64-column blocks, each [rows][128 B], the 16-byte
 * piece c of row r at piece c ^ (r % 8).  The same bytes serve V as an
 * MN-major operand (the V columns of a token are its row's first 512
 * entries).
 *
 * Its PTX (barriers, fences, wgmma and its descriptors, the cluster's
 * operations) is the part verify_attn_wgmma_ptx.cuh.  The FP8
 * arithmetic (MATH = e4m3) keeps this loop and its barriers with e4m3
 * operands throughout (Q quantized, the tiles' own bytes, P in e4m3,
 * P V as O^T = V^T P^T with V^T gathered into registers, the row sums
 * one more wgmma): its phases are the part verify_attn_wgmma_e4m3.cuh.
 */

constexpr int BM = KDT_ATTN_WG_BM;
constexpr int BN = KDT_ATTN_WG_BN;
constexpr int NTHREADS = KDT_ATTN_WG_THREADS;  /* the math warpgroups' */
/* Over an e4m3 cache in bf16 arithmetic a third warpgroup (WG2, the
 * producer) fetches and widens the tiles: the block is NLAUNCH threads. */
constexpr bool PRODUCER = KDT_ATTN_WG_PRODUCER(KDT_KV, KDT_MATH);
constexpr int NLAUNCH = KDT_ATTN_WG_LAUNCH_THREADS(KDT_KV, KDT_MATH);
/* With the producer the block launches at 65536 / 384 registers a thread,
 * 168 (a multiple of 8); the producer gives back all but PRODUCER_REGS,
 * and the math warpgroups take them (setmaxnreg): the pool the three
 * share is the block's 384 x 168. */
constexpr int LAUNCH_REGS = 168;
constexpr int PRODUCER_REGS = 72;
constexpr int MATH_REGS = 216;
static_assert(!PRODUCER || (NLAUNCH == 384
                            && 128 * PRODUCER_REGS + 256 * MATH_REGS
                                   <= NLAUNCH * LAUNCH_REGS
                            && NLAUNCH * LAUNCH_REGS <= 65536),
              "the producer's registers pay for the math warpgroups'");
/* The block's shared memory is a kdt_attn_wg_smem (kdt_attn_tiles.h)
 * from a KDT_ATTN_WG_ALIGN-aligned base: the Q tile at Q_OFF, the KV
 * stages at K_OFF (TILE_BYTES each, in KBLK blocks of 64 columns), P at
 * P_OFF, the alphas and the row sums. */
constexpr int KBLK = D_QK / 64;               /* 64-column swizzle blocks */
constexpr int TILE_BYTES = sizeof(kdt_attn_wg_kvtile);
constexpr int BLK_BYTES = TILE_BYTES / KBLK;  /* one block of a KV tile */
constexpr int Q_BLK_BYTES = sizeof(kdt_attn_wg_qtile) / KBLK;
constexpr int Q_OFF = KDT_OFFSETOF(kdt_attn_wg_smem, q);
constexpr int K_OFF = KDT_OFFSETOF(kdt_attn_wg_smem, stages.kv);
constexpr int P_OFF = KDT_OFFSETOF(kdt_attn_wg_smem, p);
constexpr int ALPHA_OFF = KDT_OFFSETOF(kdt_attn_wg_smem, alpha);
constexpr int L_OFF = KDT_OFFSETOF(kdt_attn_wg_smem, l);
constexpr int SMEM_BYTES = KDT_ATTN_WG_SMEM;
constexpr int VCOLS = D_V / 2;                /* O columns per warpgroup */

static_assert(BLK_BYTES == KDT_ATTN_WG_V_LBO && Q_BLK_BYTES == BM * 128,
              "a 64-column block is [rows][128 B]");
static_assert(BM == 64 && BN == 64 && NTHREADS == 256,
              "the roles below are two warpgroups, m64, 64-token tiles");
static_assert(D_QK % 64 == 0 && VCOLS == 256, "576 / 512 dims");

/* named barriers (0 is __syncthreads): each is one producer warpgroup's
 * bar.arrive against the other's bar.sync, 256 threads; with WG2, the
 * stages' hand-back is both math warpgroups' arrive against WG2's sync,
 * 384 (kempty_arrive, kempty_sync) */
constexpr int BAR_KFULL = 1;                  /* + stage: tile landed */
constexpr int BAR_KEMPTY = 3;                 /* + stage: WG0 done with it */
constexpr int BAR_PFULL = 5;                  /* + half: P's half published */
constexpr int BAR_PEMPTY = 7;                 /* WG1's PV done with P */
/* MATH = e4m3: WG0's rescale factors all written (WG0 alone, 128) */
constexpr int BAR_ALPHA = 8;
/* P leaves WG0 in two halves of PHALF tokens, so that both warpgroups'
 * PV of the first half runs while WG0 computes the second */
constexpr int PHALF = BN / 2;
constexpr int QUNSCALE_OFF = KDT_OFFSETOF(kdt_attn_wg_smem, q_unscale);
/* Over an e4m3 cache P goes to f16 times 2^P_SHIFT (docs/contract.md §3:
 * at most 2^15, 11 significant bits a weight down to 2^-21); the row sums
 * carry the same factor, and the LSE takes it back. */
constexpr int P_SHIFT = KV_E4M3 && !MATH_E4M3 ? 7 : 0;

#include "verify_attn_wgmma_ptx.cuh"
#include "kdt_fp8.cuh"

/* A stage handed back: by WG0 alone to WG1, which refills it; with the
 * producer, by both math warpgroups to it (all NLAUNCH threads). */
constexpr int KEMPTY_THREADS = PRODUCER ? NLAUNCH : NTHREADS;

static __device__ __forceinline__ void
kempty_arrive(int st)
{
    bar_arrive_n<KEMPTY_THREADS>(BAR_KEMPTY + st);
}

static __device__ __forceinline__ void
kempty_sync(int st)
{
    bar_sync_n<KEMPTY_THREADS>(BAR_KEMPTY + st);
}

/* Byte offset of 16-byte piece c (0..71) of row `row` in a swizzled
 * 576-wide tile of `rows` rows. */
static __device__ __forceinline__ uint32_t
sw_piece(int rows, int row, int c)
{
    return (uint32_t)((c >> 3) * (rows * 128) + row * 128
                      + (((c & 7) ^ (row & 7)) << 4));
}

/* The KV rows a thread of WG1 copies: token 16 i + wtid/8 of a tile,
 * i < BN/16.  kv_rows gives their element offsets in the cache (-1: past
 * `total`), read from the block table a tile before the copy needs them,
 * so that read's latency is not in front of the cp.async. */
static __device__ __forceinline__ void
kv_rows(int64_t (&row)[BN / 16], int wtid, int t, int total,
        const int32_t *__restrict__ bt)
{
#pragma unroll
    for (int i = 0; i < BN / 16; ++i) {
        const int pos = t * BN + 16 * i + (wtid >> 3);
        row[i] = pos < total
            ? ((int64_t)__ldg(bt + pos / PAGE) * PAGE + pos % PAGE) * D_QK
            : -1;
    }
}

/* WG1's loading of a KV tile (rows from kv_rows) into the stage at `dst`:
 * 8 threads a token (piece c = 8 k + wtid % 8), 16 tokens a pass; rows
 * past the end are zero-filled (never read, and 0 * P cannot be NaN). */
static __device__ __forceinline__ void
load_kv_tile(uint32_t dst, int wtid, const int64_t (&row)[BN / 16],
             const uint16_t *__restrict__ kv)
{
    const int part = wtid & 7;
#pragma unroll
    for (int i = 0; i < BN / 16; ++i) {
        const int tok = 16 * i + (wtid >> 3);
        const bool ok = row[i] >= 0;
        const uint16_t *src = ok ? kv + row[i] + part * 8 : kv;
        const uint32_t d = dst + tok * 128 + ((part ^ (tok & 7)) << 4);
#pragma unroll
        for (int k = 0; k < KBLK; ++k)
            kdt_cp_async16(d + k * BLK_BYTES, src + (ok ? k * 64 : 0),
                           ok ? 16 : 0);
    }
}

/*
 * An e4m3 cache under bf16 arithmetic (KV_E4M3, docs/contract.md §3):
 * the stages hold 16-bit tiles as for a bf16 cache, but f16 ones, and so
 * do Q (q_to_f16: each row times a power of two) and P (times 2^P_SHIFT):
 * e4m3 widens to f16 exactly in one cvt for two elements, where bf16
 * takes four integer operations more, 3.5 instructions an element in
 * all.  The producer (WG2, wg2_widen_loop) widens each tile into its
 * stage, so that the math warpgroups do only math (WG1 loading and
 * widening every tile beside its P V, on 254 registers a thread, paced
 * the loop: docs/performance.md, ideas tried).  It reads the tile's e4m3
 * bytes (36,864, half a bf16 tile's) with plain loads into its
 * registers (kv8_fetch) and, once the stage is free, widens them there
 * (kv8_store: e4m3 -> f16 exactly, kdt_fp8.cuh; st.shared into the
 * 128-byte-swizzled layout).  Why registers and not cp.async into
 * shared memory: Q and the two bf16 stages leave 1.5 KB of Hopper's
 * 227 KB, no room to stage the bytes, and a pass through shared memory
 * would add 72 KB a tile (bytes in, read back) to the 220 KB that wgmma
 * reads.  A tile is two halves:
 * the first is fetched a tile ahead (the registers are the ring's third
 * stage, half a tile deep), the second when the stage is handed back:
 * the producer's 72 registers hold one half and the addresses.
 *
 * Half j of a tile is its tokens 16 w4 + 8 j + lane % 8 (w4: the
 * loading thread's warp, of WG1 for the first tile, else of WG2): a
 * thread loads one token a half, its e4m3 bytes
 * 64 k + 16 (lane / 8) (k < 9), i.e. bf16 pieces 2 (lane / 8) and
 * 2 (lane / 8) + 1 of column block k.  So a warp's stores hit 8 rows of
 * one piece column at a time, 8 distinct 16-byte bank groups under the
 * swizzle, and its loads 64 contiguous bytes of each of 8 tokens.
 */
constexpr int KV8_PIECES = KBLK;  /* 16-byte e4m3 pieces a thread a half */
static_assert(NTHREADS / 2 == 4 * 32 && BN == 2 * 4 * 8 &&
                  KV8_PIECES * 4 * 16 == D_QK,
              "a half is 32 tokens, 8 a warp, 4 lanes x 16 B a block each");

/* Position in the request's KV of this thread's token of half j of
 * tile t. */
static __device__ __forceinline__ int
kv8_pos(int wtid, int t, int j)
{
    return t * BN + 16 * (wtid >> 5) + 8 * j + (wtid & 7);
}

/* The block-table entry (page) of this thread's token of half j of tile
 * t (-1: past `total`), read a tile before it is loaded (as kv_rows);
 * 32 bits held where the byte offset would take 64. */
static __device__ __forceinline__ int
kv8_page(int wtid, int t, int j, int total, const int32_t *__restrict__ bt)
{
    const int pos = kv8_pos(wtid, t, j);
    return pos < total ? __ldg(bt + pos / PAGE) : -1;
}

/* This thread's e4m3 pieces of half j of tile t (its token on `page`)
 * into registers; zeros past the end (widened, never read, and 0 * P
 * cannot be NaN). */
static __device__ __forceinline__ void
kv8_fetch(uint4 (&v)[KV8_PIECES], int page, int t, int j,
          const uint16_t *__restrict__ kv, int wtid)
{
    const int64_t row =
        ((int64_t)page * PAGE + kv8_pos(wtid, t, j) % PAGE) * D_QK;
    const uint8_t *src = (const uint8_t *)kv + row + 16 * ((wtid & 31) >> 3);
#pragma unroll
    for (int k = 0; k < KV8_PIECES; ++k)
        v[k] = page >= 0 ? __ldg((const uint4 *)(src + 64 * k))
                         : make_uint4(0, 0, 0, 0);
}

/* This thread's token of half j of tile t (on `page`; none past the
 * end) asked of L2 a tile before kv8_fetch reads it.  The token's 576
 * bytes start 64-byte aligned (rows 576 bytes apart from a torch
 * allocation's base), so five 128-byte lines hold them, the ones at
 * 128 p from its start, p < 5: the thread of piece column p of the four
 * that read the token asks for line p, column 0 for line 4 as well (a
 * less aligned cache loses a part of the hint, nothing else).  The
 * second half's fetch is the one on the way to publishing a tile
 * (issued when the stage comes back); from L2 it waits less. */
static __device__ __forceinline__ void
kv8_prefetch(int page, int t, int j, const uint16_t *__restrict__ kv,
             int wtid)
{
    if (page < 0)
        return;
    const int part = (wtid & 31) >> 3;
    const uint8_t *row = (const uint8_t *)kv
        + ((int64_t)page * PAGE + kv8_pos(wtid, t, j) % PAGE) * D_QK;
    prefetch_l2(row + 128 * part);
    if (part == 0)
        prefetch_l2(row + 512);
}
static_assert(D_QK + 64 <= 5 * 128,
              "a 64-byte-aligned e4m3 row lies in five 128-byte lines");

/* kv8_fetch's pieces of half j, widened to f16, into the stage at
 * `dst`: each 16 bytes of e4m3 are two 16-byte pieces of f16, adjacent
 * columns. */
static __device__ __forceinline__ void
kv8_store(uint32_t dst, const uint4 (&v)[KV8_PIECES], int j, int wtid)
{
    const int part = (wtid & 31) >> 3;
    const int tok = 16 * (wtid >> 5) + 8 * j + (wtid & 7);
    const uint32_t row = dst + tok * 128;
#pragma unroll
    for (int k = 0; k < KV8_PIECES; ++k) {
        uint32_t b[8];
        kdt_e4m3x4_to_f16x4(b[0], b[1], v[k].x);
        kdt_e4m3x4_to_f16x4(b[2], b[3], v[k].y);
        st_shared_v4(row + k * BLK_BYTES + (((2 * part) ^ (tok & 7)) << 4),
                     b[0], b[1], b[2], b[3]);
        kdt_e4m3x4_to_f16x4(b[4], b[5], v[k].z);
        kdt_e4m3x4_to_f16x4(b[6], b[7], v[k].w);
        st_shared_v4(row + k * BLK_BYTES
                         + (((2 * part + 1) ^ (tok & 7)) << 4),
                     b[4], b[5], b[6], b[7]);
    }
}

/* Issues S = Q K^T from the descriptors of the Q tile and of a KV tile:
 * 9 column blocks x 4 k16 steps, the first overwriting S. */
static __device__ __forceinline__ void
qk_issue(float (&s)[32], uint64_t dq, uint64_t dk)
{
#pragma unroll
    for (int kb = 0; kb < KBLK; ++kb)
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wg_mma_qk(s, desc_add(dq, kb * Q_BLK_BYTES + ks * 32),
                      desc_add(dk, kb * BLK_BYTES + ks * 32), kb | ks);
}

/* The ancestor masks of a block's tail tiles (those that hold positions
 * at or past past_len), in WG0's registers.  Of a tail tile, a thread
 * needs 16 visibility bits of each of its rows r0 and r0 + 8: columns
 * 8 j + c2 + e (j < 8, e < 2) of S.  So one 32-bit word a tile holds
 * both rows' bits (bit 16 h + 2 j + e), and TAIL_TILES of them cover the
 * most tail tiles a block can have: the tree's N_MAX positions starting
 * anywhere in a 64-token tile.
 *
 * Why registers: a tail tile's mask loads, issued while WG1's cp.async of
 * the next KV tile fill the SM's load pipeline, stalled WG0 (5-8% of the
 * time at 513 rows), and neither fetching the lines early nor staging
 * them in shared memory took it back (docs/performance.md, the table of
 * ideas tried).  So the mask words are loaded when the block starts,
 * before the Q tile's and first KV tile's cp.async (tail_words_load), and
 * packed once those have landed (tail_bits_pack). */
constexpr int TAIL_TILES = (N_MAX + 2 * BN - 2) / BN;
/* mask words a row's tail tiles span: each tile's 64 bits start
 * anywhere in a word, so TAIL_TILES pairs and one more */
constexpr int TAIL_WORDS = 2 * TAIL_TILES + 1;
/* rows r0 and r0 + 8 are one node when H is a multiple of 16 */
constexpr int MASK_ROWS = H % 16 == 0 ? 1 : 2;

/* Position jj - past_len of the block's first tail tile's column 0
 * (>= -63): where its first mask bit sits in the tree's bit stream. */
static __device__ __forceinline__ int
tail_base(const va_block &b)
{
    return max(b.t0, b.past / BN) * BN - b.past;
}

/* Phase 0 (WG0): the raw mask words of rows row0 and row0 + 8 that the
 * block's tail tiles span, words wb .. wb + TAIL_WORDS - 1 of each row
 * (wb = tail_base / 32, rounded down).  A word before the tree (its
 * positions are the prefix) is all ones; one past the tree, or of a row
 * that is not a node, is 0 and not read; a block without a tail tile
 * reads nothing. */
static __device__ __forceinline__ void
tail_words_load(uint32_t (&u)[MASK_ROWS][TAIL_WORDS], const va_block &b,
                const uint32_t *__restrict__ anc, int row0)
{
    const bool any = b.t1 * BN > b.past;
    const int wb = tail_base(b) >> 5;
    const int ntree = b.total - b.past;
#pragma unroll
    for (int h = 0; h < MASK_ROWS; ++h) {
        const int node = (row0 + 8 * h) / H;
        const bool live = any && node < b.nn;
        /* 32 wi < ntree <= N_MAX <= 32 W: a word read is in the row */
        const uint32_t *mask_row = anc + min(node, N_MAX - 1) * W;
#pragma unroll
        for (int i = 0; i < TAIL_WORDS; ++i) {
            const int wi = wb + i;
            u[h][i] = wi < 0 ? ~0u
                : live && 32 * wi < ntree ? __ldg(mask_row + wi) : 0u;
        }
    }
}

/* The 8 bits of columns 8 j + c2 + e (j < 4, e < 2) of a 32-column
 * window x, as bit 2 j + e. */
static __device__ __forceinline__ uint32_t
thread_cols8(uint32_t x, int c2)
{
    uint32_t y = (x >> c2) & 0x03030303u;
    y = (y | (y >> 6)) & 0x000f000fu;
    return (y | (y >> 12)) & 0xffu;
}

/* Phase 1b (WG0): tail_words_load's words as one word a tail tile, the
 * block's first tail tile in bits[0].  Tile k's window is bits
 * base + 64 k .. base + 64 k + 63 of a row's stream; the bits of
 * positions past the tree's end (total) are cleared here. */
static __device__ __forceinline__ void
tail_bits_pack(uint32_t (&bits)[TAIL_TILES],
               const uint32_t (&u)[MASK_ROWS][TAIL_WORDS], const va_block &b,
               int c2)
{
    const int base = tail_base(b), wb = base >> 5, sh = base & 31;
    const int ntree = b.total - b.past;
#pragma unroll
    for (int k = 0; k < TAIL_TILES; ++k) {
        uint32_t out = 0;
#pragma unroll
        for (int h = 0; h < MASK_ROWS; ++h) {
            uint32_t v[3];
#pragma unroll
            for (int d = 0; d < 3; ++d) {
                const int wi = wb + 2 * k + d;
                const int nb = ntree - 32 * wi; /* the word's tree bits */
                const uint32_t keep = wi < 0 || nb >= 32 ? ~0u
                    : nb <= 0 ? 0u : (1u << nb) - 1u;
                v[d] = u[h][2 * k + d] & keep;
            }
            const uint32_t lo = __funnelshift_r(v[0], v[1], sh);
            const uint32_t hi = __funnelshift_r(v[1], v[2], sh);
            out |= (thread_cols8(lo, c2) | thread_cols8(hi, c2) << 8)
                << (16 * h);
        }
        bits[k] = MASK_ROWS == 1 ? out | out << 16 : out;
    }
}

/* A tail tile: S scaled to log2 units (row h by scale_log2[h]), and -inf
 * where this thread's rows may not look (`bits`, this tile's word of
 * tail_bits_pack): positions at or past past_len that are not the row's
 * ancestors (or itself), and positions past the KV's end. */
static __device__ __forceinline__ void
mask_tail(float (&s)[32], uint32_t bits, const float (&scale_log2)[2])
{
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float &x = s[4 * j + 2 * h + e];
                x = (bits >> (16 * h + 2 * j + e)) & 1u ? x * scale_log2[h]
                                                        : kdt_neg_inf();
            }
}

/* O rows r0 (a0) and r0 + 8 (a1) of this thread times their rescale
 * factors; the lazy maximum makes both 1 on almost every tile. */
static __device__ __forceinline__ void
rescale(float (&o)[128], float a0, float a1)
{
    if (a0 != 1.f)
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            o[4 * j] *= a0;
            o[4 * j + 1] *= a0;
        }
    if (a1 != 1.f)
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            o[4 * j + 2] *= a1;
            o[4 * j + 3] *= a1;
        }
}

/* Phase 1b, over an e4m3 cache: the landed Q tile, in place, as f16, each
 * row times the power of two 2^k that brings its max |q| into
 * [2^14, 2^15) (kdt_q16_row_exp), and 2^-k, which its logits are
 * multiplied by, into q_unscale.  Four threads a row, 18 of its 72
 * pieces each; two passes over shared memory (the maximum, then the
 * conversion) rather than 72 registers a thread.  Once a block. */
static __device__ __forceinline__ void
q_to_f16(unsigned char *smem, int tid)
{
    static_assert(NTHREADS == 4 * BM && CHUNKS % 4 == 0,
                  "four threads a Q row, a quarter of its pieces each");
    constexpr int NPC = CHUNKS / 4;
    const int row = tid >> 2, c0 = (tid & 3) * NPC;
    uint32_t mbits = 0;
#pragma unroll 6
    for (int c = c0; c < c0 + NPC; ++c)
        mbits = kdt_bf16x8_absmax_bits(
            mbits, *(const uint4 *)(smem + Q_OFF + sw_piece(BM, row, c)));
    mbits = kdt_quad_max(mbits);
    const int k = kdt_q16_row_exp(__uint_as_float(mbits << 16));
    const float s = kdt_pow2f(k);
    if ((tid & 3) == 0)
        ((float *)(smem + QUNSCALE_OFF))[row] = kdt_pow2f(-k);
#pragma unroll 6
    for (int c = c0; c < c0 + NPC; ++c) {
        uint4 *piece = (uint4 *)(smem + Q_OFF + sw_piece(BM, row, c));
        uint4 w = *piece;
        uint32_t *x = &w.x;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            x[i] = kdt_pack_f16x2(__uint_as_float(x[i] << 16) * s,
                                  __uint_as_float(x[i] & 0xffff0000u) * s);
        *piece = w;
    }
}

#include "verify_attn_wgmma_e4m3.cuh"

/* Phase 1: the Q tile (all threads) and the first KV tile (WG1; from an
 * e4m3 cache widened, kv8_store) into shared memory; padding rows of Q
 * and tokens past the KV's end are zero-filled; over an e4m3 cache, Q
 * then goes to f16 (q_to_f16).  Under MATH = e4m3 the bf16 Q tile lands
 * in the second stage and goes to e4m3 (q_to_e4m3), and the first tile's
 * bytes land as they are. */
static __device__ __forceinline__ void
load_q_and_first_tile(const kdt_verify_attn_params &p, const va_block &b,
                      unsigned char *smem, uint32_t sq, uint32_t sk, int tid,
                      int wg, int wtid, const uint16_t *__restrict__ kv,
                      const int32_t *__restrict__ bt)
{
    const uint16_t *q = p.q + (b.req_row0 + b.m0) * D_QK;
    const uint32_t qdst = MATH_E4M3 ? sk + TILE_BYTES : sq;
    /* the math warpgroups' threads (the producer's pass the barriers) */
    for (int i = tid; i < BM * CHUNKS && (!PRODUCER || tid < NTHREADS);
         i += NTHREADS) {
        const int row = i / CHUNKS, c = i - row * CHUNKS;
        const bool ok = b.m0 + row < b.valid_rows;
        kdt_cp_async16(qdst + sw_piece(BM, row, c),
                       ok ? q + (int64_t)row * D_QK + c * 8 : q,
                       ok ? 16 : 0);
    }
    if (wg == 1 && b.t0 < b.t1) {
        if constexpr (MATH_E4M3) {
            int where[KV8B_PAGES];
            kv8b_where_bt(where, wtid, b.t0, b.total, bt);
            kv8b_load_tile(sk, where, b.t0, b.total, (const uint8_t *)kv,
                           wtid);
            /* the next tile's rows (slot 1), for the loop (the barriers
             * below order them before it) */
            if constexpr (!KV8B_ONE_PAGE)
                kv8b_stage((int *)(smem + ROWS_OFF) + KDT_ATTN_WG8_ROWS_LD,
                           kv8b_entry(wtid, b.t0 + 1, b.total, bt),
                           b.t0 + 1, wtid);
        } else if constexpr (KV_E4M3) {
            uint4 v[KV8_PIECES];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                kv8_fetch(v, kv8_page(wtid, b.t0, j, b.total, bt), b.t0, j,
                          kv, wtid);
                kv8_store(sk, v, j, wtid);
            }
        } else {
            int64_t rows[BN / 16];
            kv_rows(rows, wtid, b.t0, b.total, bt);
            load_kv_tile(sk, wtid, rows, kv);
        }
    }
    kdt_cp_async_commit();
    kdt_cp_async_wait<0>();
    if constexpr (MATH_E4M3) {
        __syncthreads(); /* every thread's Q pieces have landed */
        q_to_e4m3(smem, tid);
    } else if constexpr (KV_E4M3) {
        __syncthreads(); /* every thread's Q pieces have landed */
        if (tid < NTHREADS)
            q_to_f16(smem, tid);
    }
    proxy_fence();
    __syncthreads();
}

/* Phase 2b, WG0's online softmax of rows r0 (h = 0) and r0 + 8 (h = 1) of
 * tile t, whose S this thread holds as columns 8 j + c2 + e (j < 8,
 * e < 2), i.e. s[4 j + 2 h + e].  softmax_max: the row maxima, the lazy
 * reference maximum, the rescale factors alpha and the exponents' offset
 * mu.  A tail tile's s is already scaled and masked (mask_tail). */
static __device__ __forceinline__ void
softmax_max(const float (&s)[32], float (&alpha)[2], float (&m_ref)[2],
            float (&l_part)[2], float (&mu)[2], bool tail, bool neg,
            const float (&abs_scale)[2])
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx;
        if (tail) { /* s already scaled, masked entries -inf */
            mx = s[2 * h];
#pragma unroll
            for (int j = 0; j < 8; ++j)
                mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h],
                                     s[4 * j + 2 * h + 1]));
        } else {
            /* (negation is free in FMNMX; the branch is uniform) */
            float m;
            if (neg) {
                m = -s[2 * h];
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    m = fmaxf(m, fmaxf(-s[4 * j + 2 * h],
                                       -s[4 * j + 2 * h + 1]));
            } else {
                m = s[2 * h];
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    m = fmaxf(m, fmaxf(s[4 * j + 2 * h],
                                       s[4 * j + 2 * h + 1]));
            }
            mx = m * abs_scale[h];
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        alpha[h] = 1.f;
        if (mx > m_ref[h] + LAZY_RESCALE) {
            alpha[h] = kdt_exp2(m_ref[h] - mx); /* 0 from -inf */
            m_ref[h] = mx;
            l_part[h] *= alpha[h];
        }
        /* m_ref = -inf: every x so far is -inf, p = 0 (not NaN) */
        mu[h] = m_ref[h] == kdt_neg_inf() ? 0.f : m_ref[h];
        if constexpr (P_SHIFT != 0)
            mu[h] -= (float)P_SHIFT; /* p times 2^P_SHIFT */
    }
}

/* softmax_p_half: half `half` of the tile's P (tokens PHALF half ..),
 * p = 2^(x x_scale[h] - mu[h]), into the row sums and, packed to bf16
 * pairs (f16 over an e4m3 cache)
 * (pk[h][jj]: the fragment of 8x8 matrix (h, j + jj) of the warp's
 * 16 x 64 P), into the swizzled K-major P tile at `prow` (piece j of row
 * r at piece j ^ (r % 8)), four matrices a stmatrix.  x_scale is 1 on a
 * tail tile (mask_tail scaled it), scale_log2 otherwise. */
static __device__ __forceinline__ void
softmax_p_half(const float (&s)[32], const float (&mu)[2],
               float (&l_part)[2], const float (&x_scale)[2], uint32_t prow,
               int mi, int l7, int half)
{
#pragma unroll
    for (int j = PHALF / 8 * half; j < PHALF / 8 * (half + 1); j += 2) {
        uint32_t pk[2][2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const float *x = &s[4 * (j + jj) + 2 * h];
                const float p0 = kdt_exp2(fmaf(x[0], x_scale[h], -mu[h]));
                const float p1 = kdt_exp2(fmaf(x[1], x_scale[h], -mu[h]));
                l_part[h] += p0 + p1;
                pk[h][jj] = KV_E4M3 ? kdt_pack_f16x2(p0, p1)
                                    : kdt_pack_bf16x2(p0, p1);
            }
        kdt_stmatrix_x4(prow + (((j + (mi >> 1)) ^ l7) << 4),
                        pk[0][0], pk[1][0], pk[0][1], pk[1][1]);
    }
}

/* Phase 2c (both warpgroups): O[:, this warpgroup's 256 columns] = alpha
 * O + P V for the V columns `voff` bytes into the ring (`dv0`: the ring
 * as V), one half of P at a time.  pv_issue starts a half (half 0
 * rescales O first); pv_finish waits for both (they must be done within
 * the loop's iteration: an accumulator carried around the loop in flight
 * serialises every wgmma).  Nothing touches O between the halves, so
 * the second queues behind the first. */
static __device__ __forceinline__ void
pv_issue(float (&o)[128], float a0, float a1, uint64_t dp, uint64_t dv0,
         uint32_t voff, int half)
{
    if (half == 0) {
        rescale(o, a0, a1);
        pin(o);
    }
    wg_fence();
#pragma unroll
    for (int ks = PHALF / 16 * half; ks < PHALF / 16 * (half + 1); ++ks)
        wg_mma_pv(o, desc_add(dp, ks * 32),
                  desc_add(dv0, voff + ks * 2048));
    wg_commit();
}

static __device__ __forceinline__ void
pv_finish(float (&o)[128])
{
    wg_wait<0>();
    pin(o);
}

/* The two loops below take the kernel's accumulator (WG0 also its
 * softmax state) by reference, in and out, and run on local copies: the
 * compiler simplifies a loop before it inlines it, and through a
 * reference the accumulator is memory there, after which ptxas allocated
 * the kernel's registers otherwise than for the same loop written inline
 * (tools/dev/attn_sass.sh --compare).  A copy is registers from the
 * start. */
template <int N>
static __device__ __forceinline__ void
regs_copy(float (&dst)[N], const float (&src)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        dst[i] = src[i];
}

/* A timing point of the KV loops: warpgroup wg, tile it (from 0), point
 * i.  Empty in the library; tools/dev/va_phases.cu records clock64()
 * there. */
#ifndef KDT_VA_PHASE
#define KDT_VA_PHASE(wg, it, i) ((void)0)
#endif

/* Phase 2, WG0's side of the KV loop.  Per tile t: S = Q K^T once WG1
 * has published the tile (BAR_KFULL; tile t0 landed in phase 1), a tail
 * tile's mask, the online softmax of rows r0 and r0 + 8 (their rescale
 * factors into alpha_s for WG1), then P into shared memory a half at a
 * time, each half published to WG1 (BAR_PFULL + half) with this
 * warpgroup's PV of it issued behind it (MATH = e4m3: both halves
 * published, then the tile's PV, pv8_tile), and the stage handed back
 * (BAR_KEMPTY).  P is rewritten only once WG1's PV of the last tile is
 * done with it (BAR_PEMPTY).  Leaves for the epilogue: O[:, 0:256] of
 * rows r0 and r0 + 8 in o_io, unnormalised; their reference maxima in
 * m_ref_io and this lane's share of their sums in l_part_io (the quad's
 * four lanes add theirs); and WG1's last arrive on BAR_PEMPTY waited
 * for. */
static __device__ __forceinline__ void
wg0_softmax_loop(float (&o_io)[128], float (&m_ref_io)[2],
                 float (&l_part_io)[2],
                 const uint32_t (&mask_words)[MASK_ROWS][TAIL_WORDS],
                 const kdt_verify_attn_params &p, const va_block &b,
                 const unsigned char *smem, uint64_t dq, uint64_t dk0,
                 uint64_t dp, uint64_t dv0, uint32_t sp,
                 uint32_t vcol, float *alpha_s, int r0, int c2, int wwarp,
                 int lane)
{
    const int past = b.past, t0 = b.t0, t1 = b.t1;
    float o[128], m_ref[2], l_part[2];
    regs_copy(o, o_io);
    regs_copy(m_ref, m_ref_io);
    regs_copy(l_part, l_part_io);
    /* the cache's scale joins the logits' (docs/contract.md §3); written
     * out, not through a helper taking p, which cost the wgmma body its
     * global stores' address space (other SASS) */
    const float scale_log2 =
        (KV_E4M3 ? p.scale * p.kv_scale : p.scale) * KDT_LOG2E;
    /* row h's: over an e4m3 cache, times 2^-k of its f16 Q row (q_to_f16;
     * a power of two, so the product is exact) */
    float row_scale[2] = {scale_log2, scale_log2};
    if constexpr (KV_E4M3) {
        const float *qu = (const float *)(smem + QUNSCALE_OFF);
        row_scale[0] *= qu[r0];
        row_scale[1] *= qu[r0 + 8];
    }
    /* x = s * row_scale; its row maximum is row_scale times the
     * maximum of s, or of -s when the scale is negative */
    const bool neg = scale_log2 < 0.f;
    const float abs_scale[2] = {fabsf(row_scale[0]), fabsf(row_scale[1])};
    /* stmatrix lane addresses of P: lane L gives row L % 8 of matrix
     * L / 8 = (row half h = (L/8) % 2, piece pair offset (L/8) / 2) */
    const int mi = lane >> 3, l7 = lane & 7;
    const uint32_t prow = sp + (16 * wwarp + 8 * (mi & 1) + l7) * 128;
    uint32_t tail_bits[TAIL_TILES];
    tail_bits_pack(tail_bits, mask_words, b, c2);
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i)
        s[i] = 0.f;
    /* MATH = e4m3: this thread's V^T loads in stage 0 (vt8_bases) */
    const unsigned char *vb[4];
    if constexpr (MATH_E4M3)
        vt8_bases(vb, smem + K_OFF, 0, 32 * wwarp + lane);
    for (int t = t0; t < t1; ++t) {
        const int it = t - t0, st = it & 1;
        KDT_VA_PHASE(0, it, 0);
        if (it > 0)
            bar_sync(BAR_KFULL + st);
        KDT_VA_PHASE(0, it, 1);
        wg_fence();
        if constexpr (MATH_E4M3)
            qk8_issue(s, dq, desc_add(dk0, st * TILE_BYTES));
        else
            qk_issue(s, dq, desc_add(dk0, st * TILE_BYTES));
        wg_commit();
        wg_wait<0>();
        pin(s);
        KDT_VA_PHASE(0, it, 2);

        /* P goes straight to shared memory: wait until WG1's PV of the
         * last tile is done with it (long since, usually) */
        if (it > 0)
            bar_sync(BAR_PEMPTY);
        KDT_VA_PHASE(0, it, 3);
        const bool tail = (t + 1) * BN > past;
        if (tail) { /* this tile's word, then the next one's down */
            mask_tail(s, tail_bits[0], row_scale);
#pragma unroll
            for (int k = 0; k + 1 < TAIL_TILES; ++k)
                tail_bits[k] = tail_bits[k + 1];
        }
        float alpha[2], mu[2];
        softmax_max(s, alpha, m_ref, l_part, mu, tail, neg, abs_scale);
        if ((lane & 3) == 0) {
            alpha_s[r0] = alpha[0];
            alpha_s[r0 + 8] = alpha[1];
        }
        if constexpr (MATH_E4M3)
            bar_sync_wg(BAR_ALPHA); /* O^T's columns are every row */
        KDT_VA_PHASE(0, it, 4);
        const float x_scale[2] = {tail ? 1.f : row_scale[0],
                                  tail ? 1.f : row_scale[1]};
        if constexpr (MATH_E4M3) {
            /* both halves of P, then the tile's PV (pv8_tile waits for
             * its steps: it adds each chunk's to O in f32) */
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                softmax_p8_half(s, mu, l_part, x_scale, sp, r0, lane & 3,
                                half);
                proxy_fence();
                bar_arrive(BAR_PFULL + half);
            }
            pv8_tile(o, alpha_s, dp, vb, st * TILE_BYTES, lane & 3);
            KDT_VA_PHASE(0, it, 6);
        } else {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                softmax_p_half(s, mu, l_part, x_scale, prow, mi, l7, half);
                proxy_fence();
                bar_arrive(BAR_PFULL + half);
                pv_issue(o, alpha[0], alpha[1], dp, dv0,
                         st * TILE_BYTES + vcol, half);
                KDT_VA_PHASE(0, it, 5 + half);
            }
            pv_finish(o);
        }
        KDT_VA_PHASE(0, it, 7);
        kempty_arrive(st);
    }
    if (t1 > t0)
        bar_sync(BAR_PEMPTY); /* pairs WG1's last arrive */
    regs_copy(o_io, o);
    regs_copy(m_ref_io, m_ref);
    regs_copy(l_part_io, l_part);
}

/* Phase 2, WG1's side of the KV loop under MATH = e4m3, the loop below
 * (wg1_load_pv_loop) with e4m3 tiles: tile t+1's bytes by cp.async into
 * the stage WG0 handed back, published (BAR_KFULL) once they have
 * landed; then, both halves of P published, the tile's PV, O^T = V^T
 * P^T with V^T gathered from the tile's stage (pv8_tile). */
static __device__ __forceinline__ void
wg1_load_pv8_loop(float (&o)[128], const va_block &b,
                  const uint8_t *__restrict__ kv,
                  const int32_t *__restrict__ bt, uint64_t dp, uint32_t sk,
                  const unsigned char *smem_k, int *rows,
                  const float *alpha_s, int wtid)
{
    const int total = b.total, t0 = b.t0, t1 = b.t1;
    int where[KV8B_PAGES]; /* one page a tile: of tile t+1, then of t+2 */
    int entry = -1;        /* else token wtid's entry of t+2, then of t+3 */
    const unsigned char *vb[4];
    vt8_bases(vb, smem_k, 1, wtid);
    if constexpr (KV8B_ONE_PAGE)
        kv8b_where_bt(where, wtid, t0 + 1, total, bt);
    else
        entry = kv8b_entry(wtid, t0 + 2, total, bt);
    for (int t = t0; t < t1; ++t) {
        const int it = t - t0, st = it & 1, nb = st ^ 1;
        const uint32_t next = sk + nb * TILE_BYTES;
        KDT_VA_PHASE(1, it, 0);
        /* tile t+1 goes where tile t-1 was: WG0 must be done with it */
        if (it > 0)
            bar_sync(BAR_KEMPTY + nb);
        KDT_VA_PHASE(1, it, 1);
        if (t + 1 < t1) {
            if constexpr (!KV8B_ONE_PAGE)
                kv8b_where_staged(where, rows + nb * KDT_ATTN_WG8_ROWS_LD,
                                  wtid);
            kv8b_load_tile(next, where, t + 1, total, kv, wtid);
        }
        kdt_cp_async_commit();
        if constexpr (KV8B_ONE_PAGE) {
            kv8b_where_bt(where, wtid, t + 2, total, bt);
        } else {
            /* t+2's rows where t's were: read in the last iteration,
             * before its BAR_PFULL; read in the next, after this one's */
            kv8b_stage(rows + st * KDT_ATTN_WG8_ROWS_LD, entry, t + 2, wtid);
            entry = kv8b_entry(wtid, t + 3, total, bt);
        }
        KDT_VA_PHASE(1, it, 2);

        bar_sync(BAR_PFULL);
        KDT_VA_PHASE(1, it, 3);
        if (t + 1 < t1) {
            kdt_cp_async_wait<0>();
            proxy_fence();
            bar_arrive(BAR_KFULL + nb);
        }
        KDT_VA_PHASE(1, it, 4);
        bar_sync(BAR_PFULL + 1);
        KDT_VA_PHASE(1, it, 5);
        pv8_tile(o, alpha_s, dp, vb, st * TILE_BYTES, wtid & 3);
        KDT_VA_PHASE(1, it, 6);
        KDT_VA_PHASE(1, it, 7);
        bar_arrive(BAR_PEMPTY);
    }
    if (t1 > t0)
        bar_sync(BAR_KEMPTY + ((t1 - 1 - t0) & 1)); /* WG0's last */
}

/* Phase 2, WG1's side of the KV loop.  Per tile t: tile t+1 into the
 * other stage once WG0 has handed it back (BAR_KEMPTY; the block-table
 * entries read a tile before, kv_rows), then, as WG0 publishes each half
 * of P (BAR_PFULL + half), this warpgroup's PV of it with the rows'
 * rescale factors from alpha_s, publishing tile t+1 (BAR_KFULL) while
 * the first half's PV runs, and P handed back (BAR_PEMPTY).
 * With the producer (an e4m3 cache in bf16 arithmetic) WG1 loads
 * nothing: per tile its PV of each half, then P and, with WG0, the stage
 * handed back (to the producer, wg2_widen_loop).  Leaves for the
 * epilogue: O[:, 256:512] of rows r0 and r0 + 8 in o_io, unnormalised
 * (the row sums are WG0's), and WG0's last arrive on BAR_KEMPTY waited
 * for (with the producer, the producer waits for it). */
static __device__ __forceinline__ void
wg1_load_pv_loop(float (&o_io)[128], const va_block &b,
                 const uint16_t *__restrict__ kv,
                 const int32_t *__restrict__ bt, uint64_t dp, uint64_t dv0,
                 uint32_t sk, unsigned char *smem_k, uint32_t vcol,
                 const float *alpha_s, int r0, int wtid)
{
    const int total = b.total, t0 = b.t0, t1 = b.t1;
    float o[128];
    regs_copy(o, o_io);
    if constexpr (MATH_E4M3) {
        wg1_load_pv8_loop(o, b, (const uint8_t *)kv, bt, dp, sk, smem_k,
                          (int *)(smem_k + (ROWS_OFF - K_OFF)), alpha_s,
                          wtid);
        regs_copy(o_io, o);
        return;
    }
    int64_t rows[BN / 16]; /* of tile t+1 (none with the producer) */
    if (!PRODUCER)
        kv_rows(rows, wtid, t0 + 1, total, bt);
    for (int t = t0; t < t1; ++t) {
        const int it = t - t0, st = it & 1, nb = st ^ 1;
        KDT_VA_PHASE(1, it, 0);
        if (!PRODUCER) {
            /* tile t+1 goes where tile t-1 was: WG0 must be done with it */
            if (it > 0)
                kempty_sync(nb);
            KDT_VA_PHASE(1, it, 1);
            if (t + 1 < t1)
                load_kv_tile(sk + nb * TILE_BYTES, wtid, rows, kv);
            kdt_cp_async_commit();
            kv_rows(rows, wtid, t + 2, total, bt);
        }
        KDT_VA_PHASE(1, it, 2);

        bar_sync(BAR_PFULL);
        KDT_VA_PHASE(1, it, 3);
        pv_issue(o, alpha_s[r0], alpha_s[r0 + 8], dp, dv0,
                 st * TILE_BYTES + vcol, 0);
        /* tile t+1 is published while this PV runs, so WG0's S of it
         * queues behind the PV instead of waiting for its end */
        if (!PRODUCER && t + 1 < t1) {
            kdt_cp_async_wait<0>();
            proxy_fence();
            bar_arrive(BAR_KFULL + nb);
        }
        KDT_VA_PHASE(1, it, 4);
        bar_sync(BAR_PFULL + 1);
        KDT_VA_PHASE(1, it, 5);
        pv_issue(o, 1.f, 1.f, dp, dv0, st * TILE_BYTES + vcol, 1);
        KDT_VA_PHASE(1, it, 6);
        pv_finish(o);
        KDT_VA_PHASE(1, it, 7);
        bar_arrive(BAR_PEMPTY);
        if (PRODUCER)
            kempty_arrive(st); /* with WG0's, to the producer */
    }
    if (!PRODUCER && t1 > t0)
        kempty_sync((t1 - 1 - t0) & 1); /* WG0's last */
    regs_copy(o_io, o);
}

/* Phase 2, the producer's side of the KV loop (an e4m3 cache in bf16
 * arithmetic, WG2): tiles t0+1 .. t1-1 (WG1 loaded t0 in phase 1), each
 * into its stage once both math warpgroups have handed back the tile two
 * before it (BAR_KEMPTY, 384 threads): the first half, fetched into
 * registers during the tile before, widened into the stage (kv8_store),
 * the second fetched (asked of L2 a tile before: kv8_prefetch) and
 * widened, the tile published (BAR_KFULL, to WG0; WG1 learns of it
 * through WG0's P), then the next tile's first half fetched.  Its
 * registers are the first half's 36 and the addresses: the producer
 * runs on PRODUCER_REGS.  Leaves every hand-back of the loop waited for,
 * so that no barrier is left half-arrived. */
static __device__ __forceinline__ void
wg2_widen_loop(const va_block &b, const uint16_t *__restrict__ kv,
               const int32_t *__restrict__ bt, uint32_t sk, int wtid)
{
    const int total = b.total, t0 = b.t0, t1 = b.t1;
    uint4 v[KV8_PIECES]; /* the first half of tile t */
    if (t0 + 1 < t1)
        kv8_fetch(v, kv8_page(wtid, t0 + 1, 0, total, bt), t0 + 1, 0, kv,
                  wtid);
    int page1 = kv8_page(wtid, t0 + 1, 1, total, bt); /* t's second half */
    int page2 = kv8_page(wtid, t0 + 2, 0, total, bt); /* t+1's first */
    if (t0 + 1 < t1)
        kv8_prefetch(page1, t0 + 1, 1, kv, wtid);
    for (int t = t0 + 1; t < t1; ++t) {
        const int it = t - t0, st = it & 1;
        const uint32_t dst = sk + st * TILE_BYTES;
        /* tile t goes where tile t-2 was: both math warpgroups are done */
        if (it >= 2)
            kempty_sync(st);
        kv8_store(dst, v, 0, wtid);
        kv8_fetch(v, page1, t, 1, kv, wtid);
        kv8_store(dst, v, 1, wtid);
        proxy_fence();
        bar_arrive(BAR_KFULL + st);
        if (t + 1 < t1)
            kv8_fetch(v, page2, t + 1, 0, kv, wtid);
        page1 = kv8_page(wtid, t + 1, 1, total, bt);
        page2 = kv8_page(wtid, t + 2, 0, total, bt);
        if (t + 1 < t1)
            kv8_prefetch(page1, t + 1, 1, kv, wtid);
    }
    /* the last two tiles' hand-backs (one, for a single tile) */
    for (int t = max(t0, t1 - 2); t < t1; ++t)
        kempty_sync((t - t0) & 1);
}

/* Phase 3b, a cluster's merge (the row tile's S splits are one cluster;
 * no workspace, no merge kernel): every block puts its normalised O (f32,
 * rows OBUF_LD floats apart so that a warp's 8 rows of float2 stores hit
 * distinct banks) and its rows' log2-sum-exp (WG0's lse2, after O) into
 * its KV stages, which the loop no longer needs; after a cluster barrier,
 * block s merges rows [s * rps, (s + 1) * rps) of all S by their LSE from
 * the others' shared memory, a float4 a thread, and stores them as bf16;
 * a second barrier keeps every block's shared memory until all have read
 * it.  Same arithmetic as kdt_verify_attn_merge. */
constexpr int OBUF_LD = KDT_ATTN_WG_O_LD;
/* floats: the lse after O (kdt_attn_wg_merge, at K_OFF) */
constexpr int OBUF_LSE = KDT_OFFSETOF(kdt_attn_wg_merge, lse) / 4;
static_assert(KDT_OFFSETOF(kdt_attn_wg_smem, stages.merge) == K_OFF &&
                  OBUF_LSE == BM * OBUF_LD,
              "the merge's rows are in the stages, OBUF_LD floats apart");
static_assert(NTHREADS * 4 == 2 * D_V, "two rows a pass, a float4 a thread");

static __device__ __forceinline__ void
cluster_merge(const kdt_verify_attn_params &p, const va_block &b,
              const float (&o)[128], const float (&lse2)[2], const float *l_s,
              float *obuf, uint32_t sbuf, int r0, int c2, int wg, int tid)
{
    const uint32_t slse = sbuf + OBUF_LSE * 4;
    if (wg == 0 && (tid & 3) == 0) {
        obuf[OBUF_LSE + r0] = lse2[0];
        obuf[OBUF_LSE + r0 + 8] = lse2[1];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r0 + 8 * h;
        const float inv = va_row_inv(b, b.m0 + row, l_s[row]);
        float *dst = obuf + row * OBUF_LD + VCOLS * wg + c2;
#pragma unroll
        for (int j = 0; j < 32; ++j)
            *(float2 *)(dst + 8 * j) = make_float2(o[4 * j + 2 * h] * inv,
                                                   o[4 * j + 2 * h + 1] * inv);
    }
    cluster_sync();

    const int n = (int)cluster_size(), rank = (int)cluster_rank();
    const int rps = (BM + n - 1) / n;
    const int c4 = (tid & (NTHREADS / 2 - 1)) * 4;
    for (int row = rank * rps + tid / (NTHREADS / 2);
         row < min(BM, (rank + 1) * rps); row += 2) {
        const int m = b.m0 + row;
        if (m >= ROWS)
            break;
        uint2 *dst = (uint2 *)(p.o + (b.req_row0 + m) * D_V + c4);
        float mx = kdt_neg_inf();
        if (m < b.valid_rows)
            for (int j = 0; j < n; ++j)
                mx = fmaxf(mx, cluster_ld(cluster_addr(slse + row * 4, j)));
        if (mx == kdt_neg_inf()) { /* padded row (or one that saw nothing) */
            *dst = make_uint2(0, 0);
            if (p.lse && c4 == 0)
                p.lse[b.req_row0 + m] = kdt_neg_inf();
            continue;
        }
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        float wsum = 0.f;
        for (int j = 0; j < n; ++j)
            va_merge_add(acc, wsum,
                         cluster_ld(cluster_addr(slse + row * 4, j)), mx,
                         cluster_ld4(cluster_addr(
                             sbuf + (row * OBUF_LD + c4) * 4, j)));
        const float inv = 1.f / wsum;
        *dst = make_uint2(kdt_pack_bf16x2(acc.x * inv, acc.y * inv),
                          kdt_pack_bf16x2(acc.z * inv, acc.w * inv));
        if (p.lse && c4 == 0)
            p.lse[b.req_row0 + m] = (mx + kdt_log2(wsum)) * KDT_LN2;
    }
    cluster_sync();
}

/* Phase 3c, an unsplit block's O: normalised, as bf16, through shared
 * memory to global memory in whole lines, where the accumulator's
 * layout would store 16 bytes a row a warp instruction.  Each warp
 * stages only what it holds (its 16 rows of its warpgroup's 256
 * columns, in the KV stages the loop is done with; rows OB_LD apart, so
 * that its 8 rows of 4-byte stores hit 32 distinct banks), so a
 * __syncwarp is all the hand-off needs; then each of its rows leaves as
 * 512 contiguous bytes, 16 a lane.  Padded rows get zeros. */
constexpr int OB_LD = KDT_ATTN_WG_O_LD;      /* bf16 a staged row */
static_assert(KDT_OFFSETOF(kdt_attn_wg_smem, stages.o) == K_OFF,
              "O is staged in the stages");

static __device__ __forceinline__ void
store_o(const kdt_verify_attn_params &p, const va_block &b,
        const float (&o)[128], const float *l_s, uint16_t *ob, int r0,
        int c2, int wg, int wwarp, int lane)
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r0 + 8 * h;
        const float inv = va_row_inv(b, b.m0 + row, l_s[row]);
        uint32_t *dst = (uint32_t *)(ob + row * OB_LD + VCOLS * wg + c2);
#pragma unroll
        for (int j = 0; j < 32; ++j)
            dst[4 * j] = kdt_pack_bf16x2(o[4 * j + 2 * h] * inv,
                                         o[4 * j + 2 * h + 1] * inv);
    }
    __syncwarp();
    const int rows = min(BM, ROWS - b.m0);
    const int col = VCOLS * wg + 8 * lane;
#pragma unroll 4
    for (int i = 0; i < 16; ++i) {
        const int row = 16 * wwarp + i;
        if (row >= rows)
            break;
        *(uint4 *)(p.o + (b.req_row0 + b.m0 + row) * D_V + col) =
            *(const uint4 *)(ob + row * OB_LD + col);
    }
}

extern "C" __global__ void __launch_bounds__(NLAUNCH, 1)
kdt_verify_attn(const kdt_verify_attn_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wtid = tid & 127, wwarp = wtid >> 5;
    va_block b;
    const bool clustered = cluster_size() > 1;
    if (!va_block_begin<BM, BN, NLAUNCH>(b, p, clustered))
        return;
    const int m0 = b.m0;

    const uint32_t raw = kdt_smem_addr(smem_raw);
    const uint32_t base =
        (raw + KDT_ATTN_WG_ALIGN - 1) & ~(uint32_t)(KDT_ATTN_WG_ALIGN - 1);
    unsigned char *smem = smem_raw + (base - raw);
    const uint32_t sq = base + Q_OFF, sk = base + K_OFF, sp = base + P_OFF;
    float *alpha_s = (float *)(smem + ALPHA_OFF);
    float *l_s = (float *)(smem + L_OFF);

    const uint16_t *__restrict__ kv = p.kv_cache;
    const int32_t *__restrict__ bt = p.block_table + (int64_t)b.r * p.max_pages;

    /* this thread's accumulator rows (of the block's 64) and column pair */
    const int r0 = 16 * wwarp + (lane >> 2);
    const int c2 = 2 * (lane & 3);
    uint32_t mask_words[MASK_ROWS][TAIL_WORDS];
    if (wg == 0)
        tail_words_load(mask_words, b, p.anc_mask + (int64_t)b.r * N_MAX * W,
                        m0 + r0);

    load_q_and_first_tile(p, b, smem, sq, sk, tid, wg, wtid, kv, bt);
    if constexpr (PRODUCER) {
        if (wg == 2) {
            setmaxnreg_dec<PRODUCER_REGS>();
            wg2_widen_loop(b, kv, bt, sk, wtid);
            /* the epilogue's block barrier, and a cluster's two */
            __syncthreads();
            if (clustered) {
                cluster_sync();
                cluster_sync();
            }
            return;
        }
        setmaxnreg_inc<MATH_REGS>();
    }
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i)
        o[i] = 0.f;
    /* WG0's softmax state of rows r0 and r0 + 8 (4 lanes share a row) */
    float m_ref[2] = {kdt_neg_inf(), kdt_neg_inf()};
    float l_part[2] = {0.f, 0.f};
    /* V columns of this warpgroup: blocks 4 wg .. 4 wg + 3 of a tile */
    const uint32_t vcol = (uint32_t)(4 * wg * BLK_BYTES);
    /* operand descriptors: Q, P, and stage 0 of the ring as K and as V
     * (MATH = e4m3: P is P^T's too) */
    const uint64_t dq = kmajor_desc(sq);
    const uint64_t dp = MATH_E4M3 ? sw64_desc(sp) : kmajor_desc(sp);
    const uint64_t dk0 = kmajor_desc(sk);
    const uint64_t dv0 = vmajor_desc(sk);

    /* Phase 2, the KV loop, one function a warpgroup.  The wgmma below
     * sit on no branch but the loops' and this warpgroup choice: ptxas
     * serialises every wgmma of a kernel that has one on a path it cannot
     * prove warp-uniform (measured: 96 -> 141 us). */
    if (wg == 0)
        wg0_softmax_loop(o, m_ref, l_part, mask_words, p, b, smem, dq,
                         dk0, dp, dv0, sp, vcol, alpha_s, r0, c2,
                         wwarp, lane);
    else
        wg1_load_pv_loop(o, b, kv, bt, dp, dv0, sk, smem + K_OFF, vcol,
                         alpha_s, r0, wtid);
    kdt_cp_async_wait<0>(); /* nothing may land after the block exits */
    if constexpr (MATH_E4M3) {
        /* WG0 leaves a loop of tiles having passed one bar.sync fewer
         * than WG1 (its first tile has one, WG1's two).  With the counts
         * one apart, compute-sanitizer's racecheck reported reads of one
         * warpgroup against writes of the other that barriers order (of
         * the stages, and of O's staging below), and each barrier added
         * moved the pairs as a thread's count of them, whatever their
         * id, would; with the counts even it reports none.  The barrier
         * orders nothing the loops do not. */
        if (wg == 0 && b.t1 > b.t0)
            bar_sync_wg(BAR_ALPHA);
        pv8t_to_rows(o, (float *)(smem + K_OFF), wg, wtid);
    }

    /* ---- Phase 3, the epilogue: row sums (WG0), LSE, normalised O ---- */
    float lse2[2] = {0.f, 0.f}; /* WG0's rows' log2-sum-exp (va_lse2) */
    if (wg == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = l_part[h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            /* l, like O, is 2^P_SHIFT times the row's */
            lse2[h] = va_lse2(m_ref[h] - (float)P_SHIFT, l);
            if ((lane & 3) == 0) {
                l_s[r0 + 8 * h] = l;
                if (!clustered)
                    va_store_lse(p, b, m0 + r0 + 8 * h, lse2[h]);
            }
        }
    }
    __syncthreads();
    if (clustered) {
        cluster_merge(p, b, o, lse2, l_s, (float *)(smem + K_OFF), sk, r0, c2,
                      wg, tid);
        return;
    }

    if (b.nsplit == 1) {
        store_o(p, b, o, l_s, (uint16_t *)(smem + K_OFF), r0, c2, wg, wwarp,
                lane);
        return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r0 + 8 * h;
        if (m0 + row >= ROWS)
            continue;
        const va_out d = va_row_out(p, b, m0 + row, l_s[row]);
        const int col0 = VCOLS * wg + c2;
#pragma unroll
        for (int j = 0; j < 32; ++j)
            va_put(d, col0 + 8 * j, o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    }
}
