/*
 * bench_ddtree_input.h: kdtree-bench's build_ddtree input, shared by
 * tools/bench_build_ddtree.c and tools/dev/bd_phases.cu (C and C++).
 *
 * One request's [L][K] log-probs and ids, as draft_topk would give them
 * for a drafter's peaked rows: logits -a ln(rank + 1) plus noise over 4096
 * tokens (a Zipf law with exponent a in [1, 2.4] per depth; the top token
 * gets 40-80% of the mass), log-softmaxed and sorted.  Such rows make
 * trees several levels deep, as DDTree's are.
 */
#ifndef KDT_BENCH_DDTREE_INPUT_H
#define KDT_BENCH_DDTREE_INPUT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* The seed of kdtree-bench's case with budget B and R requests. */
#define BD_SEED(B, R) (0xB11D0000u + (uint64_t)(B) * 131 + (uint64_t)(R))

static uint64_t
bd_rnd64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int
bd_fdesc(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

static void
bd_make_request(float *lp, int32_t *ids, int L, int K, uint64_t *seed)
{
    enum { VS = 4096 };
    float x[VS];
    for (int d = 0; d < L; d++) {
        double m = -INFINITY, s = 0;
        float a = 1.0f + (float)(bd_rnd64(seed) % 1000) / 700.0f;
        for (int j = 0; j < VS; j++) {
            uint64_t r = bd_rnd64(seed);
            float u = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) +
                      (float)((r >> 32) & 0xffff) + (float)(r >> 48);
            x[j] = -a * logf((float)j + 1.0f) + 0.3f * (u / 65536.0f - 2.0f);
            if (x[j] > m)
                m = x[j];
        }
        for (int j = 0; j < VS; j++)
            s += exp(x[j] - m);
        qsort(x, VS, sizeof(float), bd_fdesc);
        for (int k = 0; k < K; k++) {
            lp[d * K + k] = (float)(x[k] - m - log(s));
            ids[d * K + k] = (int32_t)(bd_rnd64(seed) % 163840);
        }
    }
}

#endif
