/*
 * gpu_runtime.c: the runtime on a real device: creation, the load path
 * (cold, memory, disk), the hot table, contexts left as the caller had
 * them, streams, and many threads loading and launching at once.
 * Exits 77 (skipped) without a GPU.  tree_accept serves as the kernel:
 * its own correctness is gpu_tree_accept's business.
 */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "cuda/driver.h"
#include "gpu.h"
#include "harness.h"
#include "kdtree.h"
#include "runtime/runtime.h"

static const kdt_driver *drv;
/* A batch of R single-node trees: accept_len 1 and bonus = target[r][0]. */
typedef struct batch {
    int R, n_max, L;
    uint64_t token, fc, ns, nn, target, alen, aidx, atok, bonus;
} batch;

static void
batch_make(batch *b, int R, int n_max, int L)
{
    b->R = R;
    b->n_max = n_max;
    b->L = L;
    size_t rows = (size_t)R * n_max;
    int32_t *v = malloc(rows * sizeof *v);
    for (size_t i = 0; i < rows; i++)
        v[i] = -1;
    b->fc = gpu_upload(v, rows * 4);
    b->ns = gpu_upload(v, rows * 4);
    for (size_t i = 0; i < rows; i++)
        v[i] = (int32_t)(1000 + i);
    b->token = gpu_upload(v, rows * 4);
    b->target = gpu_upload(v, rows * 4);
    for (int r = 0; r < R; r++)
        v[r] = 1;
    b->nn = gpu_upload(v, (size_t)R * 4);
    b->alen = gpu_alloc((size_t)R * 4);
    b->aidx = gpu_alloc((size_t)R * (L + 1) * 4);
    b->atok = gpu_alloc((size_t)R * (L + 1) * 4);
    b->bonus = gpu_alloc((size_t)R * 4);
    free(v);
}

static int
batch_launch(kdtree_runtime *rt, batch *b, void *stream)
{
    kdtree_tree tree = {.n_nodes = b->nn, .token = b->token,
                        .first_child = b->fc, .next_sibling = b->ns,
                        .n_requests = b->R, .n_max = b->n_max};
    kdtree_requests req = {.n_requests = b->R};
    kdtree_accept acc = {.accept_len = b->alen, .accept_idx = b->aidx,
                         .accept_token = b->atok, .bonus = b->bonus,
                         .n_requests = b->R, .depth = b->L};
    return kdtree_tree_accept(rt, &acc, &tree, b->target, &req, stream);
}

static void
batch_check(batch *b)
{
    int32_t *len = malloc((size_t)b->R * 4), *bonus = malloc((size_t)b->R * 4);
    gpu_download(len, b->alen, (size_t)b->R * 4);
    gpu_download(bonus, b->bonus, (size_t)b->R * 4);
    for (int r = 0; r < b->R; r++) {
        ck_assert_int_eq(len[r], 1);
        ck_assert_int_eq(bonus[r], 1000 + r * b->n_max);
    }
    free(len);
    free(bonus);
}

static void
batch_free(batch *b)
{
    uint64_t *p[] = {&b->token, &b->fc, &b->ns, &b->nn, &b->target,
                     &b->alen, &b->aidx, &b->atok, &b->bonus};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        gpu_free(*p[i]);
}

START_TEST(create_and_devices)
{
    kdtree_runtime *rt = gpu_runtime();
    ck_assert_int_eq(kdtree_runtime_device(rt), 0);
    ck_assert(strncmp(kdtree_runtime_arch(rt), "sm_", 3) == 0);
    int count = 0;
    drv->device_get_count(&count);
    kdtree_runtime *bad = (kdtree_runtime *)1;
    ck_assert_int_eq(kdtree_runtime_create(&bad, count),
                     KDTREE_ERROR_NO_DEVICE);
    ck_assert_ptr_null(bad);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "device"));
    ck_assert_int_eq(kdtree_runtime_create(&bad, -1), KDTREE_ERROR_NO_DEVICE);
    /* A second runtime of the same device is independent. */
    kdtree_runtime *two;
    ck_assert_int_eq(kdtree_runtime_create(&two, 0), KDTREE_OK);
    kdtree_runtime_destroy(two);
}
END_TEST

START_TEST(load_paths)
{
    kdt_test_fresh_cache();
    kdtree_runtime *rt;
    ck_assert_int_eq(kdtree_runtime_create(&rt, 0), KDTREE_OK);
    kdtree_cache_stats_reset();
    kdtree_cache_stats s;
    /* Cold: compiled. */
    ck_assert_int_eq(kdtree_prepare(rt, "tree_accept", "N_MAX=33,L=7"),
                     KDTREE_OK);
    kdtree_cache_stats_get(&s);
    ck_assert_int_eq(s.compiles, 1);
    ck_assert_int_eq(s.loads, 1);
    /* Hot: no load at all. */
    ck_assert_int_eq(kdtree_prepare(rt, "tree_accept", "L=7,N_MAX=33"),
                     KDTREE_OK);
    kdtree_cache_stats_get(&s);
    ck_assert_int_eq(s.loads, 1);
    int64_t vals[2] = {33, 7};
    ck_assert_ptr_nonnull(kdt_runtime_find(rt, KDT_KERNEL_TREE_ACCEPT, vals));
    kdtree_runtime_destroy(rt);
    /* A new runtime: from process memory. */
    ck_assert_int_eq(kdtree_runtime_create(&rt, 0), KDTREE_OK);
    ck_assert_int_eq(kdtree_prepare(rt, "tree_accept", "N_MAX=33,L=7"),
                     KDTREE_OK);
    kdtree_runtime_destroy(rt);
    /* And with memory forgotten: from disk, still no compile. */
    kdt_cache_memory_clear();
    ck_assert_int_eq(kdtree_runtime_create(&rt, 0), KDTREE_OK);
    ck_assert_int_eq(kdtree_prepare(rt, "tree_accept", "N_MAX=33,L=7"),
                     KDTREE_OK);
    kdtree_cache_stats_get(&s);
    ck_assert_int_eq(s.compiles, 1);
    ck_assert_int_ge(s.memory_hits, 1);
    ck_assert_int_ge(s.disk_hits, 1);
    ck_assert_int_eq(s.loads, 3);
    /* Bad shapes are refused before any compile. */
    ck_assert_int_eq(kdtree_prepare(rt, "tree_accept", "N_MAX=2000,L=7"),
                     KDTREE_ERROR_SHAPE);
    ck_assert_int_eq(kdtree_prepare(rt, "nope", "N_MAX=2,L=7"),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    kdtree_cache_stats_get(&s);
    ck_assert_int_eq(s.compiles, 1);
    kdtree_runtime_destroy(rt);
}
END_TEST

START_TEST(contexts_and_streams)
{
    kdtree_runtime *rt = gpu_runtime();
    batch b;
    batch_make(&b, 5, 17, 4);
    /* No current context: the launch still lands, and none is left. */
    CUcontext cur = (CUcontext)1;
    gpu_check_cu(drv->ctx_set_current(NULL), "cuCtxSetCurrent");
    ck_assert_int_eq(batch_launch(rt, &b, NULL), KDTREE_OK);
    drv->ctx_get_current(&cur);
    ck_assert_ptr_null(cur);
    gpu_check_cu(drv->ctx_set_current(rt->ctx), "cuCtxSetCurrent");
    batch_check(&b);
    /* The primary context current: stays current. */
    void *stream = gpu_stream();
    ck_assert_int_eq(batch_launch(rt, &b, stream), KDTREE_OK);
    drv->ctx_get_current(&cur);
    ck_assert_ptr_eq(cur, rt->ctx);
    gpu_check_cu(drv->stream_synchronize(stream), "cuStreamSynchronize");
    batch_check(&b);
    /* A stream that is not one is the driver's error, named. */
    drv->stream_destroy(stream);
    batch_free(&b);
}
END_TEST

typedef struct worker {
    kdtree_runtime *rt;
    int id;
    int failures;
} worker;

static void *
work(void *arg)
{
    worker *w = arg;
    char shape[64];
    for (int i = 0; i < 20; i++) {
        /* Four threads share each shape; every thread also launches. */
        snprintf(shape, sizeof shape, "N_MAX=%d,L=3", 8 + (w->id % 2));
        if (kdtree_prepare(w->rt, "tree_accept", shape) != KDTREE_OK)
            w->failures++;
    }
    return NULL;
}

START_TEST(threads)
{
    kdt_test_fresh_cache();
    kdtree_runtime *rt;
    ck_assert_int_eq(kdtree_runtime_create(&rt, 0), KDTREE_OK);
    kdtree_cache_stats_reset();
    pthread_t t[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){rt, i, 0};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(w[i].failures, 0);
    }
    kdtree_cache_stats s;
    kdtree_cache_stats_get(&s);
    ck_assert_int_eq(s.compiles, 2);
    ck_assert_int_eq(s.loads, 2);
    batch b;
    batch_make(&b, 3, 9, 3);
    ck_assert_int_eq(batch_launch(rt, &b, NULL), KDTREE_OK);
    batch_check(&b);
    batch_free(&b);
    kdtree_runtime_destroy(rt);
}
END_TEST

/* A target chosen instead of the device's own: run on this device only if
 * its code does, used for every kernel of the runtime, named by
 * kdtree_runtime_target; $KDTREE_TARGET does the same for
 * kdtree_runtime_create. */
START_TEST(explicit_targets)
{
    kdtree_runtime *rt = gpu_runtime();
    int cc = atoi(kdtree_runtime_arch(rt) + 3);
    char same_major[24], newer[24], ptx[24], other_major[24];
    snprintf(same_major, sizeof same_major, "sm_%d", cc / 10 * 10);
    snprintf(newer, sizeof newer, "sm_%d", cc + 1);
    snprintf(ptx, sizeof ptx, "compute_%d", cc / 10 * 10);
    snprintf(other_major, sizeof other_major, "sm_%d", cc / 10 * 10 - 10);
    const char *refused[] = {newer, other_major, "gfx90a", "sm_9", ""};
    for (size_t i = 0; i + 1 < sizeof refused / sizeof refused[0]; i++) {
        kdtree_runtime *bad = (kdtree_runtime *)1;
        ck_assert_int_eq(kdtree_runtime_create_for(&bad, 0, refused[i]),
                         KDTREE_ERROR_ARCH);
        ck_assert_ptr_null(bad);
        ck_assert_ptr_nonnull(strstr(kdtree_last_error(), refused[i]));
    }
    const char *taken[] = {same_major, ptx};
    for (size_t i = 0; i < 2; i++) {
        kdtree_runtime *t;
        ck_assert_int_eq(kdtree_runtime_create_for(&t, 0, taken[i]),
                         KDTREE_OK);
        ck_assert_str_eq(kdtree_runtime_target(t), taken[i]);
        batch b;
        batch_make(&b, 2, 7, 3);
        ck_assert_int_eq(batch_launch(t, &b, NULL), KDTREE_OK);
        batch_check(&b);
        batch_free(&b);
        ck_assert_str_eq(kdtree_runtime_target(t), taken[i]);
        kdtree_runtime_destroy(t);
    }
    /* NULL and "" choose from the device, as kdtree_runtime_create */
    kdtree_runtime *t;
    ck_assert_int_eq(kdtree_runtime_create_for(&t, 0, ""), KDTREE_OK);
    kdtree_runtime_destroy(t);
    const char *saved = getenv("KDTREE_TARGET");
    char *keep = saved ? strdup(saved) : NULL;
    setenv("KDTREE_TARGET", same_major, 1);
    ck_assert_int_eq(kdtree_runtime_create(&t, 0), KDTREE_OK);
    ck_assert_str_eq(kdtree_runtime_target(t), same_major);
    kdtree_runtime_destroy(t);
    setenv("KDTREE_TARGET", newer, 1);
    ck_assert_int_eq(kdtree_runtime_create(&t, 0), KDTREE_ERROR_ARCH);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "KDTREE_TARGET"));
    if (keep) {
        setenv("KDTREE_TARGET", keep, 1);
        free(keep);
    } else {
        unsetenv("KDTREE_TARGET");
    }
}
END_TEST

static Suite *
suite(void)
{
    gpu_runtime();
    int st;
    drv = kdt_driver_get(&st);
    Suite *s = suite_create("gpu_runtime");
    TCase *t = tcase_create("runtime");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, create_and_devices);
    tcase_add_test(t, load_paths);
    tcase_add_test(t, contexts_and_streams);
    tcase_add_test(t, threads);
    tcase_add_test(t, explicit_targets);
    suite_add_tcase(s, t);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_GPU);
}
