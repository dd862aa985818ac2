// Host emulation test: tools/dev/emu/run.sh builds it against kernels_src/.
// Both of build_ddtree's paths against ref/build_ddtree.c: well-formed
// requests (sorted rows <= 0: realistic, softmax, dyadic ties, zeros, -inf
// tails) take the threshold path when the budget is above LOOP_MAX_B;
// ill-formed ones (unsorted, positive, NaN, +inf, one inversion) the loop,
// and so do the well-formed ones the threshold path gives up on (more
// ties at one score than it can hold, -inf scores needed, too few
// prefixes).
// Budgets 0, 1, around LOOP_MAX_B, N_MAX-1, too large, and around the
// number of prefixes; depth limits.  The kernel reports each threshold
// search through KDT_BD_TRACE, so the test can insist that the threshold
// path did run.
#include <atomic>
static std::atomic<int> tr_fast{0}, tr_giveup{0}, tr_rounds{0}, tr_maxr{0};
static std::atomic<int> tr_sort[3]; // searches ending with <= THREADS, <= 2 THREADS, more prefixes
static int sort_class(int n); // after the kernel: THREADS
#define KDT_BD_TRACE(n, rounds)                                              \
    do {                                                                     \
        if ((n) >= 0) {                                                      \
            tr_fast++;                                                       \
            tr_sort[sort_class(n)]++;                                        \
            tr_rounds += (rounds) + 1;                                       \
            if ((rounds) + 1 > tr_maxr) tr_maxr = (rounds) + 1;             \
        } else                                                               \
            tr_giveup++;                                                     \
    } while (0)
#include "build_ddtree.cc"
static int sort_class(int n) { int n2 = 2; while (n2 < n) n2 <<= 1; return n2 <= THREADS ? 0 : n2 <= 2 * THREADS ? 1 : 2; }
#include "launch.h"
#include "ref/build_ddtree.h"
static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static float unit() { return ((float)(rnd() & 0xffffff) + 0.5f) / 16777216.0f; }
static int fdesc(const void *x, const void *y) { float a = *(const float *)x, b = *(const float *)y; return (a < b) - (a > b); }
enum { KINDS = 10 };
static void fill(float *lp, int32_t *ids, int kind) {
    for (int d = 0; d < L; d++) {
        float *row = lp + d * K;
        for (int k = 0; k < K; k++) {
            ids[d * K + k] = rnd() % 163840;
            switch (kind) {
            case 0: row[k] = logf(unit()) * (1.f + 4.f * unit()) - 0.05f * k; break;
            case 1: row[k] = -(float)(rnd() % 513) / 64.f; if (rnd() % 4 == 0) row[k] = -(float)(rnd() % 4) / 8.f; break;
            case 2: row[k] = 0.f; break;
            case 4: row[k] = -(float)(rnd() % 9) / 2.f; break; // coarse dyadic: big runs of ties (at 0: more than CAP)
            case 8: row[k] = -(float)(1 + rnd() % 24) / 8.f; break; // dyadic < 0: ties the threshold path must order
            case 5: row[k] = logf(unit()) * 3.f; if (rnd() % 5 == 0) row[k] = -INFINITY; break;
            case 6: row[k] = -(float)(rnd() % 64) / 16.f; break;
            case 9: row[k] = -6.9f - 0.002f * k - 0.3f * unit(); break; // nearly flat: big trees take deep ranks
            default: { uint32_t c = rnd() % 24; row[k] = c == 0 ? NAN : c == 1 ? -INFINITY : c == 2 ? INFINITY : c == 3 ? -0.f : c < 12 ? -(float)(rnd() % 6) / 4.f : (unit() - .7f) * 6.f; }
            }
        }
        if (kind == 7) { // a log-softmax over 256 Zipf-like logits, its top K
            float x[256]; double m = -INFINITY, s = 0; float a = 1.f + (rnd() % 1000) / 700.f;
            for (int j = 0; j < 256; j++) { x[j] = -a * logf(j + 1.f) + 0.6f * unit(); if (x[j] > m) m = x[j]; }
            for (int j = 0; j < 256; j++) s += exp(x[j] - m);
            qsort(x, 256, sizeof(float), fdesc);
            for (int k = 0; k < K; k++) row[k] = k < 256 ? (float)(x[k] - m - log(s)) : -INFINITY;
        } else if (kind != 3) {
            qsort(row, K, sizeof(float), fdesc);
            if (kind == 6 && K > 1 && d == (int)(rnd() % L)) { float t = row[0]; row[0] = row[1]; row[1] = t; if (row[0] == row[1]) row[0] = 0.5f; } // ill-formed
        }
    }
}
// Prefixes of depth <= dl (saturating).
static long prefixes(int dl) { long s = 0, p = 1; for (int d = 0; d < dl; d++) { p = p * K > 1000000 ? 1000000 : p * K; s += p; } return s; }
int main() {
    const int R = 6, N = N_MAX; int bad = 0;
    for (int it = 0; it < ITERS; it++) {
        size_t lk = (size_t)R * L * K, rn = (size_t)R * N;
        std::vector<float> lp(lk); std::vector<int32_t> ids(lk), bu(R), dl(R), root(R), past(R);
        int use_dl = it & 1, use_past = (it >> 1) & 1;
        for (int r = 0; r < R; r++) { fill(&lp[r * L * K], &ids[r * L * K], (it * R + r) % KINDS);
            dl[r] = 1 + rnd() % L; root[r] = rnd() % 100; past[r] = rnd() % 1000;
            long np = prefixes(use_dl ? dl[r] : L);
            uint32_t c = rnd() % 10;
            bu[r] = c == 0 ? 0 : c == 1 ? N - 1 : c == 2 ? 1 : c == 3 ? 1000 : c == 4 ? LOOP_MAX_B + (int)(rnd() % 3)
                  : c == 5 ? (int)np + (int)(rnd() % 3) - 1 : c == 6 ? -5 : (int)(rnd() % N); }
        int W = (N + 31) / 32;
        std::vector<int32_t> g[7], c[7]; std::vector<float> gs(rn), cs(rn); std::vector<uint32_t> gm(rn * W, 0xA5A5A5A5), cm(rn * W);
        for (int f = 0; f < 7; f++) { g[f].assign(f ? rn : R, (int32_t)0xA5A5A5A5); c[f].assign(f ? rn : R, 0); }
        kdt_build_ddtree_params p = {lp.data(), ids.data(), bu.data(), use_dl ? dl.data() : NULL, root.data(), use_past ? past.data() : NULL,
            g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(), g[6].data(), gs.data(), gm.data(), R, 0};
        emu_launch(kdt_build_ddtree, p, R, THREADS, SMEM_BYTES);
        ref_build_ddtree(c[0].data(), c[1].data(), c[2].data(), c[3].data(), c[4].data(), c[5].data(), c[6].data(), cs.data(), cm.data(),
            lp.data(), ids.data(), bu.data(), use_dl ? dl.data() : NULL, root.data(), use_past ? past.data() : NULL, R, L, K, N);
        const char *names[7] = {"n_nodes", "token", "parent", "depth", "position", "first_child", "next_sibling"};
        for (int f = 0; f < 7; f++) for (size_t i = 0; i < g[f].size(); i++) if (g[f][i] != c[f][i]) { if (bad < 8) printf("it %d %s [%zu] (kind %d): %d want %d\n", it, names[f], i, (int)((it * R + i / (f ? N : 1)) % KINDS), g[f][i], c[f][i]); bad++; break; }
        for (size_t i = 0; i < rn; i++) if (memcmp(&gs[i], &cs[i], 4)) { if (bad < 8) printf("it %d score [%zu]: %a want %a\n", it, i, gs[i], cs[i]); bad++; break; }
        for (size_t i = 0; i < rn * W; i++) if (gm[i] != cm[i]) { if (bad < 8) printf("it %d mask [%zu]: %08x want %08x\n", it, i, gm[i], cm[i]); bad++; break; }
    }
    printf("L=%d K=%d N_MAX=%d CAP=%d FAST=%d THREADS=%d: %s (%d bad); threshold path %d requests (prefixes ranked: <= THREADS %d, <= 2 THREADS %d, more %d), %.2f rounds avg, %d max; gave up %d\n",
           L, K, N_MAX, CAP, (int)FAST, THREADS, bad ? "FAIL" : "ok", bad, (int)tr_fast, (int)tr_sort[0], (int)tr_sort[1], (int)tr_sort[2],
           tr_fast ? (double)tr_rounds / tr_fast : 0., (int)tr_maxr, (int)tr_giveup);
    if (FAST && N_MAX - 1 > LOOP_MAX_B && ITERS >= 6 && prefixes(L) >= 2 * N_MAX && tr_fast == 0) { printf("  FAIL: the threshold path never ran\n"); bad++; }
    return bad != 0;
}
