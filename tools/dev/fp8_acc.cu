/* fp8_acc.cu: how many bits the tensor cores' f32 accumulator keeps,
 * for each instruction verify_attn uses (wgmma and mma.sync, e4m3 and
 * bf16).  In the first two probes every element of A and B is the same
 * value x, so every product is x^2 and the operands' layouts do not
 * matter; the third lays B out as the descriptor says.
 *
 *   carry:    A = B = 0, C = 1 + 2^-k: D = C exactly when the
 *             instruction passes the accumulator through in f32; prints
 *             the largest k kept (f32 keeps k = 23).
 *   products: C = 1, x = 2^-j: D = 1 + K x^2 (K products of the
 *             instruction's k), exactly in f32 down to 2^-23; prints what
 *             each instruction adds, against K x^2.
 *   groups:   wgmma m64n8k32 e4m3 only, A = 1 and B's eight columns
 *             each a pattern of one big product (448) and small ones
 *             (2^-9, below 2^-13 of the big one) at chosen k: how many
 *             small products each column keeps says which of the k32's
 *             products are aligned together (a small one aligned to
 *             the big one is lost; one summed apart, kept), with C = 0
 *             and C = 448.
 *
 * Build: nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a
 *        -I kernels_src -I tools/dev tools/dev/fp8_acc.cu -o fp8_acc
 * (sm_90a: wgmma; mma.sync m16n8k32 e4m3 there is what ptxas builds for
 * a part without the FP8 mma.sync instruction.)  For the parts that
 * have it, -arch=sm_89 or -arch=sm_120 instead: the mma.sync probes
 * alone (the wgmma ones are left out of the build and skipped). */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>
#include "kdt_mma.cuh"
#include "dev_cuda.h"

enum { WG_E4M3, WG_BF16, MMA_E4M3, MMA_BF16, NKIND };
static const char *const kind_name[NKIND] = {
    "wgmma m64n8k32 e4m3", "wgmma m64n8k16 bf16", "mma.sync m16n8k32 e4m3",
    "mma.sync m16n8k16 bf16"};
static const int kind_k[NKIND] = {32, 16, 32, 16};

/* wgmma is sm_90a's alone: elsewhere its probes are built empty and the
 * host skips them (wgmma_built). */
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8_ACC_NO_WGMMA 1
#endif

#ifndef FP8_ACC_NO_WGMMA
/* No-swizzle descriptor of an 8 x 32-byte K-major B: two 8 x 16-byte core
 * matrices 128 bytes apart (leading), one group of eight rows (stride). */
static __device__ uint64_t
plain_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(128 >> 4) << 16)
           | ((uint64_t)(256 >> 4) << 32);
}

/* D (64 x 8) += A (registers) times B (desc), e4m3 */
static __device__ __forceinline__ void
wg_e4m3(float (&d)[4], const uint32_t (&a)[4], uint64_t desc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
#endif

/* Whether this build's code for the device holds the wgmma probes. */
__global__ void
wgmma_built(int *out)
{
#ifdef FP8_ACC_NO_WGMMA
    *out = 0;
#else
    *out = 1;
#endif
}

/* d[0] of thread 0 into out[0]; the largest |d - d of thread 0| over
 * every element of every thread into out[1] (all must be equal). */
template <int KIND>
__global__ void __launch_bounds__(128)
probe(float c, uint32_t word, float *out)
{
    __shared__ __align__(1024) uint32_t b_tile[256];
    for (int i = threadIdx.x; i < 256; i += 128)
        b_tile[i] = word;
    __syncthreads();
    float d[4] = {c, c, c, c};
    const uint32_t a[4] = {word, word, word, word};
    if (KIND == WG_E4M3 || KIND == WG_BF16) {
#ifndef FP8_ACC_NO_WGMMA
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        const uint32_t addr = (uint32_t)__cvta_generic_to_shared(b_tile);
        const uint64_t desc = plain_desc(addr);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        if (KIND == WG_E4M3)
            wg_e4m3(d, a, desc);
        else
            asm volatile(
                "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
    } else if (KIND == MMA_E4M3) {
        kdt_mma_e4m3(d, a, word, word);
    } else {
        kdt_mma_bf16(d, a, word, word);
    }
    __shared__ float d0;
    if (threadIdx.x == 0)
        d0 = d[0];
    __syncthreads();
    float dev = 0.f;
    for (int i = 0; i < 4; ++i)
        dev = fmaxf(dev, fabsf(d[i] - d0));
    for (int o = 16; o > 0; o >>= 1)
        dev = fmaxf(dev, __shfl_xor_sync(0xffffffffu, dev, o));
    if (threadIdx.x == 0)
        out[0] = d0;
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        atomicMax((int *)&out[1], __float_as_int(dev)); /* dev >= 0 */
}

/* groups: A = 1.0 everywhere, B's 8 x 32 bytes from bg (K-major, no
 * swizzle: byte (k / 16) 128 + n 16 + k % 16, as plain_desc says), C =
 * c; D[0][n] into out[n] (threads 0-3 hold row 0's eight columns), and
 * out[8] the largest |D[8][n] - D[0][n]| (every row alike). */
__global__ void __launch_bounds__(128)
probe_groups(float c, const uint8_t *bg, float *out)
{
#ifndef FP8_ACC_NO_WGMMA
    __shared__ __align__(1024) uint8_t b_tile[1024];
    for (int i = threadIdx.x; i < 1024; i += 128)
        b_tile[i] = i < 256 ? bg[i] : 0;
    __syncthreads();
    float d[4] = {c, c, c, c};
    const uint32_t a = 0x38383838u; /* four e4m3 1.0 */
    const uint32_t as[4] = {a, a, a, a};
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    wg_e4m3(d, as, plain_desc((uint32_t)__cvta_generic_to_shared(b_tile)));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    /* d[2 h + e] = D[l / 4 + 8 h][2 (l % 4) + e] for warp 0's lane l */
    if (threadIdx.x < 4) {
        out[2 * threadIdx.x] = d[0];
        out[2 * threadIdx.x + 1] = d[1];
        const float dev = fmaxf(fabsf(d[2] - d[0]), fabsf(d[3] - d[1]));
        atomicMax((int *)&out[8], __float_as_int(dev)); /* dev >= 0 */
    }
#endif
}

/* Column n of the groups probe: the big product's k (-1: none) and the
 * small products' k range [lo, hi]. */
struct group_col {
    int big, lo, hi;
};
static const group_col group_cols[8] = {
    {0, 1, 31},  /* every other product small */
    {0, 16, 31}, /* the smalls in the other k16 half */
    {0, 8, 15},  /* in the other k8 of the big one's k16 */
    {0, 4, 7},   /* in the other k4 of its k8 */
    {0, 1, 3},   /* beside it in its k4 */
    {-1, 0, 15}, /* no big product: the smalls' own sum */
    {16, 0, 15}, /* the big one in the second half */
    {0, 1, 0},   /* the big one alone */
};

static void
run_groups(void)
{
    uint8_t h[256] = {0};
    for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 32; ++k) {
            const group_col &g = group_cols[n];
            const uint8_t v = k == g.big ? 0x7e /* 448 */
                              : (k >= g.lo && k <= g.hi) ? 0x01 /* 2^-9 */
                                                          : 0x00;
            h[(k / 16) * 128 + n * 16 + k % 16] = v;
        }
    uint8_t *bg;
    float *out;
    CK(cudaMalloc(&bg, sizeof h));
    CK(cudaMalloc(&out, 9 * sizeof(float)));
    CK(cudaMemcpy(bg, h, sizeof h, cudaMemcpyHostToDevice));
    const float cs[2] = {0.f, 448.f};
    for (int ci = 0; ci < 2; ++ci) {
        float o[9];
        CK(cudaMemset(out, 0, sizeof o));
        probe_groups<<<1, 128>>>(cs[ci], bg, out);
        CK(cudaGetLastError());
        CK(cudaMemcpy(o, out, sizeof o, cudaMemcpyDeviceToHost));
        for (int n = 0; n < 8; ++n) {
            const group_col &g = group_cols[n];
            const int smalls = g.hi >= g.lo ? g.hi - g.lo + 1 : 0;
            const double big = (g.big >= 0 ? 448.0 : 0.0) + cs[ci];
            const double kept = ((double)o[n] - big) / 0x1p-9;
            printf("wgmma m64n8k32 e4m3      groups: C = %g, big at k %2d, "
                   "%2d small at k %2d-%2d: D = %.9g, %g of %d small kept\n",
                   cs[ci], g.big, smalls, g.lo, g.hi, o[n], kept, smalls);
        }
        printf("wgmma m64n8k32 e4m3      groups: C = %g: rows alike: %s\n",
               cs[ci], o[8] == 0.f ? "yes" : "NO");
    }
    CK(cudaFree(bg));
    CK(cudaFree(out));
}

static float *g_out;

static float
run(int kind, float c, uint32_t word, float *dev)
{
    float h[2];
    CK(cudaMemset(g_out, 0, 8));
    switch (kind) {
    case WG_E4M3: probe<WG_E4M3><<<1, 128>>>(c, word, g_out); break;
    case WG_BF16: probe<WG_BF16><<<1, 128>>>(c, word, g_out); break;
    case MMA_E4M3: probe<MMA_E4M3><<<1, 128>>>(c, word, g_out); break;
    default: probe<MMA_BF16><<<1, 128>>>(c, word, g_out); break;
    }
    CK(cudaGetLastError());
    CK(cudaMemcpy(h, g_out, 8, cudaMemcpyDeviceToHost));
    *dev = fmaxf(*dev, h[1]);
    return h[0];
}

/* x = 2^-j as the operand word (four e4m3 bytes or two bf16) */
static uint32_t
pow2_word(int kind, int j)
{
    if (kind == WG_E4M3 || kind == MMA_E4M3) {
        /* e4m3: bias 7, normal down to 2^-6, subnormals 2^-7 .. 2^-9 */
        const uint32_t b = j <= 6 ? (uint32_t)(7 - j) << 3 : 1u << (9 - j);
        return b * 0x01010101u;
    }
    return ((uint32_t)(127 - j) << 7) * 0x00010001u;
}

int
main()
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    CK(cudaMalloc(&g_out, 8));
    int *built, wgmma = 0;
    CK(cudaMalloc(&built, sizeof(int)));
    wgmma_built<<<1, 1>>>(built);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&wgmma, built, sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaFree(built));
    for (int kind = 0; kind < NKIND; ++kind) {
        if (!wgmma && (kind == WG_E4M3 || kind == WG_BF16)) {
            printf("%-24s not built for this part (wgmma is sm_90a's)\n",
                   kind_name[kind]);
            continue;
        }
        float dev = 0.f;
        int kept = 0;
        for (int k = 1; k <= 23; ++k) {
            const float c = 1.f + ldexpf(1.f, -k);
            if (run(kind, c, 0u, &dev) == c)
                kept = k;
            else
                break;
        }
        printf("%-24s carry: C = 1 + 2^-k passes through for k <= %d", kind_name[kind], kept);
        /* the same below: which bits of C = 1 + 2^-14 + ... survive */
        const float c = 1.f + ldexpf(1.f, -12) + ldexpf(1.f, -14)
                        + ldexpf(1.f, -20) + ldexpf(1.f, -23);
        const float d = run(kind, c, 0u, &dev);
        printf(" (C = 1 + 2^-12 + 2^-14 + 2^-20 + 2^-23 gives 1 + %.9g"
               " 2^-12)\n", (d - 1.f) * 4096.f);
        for (int j = 3; j <= 9; ++j) {
            const double want = kind_k[kind] * ldexp(1.0, -2 * j);
            const float got = run(kind, 1.f, pow2_word(kind, j), &dev) - 1.f;
            printf("%-24s products: C = 1, x = 2^-%d: adds %.9g, K x^2 = %.9g%s\n",
                   kind_name[kind], j, got, want,
                   (double)got == want ? "" : "  (differs)");
        }
        printf("%-24s every element of every thread alike: %s\n",
               kind_name[kind], dev == 0.f ? "yes" : "NO");
    }
    if (wgmma)
        run_groups();
    return 0;
}
