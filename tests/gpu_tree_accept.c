/*
 * gpu_tree_accept.c: kdtree_tree_accept() on the GPU against the CPU
 * reference (ref/tree_accept.c), bit for bit: trees built by the
 * reference build_ddtree and arbitrary (even malformed) link arrays, the
 * spec's edge cases, caps, and the argument checks (which must never
 * launch).  Exits 77 without a GPU.  On a mismatch it prints the first
 * differing request, field and index with expected and got values.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "harness.h"
#include "kdtree.h"
#include "ref/build_ddtree.h"
#include "ref/tree_accept.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* One batch on the host. */
typedef struct batch {
    int R, L, N;
    int32_t *token, *fc, *ns, *nn, *target, *cap;
} batch;

static batch
batch_new(int R, int L, int N)
{
    batch b = {R, L, N, NULL, NULL, NULL, NULL, NULL, NULL};
    b.token = calloc((size_t)R * N, 4);
    b.fc = calloc((size_t)R * N, 4);
    b.ns = calloc((size_t)R * N, 4);
    b.target = calloc((size_t)R * N, 4);
    b.nn = calloc((size_t)R, 4);
    b.cap = calloc((size_t)R, 4);
    return b;
}

static void
batch_free(batch *b)
{
    free(b->token);
    free(b->fc);
    free(b->ns);
    free(b->target);
    free(b->nn);
    free(b->cap);
}

/* Fills request r with a tree built by the reference build_ddtree from
 * random dyadic log-probs over a small token alphabet (duplicate tokens
 * among siblings and across depths), and targets that follow the tree
 * most of the time. */
static void
fill_built(batch *b, int r, int K, int alphabet)
{
    int L = b->L, N = b->N;
    float *lp = malloc(sizeof(float) * L * K);
    int32_t *ids = malloc(sizeof(int32_t) * L * K);
    int32_t *par = malloc(4 * N), *dep = malloc(4 * N), *pos = malloc(4 * N);
    uint32_t *mask = malloc(4 * (size_t)N * ((N + 31) / 32));
    for (int d = 0; d < L; d++) {
        float v = 0.0f;
        for (int k = 0; k < K; k++) {
            v -= (float)(rnd() % 5) / 8.0f;
            lp[d * K + k] = v;
            ids[d * K + k] = (int32_t)(rnd() % alphabet);
        }
    }
    int B = (int)(rnd() % N);
    b->nn[r] = ref_build_ddtree_one(b->token + r * N, par, dep, pos,
                                    b->fc + r * N, b->ns + r * N, NULL, mask,
                                    lp, ids, B, 1 + (int)(rnd() % L),
                                    (int)(rnd() % alphabet), 0, L, K, N);
    for (int i = 0; i < N; i++) {
        int32_t *t = b->target + r * N + i;
        int c = b->fc[r * N + i];
        if (c >= 0 && rnd() % 4) {
            int hop = (int)(rnd() % 3);
            while (hop-- && b->ns[r * N + c] >= 0)
                c = b->ns[r * N + c];
            *t = b->token[r * N + c];
        } else {
            *t = (int32_t)(rnd() % alphabet);
        }
    }
    free(lp);
    free(ids);
    free(par);
    free(dep);
    free(pos);
    free(mask);
}

/* Runs the batch on the GPU and the reference; returns 1 when equal, else
 * prints the first difference. */
static int
run_and_compare(const batch *b, int use_cap, void *stream)
{
    int R = b->R, L = b->L, N = b->N, P = L + 1;
    size_t rn = (size_t)R * N * 4;
    uint64_t d_tok = gpu_upload(b->token, rn), d_fc = gpu_upload(b->fc, rn),
             d_ns = gpu_upload(b->ns, rn), d_tg = gpu_upload(b->target, rn),
             d_nn = gpu_upload(b->nn, (size_t)R * 4),
             d_cap = use_cap ? gpu_upload(b->cap, (size_t)R * 4) : 0;
    uint64_t d_len = gpu_alloc((size_t)R * 4), d_idx = gpu_alloc((size_t)R * P * 4),
             d_at = gpu_alloc((size_t)R * P * 4), d_bonus = gpu_alloc((size_t)R * 4);
    kdtree_tree tree = {.n_nodes = d_nn, .token = d_tok, .first_child = d_fc,
                        .next_sibling = d_ns, .n_requests = R, .n_max = N};
    kdtree_requests req = {.max_accept = d_cap, .n_requests = R};
    kdtree_accept acc = {.accept_len = d_len, .accept_idx = d_idx,
                         .accept_token = d_at, .bonus = d_bonus,
                         .n_requests = R, .depth = L};
    int st = kdtree_tree_accept(gpu_runtime(), &acc, &tree, d_tg, &req,
                                stream);
    ck_assert_msg(st == 0, "kdtree_tree_accept: %s: %s",
                  kdtree_status_name(st), kdtree_last_error());
    gpu_sync();
    int32_t *g_len = malloc((size_t)R * 4), *g_idx = malloc((size_t)R * P * 4),
            *g_at = malloc((size_t)R * P * 4), *g_bonus = malloc((size_t)R * 4);
    int32_t *c_len = malloc((size_t)R * 4), *c_idx = malloc((size_t)R * P * 4),
            *c_at = malloc((size_t)R * P * 4), *c_bonus = malloc((size_t)R * 4);
    gpu_download(g_len, d_len, (size_t)R * 4);
    gpu_download(g_idx, d_idx, (size_t)R * P * 4);
    gpu_download(g_at, d_at, (size_t)R * P * 4);
    gpu_download(g_bonus, d_bonus, (size_t)R * 4);
    ref_tree_accept(c_len, c_idx, c_at, c_bonus, b->token, b->fc, b->ns,
                    b->nn, b->target, use_cap ? b->cap : NULL, R, L, N);
    int ok = 1;
    for (int r = 0; r < R && ok; r++) {
        if (g_len[r] != c_len[r] || g_bonus[r] != c_bonus[r]) {
            fprintf(stderr,
                    "tree_accept R=%d L=%d N_MAX=%d request %d: accept_len "
                    "%d (want %d), bonus %d (want %d), n_nodes %d\n",
                    R, L, N, r, g_len[r], c_len[r], g_bonus[r], c_bonus[r],
                    b->nn[r]);
            ok = 0;
        }
        for (int i = 0; i < P && ok; i++)
            if (g_idx[r * P + i] != c_idx[r * P + i] ||
                g_at[r * P + i] != c_at[r * P + i]) {
                fprintf(stderr,
                        "tree_accept R=%d L=%d N_MAX=%d request %d path %d: "
                        "accept_idx %d (want %d), accept_token %d (want "
                        "%d)\n",
                        R, L, N, r, i, g_idx[r * P + i], c_idx[r * P + i],
                        g_at[r * P + i], c_at[r * P + i]);
                ok = 0;
            }
    }
    free(g_len); free(g_idx); free(g_at); free(g_bonus);
    free(c_len); free(c_idx); free(c_at); free(c_bonus);
    gpu_free(d_tok); gpu_free(d_fc); gpu_free(d_ns); gpu_free(d_tg);
    gpu_free(d_nn); if (d_cap) gpu_free(d_cap);
    gpu_free(d_len); gpu_free(d_idx); gpu_free(d_at); gpu_free(d_bonus);
    return ok;
}

START_TEST(random_built_trees)
{
    static const int shapes[][3] = {
        /* R, L, N_MAX */
        {1, 15, 65}, {8, 15, 65}, {64, 15, 65}, {3, 1, 9}, {5, 4, 2},
        {130, 15, 129}, {7, 15, 1025}, {2, 31, 1}, {33, 8, 300}};
    int cases = 0;
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int rep = 0; rep < 25; rep++) {
            batch b = batch_new(shapes[s][0], shapes[s][1], shapes[s][2]);
            int K = 1 + (int)(rnd() % 6);
            for (int r = 0; r < b.R; r++) {
                fill_built(&b, r, K, 2 + (int)(rnd() % 6));
                b.cap[r] = (int32_t)(rnd() % (b.L + 4)) - 1;
            }
            ck_assert_msg(run_and_compare(&b, rep & 1, rep % 3 ? NULL : gpu_stream()),
                          "mismatch (shape %u, repetition %d)", s, rep);
            batch_free(&b);
            cases++;
        }
    }
    ck_assert_int_eq(cases, 225);
}
END_TEST

START_TEST(edge_cases)
{
    enum { L = 3, N = 8 };
    batch b = batch_new(6, L, N);
    for (int r = 0; r < 6; r++)
        for (int i = 0; i < N; i++) {
            b.token[r * N + i] = 100 + i;
            b.fc[r * N + i] = b.ns[r * N + i] = -1;
            b.target[r * N + i] = 999;
            b.nn[r] = 1;
            b.cap[r] = 0;
        }
    /* r0: root only (B = 0): accept_len 1, bonus = target[0]. */
    b.target[0] = 42;
    /* r1: a chain 0-1-2-3 fully accepted: path of L+1 rows. */
    b.nn[1] = 4;
    for (int i = 0; i < 3; i++) {
        b.fc[N + i] = i + 1;
        b.target[N + i] = 100 + i + 1;
    }
    b.target[N + 3] = 7;
    /* r2: the same chain, capped at 2 rows. */
    memcpy(b.fc + 2 * N, b.fc + N, 4 * N);
    memcpy(b.target + 2 * N, b.target + N, 4 * N);
    b.nn[2] = 4;
    b.cap[2] = 2;
    /* r3: a star whose children repeat a token: the first in sibling order
     * wins. */
    b.nn[3] = 4;
    b.fc[3 * N] = 1;
    b.ns[3 * N + 1] = 2;
    b.ns[3 * N + 2] = 3;
    b.token[3 * N + 2] = b.token[3 * N + 3] = 55;
    b.target[3 * N] = 55;
    b.target[3 * N + 2] = 5;
    /* r4: links out of range / backwards and n_nodes out of range. */
    b.nn[4] = 1000;
    b.fc[4 * N] = 5;
    b.ns[4 * N + 5] = 2;
    b.target[4 * N] = 102;
    b.fc[4 * N + 2] = 0; /* backwards: ends the walk */
    /* r5: n_nodes = 0 is treated as 1; the cap is negative. */
    b.nn[5] = 0;
    b.cap[5] = -5;
    b.fc[5 * N] = 1;
    b.target[5 * N] = 101;
    ck_assert(run_and_compare(&b, 0, NULL));
    ck_assert(run_and_compare(&b, 1, NULL));
    batch_free(&b);
}
END_TEST

START_TEST(bad_arguments_never_launch)
{
    enum { R = 2, L = 3, N = 8, P = L + 1 };
    kdtree_runtime *rt = gpu_runtime();
    uint64_t in = gpu_alloc(4 * R * N), out = gpu_alloc(4 * R * P);
    uint32_t host[R * P];
    const kdtree_tree tree = {.n_nodes = in, .token = in, .first_child = in,
                              .next_sibling = in, .n_requests = R,
                              .n_max = N};
    const kdtree_requests req = {.n_requests = R};
    const kdtree_accept acc = {.accept_len = out, .accept_idx = out,
                               .accept_token = out, .bonus = out,
                               .n_requests = R, .depth = L};
    kdtree_accept a0 = acc, a_mis = acc;
    a0.accept_len = 0;
    a_mis.accept_len = out + 2;
    kdtree_requests r_mis = req;
    r_mis.max_accept = in + 1;
    kdtree_tree t0 = tree, t_big = tree;
    t0.n_requests = 0;
    t_big.n_max = 1026;
    kdtree_accept a_l0 = acc;
    a_l0.depth = 0;
    struct {
        int st;
        const char *what;
    } cases[] = {
        {kdtree_tree_accept(NULL, &acc, &tree, in, &req, NULL),
         "NULL runtime"},
        {kdtree_tree_accept(rt, &a0, &tree, in, &req, NULL), "accept_len 0"},
        {kdtree_tree_accept(rt, &acc, &tree, 0, &req, NULL), "target 0"},
        {kdtree_tree_accept(rt, &a_mis, &tree, in, &req, NULL),
         "accept_len misaligned"},
        {kdtree_tree_accept(rt, &acc, &tree, in, &r_mis, NULL),
         "max_accept misaligned"},
        {kdtree_tree_accept(rt, &acc, &t0, in, &req, NULL), "R = 0"},
        {kdtree_tree_accept(rt, &a_l0, &tree, in, &req, NULL), "L = 0"},
        {kdtree_tree_accept(rt, &acc, &t_big, in, &req, NULL),
         "N_MAX = 1026"},
    };
    int want[] = {KDTREE_ERROR_INVALID_ARGUMENT, KDTREE_ERROR_INVALID_ARGUMENT,
                  KDTREE_ERROR_INVALID_ARGUMENT, KDTREE_ERROR_MISALIGNED,
                  KDTREE_ERROR_MISALIGNED, KDTREE_ERROR_INVALID_ARGUMENT,
                  KDTREE_ERROR_SHAPE, KDTREE_ERROR_SHAPE};
    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(cases[i].st == want[i], "%s: got %s, want %s",
                      cases[i].what, kdtree_status_name(cases[i].st),
                      kdtree_status_name(want[i]));
    gpu_sync();
    gpu_download(host, out, sizeof host);
    for (int i = 0; i < R * P; i++)
        ck_assert_msg(host[i] == 0xA5A5A5A5u, "output word %d written", i);
    gpu_free(in);
    gpu_free(out);
}
END_TEST

static Suite *
suite(void)
{
    gpu_runtime(); /* the device the tests use (the harness checked) */
    Suite *s = suite_create("gpu_tree_accept");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, edge_cases);
    tcase_add_test(tc, random_built_trees);
    tcase_add_test(tc, bad_arguments_never_launch);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_GPU);
}
