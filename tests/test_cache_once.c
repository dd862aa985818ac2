/*
 * test_cache_once.c: one compile per key, with real NVRTC compiles
 * (compile-only, no GPU; skipped, 77, without NVRTC).  Inside a process in
 * every mode: threads of one process share one compile whether or not a
 * lock across processes is taken (KDTREE_CACHE=readonly or off, no cache
 * directory, a refused one, an unusable lock directory).  Across
 * processes on a directory they cannot write: one compile for the node,
 * shared through the spill store, instead of one after another.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/settings.h"
#include "cache_testutil.h"
#include "harness.h"
#include "kdtree.h"

#define N_THREADS 16

static void *
compile_one(void *arg)
{
    int32_t cached;

    (void)arg;
    return (void *)(long)kdtree_compile(&cached, "sm_90", "tree_accept",
                                        kdtree_kernel_default_shape(
                                            "tree_accept"));
}

/* The modes in which no lock across processes is taken for the user's
 * directory, and readwrite. */
static const char *const modes[] = {"readonly", "off", "no directory",
                                    "refused directory",
                                    "unusable lock directory", "readwrite"};

static void
set_mode(int i)
{
    char *lockdir;

    switch (i) {
    case 0: setenv("KDTREE_CACHE", "readonly", 1); break;
    case 1: setenv("KDTREE_CACHE", "off", 1); break;
    case 2:
        unsetenv("KDTREE_CACHE_DIR");
        unsetenv("XDG_CACHE_HOME");
        unsetenv("HOME");
        break;
    case 3:
        ct_mkdirs(ct_user);
        ck_assert_int_eq(chmod(ct_user, 0777), 0);
        break;
    case 4:
        lockdir = kdt_cache_lock_dir();
        ck_assert_int_eq(ct_write(lockdir, "", 0, 0600), 0);
        free(lockdir);
        break;
    default: break;
    }
}

START_TEST(test_threads_compile_once_in_every_mode)
{
    pthread_t t[N_THREADS];
    void *st;

    set_mode(_i);
    kdtree_cache_stats_reset();
    for (int i = 0; i < N_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, compile_one, NULL), 0);
    for (int i = 0; i < N_THREADS; i++) {
        ck_assert_int_eq(pthread_join(t[i], &st), 0);
        ck_assert_int_eq((long)st, KDTREE_OK);
    }
    ck_assert_msg(ct_stats().compiles == 1, "%s: %d threads, %llu compiles",
                  modes[_i], N_THREADS,
                  (unsigned long long)ct_stats().compiles);
}
END_TEST

/* Eight processes compile one key into a directory whose publishes fail
 * (full, failing, across mounts: KDTREE_CACHE_TEST_PUBLISH_FAIL).  One of
 * them compiles: its failure tells the others, waiting or still to come,
 * to stop waiting for that directory, and its entry is in the spill
 * store, where they find it; rather than each taking the lock in turn,
 * compiling, failing and handing it on, or all compiling at once. */
START_TEST(test_one_compile_when_publishes_fail)
{
    static const char *const errors[] = {"ENOSPC", "EIO", "EXDEV"};
    char *log;

    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", errors[_i], 1);
    log = ct_compile_once_in_processes(8);
    ck_assert_msg(ct_count_lines(log, "cannot write to") >= 1,
                  "no process said it could not write");
    ck_assert_int_eq(ct_count_entries(), 0);
    free(log);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("once", 300);

    tcase_add_loop_test(tc, test_threads_compile_once_in_every_mode, 0,
                        (int)(sizeof modes / sizeof modes[0]));
    tcase_add_loop_test(tc, test_one_compile_when_publishes_fail, 0, 3);
    return ct_suite("cache_once", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_NVRTC);
}
