// Host emulation test: tools/dev/emu/run.sh builds it against kernels_src/.
// build_ddtree on realistic requests at full budget (B = N_MAX - 1):
// kind 0 is kdtree-bench's input (tools/bench_build_ddtree.c: Zipf-like
// peaked rows, deep trees), kind 1 tools/dev/profile_case.py's (bf16
// logits randn * 3 over V = 163840, log-softmax, top K: shallow trees,
// many ties).  Checks each against ref/build_ddtree.c and prints, per
// request, the threshold search's rounds, the prefixes its last round
// enumerated (the ones ranked) and the block barriers thread 0 passed:
// the figures the kernel's latency follows.  Usage: t KIND REQUESTS.
#include <atomic>
#include <algorithm>
static int st_n = -2, st_rounds = -1;
#define KDT_BD_TRACE(n, rounds) do { st_n = (n); st_rounds = (rounds) + 1; } while (0)

#include "build_ddtree.cc"
#include "launch.h"
#include "ref/build_ddtree.h"
static uint64_t seed = 0xB11D0000u;
static uint64_t rnd64(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static int fdesc(const void *x, const void *y) { float a = *(const float *)x, b = *(const float *)y; return (a < b) - (a > b); }
static void bench_req(float *lp, int32_t *ids) {
    enum { VS = 4096 }; static float x[VS];
    for (int d = 0; d < L; d++) {
        double m = -INFINITY, s = 0; float a = 1.0f + (float)(rnd64(&seed) % 1000) / 700.0f;
        for (int j = 0; j < VS; j++) { uint64_t r = rnd64(&seed);
            float u = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) + (float)(r >> 48);
            x[j] = -a * logf((float)j + 1.0f) + 0.3f * (u / 65536.0f - 2.0f); if (x[j] > m) m = x[j]; }
        for (int j = 0; j < VS; j++) s += exp(x[j] - m);
        qsort(x, VS, sizeof(float), fdesc);
        for (int k = 0; k < K; k++) { lp[d * K + k] = (float)(x[k] - m - log(s)); ids[d * K + k] = rnd64(&seed) % 163840; }
    }
}
static float bf16r(float f) { unsigned u = __float_as_uint(f); u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u; return __uint_as_float(u); }
static void randn_req(float *lp, int32_t *ids) {
    enum { V = 163840 }; static float x[V];
    for (int d = 0; d < L; d++) {
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j += 2) { double u1 = ((rnd64(&seed) >> 11) + 0.5) / 9007199254740992.0, u2 = ((rnd64(&seed) >> 11) + 0.5) / 9007199254740992.0;
            double r = sqrt(-2 * log(u1)); x[j] = bf16r(3 * r * cos(6.283185307 * u2)); x[j + 1] = bf16r(3 * r * sin(6.283185307 * u2)); }
        for (int j = 0; j < V; j++) if (x[j] > m) m = x[j];
        for (int j = 0; j < V; j++) s += exp(x[j] - m);
        std::partial_sort(x, x + K, x + V, [](float a, float b) { return a > b; });
        for (int k = 0; k < K; k++) { lp[d * K + k] = (float)(x[k] - m - log(s)); ids[d * K + k] = rnd64(&seed) % 163840; }
    }
}
int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: t KIND REQUESTS\n"); return 2; }
    long s_rounds = 0, s_bars = 0, s_n = 0;
    int kind = atoi(argv[1]), reps = atoi(argv[2]); const int N = N_MAX, W = (N + 31) / 32; int bad = 0;
    for (int it = 0; it < reps; it++) {
        std::vector<float> lp(L * K); std::vector<int32_t> ids(L * K); int32_t bu = N - 1, root = 3, past = 1000;
        if (kind == 0) bench_req(lp.data(), ids.data()); else randn_req(lp.data(), ids.data());
        std::vector<int32_t> g[7], c[7]; std::vector<float> gs(N), cs(N); std::vector<uint32_t> gm(N * W), cm(N * W);
        for (int f = 0; f < 7; f++) { g[f].assign(f ? N : 1, 0); c[f].assign(f ? N : 1, 0); }
        kdt_build_ddtree_params p = {lp.data(), ids.data(), &bu, NULL, &root, &past, g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(), g[6].data(), gs.data(), gm.data(), 1, 0};
        emu_bars = 0;
        emu_launch(kdt_build_ddtree, p, 1, THREADS, SMEM_BYTES);
        ref_build_ddtree(c[0].data(), c[1].data(), c[2].data(), c[3].data(), c[4].data(), c[5].data(), c[6].data(), cs.data(), cm.data(), lp.data(), ids.data(), &bu, NULL, &root, &past, 1, L, K, N);
        int ok = 1; for (int f = 0; f < 7; f++) if (g[f] != c[f]) ok = 0; if (memcmp(gs.data(), cs.data(), 4 * N)) ok = 0; if (gm != cm) ok = 0;
        int maxd = 0; for (int i = 0; i < N; i++) if (c[3][i] > maxd) maxd = c[3][i];
        // tie runs among the tree's scores
        int run = 1, maxrun = 1; std::vector<float> sc(cs.begin() + 1, cs.end()); std::sort(sc.begin(), sc.end());
        for (size_t i = 1; i < sc.size(); i++) { run = sc[i] == sc[i - 1] ? run + 1 : 1; if (run > maxrun) maxrun = run; }
        printf("kind %d B=%d: %s n=%d rounds=%d bars=%ld depth=%d last=%g maxtie=%d\n", kind, N - 1, ok ? "ok" : "BAD", st_n, st_rounds, emu_bars, maxd, cs[N - 1], maxrun);
        bad += !ok;
        s_rounds += st_rounds; s_bars += emu_bars; s_n += st_n;
    }
    printf("L=%d K=%d N_MAX=%d THREADS=%d kind %d: %s (%d bad of %d); averages: %.2f rounds, %.0f elements, %.1f barriers\n",
           L, K, N_MAX, THREADS, kind, bad ? "FAIL" : "ok", bad, reps, (double)s_rounds / reps, (double)s_n / reps,
           (double)s_bars / reps);
    return bad != 0;
}
