/*
 * gpu_build_ddtree.c: kdtree_build_ddtree() on the GPU against the CPU
 * reference (ref/build_ddtree.c), bit for bit on every output buffer:
 * realistic log-probs (a log-softmax's sorted top-K), dyadic ties, all
 * zeros, and arbitrary rows (unsorted, positive, NaN, inf); mixed budgets,
 * depth limits and past lengths in one batch; optional arguments absent;
 * outputs poisoned beforehand; and the argument checks, which must never
 * launch.  Exits 77 without a GPU.  A mismatch prints the first differing
 * request, row and field with expected and got values.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "harness.h"
#include "kdtree.h"
#include "ref/build_ddtree.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static float
unit(void)
{
    return ((float)(rnd() & 0xffffff) + 0.5f) / 16777216.0f;
}

enum lp_kind { LP_REAL, LP_DYADIC, LP_ZERO, LP_FLAT, LP_WILD, LP_KINDS };

static int
fdesc(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

/* One request's [L][K] log-probs and ids. */
static void
fill_request(float *lp, int32_t *ids, int L, int K, int kind)
{
    for (int d = 0; d < L; d++) {
        float *row = lp + (size_t)d * K;
        for (int k = 0; k < K; k++) {
            ids[(size_t)d * K + k] = (int32_t)(rnd() % 163840);
            switch (kind) {
            case LP_REAL: /* peaked: a few likely tokens, a long tail */
                row[k] = logf(unit()) * (1.0f + 4.0f * unit()) - 0.05f * k;
                break;
            case LP_DYADIC: /* multiples of 2^-6 in [-8, 0]: exact sums */
                row[k] = -(float)(rnd() % 513) / 64.0f;
                if (rnd() % 4 == 0)
                    row[k] = -(float)(rnd() % 4) / 8.0f; /* many ties */
                break;
            case LP_ZERO:
                row[k] = 0.0f;
                break;
            case LP_FLAT: /* an unsure drafter: a big tree takes deep ranks
                             (past the 512 that L = 15, K = 1024 keeps in
                             shared memory) */
                row[k] = -6.9f - 0.002f * (float)k - 0.3f * unit();
                break;
            default: {
                uint32_t c = rnd() % 24;
                row[k] = c == 0   ? NAN
                         : c == 1 ? -INFINITY
                         : c == 2 ? INFINITY
                         : c == 3 ? -0.0f
                         : c < 12 ? -(float)(rnd() % 6) / 4.0f
                                  : (unit() - 0.7f) * 6.0f;
            }
            }
        }
        if (kind == LP_REAL || kind == LP_DYADIC || kind == LP_FLAT)
            qsort(row, K, sizeof(float), fdesc);
    }
}

typedef struct host_out {
    int32_t *n, *tok, *par, *dep, *pos, *fc, *ns;
    float *sc;
    uint32_t *mask;
} host_out;

static host_out
host_out_new(int R, int N)
{
    int W = (N + 31) / 32;
    host_out o;
    o.n = calloc(R, 4);
    o.tok = calloc((size_t)R * N, 4);
    o.par = calloc((size_t)R * N, 4);
    o.dep = calloc((size_t)R * N, 4);
    o.pos = calloc((size_t)R * N, 4);
    o.fc = calloc((size_t)R * N, 4);
    o.ns = calloc((size_t)R * N, 4);
    o.sc = calloc((size_t)R * N, 4);
    o.mask = calloc((size_t)R * N * W, 4);
    return o;
}

static void
host_out_free(host_out *o)
{
    free(o->n); free(o->tok); free(o->par); free(o->dep); free(o->pos);
    free(o->fc); free(o->ns); free(o->sc); free(o->mask);
}

static int
cmp_i32(const char *field, const int32_t *got, const int32_t *want, int R,
        int N, const char *tag)
{
    for (int r = 0; r < R; r++)
        for (int i = 0; i < N; i++)
            if (got[r * N + i] != want[r * N + i]) {
                fprintf(stderr, "%s: request %d row %d %s: got %d, want %d\n",
                        tag, r, i, field, got[r * N + i], want[r * N + i]);
                return 0;
            }
    return 1;
}

/* Runs one batch on the GPU and the reference; 1 when every output is
 * bit-identical, else prints the first difference. */
static int
run_case(int R, int L, int K, int N, int kind, int with_dl, int with_past,
         int with_score, const int32_t *budget_in)
{
    int W = (N + 31) / 32;
    size_t lk = (size_t)R * L * K, rn = (size_t)R * N;
    float *lp = malloc(4 * lk);
    int32_t *ids = malloc(4 * lk), *budget = malloc(4 * R), *dl = malloc(4 * R),
            *root = malloc(4 * R), *past = malloc(4 * R);
    for (int r = 0; r < R; r++) {
        fill_request(lp + (size_t)r * L * K, ids + (size_t)r * L * K, L, K,
                     kind < LP_KINDS ? kind : (int)(rnd() % LP_KINDS));
        uint32_t c = rnd() % 6;
        budget[r] = budget_in ? budget_in[r]
                    : c == 0  ? 0
                    : c == 1  ? N - 1
                    : c == 2  ? 1
                              : (int32_t)(rnd() % N);
        dl[r] = 1 + (int32_t)(rnd() % L);
        root[r] = (int32_t)(rnd() % 163840);
        past[r] = (int32_t)(rnd() % 3 ? rnd() % 40000 : 0);
    }
    char tag[160];
    snprintf(tag, sizeof tag,
             "build_ddtree R=%d L=%d K=%d N_MAX=%d lp kind %d%s%s%s", R, L, K,
             N, kind, with_dl ? " depth_limit" : "", with_past ? " past_len" : "",
             with_score ? " score" : "");

    uint64_t d_lp = gpu_upload(lp, 4 * lk), d_ids = gpu_upload(ids, 4 * lk),
             d_b = gpu_upload(budget, 4 * R), d_dl = gpu_upload(dl, 4 * R),
             d_root = gpu_upload(root, 4 * R), d_past = gpu_upload(past, 4 * R);
    uint64_t d_n = gpu_alloc(4 * R), d_tok = gpu_alloc(4 * rn),
             d_par = gpu_alloc(4 * rn), d_dep = gpu_alloc(4 * rn),
             d_pos = gpu_alloc(4 * rn), d_fc = gpu_alloc(4 * rn),
             d_ns = gpu_alloc(4 * rn), d_sc = gpu_alloc(4 * rn),
             d_mask = gpu_alloc(4 * rn * W);
    kdtree_tree tree = {.n_nodes = d_n, .token = d_tok, .parent = d_par,
                        .depth = d_dep, .position = d_pos, .first_child = d_fc,
                        .next_sibling = d_ns,
                        .score = with_score ? d_sc : 0, .anc_mask = d_mask,
                        .n_requests = R, .n_max = N};
    kdtree_draft draft = {.lp = d_lp, .ids = d_ids, .n_requests = R,
                          .depth = L, .k = K};
    kdtree_requests req = {.budget = d_b, .root_token = d_root,
                           .depth_limit = with_dl ? d_dl : 0,
                           .past_len = with_past ? d_past : 0,
                           .n_requests = R};
    int st = kdtree_build_ddtree(gpu_runtime(), &tree, &draft, &req, NULL);
    ck_assert_msg(st == 0, "%s: %s: %s", tag, kdtree_status_name(st),
                  kdtree_last_error());
    gpu_sync();

    host_out g = host_out_new(R, N), c = host_out_new(R, N);
    gpu_download(g.n, d_n, 4 * R);
    gpu_download(g.tok, d_tok, 4 * rn);
    gpu_download(g.par, d_par, 4 * rn);
    gpu_download(g.dep, d_dep, 4 * rn);
    gpu_download(g.pos, d_pos, 4 * rn);
    gpu_download(g.fc, d_fc, 4 * rn);
    gpu_download(g.ns, d_ns, 4 * rn);
    gpu_download(g.sc, d_sc, 4 * rn);
    gpu_download(g.mask, d_mask, 4 * rn * W);
    ref_build_ddtree(c.n, c.tok, c.par, c.dep, c.pos, c.fc, c.ns, c.sc, c.mask,
                     lp, ids, budget, with_dl ? dl : NULL, root,
                     with_past ? past : NULL, R, L, K, N);

    int ok = cmp_i32("n_nodes", g.n, c.n, R, 1, tag) &&
             cmp_i32("token", g.tok, c.tok, R, N, tag) &&
             cmp_i32("parent", g.par, c.par, R, N, tag) &&
             cmp_i32("depth", g.dep, c.dep, R, N, tag) &&
             cmp_i32("position", g.pos, c.pos, R, N, tag) &&
             cmp_i32("first_child", g.fc, c.fc, R, N, tag) &&
             cmp_i32("next_sibling", g.ns, c.ns, R, N, tag);
    for (size_t i = 0; ok && with_score && i < rn; i++)
        if (memcmp(&g.sc[i], &c.sc[i], 4) != 0) {
            fprintf(stderr, "%s: request %zu row %zu score: got %a, want %a\n",
                    tag, i / N, i % N, g.sc[i], c.sc[i]);
            ok = 0;
        }
    if (ok && !with_score) { /* not wanted: left untouched */
        uint32_t u;
        memcpy(&u, &g.sc[0], 4);
        if (u != 0xA5A5A5A5u) {
            fprintf(stderr, "%s: score written although not wanted\n", tag);
            ok = 0;
        }
    }
    for (size_t i = 0; ok && i < rn * W; i++)
        if (g.mask[i] != c.mask[i]) {
            fprintf(stderr,
                    "%s: request %zu row %zu anc_mask word %zu: got %08x, "
                    "want %08x\n",
                    tag, i / ((size_t)N * W), (i / W) % N, i % W, g.mask[i],
                    c.mask[i]);
            ok = 0;
        }
    if (!ok)
        for (int r = 0; r < R; r++)
            if (g.n[r] != c.n[r] ||
                memcmp(g.tok + r * N, c.tok + r * N, 4 * N) != 0) {
                fprintf(stderr, "  request %d: budget %d depth_limit %d\n", r,
                        budget[r], with_dl ? dl[r] : L);
                break;
            }
    host_out_free(&g);
    host_out_free(&c);
    gpu_free(d_lp); gpu_free(d_ids); gpu_free(d_b); gpu_free(d_dl);
    gpu_free(d_root); gpu_free(d_past); gpu_free(d_n); gpu_free(d_tok);
    gpu_free(d_par); gpu_free(d_dep); gpu_free(d_pos); gpu_free(d_fc);
    gpu_free(d_ns); gpu_free(d_sc); gpu_free(d_mask);
    free(lp); free(ids); free(budget); free(dl); free(root); free(past);
    return ok;
}

START_TEST(edge_cases)
{
    int32_t b[4];
    /* B = 0 (root only) and B = 1, for every kind of log-probs. */
    for (int kind = 0; kind < LP_KINDS; kind++) {
        b[0] = 0; b[1] = 1; b[2] = 0; b[3] = 1;
        ck_assert(run_case(4, 15, 64, 65, kind, 1, 1, 1, b));
    }
    /* K = 1: a chain; budget larger than the nodes that exist. */
    b[0] = 64; b[1] = 20; b[2] = 3; b[3] = 15;
    ck_assert(run_case(4, 15, 1, 65, LP_REAL, 0, 1, 1, b));
    ck_assert(run_case(4, 15, 1, 65, LP_WILD, 1, 0, 1, b));
    /* L = 1: a star; budget larger than K. */
    b[0] = 64; b[1] = 7; b[2] = 8; b[3] = 9;
    ck_assert(run_case(4, 1, 8, 65, LP_DYADIC, 0, 0, 1, b));
    /* Exact ties everywhere (lp = 0): parents first, rank-path order. */
    b[0] = 64; b[1] = 30; b[2] = 5; b[3] = 63;
    ck_assert(run_case(4, 15, 64, 65, LP_ZERO, 1, 1, 1, b));
    ck_assert(run_case(4, 4, 3, 65, LP_ZERO, 0, 0, 1, b));
    /* -inf and NaN, inf, unsorted rows. */
    ck_assert(run_case(4, 6, 5, 65, LP_WILD, 1, 1, 1, b));
    /* N_MAX = 1: only the root row; no score wanted. */
    b[0] = b[1] = b[2] = b[3] = 0;
    ck_assert(run_case(4, 3, 2, 1, LP_REAL, 1, 1, 0, b));
    /* Mask words: N_MAX at a word boundary and just past it. */
    b[0] = 31; b[1] = 32; b[2] = 0; b[3] = 20;
    ck_assert(run_case(4, 8, 4, 33, LP_DYADIC, 1, 1, 1, b));
    b[0] = 31; b[1] = 31; b[2] = 30; b[3] = 16;
    ck_assert(run_case(4, 8, 4, 32, LP_DYADIC, 1, 1, 1, b));
    /* Ranks past those kept in shared memory (L = 15, K = 1024: 512 of a
     * row): the threshold path, then the loop (B <= 16), read them. */
    b[0] = 1024; b[1] = 700; b[2] = 16; b[3] = 1000;
    ck_assert(run_case(4, 15, 1024, 1025, LP_FLAT, 1, 1, 1, b));
    ck_assert(run_case(4, 15, 1024, 1025, LP_DYADIC, 0, 1, 1, b));
    /* Budgets outside 0..N_MAX-1 on the device are clamped. */
    b[0] = -5; b[1] = 1000; b[2] = 64; b[3] = 65;
    ck_assert(run_case(4, 15, 8, 65, LP_REAL, 0, 0, 1, b));
}
END_TEST

START_TEST(random_batches)
{
    static const int shapes[][5] = {
        /* R, L, K, N_MAX, repetitions */
        {1, 15, 64, 65, 40},   {8, 15, 64, 65, 30},  {64, 15, 64, 65, 6},
        {3, 15, 16, 129, 30},  {5, 4, 3, 40, 40},    {7, 1, 8, 9, 20},
        {6, 6, 1, 20, 20},     {2, 8, 8, 300, 20},   {3, 15, 256, 257, 10},
        {2, 15, 512, 513, 6},  {64, 15, 512, 513, 2}, {2, 8, 300, 1024, 3},
        {2, 15, 1024, 1025, 6}, {1, 128, 128, 1025, 3},
        {9, 3, 4, 1, 10},      {4, 2, 2, 33, 20}};
    int cases = 0;
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int rep = 0; rep < shapes[s][4]; rep++) {
            int kind = rep % (LP_KINDS + 1); /* LP_KINDS: mixed per request */
            ck_assert_msg(run_case(shapes[s][0], shapes[s][1], shapes[s][2],
                                   shapes[s][3], kind, rep % 3 != 0,
                                   rep % 4 != 1, rep % 5 != 2, NULL),
                          "shape %u repetition %d", s, rep);
            cases++;
        }
    ck_assert_int_ge(cases, 250);
}
END_TEST

/* kdtree_build_ddtree with every tree array at `out` but n_nodes, the
 * arguments flat so that a table of bad ones reads well. */
static int
build(kdtree_runtime *rt, uint64_t out, uint64_t n_nodes, uint64_t lp,
      uint64_t ids, uint64_t budget, uint64_t depth_limit, int R, int L,
      int K, int N)
{
    kdtree_tree tree = {.n_nodes = n_nodes, .token = out, .parent = out,
                        .depth = out, .position = out, .first_child = out,
                        .next_sibling = out, .anc_mask = out,
                        .n_requests = R, .n_max = N};
    kdtree_draft draft = {.lp = lp, .ids = ids, .n_requests = R, .depth = L,
                          .k = K};
    kdtree_requests req = {.budget = budget, .root_token = ids,
                           .depth_limit = depth_limit, .n_requests = R};
    return kdtree_build_ddtree(rt, &tree, &draft, &req, NULL);
}

START_TEST(bad_arguments_never_launch)
{
    enum { R = 2, L = 4, K = 4, N = 8 };
    kdtree_runtime *rt = gpu_runtime();
    uint64_t in = gpu_alloc(4 * R * L * K), out = gpu_alloc(4 * R * N);
#define CALL(rt_, n_, lp_, bu_, dl_, R_, L_, K_, N_)                           \
    build(rt_, out, n_, lp_, in, bu_, dl_, R_, L_, K_, N_)
    struct {
        int st, want;
        const char *what;
    } cases[] = {
        {CALL(NULL, out, in, in, 0, R, L, K, N), KDTREE_ERROR_INVALID_ARGUMENT,
         "NULL runtime"},
        {CALL(rt, 0, in, in, 0, R, L, K, N), KDTREE_ERROR_INVALID_ARGUMENT,
         "n_nodes 0"},
        {CALL(rt, out, 0, in, 0, R, L, K, N), KDTREE_ERROR_INVALID_ARGUMENT,
         "lp 0"},
        {CALL(rt, out, in, 0, 0, R, L, K, N), KDTREE_ERROR_INVALID_ARGUMENT,
         "budget 0"},
        {CALL(rt, out + 2, in, in, 0, R, L, K, N), KDTREE_ERROR_MISALIGNED,
         "n_nodes misaligned"},
        {CALL(rt, out, in + 1, in, 0, R, L, K, N), KDTREE_ERROR_MISALIGNED,
         "lp misaligned"},
        {CALL(rt, out, in, in, in + 2, R, L, K, N), KDTREE_ERROR_MISALIGNED,
         "depth_limit misaligned"},
        {CALL(rt, out, in, in, 0, 0, L, K, N), KDTREE_ERROR_INVALID_ARGUMENT,
         "R = 0"},
        {CALL(rt, out, in, in, 0, R, 0, K, N), KDTREE_ERROR_SHAPE, "L = 0"},
        {CALL(rt, out, in, in, 0, R, L, 1025, N), KDTREE_ERROR_SHAPE,
         "K = 1025"},
        {CALL(rt, out, in, in, 0, R, L, K, 1026), KDTREE_ERROR_SHAPE,
         "N_MAX = 1026"},
        {CALL(rt, out, in, in, 0, R, 128, 256, N), KDTREE_ERROR_SHAPE,
         "L*K too large"},
    };
#undef CALL
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(cases[i].st == cases[i].want, "%s: got %s, want %s (%s)",
                      cases[i].what, kdtree_status_name(cases[i].st),
                      kdtree_status_name(cases[i].want), kdtree_last_error());
    gpu_sync();
    uint32_t host[R * N];
    gpu_download(host, out, sizeof host);
    for (int i = 0; i < R * N; i++)
        ck_assert_msg(host[i] == 0xA5A5A5A5u, "output word %d written", i);
    gpu_free(in);
    gpu_free(out);
}
END_TEST

static Suite *
suite(void)
{
    gpu_runtime(); /* the device the tests use (the harness checked) */
    Suite *s = suite_create("gpu_build_ddtree");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, edge_cases);
    tcase_add_test(tc, random_batches);
    tcase_add_test(tc, bad_arguments_never_launch);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_GPU);
}
