/*
 * bench_draft_topk.c: kdtree-bench's draft_topk cases: V = 163840, L = 15
 * rows per request, K in {16, 64, 256, 1024}, R in {1, 8, 64} requests,
 * bf16 logits (and f32 at K = 64), drafter-like logits (roughly normal,
 * so the threshold behaves as on real rows).  The baseline, what a torch
 * user writes, log_softmax(float) + topk, is tools/baseline_topk.py with
 * the same config strings, run by the bench in the same run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/draft_topk.h"
#include "ref/ref_math.h"
#include "bench_suite.h"

#define DT_V 163840
#define DT_L 15

typedef struct dt_case {
    kdtree_runtime *rt;
    uint64_t logits, lp, ids;
    int dtype, rows, K;
} dt_case;

static int
launch_case(void *arg, void *stream)
{
    dt_case *c = arg;
    kdtree_draft draft = {.lp = c->lp, .ids = c->ids, .n_requests = c->rows,
                          .depth = 1, .k = c->K};
    return kdtree_draft_topk(c->rt, &draft, c->logits, c->dtype, DT_V,
                             stream);
}

static uint64_t
rnd64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Roughly normal logits (sum of four uniforms), scale 3, like a drafter's
 * row before softmax. */
static void
make_logits(float *f, uint16_t *h, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd64(&seed);
        float s = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) +
                  (float)((r >> 32) & 0xffff) + (float)(r >> 48);
        float x = (s / 65536.0f - 2.0f) * 5.2f;
        if (f)
            f[i] = x;
        if (h)
            h[i] = ref_f32_to_bf16(x);
    }
}

int
bench_draft_topk(bench_ctx *b)
{
    static const int Rs[] = {1, 8, 64};
    static const int Ks[] = {16, 64, 256, 1024};
    int quick = bench_quick(b), maxR = quick ? 1 : 64;
    size_t n = (size_t)maxR * DT_L * DT_V;
    uint16_t *h = malloc(n * 2);
    float *f = malloc(n * 4);
    if (!h || !f) {
        free(h);
        free(f);
        bench_note(b, "draft_topk: no host memory for the logits");
        return KDTREE_ERROR_OUT_OF_MEMORY;
    }
    make_logits(f, h, n, 0xD7A17u);
    for (int dtype = 1; dtype >= 0; dtype--) {
        for (int ri = 0; ri < 3; ri++) {
            int R = Rs[ri];
            if (R > maxR)
                continue;
            for (int ki = 0; ki < 4; ki++) {
                int K = Ks[ki];
                if ((quick || dtype == 0) && K != 64)
                    continue; /* f32: one K is enough to see the dtype */
                dt_case c;
                char config[96];
                size_t esz = dtype ? 2 : 4, rows = (size_t)R * DT_L;
                snprintf(config, sizeof config, "R=%d,L=%d,V=%d,K=%d,%s", R,
                         DT_L, DT_V, K, dtype ? "bf16" : "f32");
                if (!bench_wants(b, config))
                    continue;
                c.rt = bench_runtime(b);
                c.dtype = dtype;
                c.rows = (int)rows;
                c.K = K;
                c.logits = bench_upload(b, dtype ? (void *)h : (void *)f,
                                        rows * DT_V * esz);
                c.lp = bench_alloc(b, rows * K * 4);
                c.ids = bench_alloc(b, rows * K * 4);
                /* Sanity: the first row against the CPU reference. */
                bench_check(b, launch_case(&c, bench_stream(b)), "draft_topk");
                {
                    int32_t *gi = malloc((size_t)K * 4), *ci = malloc((size_t)K * 4);
                    float *gl = malloc((size_t)K * 4), *cl = malloc((size_t)K * 4);
                    bench_download(b, gi, c.ids, (size_t)K * 4);
                    bench_download(b, gl, c.lp, (size_t)K * 4);
                    ref_draft_topk(cl, ci, dtype ? (void *)h : (void *)f, dtype,
                                   1, DT_V, K);
                    int bad = 0;
                    for (int k = 0; k < K; k++)
                        bad += gi[k] != ci[k] || fabsf(gl[k] - cl[k]) > 1e-3f;
                    if (bad)
                        bench_note(b, "draft_topk K=%d %s: %d of %d entries of "
                                   "row 0 differ from the CPU reference",
                                   K, dtype ? "bf16" : "f32", bad, K);
                    free(gi); free(ci); free(gl); free(cl);
                }
                double bytes = (double)rows * ((double)DT_V * esz + 8.0 * K);
                double us = bench_gpu_us(b, launch_case, &c);
                bench_row(b, "draft_topk", config, us, bytes, 0, NULL, 0);
                bench_free_all(b);
            }
        }
    }
    free(h);
    free(f);
    return 0;
}
