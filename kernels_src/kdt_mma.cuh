/*
 * kdt_mma.cuh: the warp-level tensor-core and async-copy primitives the
 * attention kernel is built from, as inline PTX so that NVRTC needs no CUDA
 * header.  Every instruction here exists on sm_80 and later (sm_90 Hopper,
 * sm_120 Blackwell workstation parts): mma.sync m16n8k16 bf16 and f16 ->
 * f32, ldmatrix, cp.async; and on sm_89 and later mma.sync m16n8k32 e4m3
 * -> f32 (an e4m3 cache's kernels only: that shape needs sm_89).  Nothing
 * Hopper-only (no wgmma, no TMA), so one source serves both targets.
 */
#ifndef KDT_MMA_CUH
#define KDT_MMA_CUH

#include "kdt_math.cuh"
#include "kdt_params.h"

/* Shared-memory address of a generic pointer, as the 32-bit value that
 * ldmatrix / cp.async / st.shared take. */
static __device__ __forceinline__ uint32_t
kdt_smem_addr(const void *p)
{
    uint32_t a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
        : "=r"(a) : "l"(p));
    return a;
}

/* 16-byte global -> shared copy that bypasses L1 (.cg): the KV tile is
 * consumed once per block, so caching it in L1 only evicts the block table.
 * src_bytes = 0 reads nothing and zero-fills the 16 bytes. */
static __device__ __forceinline__ void
kdt_cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

static __device__ __forceinline__ void
kdt_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until at most N committed groups are still in flight. */
template <int N>
static __device__ __forceinline__ void
kdt_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

/* Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix
 * i, and r[i] receives this lane's pair of matrix i. */
static __device__ __forceinline__ void
kdt_ldmatrix_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* Two 8x8 b16 matrices (lanes 0-7 and 8-15 give the row addresses). */
static __device__ __forceinline__ void
kdt_ldmatrix_x2(uint32_t r[2], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

/* The same as x4, each matrix transposed (for a B operand stored k-major). */
static __device__ __forceinline__ void
kdt_ldmatrix_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* The same as x2, each matrix transposed. */
static __device__ __forceinline__ void
kdt_ldmatrix_x2_trans(uint32_t r[2], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

/* c += a * b for one m16n8k16 tile: a is the 16x16 bf16 A fragment (4
 * registers), b0/b1 the 16x8 B fragment, c the 16x8 f32 accumulator. */
static __device__ __forceinline__ void
kdt_mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The same with f16 operands (a: 4 registers, b0/b1: 2, each an f16x2). */
static __device__ __forceinline__ void
kdt_mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c += a * b for one m16n8k32 tile of e4m3 (sm_89+): a the 16x32 A
 * fragment (4 registers of 4 elements: rows lane / 4 (+ 8 in a[1], a[3]),
 * k 4 (lane % 4) .. + 3 (+ 16 in a[2], a[3]), element 0 in bits 0-7),
 * b0/b1 the 32x8 B fragment (column lane / 4, k 4 (lane % 4) .. + 3, + 16
 * in b1), c the f32 accumulator as for m16n8k16. */
static __device__ __forceinline__ void
kdt_mma_e4m3(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d = a * b for one m16n8k32 tile of e4m3 (sm_89+), summed from zero:
 * the fragments as kdt_mma_e4m3's.  The FP8 mma.sync of sm_89 adds in
 * fewer bits than f32 (docs/contract.md §3), so a sum that runs long
 * takes each step from zero and adds it to its own f32 total. */
static __device__ __forceinline__ void
kdt_mma_e4m3_z(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
          "f"(0.f));
}

/* Two floats -> packed f16x2 (round to nearest even); lo in bits 0..15. */
static __device__ __forceinline__ uint32_t
kdt_pack_f16x2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Two floats -> packed bf16x2 (round to nearest even); lo in bits 0..15. */
static __device__ __forceinline__ uint32_t
kdt_pack_bf16x2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#endif /* KDT_MMA_CUH */
