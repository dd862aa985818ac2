/*
 * test_cache_multi.c: many processes, one empty cache.  Sixteen processes
 * start together and each obtains the same few keys through the miss path
 * kernels.c follows (lookup, lock, lookup again, compile, store, release),
 * with a fake compile that takes a while and leaves a line in a shared
 * log.  Each key must be compiled exactly once, and every process must end
 * with the right payload.  No NVRTC needed: this runs in CI.
 * (test_cache_cold.c does the same through the public kdtree_compile().)
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/settings.h"
#include "cache/entry.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"

#define N_PROCS 16
#define N_KEYS 3
#define COMPILE_US 150000

static const char *kernels[N_KEYS] = { "alpha", "beta", "gamma" };

/* One child: obtains every key, starting at a different one per process so
 * that the locks really interleave.  Exit 0 when all payloads are right. */
static int
child(int idx, int start_fd, const char *log_path)
{
    char c;
    int i, ok = 1;

    /* The barrier: the parent closes the pipe when all are forked. */
    (void)!read(start_fd, &c, 1);
    for (i = 0; i < N_KEYS; i++) {
        int k = (i + idx) % N_KEYS, from, r;
        kdt_preimage p;
        kdt_key key;
        kdt_blob got, want = ct_blob(200000, (unsigned)k);
        kdt_cache_lock *lock;

        ct_preimage(&p, kernels[k], "sm_90", &key);
        r = kdt_cache_lookup(&key, p.text, p.len, &got, &from);
        if (r == 0) {
            lock = ct_node_lock(&key);
            if (!lock)
                ok = 0; /* the lock must work here */
            r = kdt_cache_lookup(&key, p.text, p.len, &got, &from);
            if (r == 0) {
                char line[64];
                int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0600);
                int n = snprintf(line, sizeof line, "%d %s\n", idx,
                                 kernels[k]);
                (void)!write(fd, line, (size_t)n);
                close(fd);
                usleep(COMPILE_US);
                if (kdt_cache_store(&key, p.text, p.len, &want) != 0)
                    ok = 0;
                got = want;
                want.data = NULL;
            }
            kdt_cache_lock_release(lock);
        }
        if (r < 0 || got.size != 200000)
            ok = 0;
        else {
            kdt_blob ref = ct_blob(200000, (unsigned)k);
            if (memcmp(got.data, ref.data, ref.size) != 0)
                ok = 0;
            kdt_blob_free(&ref);
        }
        kdt_blob_free(&got);
        kdt_blob_free(&want);
        kdt_preimage_free(&p);
    }
    return ok ? 0 : 1;
}

static void
run_cold_start(int n_procs, double *wall_ms, int counts[N_KEYS])
{
    char log_path[400], line[128];
    pid_t pids[N_PROCS];
    int pfd[2], i, status;
    double t0;
    FILE *f;

    snprintf(log_path, sizeof log_path, "%s/compiles.log", ct_base);
    ck_assert_int_eq(pipe(pfd), 0);
    for (i = 0; i < n_procs; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            close(pfd[1]);
            _exit(child(i, pfd[0], log_path));
        }
    }
    close(pfd[0]);
    t0 = kdt_now_ms();
    close(pfd[1]); /* go */
    for (i = 0; i < n_procs; i++) {
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "process %d failed (status %d)", i, status);
    }
    *wall_ms = kdt_now_ms() - t0;
    for (i = 0; i < N_KEYS; i++)
        counts[i] = 0;
    f = fopen(log_path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f)) {
        for (i = 0; i < N_KEYS; i++) {
            char *sp = strchr(line, ' ');
            if (sp && strncmp(sp + 1, kernels[i], strlen(kernels[i])) == 0
                && sp[1 + strlen(kernels[i])] == '\n')
                counts[i]++;
        }
    }
    fclose(f);
}

START_TEST(test_sixteen_cold_processes)
{
    int counts[N_KEYS], i;
    double wall16, wall1;

    run_cold_start(N_PROCS, &wall16, counts);
    for (i = 0; i < N_KEYS; i++)
        ck_assert_msg(counts[i] == 1, "%s compiled %d times", kernels[i],
                      counts[i]);
    /* The same cold start with one process, for the figure. */
    ct_teardown();
    ct_setup();
    run_cold_start(1, &wall1, counts);
    for (i = 0; i < N_KEYS; i++)
        ck_assert_int_eq(counts[i], 1);
    printf("cold start, %d keys, fake compile %d ms: %d processes %.0f ms "
           "wall, 1 process %.0f ms; compiles per key 1\n",
           N_KEYS, COMPILE_US / 1000, N_PROCS, wall16, wall1);
}
END_TEST

/* Without a usable lock directory the miss path still works (the lock
 * is NULL, release accepts it, the store publishes). */
START_TEST(test_no_lock_still_correct)
{
    char *dir = kdt_cache_lock_dir();

    ck_assert_int_eq(ct_write(dir, "", 0, 0600), 0);
    free(dir);
    {
        kdt_preimage p;
        kdt_key key;
        kdt_blob b = ct_blob(200000, 0), got;
        int from;
        ct_preimage(&p, kernels[0], "sm_90", &key);
        ck_assert_ptr_null(ct_node_lock(&key));
        kdt_cache_lock_release(NULL);
        ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
        kdt_cache_memory_clear();
        ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from),
                         1);
        kdt_blob_free(&got);
        kdt_blob_free(&b);
        kdt_preimage_free(&p);
    }
}
END_TEST

/* The same within one process: threads wait for each other in the
 * claim's in-process gate (cache/gate.h), then find the blob in the
 * memory layer, shared under its mutex. */
#define N_THREADS 8
static int thread_compiles[N_KEYS];
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static void *
thread_main(void *arg)
{
    int idx = (int)(long)arg, i;
    long bad = 0;

    for (i = 0; i < N_KEYS; i++) {
        int k = (i + idx) % N_KEYS, from, r;
        kdt_preimage p;
        kdt_key key;
        kdt_blob got;

        ct_preimage(&p, kernels[k], "sm_90", &key);
        r = kdt_cache_lookup(&key, p.text, p.len, &got, &from);
        if (r == 0) {
            kdt_cache_lock *lock = kdt_cache_lock_acquire(&key, "a test");
            if (!lock)
                bad++;
            r = kdt_cache_lookup(&key, p.text, p.len, &got, &from);
            if (r == 0) {
                kdt_blob want = ct_blob(200000, (unsigned)k);
                pthread_mutex_lock(&count_lock);
                thread_compiles[k]++;
                pthread_mutex_unlock(&count_lock);
                usleep(COMPILE_US / 3);
                if (kdt_cache_store(&key, p.text, p.len, &want) != 0)
                    bad++;
                kdt_blob_free(&want);
            } else {
                kdt_blob_free(&got);
            }
            kdt_cache_lock_release(lock);
        } else {
            kdt_blob_free(&got);
        }
        if (r < 0)
            bad++;
        kdt_preimage_free(&p);
    }
    return (void *)bad;
}

START_TEST(test_threads_compile_once)
{
    pthread_t t[N_THREADS];
    void *bad;
    int i;

    for (i = 0; i < N_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, thread_main,
                                        (void *)(long)i), 0);
    for (i = 0; i < N_THREADS; i++) {
        ck_assert_int_eq(pthread_join(t[i], &bad), 0);
        ck_assert_ptr_null(bad);
    }
    for (i = 0; i < N_KEYS; i++)
        ck_assert_msg(thread_compiles[i] == 1, "%s compiled %d times",
                      kernels[i], thread_compiles[i]);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("multi", 120);

    tcase_add_test(tc, test_threads_compile_once);

    tcase_add_test(tc, test_sixteen_cold_processes);
    tcase_add_test(tc, test_no_lock_still_correct);
    return ct_suite("cache_multi", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
