/*
 * gpu_draft_topk.c: kdtree_draft_topk() on the GPU against the CPU
 * reference (ref/draft_topk.c): ids exactly (descending, ties to the
 * lower id, NaN as -inf), log-probs within 1e-4 + 1e-6|lp| (the GPU sums
 * exp in f32 in another order; -inf must be exactly -inf).  Both dtypes,
 * vocabularies from 1 to 163840, rows whose start is not 16-byte aligned,
 * heavy ties, rows of -inf or NaN, ascending rows (every logit raises the
 * threshold), flat rows (every slot a candidate), outputs poisoned
 * beforehand, and the argument checks (which must never launch).  Exits
 * 77 without a GPU.  A mismatch prints the first differing row and rank
 * with expected and got values.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "harness.h"
#include "kdtree.h"
#include "ref/draft_topk.h"
#include "ref/ref_math.h"


/* kdtree_draft_topk over `rows` rows (a draft of one position a
 * request), the arguments flat so that a table of bad ones reads well. */
static int
topk(kdtree_runtime *rt, uint64_t lp, uint64_t ids, uint64_t logits,
     int dtype, int rows, int V, int K)
{
    kdtree_draft d = {.lp = lp, .ids = ids, .n_requests = rows, .depth = 1,
                      .k = K};
    return kdtree_draft_topk(rt, &d, logits, dtype, V, NULL);
}

static uint64_t rng = 0xda942042e4dd58b5ull;

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

/* Approximately normal (sum of uniforms), like a drafter's logits. */
static float
normalish(void)
{
    return (unit() + unit() + unit() + unit() - 2.0f) * 1.7f;
}

enum row_kind {
    ROW_NORMAL, ROW_TIES, ROW_SPECIAL, ROW_ASCENDING, ROW_DESCENDING,
    ROW_CONST, ROW_ALL_NEG_INF, ROW_ALL_NAN, ROW_ZEROS, ROW_KINDS
};

static float
logit(int kind, int j, int V)
{
    switch (kind) {
    case ROW_NORMAL:
        return normalish() * 3.0f;
    case ROW_TIES: /* argmax ties and ties at the K-th place; -0 = +0 */
        return rnd() % 5 == 0 ? (rnd() % 2 ? -0.0f : 0.0f)
                              : (float)(int)(rnd() % 7) - 3.0f;
    case ROW_SPECIAL: {
        uint32_t c = rnd() % 16;
        return c == 0 ? NAN : c == 1 ? -INFINITY : normalish() * 8.0f;
    }
    case ROW_ASCENDING:
        return (float)j / (float)V * 20.0f - 10.0f;
    case ROW_DESCENDING:
        return 10.0f - (float)j / (float)V * 20.0f;
    case ROW_CONST:
        return 0.75f;
    case ROW_ALL_NEG_INF:
        return -INFINITY;
    case ROW_ZEROS: /* -0 and +0 are the same logit: ties go by id */
        return rnd() % 3 == 0 ? -1.0f : (rnd() % 2 ? -0.0f : 0.0f);
    case ROW_ALL_NAN:
        return NAN;
    default:
        return NAN;
    }
}

/* One launch of `rows` rows; the logits start `offset` elements into the
 * allocation (rows not 16-byte aligned when offset or V*size is odd).
 * kind < 0: a random kind per row.  Returns 1 when all match. */
static int
run_case(int V, int K, int dtype, int rows, int kind, int offset)
{
    size_t n = (size_t)rows * V, esz = dtype ? 2 : 4;
    float *f = malloc(4 * n);
    uint16_t *h = malloc(2 * n + 2);
    int *kinds = malloc(sizeof(int) * rows);
    for (int r = 0; r < rows; r++) {
        kinds[r] = kind >= 0 ? kind : (int)(rnd() % ROW_KINDS);
        for (int j = 0; j < V; j++) {
            float x = logit(kinds[r], j, V);
            h[(size_t)r * V + j] = ref_f32_to_bf16(x);
            f[(size_t)r * V + j] = x;
        }
    }
    const void *host = dtype ? (const void *)h : (const void *)f;
    char tag[128];
    snprintf(tag, sizeof tag, "draft_topk V=%d K=%d %s rows=%d offset=%d", V,
             K, dtype ? "bf16" : "f32", rows, offset);

    /* The logits start `offset` elements into the allocation. */
    char *padded = malloc(esz * (n + (size_t)offset));
    memset(padded, 0xA5, esz * (size_t)offset);
    memcpy(padded + esz * (size_t)offset, host, esz * n);
    uint64_t d_buf = gpu_upload(padded, esz * (n + (size_t)offset));
    uint64_t d_logits = d_buf + esz * (size_t)offset;
    free(padded);
    uint64_t d_lp = gpu_alloc(4 * (size_t)rows * K),
             d_ids = gpu_alloc(4 * (size_t)rows * K);
    int st = topk(gpu_runtime(), d_lp, d_ids, d_logits, dtype, rows, V, K);
    ck_assert_msg(st == 0, "%s: %s: %s", tag, kdtree_status_name(st),
                  kdtree_last_error());
    gpu_sync();
    float *g_lp = malloc(4 * (size_t)rows * K), *c_lp = malloc(4 * (size_t)rows * K);
    int32_t *g_ids = malloc(4 * (size_t)rows * K), *c_ids = malloc(4 * (size_t)rows * K);
    gpu_download(g_lp, d_lp, 4 * (size_t)rows * K);
    gpu_download(g_ids, d_ids, 4 * (size_t)rows * K);
    ref_draft_topk(c_lp, c_ids, host, dtype, rows, V, K);
    int ok = 1;
    for (int r = 0; r < rows && ok; r++)
        for (int k = 0; k < K && ok; k++) {
            size_t i = (size_t)r * K + k;
            float want = c_lp[i], got = g_lp[i];
            int lp_ok = isinf(want) ? got == want
                                    : fabsf(got - want) <= 1e-4f + 1e-6f * fabsf(want);
            if (g_ids[i] != c_ids[i] || !lp_ok) {
                fprintf(stderr,
                        "%s: row %d (kind %d) rank %d: id %d lp %.9g, want "
                        "id %d lp %.9g\n",
                        tag, r, kinds[r], k, g_ids[i], got, c_ids[i], want);
                ok = 0;
            }
        }
    free(f); free(h); free(kinds); free(g_lp); free(c_lp); free(g_ids);
    free(c_ids);
    gpu_free(d_buf); gpu_free(d_lp); gpu_free(d_ids);
    return ok;
}

START_TEST(edge_rows)
{
    for (int dtype = 0; dtype < 2; dtype++) {
        for (int kind = 0; kind < ROW_KINDS; kind++) {
            ck_assert(run_case(1000, 8, dtype, 3, kind, 0));
            ck_assert(run_case(20000, 64, dtype, 2, kind, 1));
            /* a row split over a cluster of 8 blocks, unaligned rows */
            ck_assert(run_case(65536, 100, dtype, 2, kind, 3));
            /* bf16 K <= 64 stages slots: the same over a cluster, and
             * 1500 slots a block, all staged on flat rows */
            ck_assert(run_case(65536, 64, dtype, 2, kind, 3));
            ck_assert(run_case(12000, 64, dtype, 2, kind, 1));
        }
        ck_assert(run_case(1, 1, dtype, 5, -1, 0));        /* V = K = 1 */
        ck_assert(run_case(7, 7, dtype, 4, -1, 3));        /* K = V, tiny */
        ck_assert(run_case(1024, 1024, dtype, 2, -1, 0));  /* K = V = 1024 */
        ck_assert(run_case(8193, 1, dtype, 3, ROW_TIES, 0)); /* argmax ties */
        ck_assert(run_case(4097, 1024, dtype, 3, ROW_ASCENDING, 5));
        ck_assert(run_case(30001, 1024, dtype, 2, ROW_TIES, 0));
    }
}
END_TEST

START_TEST(random_shapes)
{
    static const int shapes[][5] = {
        /* V, K, dtype, rows, repetitions */
        {163840, 64, 1, 15, 3},  {163840, 64, 0, 15, 2},
        {163840, 16, 1, 30, 2},  {163840, 256, 1, 15, 2},
        {163840, 1024, 1, 8, 2}, {163840, 1024, 0, 8, 2},
        {32000, 8, 1, 40, 5},    {32001, 33, 0, 40, 5},
        {50000, 256, 1, 20, 5},  {3000, 100, 0, 64, 10},
        {129, 128, 1, 64, 10},   {5, 2, 0, 100, 10},
        {65537, 512, 1, 10, 4},  {100003, 1000, 0, 6, 3},
        /* many rows: one block per row; few: 8 blocks per row */
        {163840, 64, 1, 150, 1}, {65536, 16, 0, 9, 3}};
    int cases = 0;
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int rep = 0; rep < shapes[s][4]; rep++) {
            int kind = rep == 0 ? ROW_NORMAL : -1;
            ck_assert_msg(run_case(shapes[s][0], shapes[s][1], shapes[s][2],
                                   shapes[s][3], kind, rep % 3),
                          "shape %u repetition %d", s, rep);
            cases++;
        }
    ck_assert_int_ge(cases, 60);
}
END_TEST

START_TEST(bad_arguments_never_launch)
{
    kdtree_runtime *rt = gpu_runtime();
    uint64_t in = gpu_alloc(4 * 1000), out = gpu_alloc(4 * 64);
    struct {
        int st, want;
        const char *what;
    } cases[] = {
        {topk(NULL, out, out, in, 1, 1, 1000, 8),
         KDTREE_ERROR_INVALID_ARGUMENT, "NULL runtime"},
        {topk(rt, 0, out, in, 1, 1, 1000, 8),
         KDTREE_ERROR_INVALID_ARGUMENT, "lp 0"},
        {topk(rt, out, 0, in, 1, 1, 1000, 8),
         KDTREE_ERROR_INVALID_ARGUMENT, "ids 0"},
        {topk(rt, out, out, 0, 1, 1, 1000, 8),
         KDTREE_ERROR_INVALID_ARGUMENT, "logits 0"},
        {topk(rt, out + 2, out, in, 1, 1, 1000, 8),
         KDTREE_ERROR_MISALIGNED, "lp misaligned"},
        {topk(rt, out, out, in + 1, 1, 1, 1000, 8),
         KDTREE_ERROR_MISALIGNED, "bf16 logits misaligned"},
        {topk(rt, out, out, in + 2, 0, 1, 1000, 8),
         KDTREE_ERROR_MISALIGNED, "f32 logits misaligned"},
        {topk(rt, out, out, in, 2, 1, 1000, 8),
         KDTREE_ERROR_INVALID_ARGUMENT, "dtype 2"},
        {topk(rt, out, out, in, 1, 0, 1000, 8),
         KDTREE_ERROR_INVALID_ARGUMENT, "no rows"},
        {topk(rt, out, out, in, 1, 1, 0, 8),
         KDTREE_ERROR_SHAPE, "V = 0"},
        {topk(rt, out, out, in, 1, 1, (1 << 24) + 1, 8),
         KDTREE_ERROR_SHAPE, "V too large"},
        {topk(rt, out, out, in, 1, 1, 1000, 0),
         KDTREE_ERROR_SHAPE, "K = 0"},
        {topk(rt, out, out, in, 1, 1, 8, 9),
         KDTREE_ERROR_SHAPE, "K > V"},
        {topk(rt, out, out, in, 1, 1, 2000, 1025),
         KDTREE_ERROR_SHAPE, "K = 1025"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(cases[i].st == cases[i].want, "%s: got %s, want %s (%s)",
                      cases[i].what, kdtree_status_name(cases[i].st),
                      kdtree_status_name(cases[i].want), kdtree_last_error());
    gpu_sync();
    uint32_t host[64];
    gpu_download(host, out, sizeof host);
    for (int i = 0; i < 64; i++)
        ck_assert_msg(host[i] == 0xA5A5A5A5u, "output word %d written", i);
    gpu_free(in);
    gpu_free(out);
}
END_TEST

static Suite *
suite(void)
{
    gpu_runtime(); /* the device the tests use (the harness checked) */
    Suite *s = suite_create("gpu_draft_topk");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, edge_rows);
    tcase_add_test(tc, random_shapes);
    tcase_add_test(tc, bad_arguments_never_launch);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_GPU);
}
