// t_attn.cc: verify_attn on the host emulator against the CPU reference
// (ref/verify_attn.c).  tools/dev/attn_emu.sh builds it per shape:
//
//   g++ ... -DKDT_H=8 -DKDT_PAGE=16 -DKDT_N_MAX=17 [-DKERNEL="verify_attn.cc"]
//   ./t SPLITS:SCALE:SEED:past/nn[,past/nn...] [...]
//
// One case per argument: the requests' prefixes and tree sizes, the KV
// split count (> 1 runs the merge kernel too; -S launches S splits as one
// thread-block cluster, which the wgmma body merges in the cluster) and
// the logit scale.  Pages are shuffled; outputs and the workspace are
// poisoned with NaN first.  EMU_RACE=0 turns the race checker off.
// Tolerance as tests/gpu_verify_attn.c: |o - ref| <= 2^-7 (|ref| + 1)
// (max|v| <= 1 here), lse within 2e-3 (1 + |ref|), padded rows exact.
#include <cmath>
#include <cstring>
#include "launch.h"
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

// The launch geometry as the library takes it (src/kernels/verify_attn.c):
// kdt_attn_tiles.h's numbers of the body that KDT_ATTN_WGMMA selects.
#if KDT_ATTN_WGMMA
#define VA_BM KDT_ATTN_WG_BM
#define VA_THREADS KDT_ATTN_WG_THREADS
#define VA_SMEM KDT_ATTN_WG_SMEM
#else
#define VA_BM KDT_ATTN_BM
#define VA_THREADS KDT_ATTN_THREADS
#define VA_SMEM KDT_ATTN_SMEM
#endif

static int run_case(const char *spec) {
    int splits; float scale; unsigned long long seed; char list[4096];
    if (sscanf(spec, "%d:%f:%llu:%4095s", &splits, &scale, &seed, list) != 4) { fprintf(stderr, "bad case %s\n", spec); return 1; }
    const bool cluster = splits < 0; // the splits as one cluster, merged there
    splits = abs(splits);
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
    // bits past a request's tree are garbage the kernel must ignore
    // (docs/contract.md §3)
    for (int r = 0; r < R; r++)
        for (int i = 0; i < N_MAX; i++)
            for (int j = std::max(nn[r], 0); j < 32 * W; j++)
                if (ref_attn_rand(&sd) & 1) mask[((size_t)r * N_MAX + i) * W + j / 32] |= 1u << (j % 32);
    std::vector<uint16_t> o((size_t)R * ROWS * D_V, 0xffff);
    std::vector<float> lse((size_t)R * ROWS, NAN), ws;
    if (splits > 1 && !cluster) ws.assign((size_t)splits * R * ROWS * (D_V + 1), NAN);
    emu_global_ranges = {{kv.data(), kv.size() * 2}, {q.data(), q.size() * 2}};

    kdt_verify_attn_params p;
    memset(&p, 0, sizeof p);
    p.q = q.data(); p.kv_cache = kv.data(); p.block_table = bt.data();
    p.past_len = past.data(); p.n_nodes = nn.data(); p.anc_mask = mask.data();
    p.o = o.data(); p.lse = lse.data(); p.workspace = ws.empty() ? nullptr : ws.data();
    p.n_requests = R; p.max_pages = max_pages; p.num_splits = splits; p.scale = scale;
    long bars0 = emu_bars;
    const dim3e grid{(unsigned)((ROWS + VA_BM - 1) / VA_BM), (unsigned)splits, (unsigned)R};
    emu_launch_grid(kdt_verify_attn, p, grid, VA_THREADS, VA_SMEM, dim3e{1, cluster ? (unsigned)splits : 1u, 1});
    long bars = emu_bars - bars0;
    if (splits > 1 && !cluster) {
        // as the library launches it: a block per folded row
        emu_launch_grid(kdt_verify_attn_merge, p, dim3e{(unsigned)ROWS, (unsigned)R, 1}, KDT_ATTN_MERGE_THREADS, 0);
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
    printf("emu %s BM=%d H=%d PAGE=%d N_MAX=%d splits=%d%s scale=%g %s: maxerr %.3g, %ld barriers/block  %s\n",
           KDT_ATTN_WGMMA ? "wgmma" : "mma", VA_BM, H, PAGE, N_MAX, splits, cluster ? " (cluster)" : "", scale, spec, maxerr,
           bars / (long)(grid.x * grid.y * grid.z), bad ? "FAIL" : "ok");
    fflush(stdout);
    return bad != 0;
}

// kdt_fp8.cuh's conversions, on every e4m3 code, against ref/ref_math.h:
// widening (to f16 and to bf16, exact, NaN kept), rounding (to nearest
// even, saturated), the row quantization, the row maximum.  Returns the
// number of failures.
static int check_fp8_helpers() {
    int bad = 0;
    auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
    for (uint32_t c = 0; c < 256; c++) {
        const uint32_t w = c | (c ^ 0x80) << 8 | (255 - c) << 16 | 0x38u << 24; // c, -c, another, 1.0
        uint32_t lo, hi;
        kdt_e4m3x4_to_f16x4(lo, hi, w);
        const uint32_t b2 = kdt_e4m3x2_to_bf16x2((uint16_t)w);
        for (int k = 0; k < 4; k++) {
            const double want = ref_e4m3_to_f32((uint8_t)(w >> (8 * k)));
            const uint32_t h = (k < 2 ? lo : hi) >> (16 * (k & 1)) & 0xffff;
            bad += !same(emu_decode(EMU_F16, h), want);
            if (k < 2) bad += !same(emu_decode(EMU_BF16, b2 >> (16 * k) & 0xffff), want);
        }
        bad += kdt_e4m3x2_to_f16x2((uint16_t)w) != lo;
    }
    uint64_t sd = 99;
    for (int i = 0; i < 20000; i++) {
        const float x = ldexpf(ref_attn_randf(&sd), (int)(ref_attn_rand(&sd) % 26) - 14);
        const float y = i % 7 ? -x : 500.f + x;
        const uint16_t r = kdt_e4m3x2_from_f32(x, y);
        bad += (r & 0xff) != ref_f32_to_e4m3(x) || r >> 8 != ref_f32_to_e4m3(y);
    }
    const float q[4] = {0.75f, -3.f, 1e-3f, 2.9f}, s = kdt_e4m3_quant_scale(3.f);
    const uint32_t qw = kdt_e4m3x4_quantize(q[0], q[1], q[2], q[3], s);
    for (int k = 0; k < 4; k++) bad += (qw >> (8 * k) & 0xff) != ref_f32_to_e4m3(q[k] * (448.f / 3.f));
    bad += kdt_e4m3_quant_scale(0.f) != 0.f || kdt_e4m3_dequant_scale(3.f) != 3.f / 448.f;
    bad += kdt_bf16x2_absmax_bits(0x3f80, 0xc0003e00) != 0x4000; // max(1, |-2|, 0.125)
    if (bad) fprintf(stderr, "kdt_fp8.cuh: %d conversions wrong\n", bad);
    return bad;
}

int main(int argc, char **argv) {
    const char *race = getenv("EMU_RACE");
    emu_race_on = !race || strcmp(race, "0"); // emu_race.h: on unless EMU_RACE=0
    int fail = check_fp8_helpers() != 0;
    for (int i = 1; i < argc; i++) fail |= run_case(argv[i]);
    return fail;
}
