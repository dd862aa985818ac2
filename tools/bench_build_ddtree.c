/*
 * bench_build_ddtree.c: kdtree-bench's build_ddtree cases: L = 15, K = B
 * for B in {16, 64, 128, 256, 512, 1024} (N_MAX = B + 1), R in {1, 8, 64}
 * requests in one launch, realistic log-probs (the sorted top-K of a
 * log-softmax over 4096 Zipf-like logits per depth: peaked, deep trees).  The baseline is
 * the C binary-heap reference (ref/build_ddtree.c) building the same
 * requests one after another on one CPU core, measured in the same run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/build_ddtree.h"
#include "bench_ddtree_input.h"
#include "bench_suite.h"

#define BD_L 15

typedef struct bd_case {
    kdtree_runtime *rt;
    int R, K, N;
    uint64_t lp, ids, budget, root, past;
    uint64_t n_nodes, token, parent, depth, position, first_child,
        next_sibling, score, anc_mask;
    /* host copies for the CPU baseline */
    const float *h_lp;
    const int32_t *h_ids, *h_budget, *h_root, *h_past;
    int32_t *o_tok, *o_par, *o_dep, *o_pos, *o_fc, *o_ns;
    float *o_sc;
    uint32_t *o_mask;
    int32_t *o_n;
} bd_case;

static int
launch_case(void *arg, void *stream)
{
    bd_case *c = arg;
    kdtree_tree tree = {.n_nodes = c->n_nodes, .token = c->token,
                        .parent = c->parent, .depth = c->depth,
                        .position = c->position,
                        .first_child = c->first_child,
                        .next_sibling = c->next_sibling, .score = c->score,
                        .anc_mask = c->anc_mask, .n_requests = c->R,
                        .n_max = c->N};
    kdtree_draft draft = {.lp = c->lp, .ids = c->ids, .n_requests = c->R,
                          .depth = BD_L, .k = c->K};
    kdtree_requests req = {.budget = c->budget, .root_token = c->root,
                           .past_len = c->past, .n_requests = c->R};
    return kdtree_build_ddtree(c->rt, &tree, &draft, &req, stream);
}

/* The baseline: the reference heap, request after request, one core. */
static void
cpu_case(void *arg)
{
    bd_case *c = arg;
    ref_build_ddtree(c->o_n, c->o_tok, c->o_par, c->o_dep, c->o_pos, c->o_fc,
                     c->o_ns, c->o_sc, c->o_mask, c->h_lp, c->h_ids,
                     c->h_budget, NULL, c->h_root, c->h_past, c->R, BD_L,
                     c->K, c->N);
}

int
bench_build_ddtree(bench_ctx *b)
{
    static const int Bs[] = {16, 64, 128, 256, 512, 1024};
    static const int Rs[] = {1, 8, 64};
    int quick = bench_quick(b);
    for (int bi = 0; bi < 6; bi++) {
        int B = Bs[bi], K = B, N = B + 1, W = (N + 31) / 32;
        if (quick && B != 64)
            continue;
        for (int ri = 0; ri < 3; ri++) {
            int R = Rs[ri];
            if (quick && R != 1)
                continue;
            char config[96];
            snprintf(config, sizeof config, "R=%d,L=%d,K=%d,B=%d", R, BD_L, K,
                     B);
            if (!bench_wants(b, config))
                continue;
            uint64_t seed = BD_SEED(B, R);
            size_t lk = (size_t)R * BD_L * K, rn = (size_t)R * N;
            float *lp = malloc(lk * 4);
            int32_t *ids = malloc(lk * 4), *budget = malloc((size_t)R * 4),
                    *root = malloc((size_t)R * 4), *past = malloc((size_t)R * 4);
            bd_case c;
            memset(&c, 0, sizeof c);
            c.o_n = malloc((size_t)R * 4);
            c.o_tok = malloc(rn * 4);
            c.o_par = malloc(rn * 4);
            c.o_dep = malloc(rn * 4);
            c.o_pos = malloc(rn * 4);
            c.o_fc = malloc(rn * 4);
            c.o_ns = malloc(rn * 4);
            c.o_sc = malloc(rn * 4);
            c.o_mask = malloc(rn * W * 4);
            for (int r = 0; r < R; r++) {
                bd_make_request(lp + (size_t)r * BD_L * K,
                                ids + (size_t)r * BD_L * K, BD_L, K, &seed);
                budget[r] = B;
                root[r] = (int32_t)(bd_rnd64(&seed) % 163840);
                past[r] = 1000 + 37 * r;
            }
            c.rt = bench_runtime(b);
            c.R = R;
            c.K = K;
            c.N = N;
            c.lp = bench_upload(b, lp, lk * 4);
            c.ids = bench_upload(b, ids, lk * 4);
            c.budget = bench_upload(b, budget, (size_t)R * 4);
            c.root = bench_upload(b, root, (size_t)R * 4);
            c.past = bench_upload(b, past, (size_t)R * 4);
            c.n_nodes = bench_alloc(b, (size_t)R * 4);
            c.token = bench_alloc(b, rn * 4);
            c.parent = bench_alloc(b, rn * 4);
            c.depth = bench_alloc(b, rn * 4);
            c.position = bench_alloc(b, rn * 4);
            c.first_child = bench_alloc(b, rn * 4);
            c.next_sibling = bench_alloc(b, rn * 4);
            c.score = bench_alloc(b, rn * 4);
            c.anc_mask = bench_alloc(b, rn * W * 4);
            c.h_lp = lp;
            c.h_ids = ids;
            c.h_budget = budget;
            c.h_root = root;
            c.h_past = past;

            /* Sanity: the GPU's tokens and parents against the CPU's. */
            bench_check(b, launch_case(&c, bench_stream(b)), "build_ddtree");
            cpu_case(&c);
            {
                int32_t *g = malloc(rn * 4);
                int bad = 0;
                bench_download(b, g, c.token, rn * 4);
                bad += memcmp(g, c.o_tok, rn * 4) != 0;
                bench_download(b, g, c.parent, rn * 4);
                bad += memcmp(g, c.o_par, rn * 4) != 0;
                if (bad)
                    bench_note(b, "build_ddtree B=%d R=%d: the GPU's tree "
                               "differs from the CPU reference", B, R);
                free(g);
            }
            double bytes = (double)R * (8.0 * BD_L * K + 4.0 * 7 * N +
                                        4.0 * N * W);
            double us = bench_gpu_us(b, launch_case, &c);
            double cpu = bench_cpu_us(b, cpu_case, &c);
            bench_row(b, "build_ddtree", config, us, bytes, 0,
                      "C heap, 1 core, requests in turn", cpu);
            bench_free_all(b);
            free(lp); free(ids); free(budget); free(root); free(past);
            free(c.o_n); free(c.o_tok); free(c.o_par); free(c.o_dep);
            free(c.o_pos); free(c.o_fc); free(c.o_ns); free(c.o_sc);
            free(c.o_mask);
        }
    }
    return 0;
}
