/*
 * verify_attn_wgmma_ptx.cuh: the PTX the wgmma body of verify_attn is
 * built from, as inline asm (NVRTC has no CUDA header): named barriers,
 * the async-proxy fence, wgmma (fence, commit, wait, the shared-memory
 * matrix descriptors and the MMAs themselves), stmatrix, and the
 * thread-block-cluster operations of the in-cluster merge.  A part of
 * verify_attn_wgmma.cuh, included after its constants (NTHREADS, the
 * tile geometry); nothing here is used by another kernel.
 */
/* bar.sync / bar.arrive of COUNT threads: the two math warpgroups
 * (bar_sync, bar_arrive), or all three where a barrier pairs two of
 * them with the producer. */
template <int COUNT>
static __device__ __forceinline__ void
bar_sync_n(int id)
{
    asm volatile("bar.sync %0, %1;" :: "r"(id), "n"(COUNT) : "memory");
}

template <int COUNT>
static __device__ __forceinline__ void
bar_arrive_n(int id)
{
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "n"(COUNT) : "memory");
}

static __device__ __forceinline__ void
bar_sync(int id)
{
    bar_sync_n<NTHREADS>(id);
}

static __device__ __forceinline__ void
bar_arrive(int id)
{
    bar_arrive_n<NTHREADS>(id);
}

/* This warpgroup's registers a thread, raised to or lowered to N (a
 * multiple of 8 in 24..256): the block's pool gives what another
 * warpgroup gave back.  Every warp of the warpgroup runs it. */
template <int N>
static __device__ __forceinline__ void
setmaxnreg_inc(void)
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}

template <int N>
static __device__ __forceinline__ void
setmaxnreg_dec(void)
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}

/* A named barrier of one warpgroup's 128 threads alone. */
static __device__ __forceinline__ void
bar_sync_wg(int id)
{
    asm volatile("bar.sync %0, 128;" :: "r"(id) : "memory");
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

/* 16 bytes to shared memory through the generic proxy (a
 * fence.proxy.async before wgmma may read them). */
static __device__ __forceinline__ void
st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

/* Asks L2 for the 128-byte line that holds `src`: a hint, no register
 * written and nothing to wait for. */
static __device__ __forceinline__ void
prefetch_l2(const void *src)
{
    asm volatile("prefetch.global.L2 [%0];" :: "l"(src) : "memory");
}

static __device__ __forceinline__ void
st_shared_v2(uint32_t addr, uint32_t a, uint32_t b)
{
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};"
                 :: "r"(addr), "r"(a), "r"(b) : "memory");
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

/* Shared-memory matrix descriptor, 64-byte swizzle (layout type 2), K
 * major with 64-byte rows: 8-row groups 512 B apart.  The e4m3 P tile
 * of MATH = e4m3 (kdt_attn_tiles.h). */
static __device__ __forceinline__ uint64_t
sw64_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4)
           | ((uint64_t)(16 >> 4) << 16)
           | ((uint64_t)(512 >> 4) << 32)
           | (2ull << 62);
}

/* The accumulator operands of a wgmma: its asm's first N operands
 * ("%0, ..., %N-1") and their constraints, the f32 registers d[0 .. N-1]
 * read and written (N = 32 for m64n64, 128 for m64n256). */
#define KDT_WG_D32_REGS \
    "%0, %1, %2, %3, %4, %5, %6, %7, " \
    "%8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31"
#define KDT_WG_D128_REGS \
    KDT_WG_D32_REGS ", " \
    "%32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, " \
    "%72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, " \
    "%88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, " \
    "%104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, " \
    "%120, %121, %122, %123, %124, %125, %126, %127"
/* d[0 .. 31] under constraint C: "+f" read and written, "=f" written
 * only (a wgmma from zero) */
#define KDT_WG_D32_AS(C, d) \
    C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), \
    C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]), C(d[12]), C(d[13]), \
    C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), \
    C(d[20]), C(d[21]), C(d[22]), C(d[23]), C(d[24]), C(d[25]), \
    C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31])
#define KDT_WG_D32_OUT(d) KDT_WG_D32_AS("+f", d)
#define KDT_WG_D32_W(d) KDT_WG_D32_AS("=f", d)
#define KDT_WG_D128_OUT(d) \
    KDT_WG_D32_OUT(d), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
    "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), \
    "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), \
    "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
    "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
    "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), \
    "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), \
    "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), \
    "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), \
    "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/* The 16-bit operand type of both products: bf16, or f16 over an e4m3
 * cache (which widens to f16 exactly; kdt_fp8.cuh). */
#if KDT_KV == 1
#define KDT_WG_AB "f16.f16"
#else
#define KDT_WG_AB "bf16.bf16"
#endif

/* D (64 x 64 f32) += A B^T over one k16 step: A and B both K-major in
 * 128-byte-swizzled shared memory (the Q tile and the K tile).  `acc` = 0
 * overwrites D (the first step of a tile). */
static __device__ __forceinline__ void
wg_mma_qk(float (&d)[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." KDT_WG_AB " {"
        KDT_WG_D32_REGS
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        :
        KDT_WG_D32_OUT(d)
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
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." KDT_WG_AB " {"
        KDT_WG_D128_REGS
        "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
        :
        KDT_WG_D128_OUT(d)
        : "l"(da), "l"(db));
}

/* MATH = e4m3: S on e4m3 operands, one k32 step (32 bytes of each
 * operand's rows) an instruction, both K-major (FP8 wgmma has no
 * transposed form): d += A B, or d = A B for ACC 0 (d written, not
 * read). */
template <int ACC>
static __device__ __forceinline__ void
wg_mma_qk8(float (&d)[32], uint64_t da, uint64_t db)
{
    if constexpr (ACC)
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
            KDT_WG_D32_REGS
            "}, %32, %33, p, 1, 1;\n}\n"
            :
            KDT_WG_D32_OUT(d)
            : "l"(da), "l"(db));
    else
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
            KDT_WG_D32_REGS
            "}, %32, %33, p, 1, 1;\n}\n"
            :
            KDT_WG_D32_W(d)
            : "l"(da), "l"(db));
}

/* O^T of one 64-dim chunk over one k32 step, d = V^T P^T for ACC 0 (d
 * written, not read), d += V^T P^T for ACC 1: A (V^T) from this
 * thread's registers (a[r], byte b: row 16 w + g + 8 (r % 2), K position
 * 4 q + b + 16 (r / 2) of warp w, lane 4 g + q), B (P^T: P's rows are
 * its N, K-major) from shared memory. */
template <int ACC>
static __device__ __forceinline__ void
wg_mma_pv8t(float (&d)[32], const uint32_t (&a)[4], uint64_t db)
{
    if constexpr (ACC)
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
            KDT_WG_D32_REGS
            "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
            :
            KDT_WG_D32_OUT(d)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    else
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
            KDT_WG_D32_REGS
            "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
            :
            KDT_WG_D32_W(d)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* Thread block clusters (a row tile's splits launched as one cluster of
 * dims (1, S, 1)): its size and this block's rank, the cluster-wide
 * barrier (release / acquire), and loads from another block's shared
 * memory at the same offset (mapa: its address in the cluster window). */
static __device__ __forceinline__ uint32_t
cluster_size(void)
{
    uint32_t n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}

static __device__ __forceinline__ uint32_t
cluster_rank(void)
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

static __device__ __forceinline__ void
cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

static __device__ __forceinline__ uint32_t
cluster_addr(uint32_t addr, uint32_t rank)
{
    uint32_t a;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(a) : "r"(addr), "r"(rank));
    return a;
}

static __device__ __forceinline__ float
cluster_ld(uint32_t a)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a)
                 : "memory");
    return v;
}

static __device__ __forceinline__ float4
cluster_ld4(uint32_t a)
{
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a)
                 : "memory");
    return v;
}
