// t_attn.cc: verify_attn on the host emulator against the CPU reference
// (ref/verify_attn.c).  tools/dev/attn_emu.sh builds it per shape:
//
//   g++ ... -DKDT_H=8 -DKDT_PAGE=16 -DKDT_N_MAX=17 [-DKERNEL="verify_attn.cc"]
//   ./t SPLITS:SCALE:SEED:past/nn[,past/nn...] [...]
//
// One case per argument: the requests' prefixes and tree sizes, the KV
// split count (> 1 runs the merge kernel too) and the logit scale.  Pages
// are shuffled; outputs and the workspace are poisoned with NaN first.
// Tolerance as tests/gpu_verify_attn.c: |o - ref| <= 2^-7 (|ref| + 1)
// (max|v| <= 1 here), lse within 2e-3 (1 + |ref|), padded rows exact.
#include <cmath>
#include <cstring>
#include "cuda_emu.h"
// int overloads for the kernel's index clamps (cuda_emu.h has only the
// unsigned max that the other kernels use)
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
#ifndef KERNEL
#define KERNEL "verify_attn.cc"
#endif
#include KERNEL
#include "ref/ref_math.h"
#include "ref/verify_attn.h"

// blockIdx is 3-D here: launch.h's emu_launch is 1-D.
struct va_arg { void (*k)(kdt_verify_attn_params); kdt_verify_attn_params *p; int tid; };
static void *va_thread(void *a) {
    va_arg *x = (va_arg *)a;
    threadIdx.x = x->tid; threadIdx.y = threadIdx.z = 0;
    x->k(*x->p);
    if (!emu_cp_open.empty() || !emu_cp_groups.empty())
        emu_die("cp.async still in flight when the thread exits", "");
    return NULL;
}
static void va_launch(void (*k)(kdt_verify_attn_params), kdt_verify_attn_params p,
                      dim3e grid, unsigned block, unsigned smem) {
    if (smem > sizeof emu_dyn_smem) { fprintf(stderr, "smem %u too big\n", smem); exit(2); }
    blockDim = {block, 1, 1};
    emu_dyn_size = smem;
    pthread_barrier_init(&emu_block_bar, NULL, block);
    for (unsigned w = 0; w < (block + 31) / 32; w++) pthread_barrier_init(&emu_warp_bar[w], NULL, 32);
    std::vector<pthread_t> th(block);
    std::vector<va_arg> args(block);
    pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, 512 * 1024);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = {x, y, z};
                memset(emu_dyn_smem, 0x5A, smem);
                emu_or_acc[0] = emu_or_acc[1] = 0;
                for (unsigned t = 0; t < block; t++) { args[t] = {k, &p, (int)t}; pthread_create(&th[t], &at, va_thread, &args[t]); }
                for (unsigned t = 0; t < block; t++) pthread_join(th[t], NULL);
            }
    pthread_barrier_destroy(&emu_block_bar);
    for (unsigned w = 0; w < (block + 31) / 32; w++) pthread_barrier_destroy(&emu_warp_bar[w]);
}

static int run_case(const char *spec) {
    int splits; float scale; unsigned long long seed; char list[4096];
    if (sscanf(spec, "%d:%f:%llu:%4095s", &splits, &scale, &seed, list) != 4) { fprintf(stderr, "bad case %s\n", spec); return 1; }
    std::vector<int> past, nn;
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        int a, b; sscanf(t, "%d/%d", &a, &b); past.push_back(a); nn.push_back(b);
    }
    int R = (int)past.size(), cap = 1;
    for (int r = 0; r < R; r++) cap = std::max(cap, past[r] + nn[r]);
    uint64_t sd = seed;
    int max_pages = (cap + PAGE - 1) / PAGE + 1, n_pages = R * max_pages + 3;
    std::vector<int32_t> perm(n_pages);
    for (int i = 0; i < n_pages; i++) perm[i] = i;
    for (int i = n_pages - 1; i > 0; i--) std::swap(perm[i], perm[ref_attn_rand(&sd) % (uint64_t)(i + 1)]);
    std::vector<int32_t> bt(perm.begin(), perm.begin() + R * max_pages);
    std::vector<uint16_t> kv((size_t)n_pages * PAGE * D_QK), q((size_t)R * ROWS * D_QK);
    for (auto &x : kv) x = ref_f32_to_bf16(ref_attn_randf(&sd));
    for (auto &x : q) x = ref_f32_to_bf16(ref_attn_randf(&sd));
    std::vector<uint32_t> mask((size_t)R * N_MAX * W);
    for (int r = 0; r < R; r++) ref_attn_random_tree(&mask[(size_t)r * N_MAX * W], nullptr, nn[r], N_MAX, &sd);
    std::vector<uint16_t> o((size_t)R * ROWS * D_V, 0xffff);
    std::vector<float> lse((size_t)R * ROWS, NAN), ws;
    if (splits > 1) ws.assign((size_t)splits * R * ROWS * (D_V + 1), NAN);
    emu_global_ranges = {{kv.data(), kv.size() * 2}, {q.data(), q.size() * 2}};

    kdt_verify_attn_params p;
    memset(&p, 0, sizeof p);
    p.q = q.data(); p.kv_cache = kv.data(); p.block_table = bt.data();
    p.past_len = past.data(); p.n_nodes = nn.data(); p.anc_mask = mask.data();
    p.o = o.data(); p.lse = lse.data(); p.workspace = splits > 1 ? ws.data() : nullptr;
    p.n_requests = R; p.max_pages = max_pages; p.num_splits = splits; p.scale = scale;
    long bars0 = emu_bars;
    va_launch(kdt_verify_attn, p, dim3e{(unsigned)((ROWS + BM - 1) / BM), (unsigned)splits, (unsigned)R}, NTHREADS, SMEM_BYTES);
    long bars = emu_bars - bars0;
    if (splits > 1) {
        // as the library launches it: a block per folded row
        va_launch(kdt_verify_attn_merge, p, dim3e{(unsigned)ROWS, (unsigned)R, 1}, KDT_ATTN_MERGE_THREADS, 0);
    }
    std::vector<float> ro(o.size()), rl(lse.size());
    ref_verify_attn(ro.data(), rl.data(), q.data(), kv.data(), bt.data(), past.data(), nn.data(), mask.data(),
                    R, H, N_MAX, PAGE, max_pages, scale);
    long bad = 0; double maxerr = 0;
    for (size_t i = 0; i < o.size(); i++) {
        double g = ref_bf16_to_f32(o[i]), e = fabs(g - ro[i]);
        bool padded = (i / D_V) % ROWS >= (size_t)nn[i / D_V / ROWS] * H;
        bool ok = padded ? g == 0.0 : e <= (fabs(ro[i]) + 1.0) / 128.0; // -0 counts as 0
        if (!ok) { if (bad < 5) fprintf(stderr, "  o row %zu col %zu: got %g want %g\n", i / D_V, i % D_V, g, ro[i]); bad++; }
        if (!(e <= maxerr)) maxerr = e;
    }
    for (size_t i = 0; i < lse.size(); i++) {
        bool ok = std::isinf(rl[i]) ? std::isinf(lse[i]) && lse[i] < 0 : fabs(lse[i] - rl[i]) <= 2e-3 * (1 + fabs(rl[i]));
        if (!ok) { if (bad < 10) fprintf(stderr, "  lse row %zu: got %g want %g\n", i, lse[i], rl[i]); bad++; }
    }
    printf("emu BM=%d H=%d PAGE=%d N_MAX=%d splits=%d scale=%g %s: maxerr %.3g, %ld barriers/block  %s\n",
           BM, H, PAGE, N_MAX, splits, scale, spec, maxerr,
           bars / (long)((ROWS + BM - 1) / BM * splits * R), bad ? "FAIL" : "ok");
    fflush(stdout);
    return bad != 0;
}

int main(int argc, char **argv) {
    int fail = 0;
    for (int i = 1; i < argc; i++) fail |= run_case(argv[i]);
    return fail;
}
