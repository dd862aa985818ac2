// Host emulation test: tools/dev/emu/run.sh builds it against kernels_src/.
#include <cmath>
#include <cstring>
// PTX max.NaN on the host (prep.sh substitutes these for the asm).
static inline float emu_max_nan(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b); }
static inline unsigned emu_max2_nan(unsigned a, unsigned b) {
    unsigned d = 0;
    for (int h = 0; h < 32; h += 16) {
        float x, y;
        unsigned ux = (a >> h) << 16, uy = (b >> h) << 16;
        memcpy(&x, &ux, 4); memcpy(&y, &uy, 4);
        float m = emu_max_nan(x, y);
        unsigned um; memcpy(&um, &m, 4);
        if (std::isnan(m)) um = 0x7fc00000u;
        d |= (um >> 16) << h;
    }
    return d;
}
static inline float atomicExch(float *p, float v) { float o; __atomic_exchange(p, &v, &o, __ATOMIC_SEQ_CST); return o; }
static inline int atomicExch(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
#include "draft_topk.cc"
#include "launch.h"
#include "ref/draft_topk.h"
#include "ref/ref_math.h"
static uint64_t rng = 88172645463325252ull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static float unit() { return ((float)(rnd() & 0xffffff) + 0.5f) / 16777216.0f; }
static float logit(int kind, int j) {
    switch (kind) {
    case 0: return (unit() + unit() + unit() + unit() - 2.f) * 5.f;
    case 1: return rnd() % 5 == 0 ? (rnd() % 2 ? -0.0f : 0.0f) : (float)(int)(rnd() % 7) - 3.f;
    case 2: { uint32_t c = rnd() % 16; return c == 0 ? NAN : c == 1 ? -INFINITY : (unit() - .5f) * 30.f; }
    case 3: return (float)j / V * 20.f - 10.f;
    case 4: return 10.f - (float)j / V * 20.f;
    case 5: return rnd() % 3 == 0 ? -1.0f : (rnd() % 2 ? -0.0f : 0.0f);
    case 6: return -INFINITY;
    default: return NAN;
    }
}
int main() {
#ifndef ROWS
#define ROWS 8
#endif
#ifndef OFFSETS
#define OFFSETS 3
#endif
    int rows = ROWS, bad = 0;
    for (int offset = 0; offset < OFFSETS; offset++) {
        size_t n = (size_t)rows * V, esz = DTYPE ? 2 : 4;
        unsigned char *buf = (unsigned char *)aligned_alloc(16, esz * (n + 8) + 16);
        void *lg = buf + esz * offset;
        for (int r = 0; r < rows; r++) {
            int kind = r;
            for (int j = 0; j < V; j++) {
                float x = logit(kind, j);
                if (DTYPE) ((uint16_t *)lg)[(size_t)r * V + j] = ref_f32_to_bf16(x);
                else ((float *)lg)[(size_t)r * V + j] = x;
            }
        }
        std::vector<float> glp(rows * K), clp(rows * K);
        std::vector<int> gid(rows * K, -7), cid(rows * K);
        kdt_draft_topk_params p = {lg, glp.data(), gid.data(), rows, 0};
        emu_launch(kdt_draft_topk, p, rows, THREADS, SMEM_BYTES);
        ref_draft_topk(clp.data(), cid.data(), lg, DTYPE, rows, V, K);
        for (int r = 0; r < rows; r++) for (int k = 0; k < K; k++) {
            int i = r * K + k; float w = clp[i], g = glp[i];
            bool ok = isinf(w) ? g == w : fabsf(g - w) <= 1e-4f + 1e-6f * fabsf(w);
            if (gid[i] != cid[i] || !ok) { if (bad < 5) printf("V=%d K=%d dt=%d off=%d row %d rank %d: id %d lp %g want %d %g\n", V, K, DTYPE, offset, r, k, gid[i], g, cid[i], w); bad++; }
        }
        free(buf);
    }
    printf("V=%d K=%d DTYPE=%d: %s (%d bad)\n", V, K, DTYPE, bad ? "FAIL" : "ok", bad);
    return bad != 0;
}
