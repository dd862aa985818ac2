// dt_phases.cu: where one draft_topk launch spends its time.  Includes
// kernels_src/draft_topk.cu with KDT_DT_PHASE recording, for thread 0 of
// every block, clock64() and %globaltimer at each numbered point; runs
// kdtree-bench's logits (roughly normal, scale 5.2; bf16) for `rows` rows
// split over clusters of S blocks, and prints per phase the median over
// blocks and launches of the cycles since the previous point, and the
// median over launches of when the last block reached it (ns after the
// first block started).  Built with -DNO_MARKS it times 200 back-to-back
// launches instead (the marks cost a little).
//   nvcc -std=c++17 -arch=sm_90 -O3 -I kernels_src -DKDT_V=163840 \
//        -DKDT_K=64 -DKDT_DTYPE=1 tools/dev/dt_phases.cu -o dtp && ./dtp 15 8
// Development tool: not installed, not tested.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef NO_MARKS
constexpr int MAX_BLOCKS = 1024;
__device__ long long g_clk[MAX_BLOCKS][16];
__device__ unsigned long long g_ns[MAX_BLOCKS][16];
#define KDT_DT_PHASE(i)                                                   \
    do {                                                                  \
        if (threadIdx.x == 0 && blockIdx.x < MAX_BLOCKS) {                \
            unsigned long long t_;                                        \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));        \
            g_ns[blockIdx.x][(i)] = t_;                                   \
            g_clk[blockIdx.x][(i)] = clock64();                           \
        }                                                                 \
    } while (0)
#endif
#include "draft_topk.cu"

#include "dev_cuda.h"

static uint64_t
rnd64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint16_t
to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void
launch(const kdt_draft_topk_params &p, int rows, int S)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = dim3(rows * S);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = SMEM_BYTES;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = S;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = S > 1 ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, kdt_draft_topk, p));
}

int
main(int argc, char **argv)
{
    const int rows = argc > 1 ? atoi(argv[1]) : 15;
    const int S = argc > 2 ? atoi(argv[2]) : 8;
    const size_t n = (size_t)rows * V;
    std::vector<uint16_t> h(n);
    std::vector<float> f(n);
    uint64_t seed = 0xD7A17u;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd64(&seed);
        float s = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) +
                  (float)((r >> 32) & 0xffff) + (float)(r >> 48);
        f[i] = (s / 65536.0f - 2.0f) * 5.2f;
        h[i] = to_bf16(f[i]);
    }
    void *d_logits;
    float *d_lp;
    int *d_ids;
    CK(cudaMalloc(&d_logits, n * ESZ));
    CK(cudaMalloc(&d_lp, sizeof(float) * rows * K));
    CK(cudaMalloc(&d_ids, sizeof(int) * rows * K));
    CK(cudaMemcpy(d_logits, DTYPE ? (void *)h.data() : (void *)f.data(),
                  n * ESZ, cudaMemcpyHostToDevice));
    kdt_draft_topk_params p = {};
    p.logits = d_logits;
    p.lp = d_lp;
    p.ids = d_ids;
    CK(cudaFuncSetAttribute(kdt_draft_topk,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            SMEM_BYTES));
    if (S > 1)
        CK(cudaFuncSetAttribute(kdt_draft_topk,
                                cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    const int nb = rows * S;
#ifdef NO_MARKS
    for (int i = 0; i < 20; i++)
        launch(p, rows, S);
    const float us = median_us([&] { launch(p, rows, S); }, 21, 200);
    printf("rows %d S %d K %d dtype %d: %.2f us per launch (median of 21 x 200)\n",
           rows, S, K, DTYPE, us);
#else
    static const char *names[16] = {
        "start", "loads+zero", "seeded", "pass 1", "chunk sum",
        "recount", "tb found", "compacted", "narrowed", "sorted",
        "published", "cluster bar", "lists in", "ranked", "end", "-"};
    std::vector<std::vector<long long>> dc(16), last(16);
    const int its = 31;
    for (int it = 0; it < its; it++) {
        static long long zc[MAX_BLOCKS][16];
        static unsigned long long zn[MAX_BLOCKS][16];
        CK(cudaMemcpyToSymbol(g_clk, zc, sizeof zc));
        CK(cudaMemcpyToSymbol(g_ns, zn, sizeof zn));
        launch(p, rows, S);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpyFromSymbol(zc, g_clk, sizeof zc));
        CK(cudaMemcpyFromSymbol(zn, g_ns, sizeof zn));
        if (it == 0)
            continue;
        unsigned long long t0 = ~0ull;
        for (int b = 0; b < nb && b < MAX_BLOCKS; b++)
            t0 = std::min(t0, zn[b][0]);
        for (int i = 1; i < 16; i++) {
            long long lastb = -1;
            for (int b = 0; b < nb && b < MAX_BLOCKS; b++) {
                if (!zc[b][i])
                    continue;
                int prev = i - 1;
                while (prev > 0 && !zc[b][prev])
                    prev--;
                dc[i].push_back(zc[b][i] - zc[b][prev]);
                lastb = std::max(lastb, (long long)(zn[b][i] - t0));
            }
            if (lastb >= 0)
                last[i].push_back(lastb);
        }
    }
    printf("rows %d S %d K %d dtype %d: %d blocks, medians over blocks and "
           "%d launches\n", rows, S, K, DTYPE, nb, its - 1);
    printf("  %-11s %8s %14s\n", "phase", "cycles", "last block ns");
    for (int i = 1; i < 16; i++) {
        if (dc[i].empty())
            continue;
        std::sort(dc[i].begin(), dc[i].end());
        std::sort(last[i].begin(), last[i].end());
        printf("  %-11s %8lld %14lld\n", names[i], dc[i][dc[i].size() / 2],
               last[i][last[i].size() / 2]);
    }
#endif
    return 0;
}
