/*
 * verify_attn_wgmma.cuh: verify_attn on Hopper's warpgroup MMA (sm_90a).
 * verify_attn.cu includes it instead of its mma.sync body when
 * KDT_ATTN_WGMMA is 1, i.e. when NVRTC compiles for sm_90a (the library's
 * target on compute capability 9.0: H100 / H200).  Same contract
 * (docs/contract.md §3, verify_attn), same grid shape (row tile,
 * split, request), same workspace and merge kernel.
 *
 * Why a second body: mma.sync issues at most ~640 TFLOP/s on an H200
 * (tools/dev/mma_peak.cu), and its operands pass through registers, so a
 * 576/512-wide MLA tile costs more shared-memory bandwidth and register
 * file than the tensor pipe can use (docs/performance.md, verify_attn
 * history); the mma.sync body reaches 20-26% of 989 TFLOP/s.  wgmma reads
 * its B operand (and here mostly its A) from shared memory itself, and
 * Hopper lets a block have 227 KB of it, so the whole 64-row Q tile and
 * two 64-token KV tiles stay resident.  sm_120 (99 KB, no wgmma) keeps the
 * mma.sync body.
 *
 * Block = 64 folded rows x one KV split of one request, two warpgroups
 * that take the split's tiles in pairs (a in stage 0, b = a + 1 in
 * stage 1) and trade roles within a pair, so that one's softmax runs
 * while the other's GEMMs keep the tensor pipe busy:
 *  - WG0 computes S of tile a, WG1 S of tile b (36 k16 steps of m64n64k16
 *    each; the k_pe columns' Q from registers, the rest from shared
 *    memory), each the online softmax of its own tile against the
 *    running row maximum they hand each other through shared memory
 *    (WG0 first, then WG1).
 *  - WG0 owns O[:, 0:256], WG1 O[:, 256:512]: each adds its own tile's
 *    P V from registers (P is the accumulator of S, repacked as wgmma's A
 *    fragment) and the other's from shared memory.
 *  - Each warpgroup refills, for the next pair, the columns of a stage it
 *    alone still reads: WG0 blocks 0-3 (its V columns), WG1 blocks 4-8.
 *    cp.async copies, their completion counted by an mbarrier per half
 *    stage (cp.async.mbarrier.arrive), so the copying warpgroup never
 *    waits for them; the next S waits for both halves.
 * Phases: load_q_and_first_tiles, q_pe_fragments, qk_blocks (S), per
 * pair WG0's tile_max / exp_pack / pv_regs / store_p / pv_smem and WG1's,
 * load_half for the refills, then the epilogue (row sums of both
 * warpgroups, LSE, normalised O).
 * Every hand-off between the warpgroups is a named barrier (the row
 * maximum after tile a, after tile b; each P tile; WG1's PV of P0 issued),
 * each waited before its producer can reach it again; the text at each
 * refill says why no one still reads what it overwrites.  What bounds it
 * and what was tried: docs/performance.md, verify_attn history.
 *
 * Shared memory (one 1024-byte-aligned base): Q 64 x 576 bf16 (its k_pe
 * block, once in registers, then holds P1), two KV stages of 64 x 576,
 * P0 64 x 64, the running maxima m[64], the row sums of both warpgroups,
 * four mbarriers.  Every operand tile is stored as wgmma's
 * 128-byte-swizzled K-major layout: the 576 columns in nine 64-column
 * blocks, each [rows][128 B], the 16-byte piece c of row r at piece
 * c ^ (r % 8).  The same bytes serve V as an MN-major operand (the V
 * columns of a token are its row's first 512 entries).
 */

constexpr int BM = KDT_ATTN_WG_BM;
constexpr int BN = KDT_ATTN_WG_BN;
constexpr int NTHREADS = KDT_ATTN_WG_THREADS;
constexpr int KBLK = D_QK / 64;               /* 64-column swizzle blocks */
constexpr int LO_BLKS = 4;                    /* WG0's V columns: blocks 0-3 */
constexpr int CHUNKS = D_QK * 2 / 16;         /* 16-byte pieces of a row */
constexpr int BLK_BYTES = BN * 128;           /* one block of a KV tile */
constexpr int TILE_BYTES = BN * D_QK * 2;
constexpr int Q_BLK_BYTES = BM * 128;
constexpr int Q_OFF = 0;
constexpr int P1_OFF = Q_OFF + (KBLK - 1) * Q_BLK_BYTES; /* Q's k_pe block */
constexpr int K_OFF = Q_OFF + BM * D_QK * 2;
constexpr int P0_OFF = K_OFF + 2 * TILE_BYTES;
constexpr int M_OFF = P0_OFF + BM * BN * 2;
constexpr int L_OFF = M_OFF + BM * 4;         /* l of WG0, then of WG1 */
constexpr int MBAR_OFF = L_OFF + 2 * BM * 4;  /* [stage][block] */
constexpr int SMEM_BYTES = MBAR_OFF + 2 * KBLK * 8 + 1024; /* + slack */
constexpr float LAZY_RESCALE = 8.0f;          /* log2 units: P <= 256 */
constexpr int VCOLS = D_V / 2;                /* O columns per warpgroup */

static_assert(SMEM_BYTES == KDT_ATTN_WG_SMEM, "kdt_attn_tiles.h disagrees");
static_assert(BM == 64 && BN == 64 && NTHREADS == 256,
              "the roles below are two warpgroups, m64, 64-token tiles");
static_assert(D_QK == 576 && VCOLS == 256 && LO_BLKS * 64 == VCOLS,
              "576 / 512 dims: blocks 0-3 are WG0's V, 4-7 WG1's, 8 k_pe");
static_assert(H >= 1 && H <= 128 && N_MAX >= 1 && N_MAX <= KDT_LIMIT_N_MAX, "range");
static_assert(PAGE >= 1 && PAGE <= 256, "range");

/* named barriers (0 is __syncthreads): each is one warpgroup's bar.arrive
 * against the other's bar.sync, 256 threads */
constexpr int BAR_M0 = 1;                     /* m after tile a (WG0) */
constexpr int BAR_M1 = 2;                     /* m after tile b (WG1) */
constexpr int BAR_P0 = 3;                     /* P of tile a stored */
constexpr int BAR_P1 = 4;                     /* P of tile b stored */
constexpr int BAR_PV0 = 5;                    /* WG1's PV of P0 issued */

static __device__ __forceinline__ void
bar_sync(int id)
{
    asm volatile("bar.sync %0, %1;" :: "r"(id), "n"(NTHREADS) : "memory");
}

static __device__ __forceinline__ void
bar_arrive(int id)
{
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "n"(NTHREADS) : "memory");
}

/* Generic-proxy writes to shared memory (st.shared, cp.async) made visible
 * to the async proxy that wgmma reads through. */
static __device__ __forceinline__ void
proxy_fence(void)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

static __device__ __forceinline__ void
wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

static __device__ __forceinline__ void
wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

/* Waits until at most N committed wgmma groups are still in flight. */
template <int N>
static __device__ __forceinline__ void
wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}

/* Keeps the compiler from moving reads or writes of accumulator registers
 * across an asynchronous wgmma (it sees the asm as reading and writing
 * them here). */
template <int N>
static __device__ __forceinline__ void
pin(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(d[i]) :: "memory");
}

/* Four 8x8 b16 matrices from their mma fragments (r[i]: matrix i) to
 * shared memory; lanes 8i..8i+7 give the row addresses of matrix i. */
static __device__ __forceinline__ void
kdt_stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

/* Shared-memory matrix descriptor, 128-byte swizzle: start address, the
 * leading- and stride-dimension byte offsets (all >> 4), layout type 1. */
static __device__ __forceinline__ uint64_t
sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4)
           | ((uint64_t)(lbo >> 4) << 16)
           | ((uint64_t)(sbo >> 4) << 32)
           | (1ull << 62);
}

/* K-major operand (Q, K, P): 8-row groups 1024 B apart; the leading
 * offset is unused with swizzling.  `addr` = block base + 32 B per k16. */
static __device__ __forceinline__ uint64_t
kmajor_desc(uint32_t addr)
{
    return sw128_desc(addr, 16, 1024);
}

/* The descriptor of the operand `bytes` further on: the start address
 * is the low field, and no address here reaches its 14-bit limit. */
static __device__ __forceinline__ uint64_t
desc_add(uint64_t desc, uint32_t bytes)
{
    return desc + (bytes >> 4);
}

/* MN-major operand (V): 64-column blocks BLK_BYTES apart (leading), 8-token
 * groups 1024 B apart (stride). */
static __device__ __forceinline__ uint64_t
vmajor_desc(uint32_t addr)
{
    return sw128_desc(addr, KDT_ATTN_WG_V_LBO, KDT_ATTN_WG_V_SBO);
}

/* D (64 x 64 f32) += A B^T over one k16 step: A and B both K-major in
 * 128-byte-swizzled shared memory (the Q tile and the K tile).  `acc` = 0
 * overwrites D (the first step of a tile). */
static __device__ __forceinline__ void
wg_mma_qk(float (&d)[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}

/* D (64 x 256 f32) += A B over one k16 step: A = P, K-major (tokens are
 * k); B = V, MN-major (imm-trans-b = 1: the V columns are contiguous in
 * the K tile's rows, tokens are k). */
static __device__ __forceinline__ void
wg_mma_pv(float (&d)[128], uint64_t da, uint64_t db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),
        "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),
        "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]),
        "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
        "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
        "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db));
}

/* D (64 x 64 f32) += A B^T over one k16 step with A from registers (the
 * k_pe columns of Q, as wgmma's A fragment: mma.sync's m16k16 layout for
 * each warp's 16 rows) and B = K, K-major in shared memory. */
static __device__ __forceinline__ void
wg_mma_qk_rs(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
             uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(acc));
}

/* D (64 x 256 f32) += A B over one k16 step with A = P from registers
 * (its A fragment) and B = V, MN-major in shared memory. */
static __device__ __forceinline__ void
wg_mma_pv_rs(float (&d)[128], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
             uint64_t db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),
        "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),
        "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]),
        "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
        "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
        "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}

/* Keeps the compiler from reusing the registers of an A fragment that an
 * asynchronous wgmma still reads (it sees the asm as writing them here,
 * after the wait). */
template <int N>
static __device__ __forceinline__ void
pin_a(uint32_t (&a)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+r"(a[i]) :: "memory");
}

/* The mbarriers that count a half stage's copies: 128 arrivals a phase,
 * one a copying thread, each when that thread's earlier cp.async have
 * landed (the .noinc form: the count is the init value, not raised). */
static __device__ __forceinline__ void
mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
                 :: "r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void
mbar_arrive_on_copies(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
                 :: "r"(bar) : "memory");
}

/* Waits until the phase of parity `parity` has completed, then makes the
 * copies it counted visible to wgmma's (async) proxy. */
static __device__ __forceinline__ void
mbar_wait(uint32_t bar, int parity)
{
    asm volatile("{\n.reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n}\n"
                 :: "r"(bar), "r"(parity) : "memory");
    proxy_fence();
}

/* Byte offset of 16-byte piece c (0..71) of row `row` in a swizzled
 * 576-wide tile of `rows` rows. */
static __device__ __forceinline__ uint32_t
sw_piece(int rows, int row, int c)
{
    return (uint32_t)((c >> 3) * (rows * 128) + row * 128
                      + (((c & 7) ^ (row & 7)) << 4));
}

/* The block-table entries of the tokens a thread copies of tile t: token
 * 16 i + wtid/8, i < BN/16 (-1: past `total`), read a pair before the
 * copies need them, so that the read's latency is not in front of them. */
static __device__ __forceinline__ void
kv_pages(int32_t (&pg)[BN / 16], int wtid, int t, int total,
         const int32_t *__restrict__ bt)
{
#pragma unroll
    for (int i = 0; i < BN / 16; ++i) {
        const int pos = t * BN + 16 * i + (wtid >> 3);
        pg[i] = pos < total ? __ldg(bt + pos / PAGE) : -1;
    }
}

/* One warpgroup's copies of blocks [K0, K1) of tile t (pages from
 * kv_pages) into the stage at `dst`: 8 threads a token (piece 8 k +
 * wtid % 8 of each block), 16 tokens a pass; tokens past the end are
 * zero-filled (never visible, and 0 * P cannot be NaN).  After each
 * block, the thread's arrival on that block's mbarrier (`bars` + 8 k)
 * once its copies so far have landed. */
template <int K0, int K1>
static __device__ __forceinline__ void
load_blocks(uint32_t dst, uint32_t bars, int wtid, int t,
            const int32_t (&pg)[BN / 16], const uint16_t *__restrict__ kv)
{
    const int part = wtid & 7;
    const uint16_t *src[BN / 16];
    uint32_t d[BN / 16];
#pragma unroll
    for (int i = 0; i < BN / 16; ++i) {
        const int tok = 16 * i + (wtid >> 3);
        const int pos = t * BN + tok;
        src[i] = pg[i] >= 0
            ? kv + ((int64_t)pg[i] * PAGE + pos % PAGE) * D_QK + part * 8
            : nullptr;
        d[i] = dst + tok * 128 + ((part ^ (tok & 7)) << 4);
    }
#pragma unroll
    for (int k = K0; k < K1; ++k) {
#pragma unroll
        for (int i = 0; i < BN / 16; ++i)
            kdt_cp_async16(d[i] + k * BLK_BYTES, src[i] ? src[i] + k * 64 : kv,
                           src[i] ? 16 : 0);
        mbar_arrive_on_copies(bars + 8 * k);
    }
}

/* Issues block K of S = Q K^T (4 k16 steps, the first overwriting S
 * when FIRST) against the KV tile at descriptor dk once that block has
 * landed (its mbarrier at `bars` + 8 K, phase parity `par`), as a commit
 * group of its own; block 8 (k_pe) takes Q from registers (q8).  The
 * wgmma.fence comes after the wait: with it before, ptxas would fence
 * again on a path it takes as divergent (the wait loop), and serialise
 * every wgmma of the kernel (C7520). */
template <int K, bool FIRST>
static __device__ __forceinline__ void
qk_block(float (&s)[32], uint64_t dq, uint64_t dk, const uint32_t (&q8)[16],
         uint32_t bars, int par)
{
    mbar_wait(bars + 8 * K, par);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        const int acc = (FIRST && ks == 0) ? 0 : 1;
        if (K < KBLK - 1)
            wg_mma_qk(s, desc_add(dq, K * Q_BLK_BYTES + ks * 32),
                      desc_add(dk, K * BLK_BYTES + ks * 32), acc);
        else
            wg_mma_qk_rs(s, q8[4 * ks], q8[4 * ks + 1], q8[4 * ks + 2],
                         q8[4 * ks + 3], desc_add(dk, K * BLK_BYTES + ks * 32),
                         acc);
    }
    wg_commit();
}

/* The blocks of S in the order their stage is refilled: k_pe first
 * (free once the last S of the stage is done), then the V columns of the
 * warpgroup that computes this S (its own PV frees them), then the
 * other's (freed last).  qk_first issues the first five, qk_rest the
 * other four; five and four commit groups. */
template <int WG>
static __device__ __forceinline__ void
qk_first(float (&s)[32], uint64_t dq, uint64_t dk, const uint32_t (&q8)[16],
         uint32_t bars, int par)
{
    constexpr int O = WG == 0 ? 0 : LO_BLKS;
    qk_block<KBLK - 1, true>(s, dq, dk, q8, bars, par);
    qk_block<O + 0, false>(s, dq, dk, q8, bars, par);
    qk_block<O + 1, false>(s, dq, dk, q8, bars, par);
    qk_block<O + 2, false>(s, dq, dk, q8, bars, par);
    qk_block<O + 3, false>(s, dq, dk, q8, bars, par);
}

template <int WG>
static __device__ __forceinline__ void
qk_rest(float (&s)[32], uint64_t dq, uint64_t dk, const uint32_t (&q8)[16],
        uint32_t bars, int par)
{
    constexpr int O = WG == 0 ? LO_BLKS : 0;
    qk_block<O + 0, false>(s, dq, dk, q8, bars, par);
    qk_block<O + 1, false>(s, dq, dk, q8, bars, par);
    qk_block<O + 2, false>(s, dq, dk, q8, bars, par);
    qk_block<O + 3, false>(s, dq, dk, q8, bars, par);
}

/* A tail tile (it holds tree rows or the end of the KV): S scaled to
 * log2 units, and -inf where rows row0 and row0 + 8 may not look (`anc`
 * is the request's ancestor masks):
 * positions at or past past_len that are not its ancestors (or itself),
 * and positions past the KV's end. */
static __device__ __forceinline__ void
mask_tail(float (&s)[32], int t, int past, int total, int nn,
          const uint32_t *__restrict__ anc, int row0, float scale_log2)
{
    const int lane = threadIdx.x & 31, c2 = 2 * (lane & 3);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int node = (row0 + 8 * h) / H;
        const uint32_t *mask_row = anc + min(node, N_MAX - 1) * W;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int pos = t * BN + 8 * j + c2 + e;
                bool vis = pos < past;
                if (!vis && pos < total && node < nn) {
                    const int jj = pos - past;
                    vis = (__ldg(mask_row + (jj >> 5)) >> (jj & 31)) & 1u;
                }
                float &x = s[4 * j + 2 * h + e];
                x = vis ? x * scale_log2 : kdt_neg_inf();
            }
    }
}

/* The row maxima (log2 units) of rows r0 (h = 0) and r0 + 8 (h = 1) of a
 * tile whose S this thread holds as columns 8 j + c2 + e, i.e.
 * s[4 j + 2 h + e], over the 4 lanes that share a row.  A tail tile's s
 * is already scaled and masked (mask_tail); otherwise the maximum is
 * scale_log2 times that of s, or of -s when the scale is negative
 * (negation is free in FMNMX; the branch is uniform). */
static __device__ __forceinline__ void
tile_max(const float (&s)[32], float (&mx)[2], bool tail, bool neg,
         float abs_scale)
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float m;
        if (tail) {
            m = s[2 * h];
#pragma unroll
            for (int j = 0; j < 8; ++j)
                m = fmaxf(m, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        } else if (neg) {
            m = -s[2 * h];
#pragma unroll
            for (int j = 0; j < 8; ++j)
                m = fmaxf(m, fmaxf(-s[4 * j + 2 * h], -s[4 * j + 2 * h + 1]));
            m *= abs_scale;
        } else {
            m = s[2 * h];
#pragma unroll
            for (int j = 0; j < 8; ++j)
                m = fmaxf(m, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
            m *= abs_scale;
        }
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        mx[h] = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    }
}

/* The lazy running maximum: it moves only when a row's maximum passes it
 * by more than 2^8 (so P <= 256, and the O rescale is skipped on almost
 * every tile). */
static __device__ __forceinline__ float
lazy_max(float m_old, float mx)
{
    return mx > m_old + LAZY_RESCALE ? mx : m_old;
}

/* What O and l computed against m_old are multiplied by to stand against
 * m_new >= m_old (0 when m_old is -inf: there was nothing yet). */
static __device__ __forceinline__ float
rescale_factor(float m_old, float m_new)
{
    return m_new == m_old ? 1.f : kdt_exp2(m_old - m_new);
}

/* The exponent's offset for a row whose maximum is m: -inf means every x
 * so far is -inf, and then p = 0 (not NaN). */
static __device__ __forceinline__ float
exp_base(float m)
{
    return m == kdt_neg_inf() ? 0.f : m;
}

/* s <- p = 2^(x - mu) with x = s * xs, the row sums into l, and P as bf16
 * A fragments: pa[4 ks + i] is register i of k16 step ks (rows r0 / r0 + 8
 * of columns 16 ks + c2 (i = 0, 1) and 16 ks + 8 + c2 (i = 2, 3)). */
static __device__ __forceinline__ void
exp_pack(float (&s)[32], uint32_t (&pa)[16], float (&l)[2],
         const float (&mu)[2], float xs)
{
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float *x = &s[4 * j + 2 * h];
            x[0] = kdt_exp2(fmaf(x[0], xs, -mu[h]));
            x[1] = kdt_exp2(fmaf(x[1], xs, -mu[h]));
            l[h] += x[0] + x[1];
        }
#pragma unroll
    for (int i = 0; i < 16; ++i)
        pa[i] = kdt_pack_bf16x2(s[2 * i], s[2 * i + 1]);
}

/* P times per-row factors c, repacked (pa as exp_pack's). */
static __device__ __forceinline__ void
repack_scaled(const float (&s)[32], uint32_t (&pa)[16], const float (&c)[2])
{
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const float f = c[i & 1]; /* s[2 i]: row half (2 i / 2) % 2 */
        pa[i] = kdt_pack_bf16x2(s[2 * i] * f, s[2 * i + 1] * f);
    }
}

/* A warpgroup's P fragments into a swizzled K-major 64 x 64 P tile
 * (piece j of row r at piece j ^ (r % 8)) with stmatrix, one k16 step's
 * four 8x8 matrices at a time: lane L gives row L % 8 of matrix L / 8
 * (rows +8 when (L/8) is odd, pieces +1 when L >= 16) through `prow`,
 * this lane's row address. */
static __device__ __forceinline__ void
store_p(const uint32_t (&pa)[16], uint32_t prow, int mi, int l7)
{
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
        kdt_stmatrix_x4(prow + (((2 * ks + (mi >> 1)) ^ l7) << 4),
                        pa[4 * ks], pa[4 * ks + 1], pa[4 * ks + 2],
                        pa[4 * ks + 3]);
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

/* O[:, this warpgroup's 256 columns] += P V for the V columns at byte
 * offset `voff` of the ring (dv0: the ring as V), P from registers
 * (pv_regs) or from a P tile in shared memory (pv_smem, descriptor dp).
 * Both issue and commit a group; the caller waits for it within the
 * loop's iteration (an accumulator carried around the loop in flight
 * serialises every wgmma). */
static __device__ __forceinline__ void
pv_regs(float (&o)[128], const uint32_t (&pa)[16], uint64_t dv0,
        uint32_t voff)
{
    pin(o);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks)
        wg_mma_pv_rs(o, pa[4 * ks], pa[4 * ks + 1], pa[4 * ks + 2], pa[4 * ks + 3],
                     desc_add(dv0, voff + ks * 2048));
    wg_commit();
}

static __device__ __forceinline__ void
pv_smem(float (&o)[128], uint64_t dp, uint64_t dv0, uint32_t voff)
{
    pin(o);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks)
        wg_mma_pv(o, desc_add(dp, ks * 32), desc_add(dv0, voff + ks * 2048));
    wg_commit();
}

/* Phase 1: the mbarriers, the running maxima, the Q tile (all threads;
 * padding rows zero-filled) and the first two KV tiles, each warpgroup
 * the blocks it refills in the loop. */
static __device__ __forceinline__ void
load_q_and_first_tiles(const kdt_verify_attn_params &p, const va_block &b,
                       uint32_t sq, uint32_t sk, uint32_t mbar, float *m_s,
                       int tid, int wg, int wtid,
                       const uint16_t *__restrict__ kv,
                       const int32_t *__restrict__ bt)
{
    if (tid < 2 * KBLK)
        mbar_init(mbar + 8 * tid, NTHREADS / 2);
    if (tid < BM)
        m_s[tid] = kdt_neg_inf();
    __syncthreads(); /* the mbarriers exist before anyone arrives */
    const uint16_t *q = p.q + (b.req_row0 + b.m0) * D_QK;
    for (int i = tid; i < BM * CHUNKS; i += NTHREADS) {
        const int row = i / CHUNKS, c = i - row * CHUNKS;
        const bool ok = b.m0 + row < b.valid_rows;
        kdt_cp_async16(sq + sw_piece(BM, row, c),
                       ok ? q + (int64_t)row * D_QK + c * 8 : q,
                       ok ? 16 : 0);
    }
    kdt_cp_async_commit();
    /* the blocks each warpgroup refills in the loop (see there) */
    for (int st = 0; st < 2; ++st) {
        const int t = b.t0 + st;
        if (t < b.t1) {
            int32_t pg[BN / 16];
            kv_pages(pg, wtid, t, b.total, bt);
            const uint32_t dst = sk + st * TILE_BYTES;
            const uint32_t bars = mbar + 8 * KBLK * st;
            if (wg == 0)
                load_blocks<0, LO_BLKS>(dst, bars, wtid, t, pg, kv);
            else
                load_blocks<LO_BLKS, KBLK - 1>(dst, bars, wtid, t, pg, kv);
            if (wg == st)
                load_blocks<KBLK - 1, KBLK>(dst, bars, wtid, t, pg, kv);
        }
    }
    kdt_cp_async_commit();
    kdt_cp_async_wait<1>(); /* Q's group */
    proxy_fence();
    __syncthreads();
}

/* The k_pe block of Q (64 x 64) as A fragments of this warp's 16 rows,
 * 4 k16 steps (ldmatrix from the swizzled block); its shared memory then
 * holds P1. */
static __device__ __forceinline__ void
q_pe_fragments(uint32_t (&q8)[16], uint32_t sq, int wwarp, int lane)
{
    const int row = 16 * wwarp + (lane & 7) + 8 * ((lane >> 3) & 1);
    const uint32_t base = sq + (KBLK - 1) * Q_BLK_BYTES + row * 128;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        const int piece = 2 * ks + (lane >> 4);
        kdt_ldmatrix_x4(&q8[4 * ks], base + ((piece ^ (row & 7)) << 4));
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
kdt_verify_attn(const kdt_verify_attn_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wtid = tid & 127, wwarp = wtid >> 5;
    va_block b;
    if (!va_block_begin<BM, BN, NTHREADS>(b, p))
        return;
    const int past = b.past, nn = b.nn, total = b.total;
    const int m0 = b.m0, t0 = b.t0, t1 = b.t1;

    const uint32_t raw = kdt_smem_addr(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char *smem = smem_raw + (base - raw);
    const uint32_t sq = base + Q_OFF, sk = base + K_OFF;
    const uint32_t mbar = base + MBAR_OFF; /* + 8 (9 stage + block) */
    float *m_s = (float *)(smem + M_OFF);
    float *l_s = (float *)(smem + L_OFF);

    const uint16_t *__restrict__ kv = p.kv_cache;
    const int32_t *__restrict__ bt = p.block_table + (int64_t)b.r * p.max_pages;
    const uint32_t *__restrict__ anc = p.anc_mask + (int64_t)b.r * N_MAX * W;

    load_q_and_first_tiles(p, b, sq, sk, mbar, m_s, tid, wg, wtid, kv, bt);

    /* this thread's accumulator rows (of the block's 64) and column pair */
    const int r0 = 16 * wwarp + (lane >> 2);
    const int c2 = 2 * (lane & 3);
    uint32_t q8[16];
    q_pe_fragments(q8, sq, wwarp, lane);
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i)
        o[i] = 0.f;
    float s[32]; /* the first wgmma of each S overwrites it */
    uint32_t pa[16];
    float l_part[2] = {0.f, 0.f};
    const float scale_log2 = p.scale * KDT_LOG2E;
    /* x = s * scale_log2; its row maximum is scale_log2 times the maximum
     * of s, or of -s when the scale is negative */
    const bool neg = scale_log2 < 0.f;
    const float abs_scale = fabsf(scale_log2);
    /* stmatrix lane addresses into a P tile: lane L gives row L % 8 of
     * matrix L / 8 (row half (L/8) % 2, piece pair offset (L/8) / 2) */
    const int mi = lane >> 3, l7 = lane & 7;
    const uint32_t prow = (16 * wwarp + 8 * (mi & 1) + l7) * 128;
    /* operand descriptors: Q, the two P tiles, stage 0 as K and as V */
    const uint64_t dq = kmajor_desc(sq);
    const uint64_t dp0 = kmajor_desc(base + P0_OFF);
    const uint64_t dp1 = kmajor_desc(base + P1_OFF);
    const uint64_t dk0 = kmajor_desc(sk), dv0 = vmajor_desc(sk);
    const uint32_t bars0 = mbar, bars1 = mbar + 8 * KBLK; /* per stage */
    int32_t pg_a[BN / 16], pg_b[BN / 16]; /* of the next pair's tiles */

    /* Phase 2, the KV loop over pairs (a, b = a + 1).  The wgmma below sit
     * on no branch but the loop's, the warpgroup choice and the pair's
     * tile count: ptxas serialises every wgmma of a kernel that has one on
     * a path it cannot prove warp-uniform (measured: 96 -> 141 us). */
    if (wg == 0) {
        const uint32_t prow0 = base + P0_OFF + prow;
        if (t0 < t1) {
            qk_first<0>(s, dq, dk0, q8, bars0, 0);
            qk_rest<0>(s, dq, dk0, q8, bars0, 0);
            wg_wait<0>();
            pin(s);
        }
        for (int a = t0, i = 0; a < t1; a += 2, ++i) {
            const bool hasb = a + 1 < t1, na = a + 2 < t1, nb = a + 3 < t1;
            kv_pages(pg_a, wtid, a + 2, total, bt);
            kv_pages(pg_b, wtid, a + 3, total, bt);

            /* the maximum after tile a, for WG1 */
            const bool tail = (a + 1) * BN > past;
            if (tail)
                mask_tail(s, a, past, total, nn, anc, m0 + r0, scale_log2);
            float mx[2], m_new[2], mu[2], c[2];
            tile_max(s, mx, tail, neg, abs_scale);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m_old = m_s[r0 + 8 * h];
                m_new[h] = lazy_max(m_old, mx[h]);
                c[h] = rescale_factor(m_old, m_new[h]);
                l_part[h] *= c[h];
                mu[h] = exp_base(m_new[h]);
            }
            __syncwarp(); /* the row's 4 lanes have read m */
            if ((lane & 3) == 0) {
                m_s[r0] = m_new[0];
                m_s[r0 + 8] = m_new[1];
            }
            __threadfence_block(); /* m_s before the arrive (racecheck) */
            bar_arrive(BAR_M0);

            /* O_L = c O_L + P_a V_a,L, P from registers.  Stage 0's k_pe
             * block was read only by S_a, done: refill it with tile a + 2
             * meanwhile, and its blocks 0-3 once this PV is done (S_a and
             * it are their only readers) */
            exp_pack(s, pa, l_part, mu, tail ? 1.f : scale_log2);
            rescale(o, c[0], c[1]);
            pv_regs(o, pa, dv0, 0);
            if (na)
                load_blocks<KBLK - 1, KBLK>(sk, bars0, wtid, a + 2, pg_a, kv);
            wg_wait<0>();
            pin(o);
            pin_a(pa);
            if (na)
                load_blocks<0, LO_BLKS>(sk, bars0, wtid, a + 2, pg_a, kv);

            /* WG1's maximum after tile b: P_a (for WG1's O_R), O_L, l
             * brought to it */
            bar_sync(BAR_M1);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                c[h] = rescale_factor(m_new[h], m_s[r0 + 8 * h]);
                l_part[h] *= c[h];
            }
            if (c[0] != 1.f || c[1] != 1.f)
                repack_scaled(s, pa, c);
            store_p(pa, prow0, mi, l7);
            proxy_fence();
            bar_arrive(BAR_P0);
            rescale(o, c[0], c[1]);

            /* O_L += P_b V_b,L (P_b from shared memory), queued behind
             * WG1's PVs; S of tile a + 2 behind it; stage 1's blocks 0-3
             * (read by S_b, done before BAR_M1, and this PV) refilled
             * with tile a + 3 once this PV is done */
            if (hasb) {
                bar_sync(BAR_PV0);
                bar_sync(BAR_P1);
#pragma unroll
                for (int k = 0; k < LO_BLKS; ++k)
                    mbar_wait(bars1 + 8 * k, i & 1);
                pv_smem(o, dp1, dv0, TILE_BYTES);
            }
            if (na)
                qk_first<0>(s, dq, dk0, q8, bars0, (i + 1) & 1);
            if (hasb) {
                if (na)
                    wg_wait<5>();
                else
                    wg_wait<0>();
                pin(o);
                if (nb)
                    load_blocks<0, LO_BLKS>(sk + TILE_BYTES, bars1, wtid,
                                            a + 3, pg_b, kv);
            }
            if (na)
                qk_rest<0>(s, dq, dk0, q8, bars0, (i + 1) & 1);
            wg_wait<0>();
            pin(s);
            pin(o);
        }
    } else {
        const uint32_t prow1 = base + P1_OFF + prow;
        const uint64_t dk1 = desc_add(dk0, TILE_BYTES);
        float m_fin[2] = {kdt_neg_inf(), kdt_neg_inf()}; /* after tile b */
        if (t0 + 1 < t1) {
            qk_first<1>(s, dq, dk1, q8, bars1, 0);
            qk_rest<1>(s, dq, dk1, q8, bars1, 0);
            wg_wait<0>();
            pin(s);
        }
        for (int a = t0, i = 0; a < t1; a += 2, ++i) {
            const bool hasb = a + 1 < t1, na = a + 2 < t1, nb = a + 3 < t1;
            kv_pages(pg_b, wtid, a + 3, total, bt);
            kv_pages(pg_a, wtid, a + 2, total, bt);

            /* WG0's maximum after tile a, then ours after tile b */
            bar_sync(BAR_M0);
            const bool tail = (a + 2) * BN > past;
            float mx[2] = {kdt_neg_inf(), kdt_neg_inf()};
            if (hasb) {
                if (tail)
                    mask_tail(s, a + 1, past, total, nn, anc, m0 + r0,
                              scale_log2);
                tile_max(s, mx, tail, neg, abs_scale);
            }
            float mu[2], c[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m_a = m_s[r0 + 8 * h];
                const float m_b = lazy_max(m_a, mx[h]);
                /* O_R and l stand against m_fin (the last pair's end) */
                c[h] = rescale_factor(m_fin[h], m_b);
                l_part[h] *= c[h];
                m_fin[h] = m_b;
                mu[h] = exp_base(m_b);
            }
            __syncwarp();
            if ((lane & 3) == 0) {
                m_s[r0] = m_fin[0];
                m_s[r0 + 8] = m_fin[1];
            }
            __threadfence_block();
            bar_arrive(BAR_M1);
            rescale(o, c[0], c[1]);

            /* P_b stored for WG0; O_R += P_a V_a,R (P_a from WG0), then
             * O_R += P_b V_b,R from registers */
            if (hasb) {
                exp_pack(s, pa, l_part, mu, tail ? 1.f : scale_log2);
                store_p(pa, prow1, mi, l7);
                proxy_fence();
                bar_arrive(BAR_P1);
            }
            bar_sync(BAR_P0);
#pragma unroll
            for (int k = LO_BLKS; k < KBLK - 1; ++k)
                mbar_wait(bars0 + 8 * k, i & 1);
            pv_smem(o, dp0, dv0, LO_BLKS * BLK_BYTES);
            if (hasb) {
                pv_regs(o, pa, dv0, TILE_BYTES + LO_BLKS * BLK_BYTES);
                bar_arrive(BAR_PV0);
            }
            /* refills for the next pair: stage 1's k_pe block (read only
             * by S_b, done); stage 0's blocks 4-7 once P_a V_a,R is done
             * (S_a, done before BAR_M0, and it read them); stage 1's
             * blocks 4-7 once P_b V_b,R is (S_b and it) */
            if (nb)
                load_blocks<KBLK - 1, KBLK>(sk + TILE_BYTES, bars1, wtid,
                                            a + 3, pg_b, kv);
            if (hasb)
                wg_wait<1>();
            else
                wg_wait<0>();
            pin(o);
            if (na)
                load_blocks<LO_BLKS, KBLK - 1>(sk, bars0, wtid, a + 2, pg_a,
                                               kv);
            wg_wait<0>();
            pin(o);
            pin_a(pa);
            if (nb) {
                load_blocks<LO_BLKS, KBLK - 1>(sk + TILE_BYTES, bars1, wtid,
                                               a + 3, pg_b, kv);
                qk_first<1>(s, dq, dk1, q8, bars1, (i + 1) & 1);
                qk_rest<1>(s, dq, dk1, q8, bars1, (i + 1) & 1);
                wg_wait<0>();
                pin(s);
            }
        }
    }

    /* ---- Phase 3, the epilogue: both warpgroups' row sums, LSE (from
     * the last maximum, WG1's), normalised O ---- */
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_part[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if ((lane & 3) == 0)
            l_s[wg * BM + r0 + 8 * h] = l;
    }
    __syncthreads();

#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r0 + 8 * h;
        const float l = l_s[row] + l_s[BM + row];
        if (wg == 0 && (lane & 3) == 0)
            va_store_lse(p, b, m0 + row, m_s[row], l);
        if (m0 + row >= ROWS)
            continue;
        const va_out d = va_row_out(p, b, m0 + row, l);
        const int col0 = VCOLS * wg + c2;
#pragma unroll
        for (int j = 0; j < 32; ++j)
            va_put(d, col0 + 8 * j, o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    }
}
