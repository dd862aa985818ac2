/*
 * verify_attn_wgmma_e4m3.cuh: the FP8 arithmetic of the wgmma body
 * (MATH = e4m3 over an e4m3 cache, docs/contract.md §3): both products
 * on e4m3 operands, wgmma's k32 form, f32 accumulators.  A part of
 * verify_attn_wgmma.cuh, included after its constants and PTX; the KV
 * loop and its barriers are that file's, these are the phases that
 * differ.
 *
 * FP8 wgmma reads an operand from shared memory K-major only (no
 * transposed form), which shapes everything here:
 *  - Q (q_to_e4m3): the bf16 Q tile lands in the second KV stage (free
 *    until the loop starts), and each row is quantized with its own scale
 *    (448 / max |q|, kdt_fp8.cuh) into the e4m3 Q tile, 576 bytes a row
 *    in five 128-byte-swizzled column blocks (kdt_attn_wg8_tile); the
 *    row's logits are then multiplied by max |q| / 448 (q_unscale).
 *  - K: a tile's e4m3 bytes go into its stage as they are (cp.async, the
 *    same five-block layout; a tile within one page copied as whole
 *    128-byte lines, kv8l_load_tile): S = Q K^T is 18 k32 steps.
 *  - V: P V's K dimension is the tokens, and a shared-memory operand
 *    must be K-major, so each warpgroup computes O^T = V^T P^T instead,
 *    with V^T as the A operand from registers: each thread gathers its
 *    V^T fragments from the tile's stage (8-byte loads, 4 x 4 byte
 *    transposes; vt8_gather), P^T is P's tile as it is, and the
 *    epilogue turns O^T's fragments into O's (pv8t_to_rows).
 *  - P: WG0's weights (at most 256: e4m3's range holds them, never
 *    saturated) rounded to e4m3 into the [64][64 B] P tile, 64-byte
 *    swizzle.  The order of the 64 tokens along K is P's and V^T's
 *    alike and free to choose: within each half of 32, position
 *    k = 8 q + 2 a + e holds token 8 a + 2 q + e (p8_token), so that the
 *    8 weights a thread holds of a row in a half (tokens 8 a + 2 q + e,
 *    its quad column q) are 8 contiguous bytes, one 64-bit store.
 *  - The row sums the contract asks for (of the rounded weights): WG0
 *    adds the e4m3 bytes it stores in f32 on its CUDA cores
 *    (kdt_e4m3x4_sum, exact), each lane its share of a row, rescaled
 *    and added up across the quad as MATH = bf16's are.
 *  - Sums: the FP8 wgmma's accumulator holds 13 bits past its leading
 *    one, so a tile's P V starts from zero and f32 adds it to O
 *    (pv8_tile).
 */

constexpr int Q8_PIECES = D_QK / 16;       /* 16-byte e4m3 pieces a row */
constexpr int V8_PIECES = D_V / 16;        /* of them V's */
constexpr int K8_STEPS = D_QK / 32;        /* k32 steps of S = Q K^T */
/* the bf16 Q tile's staging place: the second KV stage */
constexpr int QSTAGE_OFF = K_OFF + TILE_BYTES;

static_assert(sizeof(kdt_attn_wg8_tile) == KDT_ATTN_WG8_KBLK * BN * 128 &&
                  BM == BN && Q8_PIECES == 36 && V8_PIECES == 32 &&
                  K8_STEPS == 18,
              "Q and K: 36 pieces a row in 5 blocks of [64][128 B]");
static_assert(KDT_OFFSETOF(kdt_attn_wg_smem, p.e4m3.p) == P_OFF,
              "the e4m3 P tile is at P's place");

/* The token of a tile at P's and V^T's K position k (an involution: a
 * and q trade places). */
static __host__ __device__ constexpr int
p8_token(int k)
{
    return (k & ~31) | ((k & 6) << 2) | ((k >> 2) & 6) | (k & 1);
}

/*
 * WG1's share of a tile in pages smaller than a tile (128 threads;
 * within one page, kv8l_load_tile's lines instead): thread wtid copies
 * the 16 tokens of P's K positions 16 G .. 16 G + 15 (G = wtid % 4),
 * their 16-byte piece c = x + 4 ((wtid / 16) % 2) + 8 (wtid / 32) of V's
 * 32 (x = (wtid / 4) % 4), and two of the 4 k_pe pieces of token
 * wtid / 2.  A warp's copies of one token are 128 contiguous bytes; its
 * 32 pieces of one j fall on 8 distinct 16-byte bank groups, four each
 * (the minimum for 512 bytes).  A cp.async's shared-memory wavefronts
 * follow the 128-byte lines it reads, though: a row is 576 bytes (4.5
 * lines), so a token in an odd row has its 128 bytes in two half lines,
 * and such a copy takes 8 wavefronts where the others take 4 (the k_pe
 * copies, a line a token, 16).  Each row is its own here, so there is no
 * choosing whole lines.
 *
 * Its j-th token, p8_token(16 G + j), is kv8b_tt(wtid) + kv8b_cj(j), the
 * thread's bits and j's apart, so that each address of a piece is a base
 * of the thread plus a constant of j (the instruction's immediate): the
 * swizzle's XOR takes j's part of the row through one of four bases
 * (kv8b_jx(j)), and the bases are all the arithmetic a tile needs.
 */
constexpr int KV8B_TOKENS = 16;            /* V tokens a thread copies */
constexpr int KV8B_PAGES = KV8B_TOKENS + 1; /* and its k_pe token */

/* the thread's bits of its tokens: 32 (G / 2) + 4 (G % 2) */
static __host__ __device__ constexpr int
kv8b_tt(int wtid)
{
    return 32 * ((wtid >> 1) & 1) + 4 * (wtid & 1);
}

/* j's bits: 8 ((j / 2) % 4) + 2 (j / 8) + j % 2 */
static __host__ __device__ constexpr int
kv8b_cj(int j)
{
    return 8 * ((j >> 1) & 3) + 2 * (j >> 3) + (j & 1);
}

/* j's bits of the token's row within the swizzle's 8 (the thread's are
 * its bit 2) */
static __host__ __device__ constexpr int
kv8b_jx(int j)
{
    return kv8b_cj(j) & 7;
}

/* p8_token(16 G + j) = kv8b_tt(G) + kv8b_cj(j) (G = wtid % 4 is all of
 * wtid that kv8b_tt reads), the thread's bits and j's apart: what the
 * bases below rest on */
static __host__ __device__ constexpr bool
kv8b_split_holds()
{
    for (int G = 0; G < 4; ++G)
        for (int j = 0; j < KV8B_TOKENS; ++j)
            if (p8_token(16 * G + j) != kv8b_tt(G) + kv8b_cj(j)
                || (kv8b_tt(G) & kv8b_cj(j)) != 0)
                return false;
    return true;
}
static_assert(kv8b_split_holds(), "a thread's tokens: its bits plus j's");

static __device__ __forceinline__ int
kv8b_piece(int wtid)
{
    return ((wtid >> 2) & 3) + 4 * ((wtid >> 4) & 1) + 8 * (wtid >> 5);
}

static __device__ __forceinline__ int
kv8b_token(int wtid, int j)
{
    return j < KV8B_TOKENS ? kv8b_tt(wtid) + kv8b_cj(j) : wtid >> 1;
}

/* sw_piece(BN, token, piece c) of this thread's token j is
 * (kv8b_sw0(wtid) ^ (kv8b_jx(j) << 4)) + 128 kv8b_cj(j): the XOR of the
 * swizzle flips bits 4 and 5 alone, the rows add above them. */
static __device__ __forceinline__ uint32_t
kv8b_sw0(int wtid)
{
    return sw_piece(BN, kv8b_tt(wtid), kv8b_piece(wtid));
}

/* The four bases of this thread's pieces at `base` (a shared-memory
 * offset or a generic pointer): token j's piece is at
 * b[kv8b_jx(j)] + 128 kv8b_cj(j). */
template <class T>
static __device__ __forceinline__ void
kv8b_bases(T (&b)[4], T base, int wtid)
{
    const uint32_t sw0 = kv8b_sw0(wtid);
#pragma unroll
    for (int J = 0; J < 4; ++J)
        b[J] = base + (sw0 ^ (J << 4));
}

/*
 * Where this thread's tokens of tile t are in the cache, `where` below.
 * A tile within one page (KV8B_ONE_PAGE): where[0] is the tile's page
 * (-1 past `total`), read a tile before the copy (as kv_rows), and a
 * token's place is that page's plus constants.  Otherwise where[j] is the
 * cache row (page x PAGE + slot; < 2^31: 1.2 TB of rows) of the thread's
 * token j (kv8b_token), 0 past `total` (the copy's size says "none").
 * The first tile's come straight from the block table (kv8b_where_bt);
 * the rest are staged, one block-table read a token: the warpgroup's
 * first 64 threads read token wtid's entry two tiles ahead
 * (kv8b_entry), store its row a tile ahead (kv8b_stage, into `slot`
 * (it & 1) of the rows, what the loop's barriers order), and the copy
 * reads its 17 from there (kv8b_where_staged): 64 block-table reads a
 * tile, not 17 a thread (2,176), and no entries held across the P V.
 */
constexpr bool KV8B_ONE_PAGE = PAGE % BN == 0;
constexpr int ROWS_OFF = KDT_OFFSETOF(kdt_attn_wg_smem, stages.e4m3.rows);

/* token i's place in a slot of the staged rows (kdt_attn_wg8_rows) */
static __host__ __device__ constexpr int
kv8b_rix(int i)
{
    return i + 2 * (i >> 5);
}

/* The cache row of token `pos` of its request, whose block-table entry
 * is `entry` (-1: past the end, row 0). */
static __device__ __forceinline__ int
kv8b_row_of(int entry, int pos)
{
    return entry >= 0 ? entry * PAGE + pos % PAGE : 0;
}

static __device__ __forceinline__ void
kv8b_where_bt(int (&where)[KV8B_PAGES], int wtid, int t, int total,
              const int32_t *__restrict__ bt)
{
    if constexpr (KV8B_ONE_PAGE) {
        where[0] = t * BN < total ? __ldg(bt + t * BN / PAGE) : -1;
    } else {
#pragma unroll
        for (int j = 0; j < KV8B_PAGES; ++j) {
            const int pos = t * BN + kv8b_token(wtid, j);
            where[j] = kv8b_row_of(pos < total ? __ldg(bt + pos / PAGE) : -1,
                                   pos);
        }
    }
}

/* Token wtid's block-table entry of tile t (-1 past `total`, or for a
 * thread past the tile's 64). */
static __device__ __forceinline__ int
kv8b_entry(int wtid, int t, int total, const int32_t *__restrict__ bt)
{
    const int pos = t * BN + wtid;
    return wtid < BN && pos < total ? __ldg(bt + pos / PAGE) : -1;
}

/* Token wtid's row of tile t into `slot`, from its entry. */
static __device__ __forceinline__ void
kv8b_stage(int *slot, int entry, int t, int wtid)
{
    if (wtid < BN)
        slot[kv8b_rix(wtid)] = kv8b_row_of(entry, t * BN + wtid);
}

/* A thread's tokens kv8b_tt + kv8b_cj(j) lie in one half of 32, so that
 * their places in a slot are its token 0's plus kv8b_cj(j): what the
 * reads below rest on */
static __host__ __device__ constexpr bool
kv8b_rix_split_holds()
{
    for (int G = 0; G < 4; ++G)
        for (int j = 0; j < KV8B_TOKENS; ++j)
            if (kv8b_rix(kv8b_tt(G) + kv8b_cj(j))
                != kv8b_rix(kv8b_tt(G)) + kv8b_cj(j))
                return false;
    return true;
}
static_assert(kv8b_rix_split_holds(), "a thread's rows: its place plus j's");

/* This thread's rows from `slot`: its tokens kv8b_tt + kv8b_cj(j) and
 * + 1 (j even) are one 8-byte read. */
static __device__ __forceinline__ void
kv8b_where_staged(int (&where)[KV8B_PAGES], const int *slot, int wtid)
{
    const int *r = slot + kv8b_rix(kv8b_tt(wtid));
#pragma unroll
    for (int j = 0; j < KV8B_TOKENS; j += 2) {
        const uint2 w = *(const uint2 *)(r + kv8b_cj(j));
        where[j] = (int)w.x;
        where[j + 1] = (int)w.y;
    }
    where[KV8B_TOKENS] = slot[kv8b_rix(wtid >> 1)];
}

/*
 * A tile within one page is 64 rows of 576 bytes, back to back: 288
 * whole 128-byte lines, nine to a pair of tokens.  Line 9 m + k of the
 * tile holds token 2 m's pieces 8 k .. 8 k + 7 (k < 4); its pieces 32 ..
 * 35 and token 2 m + 1's 0 .. 3 (k = 4); token 2 m + 1's 8 k - 36 .. + 7
 * (k > 4).  Copied line by line, each cp.async of a warp reads four whole
 * lines: 4 shared-memory wavefronts where a token's 128-byte run that
 * straddles two lines (every odd token's) takes 8.  Thread (warp w,
 * lane 8 y + x) copies piece x of line k (k = 0 .. 8) of the pairs
 * m = 8 w + y + 4 g (g = 0, 1): 18 copies, each a base of the thread plus
 * a constant of k and g (g adds 8 tokens, which the swizzle's XOR leaves
 * alone).  Its place in the stage: sw_piece of the token and piece, which
 * for line k of pair m is
 *   k < 4: token 2 m, piece 8 k + x;
 *   k = 4: token 2 m, piece 32 + x (x < 4), or token 2 m + 1, piece
 *          x - 4;
 *   k > 4: token 2 m + 1, piece 8 k - 36 + x (block k - 5 + x / 4).
 */
static_assert(BN == 64 && D_QK == 576 && KDT_ATTN_WG8_KBLK == 5,
              "nine lines a pair of tokens, 32 pairs a tile");

/* Phase 2a, MATH = e4m3, a tile within one page: the thread's 18 pieces
 * of its lines (above) from the tile's first byte `tile`; tokens at or
 * past `room` zero-filled. */
static __device__ __forceinline__ void
kv8l_load_tile(uint32_t dst, const uint8_t *__restrict__ tile, int room,
               int wtid)
{
    /* line 0 of pair 8 w + y (its first token te) in the stage: the
     * bases of lines k < 4, k = 4 and k > 4 */
    const int w = wtid >> 5, y = (wtid >> 3) & 3, x = wtid & 7;
    const int te0 = 16 * w + 2 * y;
    const uint32_t even = dst + sw_piece(BN, te0, x);
    const uint32_t mid = dst + (x < 4 ? sw_piece(BN, te0, 32 + x)
                                      : sw_piece(BN, te0 + 1, x - 4));
    const uint32_t odd = dst + sw_piece(BN, te0 + 1, 4 + x);
    const uint8_t *src = tile + 1152 * (te0 / 2) + 16 * x;
#pragma unroll
    for (int g = 0; g < 2; ++g) {
        const int te = te0 + 8 * g;
        const int ne = te < room ? 16 : 0, no = te + 1 < room ? 16 : 0;
        const uint8_t *s = src + 4 * 1152 * g;
#pragma unroll
        for (int k = 0; k < 4; ++k)
            kdt_cp_async16(even + 8 * 128 * g + k * (BN * 128),
                           s + 128 * k, ne);
        kdt_cp_async16(mid + 8 * 128 * g, s + 128 * 4, x < 4 ? ne : no);
#pragma unroll
        for (int k = 5; k < 9; ++k)
            kdt_cp_async16(odd + 8 * 128 * g + (k - 5) * (BN * 128),
                           s + 128 * k, no);
    }
}

/* Phase 2a, MATH = e4m3: this thread's pieces of tile t into the stage at
 * `dst` (its K tile: the cache's bytes, 128-byte-swizzled blocks), its
 * tokens at `where`; tokens past the end zero-filled (their logits are
 * masked, their V rows times P = 0). */
static __device__ __forceinline__ void
kv8b_load_tile(uint32_t dst, const int (&where)[KV8B_PAGES], int t,
               int total, const uint8_t *__restrict__ kv, int wtid)
{
    /* Within one page a token past the end is still in the tile's page,
     * so its address is in the cache and only the size says "none". */
    if constexpr (KV8B_ONE_PAGE) {
        kv8l_load_tile(dst,
                       kv + ((int64_t)where[0] * PAGE + (t * BN) % PAGE)
                           * D_QK,
                       total - t * BN, wtid);
        return;
    }
    /* Elsewhere a token's row is its own, row 0 past the end. */
    const int c = kv8b_piece(wtid), tt = kv8b_tt(wtid);
    uint32_t d[4];
    kv8b_bases(d, dst, wtid);
    const int room = total - t * BN - tt; /* j is past it: cj(j) >= room */
    const uint8_t *piece = kv + 16 * c;
#pragma unroll
    for (int j = 0; j < KV8B_TOKENS; ++j)
        kdt_cp_async16(d[kv8b_jx(j)] + 128 * kv8b_cj(j),
                       piece + (int64_t)where[j] * D_QK,
                       kv8b_cj(j) < room ? 16 : 0);
    /* k_pe: pieces V8_PIECES + 2 (wtid % 2) + u of token kt (their
     * swizzled places a bit 4 apart) */
    const int kt = wtid >> 1;
    const bool ok = kt < total - t * BN;
    const int cc = V8_PIECES + 2 * (wtid & 1);
    const uint8_t *src = kv + (int64_t)where[KV8B_TOKENS] * D_QK + 16 * cc;
    const uint32_t sw = sw_piece(BN, kt, cc);
#pragma unroll
    for (int u = 0; u < 2; ++u)
        kdt_cp_async16(dst + (sw ^ (u << 4)), src + 16 * u, ok ? 16 : 0);
}

/* Words a0 .. a3 (four K positions) as out[i] = {a0.b(i), a1.b(i),
 * a2.b(i), a3.b(i)} (byte i of each, lowest first): a 4 x 4 byte
 * transpose.  The first four perms interleave bytes 0, 1 and 2, 3 of
 * two words. */
static __device__ __forceinline__ void
transpose4x4(uint32_t (&out)[4], uint32_t a0, uint32_t a1, uint32_t a2,
             uint32_t a3)
{
    const uint32_t lo01 = __byte_perm(a0, a1, 0x5140);
    const uint32_t hi01 = __byte_perm(a0, a1, 0x7362);
    const uint32_t lo23 = __byte_perm(a2, a3, 0x5140);
    const uint32_t hi23 = __byte_perm(a2, a3, 0x7362);
    out[0] = __byte_perm(lo01, lo23, 0x5410);
    out[1] = __byte_perm(lo01, lo23, 0x7632);
    out[2] = __byte_perm(hi01, hi23, 0x5410);
    out[3] = __byte_perm(hi01, hi23, 0x7632);
}

/*
 * P V as O^T = V^T P^T.  FP8 wgmma reads a shared-memory operand K-major
 * only, and V in the stage is a token's row; but A may come from
 * registers, in any order the thread gathers it.  So each warpgroup
 * multiplies V^T, its 256 dims, from registers by P^T (P's rows are its
 * N, already K-major): 4 m64n64k32 chunks a k32 step, no V^T in shared
 * memory and no transpose pass.  The order of the dims along M and of
 * the tokens along K is free (the epilogue writes O by dim; K follows
 * p8_token, P's order).  Thread (warp w, lane 4 g + q) of warpgroup wg
 * holds the dims 256 wg + 64 w + 8 g .. + 7, one 8-byte load of a token:
 * its dim 2 c + h is row 16 w + g + 8 h of chunk c.  Its K positions of
 * a half, 4 q + u and 16 + 4 q + u (the fragment's), are the tokens
 * vt8_tt(q) + vt8_cj(half, j) (j = u, then 4 + u): 8 loads, then four
 * 4 x 4 byte transposes give the 16 registers.  The accumulators:
 * o[32 c + 4 i + 2 h + e] is O[row 8 i + 2 q + e][that dim 2 c + h].
 */
static __host__ __device__ constexpr int
vt8_tt(int q)
{
    return 16 * (q & 1) + (q & 2);
}

static __host__ __device__ constexpr int
vt8_cj(int half, int j)
{
    return 32 * half + 8 * ((j >> 1) & 1) + 4 * (j >> 2) + (j & 1);
}

/* p8_token(32 half + 16 (j / 4) + 4 q + j % 4) = vt8_tt(q) + vt8_cj(half,
 * j), the thread's bits and j's apart */
static __host__ __device__ constexpr bool
vt8_split_holds()
{
    for (int half = 0; half < 2; ++half)
        for (int q = 0; q < 4; ++q)
            for (int j = 0; j < 8; ++j)
                if (p8_token(32 * half + 16 * (j >> 2) + 4 * q + (j & 3))
                        != vt8_tt(q) + vt8_cj(half, j)
                    || (vt8_tt(q) & vt8_cj(half, j)) != 0)
                    return false;
    return true;
}
static_assert(vt8_split_holds(), "a thread's V^T tokens: its bits plus j's");

/* The four bases of this thread's V loads in the stage at `stage_p`:
 * load j reads 8 bytes at b[(cj & 1) | (cj & 4) / 2] + 128 cj (cj =
 * vt8_cj(half, j)), the swizzle's XOR taking cj's bits 0 and 2.
 *
 * A warp's load j reads 64 bytes of each of four tokens, vt8_tt(q) +
 * cj (q = 0..3), and all four would lie on the same 64-byte half of the
 * banks (the tokens' rows differ in bit 1 and 4 alone, the swizzle
 * flips the half by bit 2): 4 shared-memory wavefronts a load.  Lanes of
 * odd q therefore load token j ^ 4's bytes at load j, whose row differs
 * in bit 2 (cj's, 4 rows away): the other half, 2 wavefronts a load.
 * Their bases take that in (cj ^ 4 is X ^ 2's base and 4 rows on or
 * back), and vt8_gather swaps the loads back. */
static __device__ __forceinline__ void
vt8_bases(const unsigned char *(&b)[4], const unsigned char *stage_p,
          int wg, int wtid)
{
    const int w = wtid >> 5, g = (wtid >> 2) & 7, q = wtid & 3;
    const int blk = 2 * wg + (w >> 1), pc = 4 * (w & 1) + (g >> 1);
    const unsigned char *row =
        stage_p + blk * (BN * 128) + 128 * vt8_tt(q) + 8 * (g & 1);
    const int flip = (q & 1) ? 2 : 0;
#pragma unroll
    for (int X = 0; X < 4; ++X) {
        const int Y = X ^ flip;
        b[X] = row + ((pc ^ (vt8_tt(q) & 7) ^ ((Y & 1) | (Y & 2) << 1)) << 4)
            + (flip ? ((X & 2) ? -4 * 128 : 4 * 128) : 0);
    }
}

/* This thread's V^T fragments of half `half` of the stage `off` bytes
 * past stage 0 (vt8_bases of stage 0): a[c] for chunk c.  Lanes of odd
 * q loaded token j ^ 4's bytes at load j (vt8_bases): swapped back. */
static __device__ __forceinline__ void
vt8_gather(uint32_t (&a)[4][4], const unsigned char *const (&b)[4], int off,
           int half, bool odd_q)
{
    uint2 y[8], x[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int cj = vt8_cj(half, j);
        y[j] = *(const uint2 *)(b[(cj & 1) | (cj & 4) >> 1] + off
                                + 128 * cj);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
        x[j] = odd_q ? y[j ^ 4] : y[j];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi)
#pragma unroll
        for (int k = 0; k < 2; ++k) { /* K positions 4 q .., 16 + 4 q .. */
            uint32_t t[4]; /* dims 4 hi + i, 4 tokens each */
            transpose4x4(t, (&x[4 * k].x)[hi], (&x[4 * k + 1].x)[hi],
                         (&x[4 * k + 2].x)[hi], (&x[4 * k + 3].x)[hi]);
#pragma unroll
            for (int i = 0; i < 4; ++i)
                a[2 * hi + (i >> 1)][(i & 1) + 2 * k] = t[i];
        }
}

/* Phase 1b, MATH = e4m3: the landed bf16 Q tile (at QSTAGE_OFF, the bf16
 * swizzled layout) quantized row by row into the e4m3 Q tile at Q_OFF:
 * a = the row's max |q|, each element e4m3(q * (448 / a)) (kdt_fp8.cuh;
 * the contract's order of f32 operations), and a / 448 into q_unscale.
 * Four threads a row, a quarter of its dims each (18 bf16 pieces, 9
 * e4m3 ones).  Once a block. */
static __device__ __forceinline__ void
q_to_e4m3(unsigned char *smem, int tid)
{
    static_assert(NTHREADS == 4 * BM && CHUNKS == 2 * Q8_PIECES &&
                      Q8_PIECES % 4 == 0,
                  "four threads a Q row, a quarter of its pieces each");
    constexpr int NPC = Q8_PIECES / 4;
    const int row = tid >> 2, c0 = (tid & 3) * NPC;
    const unsigned char *src = smem + QSTAGE_OFF;
    uint32_t mbits = 0;
#pragma unroll 6
    for (int c = 2 * c0; c < 2 * (c0 + NPC); ++c)
        mbits = kdt_bf16x8_absmax_bits(
            mbits, *(const uint4 *)(src + sw_piece(BM, row, c)));
    mbits = kdt_quad_max(mbits);
    const float amax = __uint_as_float(mbits << 16);
    const float s = kdt_e4m3_quant_scale(amax);
    if ((tid & 3) == 0)
        ((float *)(smem + QUNSCALE_OFF))[row] = kdt_e4m3_dequant_scale(amax);
#pragma unroll 3
    for (int c = c0; c < c0 + NPC; ++c) {
        const uint4 a = *(const uint4 *)(src + sw_piece(BM, row, 2 * c));
        const uint4 b = *(const uint4 *)(src + sw_piece(BM, row, 2 * c + 1));
        const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        uint32_t e[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            e[i] = kdt_e4m3x4_quantize(
                __uint_as_float(w[2 * i] << 16),
                __uint_as_float(w[2 * i] & 0xffff0000u),
                __uint_as_float(w[2 * i + 1] << 16),
                __uint_as_float(w[2 * i + 1] & 0xffff0000u), s);
        *(uint4 *)(smem + Q_OFF + sw_piece(BM, row, c)) =
            make_uint4(e[0], e[1], e[2], e[3]);
    }
}

/* Issues S = Q K^T on e4m3 operands: 4 column blocks x 4 k32 steps and
 * the fifth block's 2 (k_pe), the first overwriting S. */
static __device__ __forceinline__ void
qk8_issue(float (&s)[32], uint64_t dq, uint64_t dk)
{
#pragma unroll
    for (int ks = 0; ks < K8_STEPS; ++ks) {
        const uint32_t off = (ks >> 2) * (BN * 128) + (ks & 3) * 32;
        if (ks == 0)
            wg_mma_qk8<0>(s, desc_add(dq, off), desc_add(dk, off));
        else
            wg_mma_qk8<1>(s, desc_add(dq, off), desc_add(dk, off));
    }
}

/* Phase 2b, MATH = e4m3: half `half` of the tile's P, p = 2^(x x_scale[h]
 * - mu[h]) rounded to e4m3, into the P tile at `p8`: row r0 + 8 h's
 * tokens 32 half + 8 a + 2 q + e (s[4 (4 half + a) + 2 h + e], q = this
 * lane's quad column) are its K positions 32 half + 8 q .. + 7, half a
 * 16-byte piece; lanes q and q ^ 1 trade halves so that each stores a
 * whole piece (even q row r0, odd q row r0 + 8).  The rounded weights,
 * as P V reads them, are added to l_part in f32. */
static __device__ __forceinline__ void
softmax_p8_half(const float (&s)[32], const float (&mu)[2],
                float (&l_part)[2], const float (&x_scale)[2], uint32_t p8,
                int r0, int q, int half)
{
    uint32_t w[2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float p[8];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                p[2 * a + e] = kdt_exp2(
                    fmaf(s[4 * (4 * half + a) + 2 * h + e], x_scale[h],
                         -mu[h]));
        w[h][0] = kdt_e4m3x4_from_f32(p[0], p[1], p[2], p[3]);
        w[h][1] = kdt_e4m3x4_from_f32(p[4], p[5], p[6], p[7]);
        l_part[h] += kdt_e4m3x4_sum(w[h][0]) + kdt_e4m3x4_sum(w[h][1]);
    }
    const bool odd = q & 1;
    const uint32_t y0 =
        __shfl_xor_sync(0xffffffffu, odd ? w[0][0] : w[1][0], 1);
    const uint32_t y1 =
        __shfl_xor_sync(0xffffffffu, odd ? w[0][1] : w[1][1], 1);
    const int r = r0 + (odd ? 8 : 0);
    const int piece = (2 * half + (q >> 1)) ^ ((r >> 1) & 3);
    const uint32_t dst = p8 + r * BN + (piece << 4);
    if (odd)
        st_shared_v4(dst, y0, y1, w[1][0], w[1][1]);
    else
        st_shared_v4(dst, w[0][0], w[0][1], y0, y1);
}

/* O^T times the rescale factors of its columns (rows 8 i + 2 q + e of
 * alpha_s, WG0's), unless all are 1 (the lazy maximum: almost every
 * tile). */
static __device__ __forceinline__ void
rescale8t(float (&o)[128], const float *alpha_s, int q)
{
    float al[16];
    bool one = true;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            al[2 * i + e] = alpha_s[8 * i + 2 * q + e];
            one = one && al[2 * i + e] == 1.f;
        }
    if (one)
        return;
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    o[32 * c + 4 * i + 2 * h + e] *= al[2 * i + e];
}

/* o's chunk C += d, in f32, once d's step is done. */
template <int C>
static __device__ __forceinline__ void
pv8_fold(float (&o)[128], float (&d)[32])
{
    pin(d);
#pragma unroll
    for (int i = 0; i < 32; ++i)
        o[32 * C + i] += d[i];
}

/* Chunk C of the tile: its two k32 steps (the halves of 32 positions),
 * the first from zero, into t, waited for, added to o's chunk C. */
template <int C>
static __device__ __forceinline__ void
pv8_chunk(float (&o)[128], float (&t)[32], const uint32_t (&a)[2][4][4],
          uint64_t dp)
{
    wg_fence(); /* t was read by the last chunk's sum */
    wg_mma_pv8t<0>(t, a[0][C], dp);
    wg_mma_pv8t<1>(t, a[1][C], desc_add(dp, 32));
    wg_commit();
    wg_wait<0>();
    pv8_fold<C>(o, t);
}

/*
 * Phase 2c, MATH = e4m3: the tile's P V, O^T += V^T P^T, with this
 * thread's V^T fragments (both halves) from the stage `off` bytes past
 * stage 0 (vt8_bases `vb`) and P^T at `dp`, O^T rescaled first (alpha_s:
 * every row's factor, published).  Both halves of P must be published.
 *
 * The FP8 wgmma adds in 13 bits past the leading one of its sum
 * (docs/contract.md section 3): an accumulator that carried across the
 * range would drop the late products beside the sum of the early ones
 * (at 32k positions a row sum came out 56% low on an H100).  So each
 * 64-dim chunk of the tile takes its two k32 steps (64 weights of at
 * most 256 each) from zero in a register tile, and f32 adds the tile to
 * O^T once it is done.  One register tile, the
 * chunks in turn: two of 32 taking turns left ptxas spilling O itself
 * (255 registers a thread beside O's 128 and the fragments), and two of
 * 16 (P's rows in halves, m64n32k32) measured slower; a half at a time
 * (a step per chunk and half, eight waits a tile) measured 1.02x this
 * (median of 20 shapes).  Returns with every wgmma done.
 */
static __device__ __forceinline__ void
pv8_tile(float (&o)[128], const float *alpha_s, uint64_t dp,
         const unsigned char *const (&vb)[4], int off, int q)
{
    rescale8t(o, alpha_s, q);
    uint32_t a[2][4][4];
    vt8_gather(a[0], vb, off, 0, q & 1);
    vt8_gather(a[1], vb, off, 1, q & 1);
    float t[32];
    pv8_chunk<0>(o, t, a, dp);
    pv8_chunk<1>(o, t, a, dp);
    pv8_chunk<2>(o, t, a, dp);
    pv8_chunk<3>(o, t, a, dp);
}

/* Phase 3a, MATH = e4m3: O^T's fragments to O's (o[4 j + 2 h + e] =
 * O[r0 + 8 h][256 wg + 8 j + 2 q + e], as the other arithmetics leave it
 * for the epilogue), through the stages as f32 rows (`ob`, O_LD apart).
 * The loops' last barriers leave both warpgroups done with the stages:
 * each waited for the other's last PV. */
static __device__ __forceinline__ void
pv8t_to_rows(float (&o)[128], float *ob, int wg, int wtid)
{
    const int w = wtid >> 5, g = (wtid >> 2) & 7, q = wtid & 3;
    constexpr int LD = KDT_ATTN_WG_O_LD;
    float *dst = ob + 256 * wg + 64 * w + 8 * g;
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                *(float2 *)(dst + (8 * i + 2 * q + e) * LD + 2 * c) =
                    make_float2(o[32 * c + 4 * i + e],
                                o[32 * c + 4 * i + 2 + e]);
    __syncthreads();
    const float *src = ob + (16 * w + g) * LD + 256 * wg + 2 * q;
#pragma unroll
    for (int j = 0; j < 32; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float2 v = *(const float2 *)(src + 8 * h * LD + 8 * j);
            o[4 * j + 2 * h] = v.x;
            o[4 * j + 2 * h + 1] = v.y;
        }
}
