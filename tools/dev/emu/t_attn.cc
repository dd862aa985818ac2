// t_attn.cc: verify_attn on the host emulator against the CPU reference
// (ref/verify_attn.c).  tools/dev/attn_emu.sh builds it per shape:
//
//   g++ ... -DKDT_H=8 -DKDT_PAGE=16 -DKDT_N_MAX=17 [-DKDT_KV=1 -DKDT_MATH=1]
//       [-DKERNEL="verify_attn.cc"]
//   ./t SPLITS:SCALE:SEED:past/nn[,past/nn...][@KV_SCALE] [...]
//
// One case per argument: the requests' prefixes and tree sizes, the KV
// split count (> 1 runs the merge kernel too; -S launches S splits as one
// thread-block cluster, which the wgmma body merges in the cluster), the
// logit scale and, for an e4m3 cache (KV = 1), the cache's scale (1 when
// left out).  Pages are shuffled; outputs and the workspace are poisoned
// with NaN first.  EMU_RACE=0 turns the race checker off.
//
// Tolerance, as tests/gpu_verify_attn.c (where it is derived), with vmax
// = max |v| over the cache (dequantized; <= 1 for bf16 data here):
//  - a bf16 cache, or an e4m3 one with MATH = bf16: |o - ref| <= 2^-7
//    (|ref| + vmax), lse within 2e-3 (1 + |ref|);
//  - MATH = e4m3: docs/contract.md §3's bound, from o_q and lse_q (the
//    attention with each query row quantized, ref_verify_attn_qe4m3) and
//    the row's beta, and the typical error on each row's RMS;
//  - padded rows exact.
// The emulator's products and sums are exact, so these check the logic,
// the layouts and the bound's roundings (Q's, P's, the output's), not the
// tensor cores' accumulation.
#include <cmath>
#include <cstring>
#include "launch.h"
// int overloads for the kernel's index clamps (cuda_emu.h has only the
// unsigned max that the other kernels use)
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
// CUDA's byte permute (PRMT): byte i of the result is byte s[4i..4i+2]
// of the eight bytes y:x
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)(v >> (8 * ((s >> (4 * i)) & 7)) & 0xff) << (8 * i);
    return r;
}
#ifndef KERNEL
#define KERNEL "verify_attn.cc"
#endif
#include KERNEL
#include "ref/ref_math.h"
#include "ref/verify_attn.h"

// The launch geometry as the library takes it (src/kernels/verify_attn.c):
// kdt_attn_tiles.h's numbers of the body that KDT_ATTN_WGMMA selects, and
// of the cache's type.
#if KDT_ATTN_WGMMA
#define VA_BM KDT_ATTN_WG_BM
#define VA_THREADS KDT_ATTN_WG_LAUNCH_THREADS(KDT_KV, KDT_MATH)
#define VA_SMEM KDT_ATTN_WG_SMEM /* an e4m3 cache: the wgmma body's plan to name */
#else
#define VA_BM KDT_ATTN_BM
#define VA_THREADS KDT_ATTN_THREADS
#define VA_SMEM KDT_ATTN_MMA_SMEM(KDT_KV)
#endif

// A random cache element: bf16 in [-1, 1), or an e4m3 code of such a
// value, one in eight of them 2^-8 smaller (subnormal codes) and one in
// 64 zero.
static uint16_t kv_elem(uint64_t *sd) {
    const float x = ref_attn_randf(sd);
    if (!KV_E4M3) return ref_f32_to_bf16(x);
    const uint64_t k = ref_attn_rand(sd) % 64;
    return k == 0 ? 0 : ref_f32_to_e4m3(k % 8 == 1 ? x * 0x1p-8f : x);
}
static double kv_value(const std::vector<uint16_t> &kv, size_t i, float kv_scale) {
    return KV_E4M3 ? (double)kv_scale * ref_e4m3_to_f32((uint8_t)kv[i]) : ref_bf16_to_f32(kv[i]);
}

static int run_case(const char *spec) {
    int splits; float scale; unsigned long long seed; char list[4096];
    if (sscanf(spec, "%d:%f:%llu:%4095s", &splits, &scale, &seed, list) != 4) { fprintf(stderr, "bad case %s\n", spec); return 1; }
    float kv_scale = 1.f;
    if (char *at = strchr(list, '@')) { kv_scale = strtof(at + 1, nullptr); *at = 0; }
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
    // an e4m3 cache: one byte an element, kept in the low byte here and
    // packed into kv8 for the kernel
    std::vector<uint16_t> kv((size_t)n_pages * PAGE * D_QK), q((size_t)R * ROWS * D_QK);
    for (auto &x : kv) x = kv_elem(&sd);
    for (auto &x : q) x = ref_f32_to_bf16(ref_attn_randf(&sd));
    double vmax = 0;
    for (size_t i = 0; i < kv.size(); i++) vmax = std::max(vmax, fabs(kv_value(kv, i, kv_scale)));
    // a request's slots past its end hold NaN: what a tile reads there
    // must be zero-filled, never multiplied by its zero weights
    for (int r = 0; r < R; r++)
        for (int pos = std::max(past[r], 0) + std::max(nn[r], 0); pos < max_pages * PAGE; pos++) {
            size_t row = ((size_t)bt[(size_t)r * max_pages + pos / PAGE] * PAGE + pos % PAGE) * D_QK;
            for (int d = 0; d < D_QK; d++) kv[row + d] = KV_E4M3 ? 0x7f : 0x7fc0;
        }
    std::vector<uint8_t> kv8(KV_E4M3 ? kv.size() : 0);
    for (size_t i = 0; i < kv8.size(); i++) kv8[i] = (uint8_t)kv[i];
    const void *kvp = KV_E4M3 ? (const void *)kv8.data() : (const void *)kv.data();
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
    emu_global_ranges = {{kvp, kv.size() * (KV_E4M3 ? 1 : 2)}, {q.data(), q.size() * 2}};

    kdt_verify_attn_params p;
    memset(&p, 0, sizeof p);
    p.q = q.data(); p.kv_cache = (const uint16_t *)kvp; p.block_table = bt.data();
    p.past_len = past.data(); p.n_nodes = nn.data(); p.anc_mask = mask.data();
    p.o = o.data(); p.lse = lse.data(); p.workspace = ws.empty() ? nullptr : ws.data();
    p.n_requests = R; p.max_pages = max_pages; p.num_splits = splits; p.scale = scale;
    p.kv_scale = KV_E4M3 ? kv_scale : 1.f;
    long bars0 = emu_bars;
    const dim3e grid{(unsigned)((ROWS + VA_BM - 1) / VA_BM), (unsigned)splits, (unsigned)R};
    emu_launch_grid(kdt_verify_attn, p, grid, VA_THREADS, VA_SMEM, dim3e{1, cluster ? (unsigned)splits : 1u, 1});
    long bars = emu_bars - bars0;
    if (splits > 1 && !cluster) {
        // as the library launches it: a block per folded row
        emu_launch_grid(kdt_verify_attn_merge, p, dim3e{(unsigned)ROWS, (unsigned)R, 1}, KDT_ATTN_MERGE_THREADS, 0);
    }
    std::vector<float> ro(o.size()), rl(lse.size()), rq, lq;
    std::vector<double> st;
    ref_verify_attn_kv(ro.data(), rl.data(), q.data(), kvp, KV_E4M3, kv_scale, bt.data(), past.data(), nn.data(),
                       mask.data(), R, H, N_MAX, PAGE, max_pages, scale);
    if (MATH_E4M3) {
        rq.resize(o.size()); lq.resize(lse.size()); st.resize(3 * lse.size());
        ref_verify_attn_qe4m3(rq.data(), lq.data(), st.data(), q.data(), kvp, KV_E4M3, kv_scale, bt.data(),
                              past.data(), nn.data(), mask.data(), R, H, N_MAX, PAGE, max_pages, scale);
    }
    long bad = 0; double maxerr = 0, maxq = 0; // maxq: |o - o_q|, MATH = e4m3
    for (size_t row = 0; row < lse.size(); row++) {
        const bool padded = row % ROWS >= (size_t)nn[row / ROWS] * H;
        // MATH = e4m3: the row's worst-case bounds (docs/contract.md §3,
        // ref_qe4m3_bounds) and the typical error of P's rounding
        // (tests/gpu_verify_attn.c)
        double ob = 0, lb = 0, typ = 0;
        if (MATH_E4M3 && !padded) {
            const double n = st[3 * row], s0 = st[3 * row + 1], s2 = st[3 * row + 2];
            ref_qe4m3_bounds(n, s0, &ob, &lb);
            typ = 4 * 2 * vmax * sqrt((0x1p-8 * s2 + 0x1p-20 * n) / 3) / s0;
        }
        double se = 0, sq = 0, sr = 0;
        for (size_t c = 0; c < D_V; c++) {
            const size_t i = row * D_V + c;
            const double g = ref_bf16_to_f32(o[i]), e = fabs(g - ro[i]);
            double tol = (fabs(ro[i]) + vmax) / 128.0;
            if (MATH_E4M3 && !padded) {
                const double eq = fabs((double)rq[i] - ro[i]);
                tol = eq + vmax * ob + (fabs(ro[i]) + vmax) / 256.0;
                se += e * e; sq += eq * eq; sr += (double)ro[i] * ro[i];
                maxq = std::max(maxq, fabs(g - rq[i]));
            }
            const bool ok = padded ? g == 0.0 : e <= tol; // -0 counts as 0
            if (!ok) { if (bad < 5) fprintf(stderr, "  o row %zu col %zu: got %g want %g\n", row, c, g, ro[i]); bad++; }
            if (!padded && !(e <= maxerr)) maxerr = e;
        }
        if (MATH_E4M3 && !padded) {
            const double rms = sqrt(se / D_V), lim = sqrt(sq / D_V) + typ + (sqrt(sr / D_V) + vmax) / 256.0;
            if (!(rms <= lim)) { if (bad < 5) fprintf(stderr, "  o row %zu: rms error %g > %g\n", row, rms, lim); bad++; }
        }
        if (padded) {
            if (!(std::isinf(lse[row]) && lse[row] < 0)) { if (bad < 10) fprintf(stderr, "  lse row %zu: got %g want -inf\n", row, lse[row]); bad++; }
            continue;
        }
        double ltol = 2e-3 * (1 + fabs(rl[row]));
        if (MATH_E4M3) ltol = fabs((double)lq[row] - rl[row]) + lb + 1e-3 * (1 + fabs(rl[row]));
        const bool ok = std::isinf(rl[row]) ? std::isinf(lse[row]) && lse[row] < 0 : fabs(lse[row] - rl[row]) <= ltol;
        if (!ok) { if (bad < 10) fprintf(stderr, "  lse row %zu: got %g want %g\n", row, lse[row], rl[row]); bad++; }
    }
    char vsq[40] = "";
    if (MATH_E4M3) snprintf(vsq, sizeof vsq, " (%.3g from o_q)", maxq);
    printf("emu %s BM=%d H=%d PAGE=%d N_MAX=%d KV=%s MATH=%s splits=%d%s scale=%g %s: maxerr %.3g%s, %ld barriers/block  %s\n",
           KDT_ATTN_WGMMA ? "wgmma" : "mma", VA_BM, H, PAGE, N_MAX, KV_E4M3 ? "e4m3" : "bf16", MATH_E4M3 ? "e4m3" : "bf16",
           splits, cluster ? " (cluster)" : "", scale, spec, maxerr, vsq,
           bars / (long)(grid.x * grid.y * grid.z), bad ? "FAIL" : "ok");
    fflush(stdout);
    return bad != 0;
}

// kdt_fp8.cuh's conversions, on every e4m3 code, against ref/ref_math.h:
// widening (to f16, exact, NaN kept), rounding (to nearest
// even, saturated), the row quantization, the row maximum.  Returns the
// number of failures.
static int check_fp8_helpers() {
    int bad = 0;
    auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
    for (uint32_t c = 0; c < 256; c++) {
        const uint32_t w = c | (c ^ 0x80) << 8 | (255 - c) << 16 | 0x38u << 24; // c, -c, another, 1.0
        uint32_t lo, hi;
        kdt_e4m3x4_to_f16x4(lo, hi, w);
        for (int k = 0; k < 4; k++) {
            const double want = ref_e4m3_to_f32((uint8_t)(w >> (8 * k)));
            const uint32_t h = (k < 2 ? lo : hi) >> (16 * (k & 1)) & 0xffff;
            bad += !same(emu_decode(EMU_F16, h), want);
        }
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
