/*
 * test_cache_cold.c: sixteen processes cold-start on one empty cache
 * through the public kdtree_compile() (a real NVRTC compile, no GPU): each
 * key must be compiled exactly once across all of them, and all must
 * succeed.  Then a fresh "install": the cache populated by one process
 * becomes a read-only prebuilt layer, NVRTC is made unavailable
 * (KDTREE_NVRTC_LIBRARY=/nonexistent), and the same calls must be served
 * warm from the layer.  Skipped (77) when NVRTC cannot be loaded.
 *
 * Prints the figures for the notes: compiles per key, the wall time of 16
 * processes against one, and the warm start from the prebuilt layer.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"

#define N_PROCS 16
#define KERNEL "tree_accept"

/* The keys: each kernel of $KDT_COLD_KERNELS (comma-separated, default
 * tree_accept, the quickest to compile) at its default shape, for each
 * arch. */
static const char *archs[] = { "sm_90", "sm_120" };
#define N_ARCHS 2
static char kernel_names[8][64];
static int n_kernels;
static int N_KEYS;

static void
pick_kernels(void)
{
    const char *v = getenv("KDT_COLD_KERNELS");
    char buf[512], *save = NULL, *k;

    snprintf(buf, sizeof buf, "%s", v && *v ? v : KERNEL);
    for (k = strtok_r(buf, ",", &save); k && n_kernels < 8;
         k = strtok_r(NULL, ",", &save))
        snprintf(kernel_names[n_kernels++], sizeof kernel_names[0], "%s", k);
    N_KEYS = n_kernels * N_ARCHS;
}

/* One process: compiles every key (starting at a different one), reports
 * its compile count and how many were already cached on a pipe line. */
static int
child(int idx, int start_fd, int out_fd)
{
    kdtree_cache_stats s;
    char line[128], c;
    int i, cached_total = 0;
    double t0;

    (void)!read(start_fd, &c, 1);
    t0 = kdt_now_ms();
    for (i = 0; i < N_KEYS; i++) {
        int32_t cached = 0;
        int key = (i + idx) % N_KEYS;
        const char *kernel = kernel_names[key / N_ARCHS];
        int st = kdtree_compile(&cached, archs[key % N_ARCHS], kernel,
                                kdtree_kernel_default_shape(kernel));
        if (st) {
            fprintf(stderr, "process %d: %s: %s\n", idx,
                    kdtree_status_name(st), kdtree_last_error());
            return 1;
        }
        cached_total += cached;
    }
    kdtree_cache_stats_get(&s);
    snprintf(line, sizeof line, "%llu %d %.3f\n",
             (unsigned long long)s.compiles, cached_total, kdt_now_ms() - t0);
    (void)!write(out_fd, line, strlen(line));
    return 0;
}

/* Runs n processes at once; returns the wall time, and the compiles and
 * cached results summed over them (and the slowest process's own time in
 * its kdtree_compile calls). */
static double
run(int n, unsigned long *compiles, int *cached, double *inner_ms)
{
    int start[2], out[2], i, status;
    pid_t pids[N_PROCS];
    double t0, wall;
    FILE *f;
    char line[128];

    ck_assert_int_eq(pipe(start), 0);
    ck_assert_int_eq(pipe(out), 0);
    for (i = 0; i < n; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            close(start[1]);
            close(out[0]);
            _exit(child(i, start[0], out[1]));
        }
    }
    close(start[0]);
    close(out[1]);
    t0 = kdt_now_ms();
    close(start[1]);
    for (i = 0; i < n; i++) {
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "process %d failed", i);
    }
    wall = kdt_now_ms() - t0;
    *compiles = 0;
    *cached = 0;
    *inner_ms = 0;
    f = fdopen(out[0], "r");
    while (fgets(line, sizeof line, f)) {
        unsigned long c;
        int k;
        double ms;
        ck_assert_int_eq(sscanf(line, "%lu %d %lf", &c, &k, &ms), 3);
        *compiles += c;
        *cached += k;
        if (ms > *inner_ms)
            *inner_ms = ms;
    }
    fclose(f);
    return wall;
}

START_TEST(test_cold_start_compiles_once)
{
    unsigned long compiles;
    int cached;
    double wall16, wall1, warm, in16, in1, warm_in;
    char layer[400];

    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "300", 1);
    wall16 = run(N_PROCS, &compiles, &cached, &in16);
    ck_assert_msg(compiles == (unsigned long)N_KEYS,
                  "%lu compiles for %d keys", compiles, N_KEYS);
    ck_assert_int_eq(cached, N_PROCS * N_KEYS - N_KEYS);

    /* One process alone on an empty cache, for the comparison. */
    snprintf(layer, sizeof layer, "%s/prebuilt", ct_base);
    setenv("KDTREE_CACHE_DIR", layer, 1);
    wall1 = run(1, &compiles, &cached, &in1);
    ck_assert_int_eq(compiles, N_KEYS);

    /* A fresh install: that cache is now the read-only prebuilt layer, the
     * user's cache is empty, and there is no NVRTC at all. */
    setenv("KDTREE_CACHE_PREBUILT_DIR", layer, 1);
    snprintf(layer, sizeof layer, "%s/fresh-user", ct_base);
    setenv("KDTREE_CACHE_DIR", layer, 1);
    setenv("KDTREE_NVRTC_LIBRARY", "/nonexistent", 1);
    warm = run(1, &compiles, &cached, &warm_in);
    ck_assert_int_eq(compiles, 0);
    ck_assert_int_eq(cached, N_KEYS);
    unsetenv("KDTREE_NVRTC_LIBRARY");

    printf("cold start of %s%s (%d keys, archs %s and %s): %d processes "
           "%.0f ms wall (slowest %.0f ms in kdtree_compile), 1 process %.0f ms (%.0f ms); "
           "compiles per key 1\n"
           "fresh install, prebuilt layer, NVRTC unavailable: %d kernels "
           "served warm in %.2f ms of kdtree_compile (%.1f ms with the "
           "fork), 0 compiles\n",
           kernel_names[0], n_kernels > 1 ? ",..." : "", N_KEYS, archs[0],
           archs[1], N_PROCS, wall16, in16, wall1,
           in1, N_KEYS, warm_in, warm);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc;

    pick_kernels();
    tc = ct_tcase("cold", 600);
    tcase_add_test(tc, test_cold_start_compiles_once);
    return ct_suite("cache_cold", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_NVRTC);
}
