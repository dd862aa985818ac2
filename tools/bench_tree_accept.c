/*
 * bench_tree_accept.c: kdtree-bench's tree_accept cases (random trees of
 * N_MAX = 65 rows, L = 15, for R = 1, 8, 64 requests) and the measure of
 * the C API's host cost over a bare cuLaunchKernel of the same kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_suite.h"
#include "cuda/driver.h"
#include "kdt_params.h"
#include "kdt_tree_accept_plan.h"
#include "jit/registry.h"
#include "runtime/runtime.h"

#define TA_N_MAX 65
#define TA_L 15

/* One batch of random trees on the host, in build_ddtree's layout. */
typedef struct trees {
    int R;
    int32_t *token, *first_child, *next_sibling, *n_nodes, *target;
} trees;

static uint32_t
rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*s >> 33);
}

/* Random trees shaped like DDTree's: each node hangs under one of the few
 * nodes built just before it (deep, narrow trees), tokens come from a small
 * alphabet (so siblings repeat tokens, which the walk must resolve by
 * sibling order), and the target agrees with some child 3 times in 4, so
 * walks run several levels deep. */
static void
make_trees(trees *t, int R, uint64_t seed)
{
    size_t n = (size_t)R * TA_N_MAX;
    int depth[TA_N_MAX];
    t->R = R;
    t->token = calloc(n, 4);
    t->first_child = calloc(n, 4);
    t->next_sibling = calloc(n, 4);
    t->target = calloc(n, 4);
    t->n_nodes = calloc((size_t)R, 4);
    if (!t->token || !t->first_child || !t->next_sibling || !t->target ||
        !t->n_nodes) {
        fprintf(stderr, "kdtree-bench: out of memory\n");
        exit(2);
    }
    for (int r = 0; r < R; r++) {
        int32_t *tok = t->token + r * TA_N_MAX;
        int32_t *fc = t->first_child + r * TA_N_MAX;
        int32_t *ns = t->next_sibling + r * TA_N_MAX;
        int32_t *tg = t->target + r * TA_N_MAX;
        int32_t last_child[TA_N_MAX];
        int nn = r == 0 ? TA_N_MAX : 1 + (int)(rnd(&seed) % TA_N_MAX);
        t->n_nodes[r] = nn;
        for (int i = 0; i < TA_N_MAX; i++) {
            tok[i] = 7;
            fc[i] = ns[i] = last_child[i] = -1;
            tg[i] = (int32_t)(rnd(&seed) % 16);
        }
        depth[0] = 0;
        for (int i = 1; i < nn; i++) {
            /* A parent among the last few nodes that can still take a
             * child, else the root (depth 0 < L): a loop that only
             * redrew could spin forever once the last few are all at
             * depth L. */
            int lo = i > 6 ? i - 6 : 0, p = 0, open = 0;
            for (int j = lo; j < i; j++)
                open += depth[j] < TA_L;
            if (open) {
                int pick = (int)(rnd(&seed) % (unsigned)open);
                for (int j = lo; j < i; j++)
                    if (depth[j] < TA_L && pick-- == 0) {
                        p = j;
                        break;
                    }
            }
            depth[i] = depth[p] + 1;
            tok[i] = (int32_t)(rnd(&seed) % 16);
            if (last_child[p] < 0)
                fc[p] = i;
            else
                ns[last_child[p]] = i;
            last_child[p] = i;
        }
        for (int i = 0; i < nn; i++) {
            int kids = 0;
            for (int c = fc[i]; c >= 0; c = ns[c])
                kids++;
            if (kids && rnd(&seed) % 4 != 0) {
                int pick = (int)(rnd(&seed) % (unsigned)kids), c = fc[i];
                while (pick--)
                    c = ns[c];
                tg[i] = tok[c];
            }
        }
    }
}

static void
free_trees(trees *t)
{
    free(t->token);
    free(t->first_child);
    free(t->next_sibling);
    free(t->target);
    free(t->n_nodes);
}

/* The spec's walk (§4), for a sanity check of what was timed. */
static int
walk_len(const trees *t, int r)
{
    const int32_t *tok = t->token + r * TA_N_MAX;
    const int32_t *fc = t->first_child + r * TA_N_MAX;
    const int32_t *ns = t->next_sibling + r * TA_N_MAX;
    const int32_t *tg = t->target + r * TA_N_MAX;
    int cur = 0, len = 1;
    while (len < TA_L + 1) {
        int c = fc[cur];
        while (c >= 0 && tok[c] != tg[cur])
            c = ns[c];
        if (c < 0)
            break;
        cur = c;
        len++;
    }
    return len;
}

/* Device buffers of one case. */
typedef struct ta_case {
    kdtree_runtime *rt;
    int R;
    uint64_t token, first_child, next_sibling, n_nodes, target;
    uint64_t accept_len, accept_idx, accept_token, bonus;
} ta_case;

static void
upload_case(bench_ctx *b, ta_case *c, const trees *t)
{
    size_t rows = (size_t)t->R * TA_N_MAX * 4, per = (size_t)t->R * 4;
    size_t path = (size_t)t->R * (TA_L + 1) * 4;
    c->rt = bench_runtime(b);
    c->R = t->R;
    c->token = bench_upload(b, t->token, rows);
    c->first_child = bench_upload(b, t->first_child, rows);
    c->next_sibling = bench_upload(b, t->next_sibling, rows);
    c->target = bench_upload(b, t->target, rows);
    c->n_nodes = bench_upload(b, t->n_nodes, per);
    c->accept_len = bench_alloc(b, per);
    c->accept_idx = bench_alloc(b, path);
    c->accept_token = bench_alloc(b, path);
    c->bonus = bench_alloc(b, per);
}

static int
launch_case(void *arg, void *stream)
{
    ta_case *c = arg;
    kdtree_tree tree = {.n_nodes = c->n_nodes, .token = c->token,
                        .first_child = c->first_child,
                        .next_sibling = c->next_sibling, .n_requests = c->R,
                        .n_max = TA_N_MAX};
    kdtree_requests req = {.n_requests = c->R};
    kdtree_accept acc = {.accept_len = c->accept_len,
                         .accept_idx = c->accept_idx,
                         .accept_token = c->accept_token, .bonus = c->bonus,
                         .n_requests = c->R, .depth = TA_L};
    return kdtree_tree_accept(c->rt, &acc, &tree, c->target, &req, stream);
}

int
bench_tree_accept(bench_ctx *b)
{
    static const int Rs[] = {1, 8, 64};
    int n_cases = bench_quick(b) ? 2 : 3;
    for (int i = 0; i < n_cases; i++) {
        trees t;
        ta_case c;
        char config[96];
        int R = Rs[i], bad = 0;
        snprintf(config, sizeof config, "R=%d N_MAX=%d L=%d random trees", R,
                 TA_N_MAX, TA_L);
        if (!bench_wants(b, config))
            continue;
        int32_t *len = calloc((size_t)R, 4);
        make_trees(&t, R, 0x5EED0000u + (uint64_t)R);
        upload_case(b, &c, &t);
        bench_check(b, launch_case(&c, bench_stream(b)), "tree_accept");
        bench_download(b, len, c.accept_len, (size_t)R * 4);
        for (int r = 0; r < R; r++)
            bad += len[r] != walk_len(&t, r);
        if (bad)
            bench_note(b, "tree_accept R=%d: %d of %d accept lengths differ "
                       "from the CPU walk (timed anyway)", R, bad, R);
        /* Bytes: every input and output buffer once; the kernel touches
         * less (only the walked rows), so this is an upper bound. */
        double bytes = (double)R * (4.0 * TA_N_MAX * 4 + 4 +
                                    4.0 * 2 * (TA_L + 1) + 4 + 4);
        double us = bench_gpu_us(b, launch_case, &c);
        bench_row(b, "tree_accept", config, us, bytes, 0, NULL, 0);
        bench_free_all(b);
        free_trees(&t);
        free(len);
    }
    return 0;
}

/* ---- host cost over a bare launch ---------------------------------------
 *
 * The same loaded function, the same parameter struct and the same launch
 * geometry as the API uses (mirrors src/kernels/tree_accept.c), launched
 * with cuLaunchKernel with the context already current: what a user who
 * hand-wrote the launch would pay.  The API adds argument checks, the table
 * lookup and the context push/pop.  Each batch is short enough never to
 * fill the launch queue, and the stream is drained between batches, so a
 * batch measures the host and not the GPU. */

typedef struct bare_arg {
    const kdt_driver *drv;
    CUfunction fn;
    CUstream stream;
    void *params[1];
    unsigned grid, block, smem;
} bare_arg;

static double
host_batch_us(bench_ctx *b, ta_case *c, bare_arg *bare, int n)
{
    const kdt_driver *d = bench_driver(b);
    struct timespec t0, t1;
    int st = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (bare) {
        for (int i = 0; i < n; i++)
            st |= (int)d->launch_kernel(bare->fn, bare->grid, 1, 1,
                                        bare->block, 1, 1, bare->smem,
                                        bare->stream, bare->params, NULL);
    } else {
        for (int i = 0; i < n; i++)
            st |= launch_case(c, bench_stream(b));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    bench_check(b, st ? KDTREE_ERROR_CUDA : 0,
                bare ? "cuLaunchKernel" : "kdtree_tree_accept");
    bench_make_current(b);
    d->stream_synchronize(bench_stream(b));
    return ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) * 1e-3) /
           n;
}

static int
cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int
bench_tree_accept_overhead(bench_ctx *b)
{
    const int calls = 200, reps = bench_quick(b) ? 7 : 31;
    int id = kdt_kernel_find("tree_accept");
    int64_t vals[KDT_MAX_CONSTS];
    double api[64], raw[64];
    trees t;
    ta_case c;
    bare_arg bare;
    kdt_tree_accept_params p;
    kdt_loaded *m;
    char shape[64];
    static const char config[] = "R=1 N_MAX=65 L=15";

    if (!bench_wants(b, config))
        return 0;
    snprintf(shape, sizeof shape, "N_MAX=%d,L=%d", TA_N_MAX, TA_L);
    bench_check(b, kdt_shape_parse(id, shape, vals), "shape");
    make_trees(&t, 1, 0x0BEEF);
    upload_case(b, &c, &t);
    bench_check(b, kdtree_prepare(c.rt, "tree_accept", shape), "prepare");
    m = kdt_runtime_find(c.rt, id, vals);
    if (!m)
        bench_check(b, KDTREE_ERROR_INTERNAL, "lookup after prepare");

    memset(&p, 0, sizeof p);
    p.token = (const int32_t *)(uintptr_t)c.token;
    p.first_child = (const int32_t *)(uintptr_t)c.first_child;
    p.next_sibling = (const int32_t *)(uintptr_t)c.next_sibling;
    p.n_nodes = (const int32_t *)(uintptr_t)c.n_nodes;
    p.target = (const int32_t *)(uintptr_t)c.target;
    p.max_accept = NULL;
    p.accept_len = (int32_t *)(uintptr_t)c.accept_len;
    p.accept_idx = (int32_t *)(uintptr_t)c.accept_idx;
    p.accept_token = (int32_t *)(uintptr_t)c.accept_token;
    p.bonus = (int32_t *)(uintptr_t)c.bonus;
    p.n_requests = 1;
    bare.drv = bench_driver(b);
    bare.fn = m->fn[0];
    bare.stream = bench_stream(b);
    bare.params[0] = &p;
    /* One thread per request, in blocks as the launcher makes them. */
    bare.grid = 1;
    bare.block = KDT_TA_THREADS;
    bare.smem = 0;

    bench_make_current(b);
    host_batch_us(b, &c, NULL, calls);
    host_batch_us(b, &c, &bare, calls);
    for (int r = 0; r < reps; r++) {
        /* Alternate, so that drift (clocks, other load) hits both. */
        api[r] = host_batch_us(b, &c, NULL, calls);
        raw[r] = host_batch_us(b, &c, &bare, calls);
    }
    qsort(api, (size_t)reps, sizeof *api, cmp_d);
    qsort(raw, (size_t)reps, sizeof *raw, cmp_d);
    bench_overhead_row(b, "tree_accept", config, api[reps / 2],
                       raw[reps / 2], calls);
    free_trees(&t);
    return 0;
}
