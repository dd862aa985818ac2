/*
 * attn_harness.cu: a standalone nvcc harness for verify_attn, for the GPU
 * host before the library is there (it has no libtool/Check).  It includes
 * the kernel source itself, so build one binary per shape:
 *
 *   nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo -I kernels_src -I . \
 *        -DKDT_H=8 -DKDT_PAGE=64 -DKDT_N_MAX=65 \
 *        tools/dev/attn_harness.cu ref/verify_attn.c -o h8
 *
 *   (-DKNAME='"name"' labels the output lines; the target picks the body:
 *   -gencode arch=compute_90a,code=sm_90a builds the wgmma one, any other
 *   target, sm_90 included, the mma.sync one; -DKDT_KV=1 an e4m3 cache,
 *   read in bf16 arithmetic)
 *
 *   ./h8 check SPLITS SCALE SEED past:nn [past:nn ...]   vs the CPU reference
 *   ./h8 bench R PAST SPLITS [SPLITS ...]                 median us, TFLOP/s
 *   ./h8 fit                         clusters of 2..8 the device runs at once
 *
 * (tools/dev/va_phases.cu includes this file to time the wgmma body's KV
 * loop point by point after `bench`.)
 *
 * SPLITS 0 means "what the library would pick" (the rules of
 * src/kernels/verify_attn_splits.h); a negative SPLITS, -SPLITS ways as
 * one cluster a row tile (the wgmma body's in-cluster merge).
 *
 * Environment, for taking the harness toward kdtree-bench's conditions
 * (the library bench against this harness at the multi-wave shapes,
 * docs/performance.md, "Ideas tried": the power cap, c59eb84):
 *   H_CUBIN=FILE      launch FILE's kdt_verify_attn (e.g. the library's
 *                     NVRTC build, from a kdtree-cache entry) through the
 *                     driver API instead of this binary's (no clusters)
 *   H_POOL_PAGES=N    spread the pages over a pool of N pages
 *   H_SCALE=X         bench's softmax scale (default 0.0722)
 *   H_DATA=bench      kdtree-bench's values (small exponents; Q from the
 *                     KV's bytes) instead of uniform [-1, 1)
 *   H_REPS=N          bench: N launches a batch, 21 batches (default 4, 15)
 *   H_SPIN=US         bench: a one-thread spin kernel of US microseconds
 *                     before each batch, as kdtree-bench queues them
 *   H_KV_SCALE=X      an e4m3 cache's scale (default 1)
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cuda.h>
#include <cuda_runtime.h>

/* the kernel source: the first -I directory that has it (kernels_src, or
 * an older copy, to measure it beside the current one) */
#include "verify_attn.cu"
/* the variant's name in the output lines (-DKNAME='"n32"') */
#ifndef KNAME
#define KNAME "lib"
#endif
#include "ref/ref_math.h"
#include "ref/verify_attn.h"
#include "src/kernels/verify_attn_splits.h"

/* Bytes of a cached element.  `check` takes bf16 arithmetic only
 * (MATH=e4m3's bound is gpu_verify_attn's); `bench` either. */
constexpr int KV_BYTES = KV_E4M3 ? 1 : 2;
/* a block's threads: the wgmma body's producer warpgroup (an e4m3 cache
 * in bf16 arithmetic) makes 384 */
#if KDT_ATTN_WGMMA
constexpr int LAUNCH_THREADS = NLAUNCH;
#else
constexpr int LAUNCH_THREADS = NTHREADS;
#endif

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, \
            cudaGetErrorString(e_)); exit(2); } } while (0)

static int sm_count;

/* The environment's knobs (the comment at the top), read once. */
struct Knobs {
    const char *cubin;
    int64_t pool_pages;
    float scale;
    bool bench_data;
    int reps, batches;
    long long spin_us;
    float kv_scale;
};
static Knobs knobs;

static void
read_knobs(void)
{
    const char *e;
    knobs.cubin = getenv("H_CUBIN");
    knobs.pool_pages = (e = getenv("H_POOL_PAGES")) ? atoll(e) : 0;
    knobs.scale = (e = getenv("H_SCALE")) ? (float)atof(e) : 0.0722f;
    knobs.bench_data = (e = getenv("H_DATA")) && !strcmp(e, "bench");
    knobs.reps = (e = getenv("H_REPS")) ? std::max(1, atoi(e)) : 4;
    knobs.batches = getenv("H_REPS") ? 21 : 15;
    knobs.spin_us = (e = getenv("H_SPIN")) ? atoll(e) : 0;
    knobs.kv_scale = (e = getenv("H_KV_SCALE")) ? (float)atof(e) : 1.f;
}

/* H_CUBIN's kernel and the driver entry points that launch it. */
typedef CUresult (*load_fn)(CUmodule *, const void *);
typedef CUresult (*getf_fn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*seta_fn)(CUfunction, CUfunction_attribute, int);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned,
                              unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
static CUfunction cubin_fn;
static launch_fn cubin_launch;

static void *
driver_fn(const char *name)
{
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault,
                                        &q));
    return fn;
}

/* A kdtree-cache entry holds its cubin after a header: from the ELF
 * magic on (trailing bytes are ignored by the loader). */
static void
load_cubin(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "H_CUBIN %s: cannot open\n", path);
        exit(2);
    }
    std::vector<char> buf;
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        buf.insert(buf.end(), tmp, tmp + n);
    fclose(f);
    size_t at = 0;
    while (at + 4 <= buf.size() && memcmp(&buf[at], "\x7f" "ELF", 4))
        ++at;
    CUmodule m;
    CK(cudaFree(0)); /* the primary context, current */
    if (at + 4 > buf.size() ||
        ((load_fn)driver_fn("cuModuleLoadData"))(&m, &buf[at]) !=
            CUDA_SUCCESS ||
        ((getf_fn)driver_fn("cuModuleGetFunction"))(&cubin_fn, m,
                                                    "kdt_verify_attn") !=
            CUDA_SUCCESS) {
        fprintf(stderr, "H_CUBIN %s: no loadable kdt_verify_attn\n", path);
        exit(2);
    }
    ((seta_fn)driver_fn("cuFuncSetAttribute"))(
        cubin_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        SMEM_BYTES);
    cubin_launch = (launch_fn)driver_fn("cuLaunchKernel");
}
/* clusters of n blocks (1 x n) of the kernel that run at once, as the
 * library asks the driver (kdt_cluster_fit) */
static int64_t cluster_fit[9];

/* A launch of `grid` blocks of the kernel in clusters of 1 x n (`at`
 * holds the attribute). */
static cudaLaunchConfig_t
cluster_config(cudaLaunchAttribute *at, dim3 grid, int n, cudaStream_t st)
{
    cudaLaunchConfig_t cfg = {};
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = 1;
    at->val.clusterDim.y = n;
    at->val.clusterDim.z = 1;
    cfg.gridDim = grid;
    cfg.blockDim = dim3(LAUNCH_THREADS);
    cfg.dynamicSmemBytes = SMEM_BYTES;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cfg;
}

static void
ask_cluster_fit(void)
{
    for (int n = 2; n <= 8; ++n) {
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = cluster_config(&at, dim3(1, n, 1), n, 0);
        int got = 0;
        if (cudaOccupancyMaxActiveClusters(&got, kdt_verify_attn, &cfg) !=
            cudaSuccess)
            got = 0;
        cluster_fit[n] = got;
    }
    cudaGetLastError();
}

/* The library's rules, from the header the launcher reads; one block an
 * SM (both bodies), clusters of up to 8: the split count, negative when
 * the splits run as one cluster (launch's convention) */
static int
pick_splits(int R, int64_t cap)
{
    const kdt_va_split_costs *c = KDT_ATTN_WGMMA ? &kdt_va_costs_wgmma
                                                 : &kdt_va_costs_mma;
    const int s = kdt_va_pick_splits(c, R, N_MAX, H, cap, sm_count);
    const int n = kdt_va_pick_cluster(c, s, R, N_MAX, H, cap, sm_count,
                                      cluster_fit, 8);
    return n > 1 ? -n : s;
}

struct Problem {
    int R, max_pages;
    std::vector<int32_t> past, nn, bt;
    std::vector<uint16_t> q, kv; /* kv: a bf16 cache */
    std::vector<uint8_t> kv8;    /* an e4m3 cache */
    std::vector<uint32_t> mask;
    int64_t n_pages;
};

static void
make_problem(Problem &P, int R, const std::vector<int> &past,
             const std::vector<int> &nn, uint64_t seed, int copies)
{
    P.R = R;
    P.past.assign(past.begin(), past.end());
    P.nn.assign(nn.begin(), nn.end());
    int64_t cap = 0;
    for (int r = 0; r < R; ++r)
        cap = std::max<int64_t>(cap, past[r] + nn[r]);
    P.max_pages = (int)std::max<int64_t>(1, (cap + PAGE - 1) / PAGE + 1);
    const int64_t used = (int64_t)R * P.max_pages * copies;
    P.n_pages = std::max(used, knobs.pool_pages);
    /* a shuffled permutation of the physical pages */
    std::vector<int32_t> perm(P.n_pages);
    for (int64_t i = 0; i < P.n_pages; ++i)
        perm[i] = (int32_t)i;
    for (int64_t i = P.n_pages - 1; i > 0; --i)
        std::swap(perm[i], perm[ref_attn_rand(&seed) % (uint64_t)(i + 1)]);
    /* copies * [R][max_pages], drawn from the whole pool */
    P.bt.assign(perm.begin(), perm.begin() + used);
    /* knobs.bench_data: tools/bench_verify_attn.c's va_bf16 (small
     * exponents); Q from a bf16 cache's bytes, or drawn alike */
    auto bench_bf16 = [&seed]() {
        const uint64_t r = ref_attn_rand(&seed);
        return (uint16_t)(((r & 1) << 15) | ((126 - (r >> 1) % 8) << 7) |
                          ((r >> 8) & 0x7f));
    };
    const size_t n_kv = (size_t)P.n_pages * PAGE * D_QK;
    if (KV_E4M3) {
        /* values of the same range as the bf16 ones, rounded to e4m3 and
         * stored divided by the cache's scale */
        P.kv8.resize(n_kv);
        if (knobs.bench_data) {
            /* every bf16 value's e4m3 byte once: a bench's cache is
             * hundreds of millions of them */
            std::vector<uint8_t> to8(65536);
            for (uint32_t b = 0; b < 65536; ++b)
                to8[b] = ref_f32_to_e4m3(
                    ref_bf16_to_f32((uint16_t)b) / knobs.kv_scale);
            for (auto &x : P.kv8)
                x = to8[bench_bf16()];
        } else {
            for (auto &x : P.kv8)
                x = ref_f32_to_e4m3(ref_attn_randf(&seed) / knobs.kv_scale);
        }
    } else {
        P.kv.resize(n_kv);
        for (auto &x : P.kv)
            x = knobs.bench_data ? bench_bf16()
                                 : ref_f32_to_bf16(ref_attn_randf(&seed));
    }
    P.q.resize((size_t)R * ROWS * D_QK);
    for (size_t i = 0; i < P.q.size(); ++i)
        P.q[i] = !knobs.bench_data ? ref_f32_to_bf16(ref_attn_randf(&seed))
                 : KV_E4M3 ? bench_bf16() : P.kv[i % P.kv.size()];
    P.mask.resize((size_t)R * N_MAX * W);
    for (int r = 0; r < R; ++r)
        ref_attn_random_tree(&P.mask[(size_t)r * N_MAX * W], nullptr, nn[r],
                             N_MAX, &seed);
}

struct Dev {
    uint16_t *q, *o;
    void *kv;
    int32_t *bt, *past, *nn;
    uint32_t *mask;
    float *lse, *ws;
    size_t ws_bytes;
};

static void
upload(Dev &D, const Problem &P, int max_splits)
{
    int R = P.R;
    CK(cudaMalloc(&D.q, P.q.size() * 2));
    const size_t kv_size = (KV_E4M3 ? P.kv8.size() : P.kv.size()) * KV_BYTES;
    CK(cudaMalloc(&D.kv, kv_size));
    CK(cudaMalloc(&D.o, (size_t)R * ROWS * D_V * 2));
    CK(cudaMalloc(&D.bt, P.bt.size() * 4));
    CK(cudaMalloc(&D.past, R * 4));
    CK(cudaMalloc(&D.nn, R * 4));
    CK(cudaMalloc(&D.mask, P.mask.size() * 4));
    CK(cudaMalloc(&D.lse, (size_t)R * ROWS * 4));
    D.ws_bytes = (size_t)max_splits * R * ROWS * (D_V + 1) * 4;
    CK(cudaMalloc(&D.ws, D.ws_bytes));
    CK(cudaMemcpy(D.q, P.q.data(), P.q.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(D.kv, KV_E4M3 ? (const void *)P.kv8.data() : P.kv.data(),
                  kv_size, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(D.bt, P.bt.data(), P.bt.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(D.past, P.past.data(), R * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(D.nn, P.nn.data(), R * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(D.mask, P.mask.data(), P.mask.size() * 4,
                  cudaMemcpyHostToDevice));
}

static void
launch(const Dev &D, const Problem &P, int splits, int copy, float scale,
       cudaStream_t st)
{
    kdt_verify_attn_params p;
    memset(&p, 0, sizeof p);
    p.q = D.q;
    p.kv_cache = (const uint16_t *)D.kv;
    p.kv_scale = KV_E4M3 ? knobs.kv_scale : 1.f;
    p.block_table = D.bt + (size_t)copy * P.R * P.max_pages;
    p.past_len = D.past;
    p.n_nodes = D.nn;
    p.anc_mask = D.mask;
    p.o = D.o;
    p.lse = D.lse;
    /* splits < 0: -splits ways as one cluster (the wgmma body's
     * in-cluster merge: no workspace, no merge kernel) */
    const int cl = splits < 0 ? -splits : 1;
    if (splits < 0)
        splits = cl;
    if (cl > 1 && cubin_fn) {
        fprintf(stderr, "negative SPLITS (a cluster): not with H_CUBIN\n");
        exit(2);
    }
    if (cl > 1 && !KDT_ATTN_WGMMA) {
        fprintf(stderr, "negative SPLITS (a cluster): the wgmma body only\n");
        exit(2);
    }
    p.workspace = splits > 1 && cl == 1 ? D.ws : nullptr;
    p.n_requests = P.R;
    p.max_pages = P.max_pages;
    p.num_splits = splits;
    p.scale = scale;
    dim3 grid((ROWS + BM - 1) / BM, splits, P.R);
    if (cl > 1) {
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = cluster_config(&at, grid, cl, st);
        CK(cudaLaunchKernelEx(&cfg, kdt_verify_attn, p));
        return;
    }
    if (cubin_fn) {
        void *args[1] = {&p};
        if (cubin_launch(cubin_fn, grid.x, grid.y, grid.z, LAUNCH_THREADS, 1, 1,
                         SMEM_BYTES, (CUstream)st, args, nullptr) !=
            CUDA_SUCCESS) {
            fprintf(stderr, "H_CUBIN: cuLaunchKernel failed\n");
            exit(2);
        }
    } else
        kdt_verify_attn<<<grid, LAUNCH_THREADS, SMEM_BYTES, st>>>(p);
    if (splits > 1) {
        kdt_verify_attn_merge<<<dim3(ROWS, P.R), KDT_ATTN_MERGE_THREADS, 0,
                                st>>>(p);
    }
}

static int
check(int argc, char **argv)
{
    if (MATH_E4M3) {
        fprintf(stderr, "check: MATH=e4m3's bound is gpu_verify_attn's "
                        "(bench only)\n");
        return 2;
    }
    int splits = atoi(argv[2]);
    float scale = (float)atof(argv[3]);
    uint64_t seed = strtoull(argv[4], 0, 10);
    std::vector<int> past, nn;
    for (int i = 5; i < argc; ++i) {
        int a, b;
        sscanf(argv[i], "%d:%d", &a, &b);
        past.push_back(a);
        nn.push_back(b);
    }
    int R = (int)past.size();
    Problem P;
    make_problem(P, R, past, nn, seed, 1);
    if (splits == 0)
        splits = pick_splits(R, (int64_t)P.max_pages * PAGE);
    Dev D;
    upload(D, P, std::max(abs(splits), 1));
    /* poison: NaN everywhere, so an unwritten element fails */
    CK(cudaMemset(D.o, 0xff, (size_t)R * ROWS * D_V * 2));
    CK(cudaMemset(D.lse, 0xff, (size_t)R * ROWS * 4));
    CK(cudaMemset(D.ws, 0xff, D.ws_bytes));
    launch(D, P, splits, 0, scale, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> o((size_t)R * ROWS * D_V);
    std::vector<float> lse((size_t)R * ROWS);
    CK(cudaMemcpy(o.data(), D.o, o.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), D.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> ro(o.size()), rl(lse.size());
    ref_verify_attn_kv(ro.data(), rl.data(), P.q.data(),
                       KV_E4M3 ? (const void *)P.kv8.data() : P.kv.data(),
                       KDT_KV, knobs.kv_scale, P.bt.data(), P.past.data(),
                       P.nn.data(), P.mask.data(), R, H, N_MAX, PAGE,
                       P.max_pages, scale);
    /* tolerance: see tests/gpu_verify_attn.c (2^-7 (|ref| + max|v|)) */
    double maxerr = 0, num = 0, den = 0, lmax = 0;
    long bad = 0;
    for (size_t i = 0; i < o.size(); ++i) {
        double g = ref_bf16_to_f32(o[i]), e = fabs(g - ro[i]);
        num += e * e;
        den += (double)ro[i] * ro[i];
        if (!(e <= (fabs(ro[i]) + 1.0) / 128.0)) {
            if (bad < 5)
                fprintf(stderr, "  o[%zu] (row %zu col %zu) gpu %g ref %g\n",
                        i, i / D_V, i % D_V, g, ro[i]);
            ++bad;
        }
        if (e > maxerr || e != e)
            maxerr = e;
    }
    for (size_t i = 0; i < lse.size(); ++i) {
        bool ok;
        if (std::isinf(rl[i]))
            ok = std::isinf(lse[i]) && lse[i] < 0;
        else
            ok = fabs(lse[i] - rl[i]) <= 2e-3 * (1 + fabs(rl[i]));
        if (!ok) {
            if (bad < 10)
                fprintf(stderr, "  lse[%zu] gpu %g ref %g\n", i, lse[i], rl[i]);
            ++bad;
        }
        if (!std::isinf(rl[i]))
            lmax = std::max(lmax, (double)fabs(lse[i] - rl[i]));
    }
    printf("check %s BM=%d H=%d PAGE=%d N_MAX=%d KV=%s R=%d splits=%d "
           "scale=%g:", KNAME, BM, H, PAGE, N_MAX, KV_E4M3 ? "e4m3" : "bf16",
           R, splits, scale);
    for (int r = 0; r < R; ++r)
        printf(" %d:%d", past[r], nn[r]);
    printf("  maxerr %.3g rel %.3g lse %.3g  %s\n", maxerr,
           sqrt(num / (den > 0 ? den : 1)), lmax, bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

/* H_SPIN's head start: one thread spinning `cycles` clocks. */
__global__ void
spin_kernel(long long cycles)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static int
bench(int argc, char **argv)
{
    int R = atoi(argv[2]), past = atoi(argv[3]);
    std::vector<int> pv(R, past), nv(R, N_MAX);
    double kv_bytes = (double)R * (past + N_MAX) * D_QK * KV_BYTES;
    int copies = (int)std::min(8.0, std::max(1.0, ceil(400e6 / kv_bytes)));
    Problem P;
    make_problem(P, R, pv, nv, 1234, copies);
    Dev D;
    upload(D, P, KDT_ATTN_MAX_SPLITS);
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    double flops = (double)R * N_MAX * H * past * 2176.0;
    /* the H100 and H200's dense peak, TFLOP/s, in the arithmetic's form */
    const double peak = MATH_E4M3 ? 1979.0 : 989.0;
    const float scale = knobs.scale;
    for (int i = 4; i < argc; ++i) {
        int splits = atoi(argv[i]);
        if (splits == 0)
            splits = pick_splits(R, (int64_t)P.max_pages * PAGE);
        for (int w = 0; w < 3; ++w)
            launch(D, P, splits, w % copies, scale, st);
        CK(cudaGetLastError());
        std::vector<float> ts;
        for (int it = 0; it < knobs.batches; ++it) {
            const int reps = knobs.reps;
            if (knobs.spin_us) /* ~1.8 GHz */
                spin_kernel<<<1, 1, 0, st>>>(knobs.spin_us * 1800);
            CK(cudaEventRecord(a, st));
            for (int k = 0; k < reps; ++k)
                launch(D, P, splits, (it * reps + k) % copies, scale, st);
            CK(cudaEventRecord(b, st));
            CK(cudaEventSynchronize(b));
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            ts.push_back(ms * 1000.f / reps);
        }
        CK(cudaGetLastError());
        std::sort(ts.begin(), ts.end());
        double us = ts[ts.size() / 2];
        printf("bench %s BM=%d H=%d PAGE=%d N_MAX=%d KV=%s MATH=%s R=%d "
               "past=%d splits=%d grid=%dx%dx%d: %.1f us  %.1f TFLOP/s  "
               "%.1f%% of %.0f\n",
               KNAME, BM, H, PAGE, N_MAX, KV_E4M3 ? "e4m3" : "bf16",
               MATH_E4M3 ? "e4m3" : "bf16", R, past, splits,
               (ROWS + BM - 1) / BM, splits, R, us, flops / us * 1e-6,
               flops / us * 1e-4 / peak, peak);
        fflush(stdout);
#ifdef KDT_HARNESS_AFTER_BENCH
        KDT_HARNESS_AFTER_BENCH(D, P, splits, scale, st);
#endif
    }
    return 0;
}

int
main(int argc, char **argv)
{
    CK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaFuncSetAttribute(kdt_verify_attn,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            SMEM_BYTES));
#if KDT_ATTN_WGMMA
    CK(cudaFuncSetAttribute(kdt_verify_attn,
                            cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
#endif
    ask_cluster_fit();
    read_knobs();
    if (knobs.cubin)
        load_cubin(knobs.cubin);
    if (argc >= 2 && !strcmp(argv[1], "fit")) {
        for (int n = 2; n <= 8; ++n)
            printf("clusters of %d: %lld at once\n", n,
                   (long long)cluster_fit[n]);
        return 0;
    }
    if (argc >= 6 && !strcmp(argv[1], "check"))
        return check(argc, argv);
    if (argc >= 5 && !strcmp(argv[1], "bench"))
        return bench(argc, argv);
    fprintf(stderr, "usage: see the comment at the top\n");
    return 2;
}
