/*
 * gpu_multi.c: several GPUs and several processes.
 *
 *  - devices: one process, a runtime per device; every device loads its
 *    module from the same compiled blob (one NVRTC compile per
 *    architecture, not per device) and its launches land on its own
 *    device.  Needs two or more devices; reported as skipped otherwise.
 *  - processes: N processes (one per device; with one device, 4 on it)
 *    cold-start together on one empty cache.  Every process must succeed
 *    and each key must be compiled once across all of them (the cache's
 *    per-key lock).  Prints the cold-start wall time of each process
 *    against one process alone.
 *
 * CUDA is not fork-safe: the parent never initialises it; every process
 * that touches the GPU is a fresh exec of this program.
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cuda/driver.h"
#include "base/error.h"
#include "harness.h"
#include "kdtree.h"

#define SKIP 77
static const char *const shapes[] = {"N_MAX=65,L=15", "N_MAX=129,L=15",
                                     "N_MAX=257,L=31"};
#define N_SHAPES 3

static int
child_fail(const char *what, int st)
{
    fprintf(stderr, "%s: %s: %s\n", what, kdtree_status_name(st),
            kdtree_last_error());
    return 1;
}

/* Child: how many devices (exit status), or SKIP. */
static int
child_count(void)
{
    int st;
    const kdt_driver *d = kdt_driver_get(&st);
    int n = 0;
    if (!d || d->device_get_count(&n) != CUDA_SUCCESS || n == 0)
        return SKIP;
    return n > 16 ? 16 : n;
}

/* Launches a root-only tree_accept batch on `rt` and checks its bonus. */
static int
launch_check(const kdt_driver *d, kdtree_runtime *rt, CUcontext ctx,
             const char *shape_n)
{
    int n_max = atoi(strchr(shape_n, '=') + 1);
    int R = 2, L = 15;
    size_t rows = (size_t)R * n_max;
    int32_t *v = malloc(rows * 4);
    CUdeviceptr p[9];
    d->ctx_push_current(ctx);
    for (int i = 0; i < 9; i++)
        d->mem_alloc(&p[i], rows * 4 * (L + 1));
    for (size_t i = 0; i < rows; i++)
        v[i] = -1;
    d->memcpy_htod(p[1], v, rows * 4); /* first_child */
    d->memcpy_htod(p[2], v, rows * 4); /* next_sibling */
    for (size_t i = 0; i < rows; i++)
        v[i] = (int32_t)(7 + i);
    d->memcpy_htod(p[0], v, rows * 4); /* token */
    d->memcpy_htod(p[4], v, rows * 4); /* target */
    v[0] = v[1] = 1;
    d->memcpy_htod(p[3], v, 8); /* n_nodes */
    kdtree_tree tree = {.n_nodes = p[3], .token = p[0], .first_child = p[1],
                        .next_sibling = p[2], .n_requests = R,
                        .n_max = n_max};
    kdtree_requests req = {.n_requests = R};
    kdtree_accept acc = {.accept_len = p[5], .accept_idx = p[6],
                         .accept_token = p[7], .bonus = p[8],
                         .n_requests = R, .depth = L};
    int st = kdtree_tree_accept(rt, &acc, &tree, p[4], &req, NULL);
    int bad = st != KDTREE_OK;
    if (!bad) {
        d->ctx_synchronize();
        d->memcpy_dtoh(v, p[8], 8);
        bad = v[0] != 7 || v[1] != 7 + n_max;
    }
    for (int i = 0; i < 9; i++)
        d->mem_free(p[i]);
    CUcontext prev;
    d->ctx_pop_current(&prev);
    free(v);
    return bad ? (st ? child_fail("kdtree_tree_accept", st) : 1) : 0;
}

/* Child: one process driving every device. */
static int
child_devices(void)
{
    int st;
    const kdt_driver *d = kdt_driver_get(&st);
    int n = 0;
    if (!d || d->device_get_count(&n) != CUDA_SUCCESS || n < 2)
        return SKIP;
    kdtree_cache_stats_reset();
    kdtree_runtime *rt[16];
    for (int i = 0; i < n && i < 16; i++) {
        if ((st = kdtree_runtime_create(&rt[i], i)))
            return child_fail("kdtree_runtime_create", st);
        if ((st = kdtree_prepare(rt[i], "tree_accept", shapes[0])))
            return child_fail("kdtree_prepare", st);
    }
    kdtree_cache_stats s;
    kdtree_cache_stats_get(&s);
    /* One compile per architecture present. */
    int archs = 0;
    for (int i = 0; i < n && i < 16; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= strcmp(kdtree_runtime_arch(rt[i]),
                          kdtree_runtime_arch(rt[j])) == 0;
        archs += !dup;
    }
    printf("devices: %d runtimes, %d architecture(s), %llu compile(s), "
           "%llu load(s)\n",
           n, archs, (unsigned long long)s.compiles,
           (unsigned long long)s.loads);
    if ((int)s.compiles != archs || (int)s.loads != n)
        return 1;
    for (int i = 0; i < n && i < 16; i++) {
        CUdevice dev;
        CUcontext ctx;
        d->device_get(&dev, i);
        d->primary_ctx_retain(&ctx, dev);
        if (launch_check(d, rt[i], ctx, shapes[0]))
            return 1;
        d->primary_ctx_release(dev);
        kdtree_runtime_destroy(rt[i]);
    }
    return 0;
}

/* Child: a cold start of every shape on device `dev`; prints its compiles
 * and wall time on one line for the parent. */
static int
child_process(int dev)
{
    double t0 = kdt_now_ms();
    kdtree_runtime *rt;
    int st = kdtree_runtime_create(&rt, dev);
    if (st)
        return child_fail("kdtree_runtime_create", st);
    for (int i = 0; i < N_SHAPES; i++)
        if ((st = kdtree_prepare(rt, "tree_accept", shapes[i])))
            return child_fail("kdtree_prepare", st);
    double ms = kdt_now_ms() - t0;
    kdtree_cache_stats s;
    kdtree_cache_stats_get(&s);
    printf("compiles=%llu ms=%.1f\n", (unsigned long long)s.compiles, ms);
    fflush(stdout);
    const kdt_driver *d = kdt_driver_get(&st);
    CUdevice cd;
    CUcontext ctx;
    d->device_get(&cd, dev);
    d->primary_ctx_retain(&ctx, cd);
    int bad = launch_check(d, rt, ctx, shapes[0]);
    d->primary_ctx_release(cd);
    kdtree_runtime_destroy(rt);
    return bad;
}

/* Runs `self mode arg` with stdout into a pipe; returns the pid. */
static pid_t
spawn(const char *self, const char *mode, int arg, int *out_fd)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char a[16];
        snprintf(a, sizeof a, "%d", arg);
        execl(self, self, mode, a, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    *out_fd = fds[0];
    return pid;
}

static int
wait_child(pid_t pid, int fd, char *buf, size_t size)
{
    size_t used = 0;
    ssize_t r;
    while (used < size - 1 && (r = read(fd, buf + used, size - 1 - used)) > 0)
        used += (size_t)r;
    buf[used] = '\0';
    close(fd);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* This program's path (the children are fresh execs of it) and the number
 * of devices, found by a child before the first test. */
static char exe[4096];
static int n_devices;

/* Runs `exe mode arg` and waits for it; its exit status, its stdout in
 * buf. */
static int
run_child(const char *mode, int arg, char *buf, size_t size)
{
    int fd;
    /* (spawn first: an argument list's evaluation order is unspecified,
     * so spawn() inside wait_child's arguments could leave fd unread.) */
    pid_t pid = spawn(exe, mode, arg, &fd);
    if (pid < 0) {
        perror("gpu_multi: fork");
        return 1;
    }
    return wait_child(pid, fd, buf, size);
}

/* One process, several devices. */
START_TEST(devices)
{
    char buf[4096];
    kdt_test_fresh_cache();
    int st = run_child("devices", 0, buf, sizeof buf);
    printf("%s", buf);
    if (st == SKIP) {
        printf("devices: skipped (%d device; needs two or more)\n",
               n_devices);
        return;
    }
    ck_assert_msg(st == 0, "the devices child failed (%d)", st);
}
END_TEST

/* One process alone, cold: each key compiles once. */
START_TEST(one_process_cold)
{
    char buf[4096];
    double ms = -1;
    unsigned long long c = 0;
    kdt_test_fresh_cache();
    int st = run_child("process", 0, buf, sizeof buf);
    ck_assert_msg(sscanf(buf, "compiles=%llu ms=%lf", &c, &ms) == 2,
                  "the lone process reported \"%s\"", buf);
    printf("processes: one alone: %llu compiles, %.1f ms cold start\n", c,
           ms);
    ck_assert_msg(c == N_SHAPES, "alone on an empty cache, each of %d keys "
                  "compiles once (%llu compiles)", N_SHAPES, c);
    ck_assert_int_eq(st, 0);
}
END_TEST

/* N processes together on one empty cache (one per device; with one
 * device, 4 on it): each key compiles once across all of them. */
START_TEST(processes_together)
{
    int N = n_devices >= 2 ? n_devices : 4, failures = 0;
    pid_t pids[16];
    int fds[16];
    unsigned long long total = 0;
    char buf[4096];
    kdt_test_fresh_cache();
    for (int i = 0; i < N; i++)
        pids[i] = spawn(exe, "process", i % n_devices, &fds[i]);
    for (int i = 0; i < N; i++) {
        int st = wait_child(pids[i], fds[i], buf, sizeof buf);
        double ms = -1;
        unsigned long long c = 0;
        if (sscanf(buf, "compiles=%llu ms=%lf", &c, &ms) != 2)
            st = st ? st : 1;
        total += c;
        printf("processes: %d of %d (device %d): %s, %llu compiles, %.1f ms "
               "cold start\n",
               i + 1, N, i % n_devices, st ? "FAILED" : "ok", c, ms);
        failures += st != 0;
    }
    printf("processes: %d together compiled %llu times for %d keys "
           "(%.2f per key)\n",
           N, total, N_SHAPES, (double)total / N_SHAPES);
    ck_assert_msg(failures == 0, "%d of %d processes failed", failures, N);
    ck_assert_msg(total == N_SHAPES, "each key must compile exactly once "
                  "across processes (%llu compiles)", total);
}
END_TEST

static Suite *
suite(void)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        exit(99);
    }
    exe[n] = '\0';
    n_devices = run_child("count", 0, buf, sizeof buf);
    if (n_devices == SKIP || n_devices == 0) {
        /* The harness's probe found a device, this child none. */
        fprintf(stderr, "gpu_multi: the count child found no device\n");
        exit(1);
    }
    Suite *s = suite_create("gpu_multi");
    TCase *tc = tcase_create("multi");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, devices);
    tcase_add_test(tc, one_process_cold);
    tcase_add_test(tc, processes_together);
    suite_add_tcase(s, tc);
    return s;
}

/* The parent never initialises CUDA (the harness probes in a child): every
 * process that touches the GPU is a fresh exec of this program, run with
 * a mode. */
int
main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "count") == 0)
        return child_count();
    if (argc == 3 && strcmp(argv[1], "devices") == 0)
        return child_devices();
    if (argc == 3 && strcmp(argv[1], "process") == 0)
        return child_process(atoi(argv[2]));
    return kdt_test_main(suite, KDT_TEST_GPU);
}
