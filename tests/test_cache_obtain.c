/*
 * test_cache_obtain.c: the miss path (src/jit/obtain.c) with real NVRTC
 * compiles, compile-only, no GPU: the compiled bytes depend on the key
 * alone (not on the working directory), a target a kernel cannot support
 * is refused before NVRTC runs, a failed compile is not retried by every
 * caller, and a call that succeeds leaves no last error behind.  Skipped
 * (77) without NVRTC.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"
#include "jit/obtain.h"
#include "jit/registry.h"

static int
obtain(const char *kernel, const char *shape, const char *target,
       kdt_blob *out)
{
    int64_t vals[KDT_MAX_CONSTS] = {0};
    int id = kdt_kernel_find(kernel), from;

    ck_assert_int_ge(id, 0);
    ck_assert_int_eq(kdt_shape_parse(id, shape, vals), KDTREE_OK);
    return kdt_kernel_obtain(id, vals, target,
                             strncmp(target, "sm_", 3) == 0
                                 ? KDT_PAYLOAD_CUBIN : KDT_PAYLOAD_PTX,
                             out, &from);
}

static int
contains(const kdt_blob *b, const char *s)
{
    return memmem(b->data, b->size, s, strlen(s)) != NULL;
}

/* NVRTC's -lineinfo records the directory a relative source name is
 * relative to, the process's cwd: the same key gave other bytes from
 * another directory, and a shared cache showed every user's path. */
START_TEST(test_payload_independent_of_cwd)
{
    /* tree_accept's header holds no code; verify_attn's kdt_mma.cuh and
     * its wgmma body do: line info names every file. */
    static const struct {
        const char *kernel, *shape, *target;
    } cases[] = {
        {"tree_accept", "N_MAX=65,L=15", "sm_90"},
        {"tree_accept", "N_MAX=65,L=15", "compute_90"},
        {"verify_attn", "H=8,PAGE=64,N_MAX=65", "sm_80"},
    };
    char a[400], b[600];

    snprintf(a, sizeof a, "%s/cwd-a", ct_base);
    snprintf(b, sizeof b, "%s/cwd-b/a/much/longer/working/directory", ct_base);
    ct_mkdirs(a);
    ct_mkdirs(b);
    setenv("KDTREE_CACHE", "off", 1);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        kdt_blob x, y;
        ck_assert_int_eq(chdir(a), 0);
        ck_assert_int_eq(obtain(cases[t].kernel, cases[t].shape,
                                cases[t].target, &x), KDTREE_OK);
        kdt_cache_memory_clear();
        ck_assert_int_eq(chdir(b), 0);
        ck_assert_int_eq(obtain(cases[t].kernel, cases[t].shape,
                                cases[t].target, &y), KDTREE_OK);
        kdt_cache_memory_clear();
        ck_assert_msg(x.size == y.size
                          && memcmp(x.data, y.data, x.size) == 0,
                      "%s for %s: the payload depends on the working "
                      "directory", cases[t].kernel, cases[t].target);
        ck_assert_msg(!contains(&x, ct_base) && !contains(&y, ct_base),
                      "%s for %s: the payload holds the working directory",
                      cases[t].kernel, cases[t].target);
        kdt_blob_free(&x);
        kdt_blob_free(&y);
    }
    ck_assert_int_eq(chdir("/"), 0);
}
END_TEST

/* verify_attn needs bf16 mma (sm_80); draft_topk thread-block clusters
 * (sm_90).  Below that: KDTREE_ERROR_ARCH naming the kernel, the target
 * and the minimum, and no compile. */
START_TEST(test_target_below_kernel_minimum)
{
    static const struct {
        const char *kernel, *arch, *minimum;
    } cases[] = {
        {"verify_attn", "sm_75", "sm_80"},
        {"verify_attn", "compute_75", "sm_80"},
        {"draft_topk", "sm_89", "sm_90"},
        {"draft_topk", "sm_80", "sm_90"},
    };
    int32_t cached;

    setenv("KDTREE_CACHE", "off", 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t c0 = ct_stats().compiles;
        const char *shape = kdtree_kernel_default_shape(cases[i].kernel);
        int st = kdtree_compile(&cached, cases[i].arch, cases[i].kernel,
                                shape);
        const char *e = kdtree_last_error();
        ck_assert_msg(st == KDTREE_ERROR_ARCH, "%s for %s: %s: %.300s",
                      cases[i].kernel, cases[i].arch,
                      kdtree_status_name(st), e);
        ck_assert_msg(strstr(e, cases[i].kernel) && strstr(e, cases[i].arch)
                          && strstr(e, cases[i].minimum),
                      "message: %.300s", e);
        ck_assert_uint_eq(ct_stats().compiles, c0);
    }
    /* At the minimum it compiles. */
    ck_assert_int_eq(kdtree_compile(&cached, "sm_80", "verify_attn",
                                    kdtree_kernel_default_shape(
                                        "verify_attn")), KDTREE_OK);
}
END_TEST

/* A compile that fails fails once per process and key: every later
 * caller gets the same status and detail without another compile. */
START_TEST(test_failed_compile_remembered)
{
    char first[2048];
    kdt_blob out;
    uint64_t c0 = ct_stats().compiles;
    int st;

    /* No NVRTC takes sm_10: the compile itself fails. */
    st = obtain("tree_accept", "N_MAX=65,L=15", "sm_10", &out);
    /* (kdtree_cache_stats_get(), a public call, clears the last error.) */
    snprintf(first, sizeof first, "%s", kdtree_last_error());
    ck_assert_int_eq(st, KDTREE_ERROR_COMPILE);
    ck_assert(first[0] != '\0');
    ck_assert_uint_eq(ct_stats().compiles, c0 + 1);
    for (int i = 0; i < 5; i++) {
        kdt_clear_error();
        ck_assert_int_eq(obtain("tree_accept", "N_MAX=65,L=15", "sm_10",
                                &out), KDTREE_ERROR_COMPILE);
        ck_assert_msg(strcmp(kdtree_last_error(), first) == 0,
                      "retry %d: '%.300s', first '%.300s'", i,
                      kdtree_last_error(), first);
    }
    ck_assert_msg(ct_stats().compiles == c0 + 1, "%llu compiles for one failure",
                  (unsigned long long)(ct_stats().compiles - c0));
    /* Another key still compiles. */
    ck_assert_int_eq(obtain("tree_accept", "N_MAX=64,L=15", "sm_90", &out),
                     KDTREE_OK);
    kdt_blob_free(&out);
}
END_TEST

/* Runs kdtree_compile of tree_accept at `shape` for sm_90 in a child,
 * without NVRTC when `no_nvrtc`, and returns its exit code: 0 when it
 * succeeded with no last error, 1 when it succeeded but left one, 2 when
 * it failed.  (NVRTC, once loaded, stays: only a child that never had it
 * can go without.) */
static int
compile_in_child(const char *shape, int no_nvrtc)
{
    pid_t pid = fork();
    int status;

    if (pid == 0 && !no_nvrtc) {
        int32_t cached;
        if (kdtree_compile(&cached, "sm_90", "tree_accept", shape))
            _exit(2);
        _exit(kdtree_last_error()[0] ? 1 : 0);
    }
    if (pid == 0) {
        int32_t cached;
        setenv("KDTREE_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
        /* The first call fails (nothing cached), the second succeeds from
         * the cache: its last error must be empty. */
        if (kdtree_compile(&cached, "sm_90", "tree_accept", "N_MAX=9,L=3")
            == KDTREE_OK)
            _exit(3);
        if (kdtree_compile(&cached, "sm_90", "tree_accept", shape)
            != KDTREE_OK)
            _exit(2);
        _exit(kdtree_last_error()[0] ? 1 : 0);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

START_TEST(test_success_leaves_no_last_error)
{
    ck_assert_int_eq(compile_in_child("N_MAX=65,L=15", 0), 0);
    ck_assert_int_eq(compile_in_child("N_MAX=65,L=15", 1), 0);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc;

    tc = ct_tcase("obtain", 120);
    tcase_add_test(tc, test_payload_independent_of_cwd);
    tcase_add_test(tc, test_target_below_kernel_minimum);
    tcase_add_test(tc, test_failed_compile_remembered);
    tcase_add_test(tc, test_success_leaves_no_last_error);
    return ct_suite("cache_obtain", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_NVRTC);
}
