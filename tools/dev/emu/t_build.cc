// Host emulation test: tools/dev/emu/run.sh builds it against kernels_src/.
#include "build_ddtree.cc"
#include "launch.h"
extern "C" {
#include "ref_ddtree.h"
}
static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static float unit() { return ((float)(rnd() & 0xffffff) + 0.5f) / 16777216.0f; }
static int fdesc(const void *x, const void *y) { float a = *(const float *)x, b = *(const float *)y; return (a < b) - (a > b); }
static void fill(float *lp, int32_t *ids, int kind) {
    for (int d = 0; d < L; d++) {
        float *row = lp + d * K;
        for (int k = 0; k < K; k++) {
            ids[d * K + k] = rnd() % 163840;
            switch (kind) {
            case 0: row[k] = logf(unit()) * (1.f + 4.f * unit()) - 0.05f * k; break;
            case 1: row[k] = -(float)(rnd() % 513) / 64.f; if (rnd() % 4 == 0) row[k] = -(float)(rnd() % 4) / 8.f; break;
            case 2: row[k] = 0.f; break;
            default: { uint32_t c = rnd() % 24; row[k] = c == 0 ? NAN : c == 1 ? -INFINITY : c == 2 ? INFINITY : c == 3 ? -0.f : c < 12 ? -(float)(rnd() % 6) / 4.f : (unit() - .7f) * 6.f; }
            }
        }
        if (kind < 2) qsort(row, K, sizeof(float), fdesc);
    }
}
int main() {
    const int R = 6, N = N_MAX; int bad = 0;
    for (int it = 0; it < ITERS; it++) {
        size_t lk = (size_t)R * L * K, rn = (size_t)R * N;
        std::vector<float> lp(lk); std::vector<int32_t> ids(lk), bu(R), dl(R), root(R), past(R);
        for (int r = 0; r < R; r++) { fill(&lp[r * L * K], &ids[r * L * K], (it + r) % 4);
            uint32_t c = rnd() % 6; bu[r] = c == 0 ? 0 : c == 1 ? N - 1 : c == 2 ? 1 : c == 3 ? 1000 : rnd() % N;
            dl[r] = 1 + rnd() % L; root[r] = rnd() % 100; past[r] = rnd() % 1000; }
        int W = (N + 31) / 32, use_dl = it & 1, use_past = (it >> 1) & 1;
        std::vector<int32_t> g[7], c[7]; std::vector<float> gs(rn), cs(rn); std::vector<uint32_t> gm(rn * W, 0xA5A5A5A5), cm(rn * W);
        for (int f = 0; f < 7; f++) { g[f].assign(f ? rn : R, (int32_t)0xA5A5A5A5); c[f].assign(f ? rn : R, 0); }
        kdt_build_ddtree_params p = {lp.data(), ids.data(), bu.data(), use_dl ? dl.data() : NULL, root.data(), use_past ? past.data() : NULL,
            g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(), g[6].data(), gs.data(), gm.data(), R, 0};
        emu_launch(kdt_build_ddtree, p, R, THREADS, SMEM_BYTES);
        ref_build_ddtree(c[0].data(), c[1].data(), c[2].data(), c[3].data(), c[4].data(), c[5].data(), c[6].data(), cs.data(), cm.data(),
            lp.data(), ids.data(), bu.data(), use_dl ? dl.data() : NULL, root.data(), use_past ? past.data() : NULL, R, L, K, N);
        const char *names[7] = {"n_nodes", "token", "parent", "depth", "position", "first_child", "next_sibling"};
        for (int f = 0; f < 7; f++) for (size_t i = 0; i < g[f].size(); i++) if (g[f][i] != c[f][i]) { if (bad < 8) printf("it %d %s [%zu]: %d want %d\n", it, names[f], i, g[f][i], c[f][i]); bad++; break; }
        for (size_t i = 0; i < rn; i++) if (memcmp(&gs[i], &cs[i], 4)) { if (bad < 8) printf("it %d score [%zu]: %a want %a\n", it, i, gs[i], cs[i]); bad++; break; }
        for (size_t i = 0; i < rn * W; i++) if (gm[i] != cm[i]) { if (bad < 8) printf("it %d mask [%zu]: %08x want %08x\n", it, i, gm[i], cm[i]); bad++; break; }
    }
    printf("L=%d K=%d N_MAX=%d: %s (%d bad)\n", L, K, N_MAX, bad ? "FAIL" : "ok", bad);
    return bad != 0;
}
