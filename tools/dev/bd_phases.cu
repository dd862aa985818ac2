// bd_phases.cu: where one build_ddtree launch spends its time.  Includes
// kernels_src/build_ddtree.cu with KDT_BD_PHASE recording thread 0's
// clock64() at each numbered point, runs one request of kdtree-bench's
// input at budget K (tools/bench_ddtree_input.h: request 0 is the bench's
// R = 1 case, the next ones follow on its seed), and prints
// the median cycles between consecutive points over 30 launches, and the
// time per launch of 50 back-to-back launches.
//   nvcc -std=c++17 -arch=sm_90 -O3 -I kernels_src -DKDT_L=15 -DKDT_K=512 \
//        -DKDT_N_MAX=513 tools/dev/bd_phases.cu -o bd_phases && ./bd_phases 3
// Development tool: not installed, not tested.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

__device__ long long g_phase[16];
#define KDT_BD_PHASE(i)                                                   \
    do {                                                                  \
        if (threadIdx.x == 0)                                             \
            g_phase[(i)] = clock64();                                     \
    } while (0)
#include "build_ddtree.cu"
#include "../bench_ddtree_input.h"

#include "dev_cuda.h"

int
main(int argc, char **argv)
{
    const int nreq = argc > 1 ? atoi(argv[1]) : 4; // distinct requests
    const int B = N_MAX - 1;
    std::vector<float> lp(L * K);
    std::vector<int> ids(L * K);
    uint64_t seed = BD_SEED(B, 1);
    kdt_build_ddtree_params p = {};
    float *d_lp;
    int *d_ids, *d_i;
    unsigned *d_mask;
    float *d_score;
    CK(cudaMalloc(&d_lp, sizeof(float) * L * K));
    CK(cudaMalloc(&d_ids, sizeof(int) * L * K));
    CK(cudaMalloc(&d_i, sizeof(int) * (8 + 6 * N_MAX)));
    CK(cudaMalloc(&d_score, sizeof(float) * N_MAX));
    CK(cudaMalloc(&d_mask, sizeof(unsigned) * N_MAX * W));
    int hb[3] = {B, 7, 0};
    CK(cudaMemcpy(d_i, hb, sizeof hb, cudaMemcpyHostToDevice));
    p.lp = d_lp;
    p.ids = d_ids;
    p.budget = d_i;
    p.root_token = d_i + 1;
    p.n_nodes = d_i + 4;
    p.token = d_i + 8;
    p.parent = p.token + N_MAX;
    p.depth = p.parent + N_MAX;
    p.position = p.depth + N_MAX;
    p.first_child = p.position + N_MAX;
    p.next_sibling = p.first_child + N_MAX;
    p.score = d_score;
    p.anc_mask = d_mask;
    p.n_requests = 1;
    CK(cudaFuncSetAttribute(kdt_build_ddtree,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            SMEM_BYTES));
    const char *names[16] = {"start", "lp loaded", "checked", "-", "round 1",
                             "round 2", "round 3", "round 4", "round 5",
                             "rounds 6+", "search done", "sorted",
                             "ranked", "links", "padding", "rows written"};
    for (int q = 0; q < nreq; q++) {
        bd_make_request(lp.data(), ids.data(), L, K, &seed);
        bd_rnd64(&seed); // the bench's root token
        CK(cudaMemcpy(d_lp, lp.data(), sizeof(float) * L * K,
                      cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_ids, ids.data(), sizeof(int) * L * K,
                      cudaMemcpyHostToDevice));
        std::vector<std::vector<long long>> d(16);
        for (int it = 0; it < 31; it++) {
            long long z[16] = {0};
            CK(cudaMemcpyToSymbol(g_phase, z, sizeof z));
            kdt_build_ddtree<<<1, THREADS, SMEM_BYTES>>>(p);
            CK(cudaDeviceSynchronize());
            long long h[16];
            CK(cudaMemcpyFromSymbol(h, g_phase, sizeof h));
            if (it == 0)
                continue;
            long long prev = h[0];
            for (int i = 1; i < 16; i++)
                if (h[i]) {
                    d[i].push_back(h[i] - prev);
                    prev = h[i];
                }
        }
        const float us = median_us(
            [&] { kdt_build_ddtree<<<1, THREADS, SMEM_BYTES>>>(p); }, 15, 50);
        int n;
        CK(cudaMemcpy(&n, p.n_nodes, sizeof n, cudaMemcpyDeviceToHost));
        printf("request %d: B=%d n_nodes=%d, %.2f us per launch "
               "(median of 15 x 50)\n", q, B, n, us);
        long long tot = 0;
        for (int i = 1; i < 16; i++) {
            if (d[i].empty())
                continue;
            std::sort(d[i].begin(), d[i].end());
            long long m = d[i][d[i].size() / 2];
            tot += m;
            printf("  %-13s %7lld cycles\n", names[i], m);
        }
        printf("  %-13s %7lld cycles\n", "total", tot);
    }
    return 0;
}
