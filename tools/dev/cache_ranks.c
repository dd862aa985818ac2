/*
 * tools/dev/cache_ranks.c: N processes compile one kernel at once, as the
 * ranks of an inference server do at a cold start, and say how long each
 * took and how many compiles the node made.
 *
 *     cache_ranks N KERNEL [ARCH [SHAPE]]
 *
 * Each rank is a child that calls kdtree_compile(ARCH, KERNEL, SHAPE)
 * (default sm_90a and the kernel's default shape) with the environment as
 * it is (KDTREE_CACHE_DIR, KDTREE_CACHE_TEST_PUBLISH_FAIL, ...), then
 * sends its kdtree_cache_stats to the parent.  The parent starts them
 * together and prints, per rank, when it finished (seconds after the
 * start), whether the entry was compiled or found, and its counters; then
 * the wall time of the slowest rank and the node's compiles.  Built with
 * `make tools/dev/cache_ranks`; docs/cache.md quotes its figures.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "kdtree.h"

#define MAX_RANKS 64

/* What a rank sends back. */
typedef struct report {
    int32_t status, cached;
    double done_s;
    kdtree_cache_stats stats;
} report;

/* Seconds on the monotonic clock every process shares. */
static double
now_s(void)
{
    return kdt_now_ms() / 1000.0;
}

/* One whole record from a pipe: reads of at most PIPE_BUF bytes are
 * atomic, and a report is smaller. */
static int
read_record(int fd, void *buf, size_t size)
{
    return read(fd, buf, size) == (ssize_t)size ? 0 : -1;
}

/* One rank: waits for the start (the parent's clock reading, on the
 * monotonic clock every process shares), compiles, reports. */
static void
rank(int go_fd, int out_fd, const char *arch, const char *kernel,
     const char *shape)
{
    report r = {0};
    double t0;

    if (read_record(go_fd, &t0, sizeof t0) != 0)
        _exit(2);
    r.status = kdtree_compile(&r.cached, arch, kernel, shape);
    r.done_s = now_s() - t0;
    kdtree_cache_stats_get(&r.stats);
    if (write(out_fd, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(2);
    _exit(r.status == KDTREE_OK ? 0 : 1);
}

int
main(int argc, char **argv)
{
    int go[2], out[MAX_RANKS][2], n, failed = 0;
    const char *kernel, *arch, *shape;
    uint64_t compiles = 0;
    pid_t pid[MAX_RANKS];
    double t0, slowest;

    if (argc < 3 || (n = atoi(argv[1])) < 1 || n > MAX_RANKS) {
        fprintf(stderr, "usage: cache_ranks N(1..%d) KERNEL [ARCH [SHAPE]]\n",
                MAX_RANKS);
        return 2;
    }
    kernel = argv[2];
    arch = argc > 3 ? argv[3] : "sm_90a";
    shape = argc > 4 ? argv[4] : kdtree_kernel_default_shape(kernel);
    if (!shape) {
        fprintf(stderr, "cache_ranks: unknown kernel %s\n", kernel);
        return 2;
    }
    if (pipe(go) != 0)
        return 2;
    for (int i = 0; i < n; i++) {
        if (pipe(out[i]) != 0)
            return 2;
        pid[i] = fork();
        if (pid[i] < 0)
            return 2;
        if (pid[i] == 0) {
            close(go[1]);
            close(out[i][0]);
            rank(go[0], out[i][1], arch, kernel, shape);
        }
        close(out[i][1]);
    }
    /* All forked: let them go together, and time from here. */
    t0 = now_s();
    for (int i = 0; i < n; i++)
        if (write(go[1], &t0, sizeof t0) != (ssize_t)sizeof t0)
            return 2;
    close(go[1]);
    for (int i = 0; i < n; i++) {
        report r;
        int status;

        if (read_record(out[i][0], &r, sizeof r) != 0) {
            waitpid(pid[i], &status, 0);
            printf("rank %d: no report (status %d)\n", i, status);
            failed = 1;
            continue;
        }
        waitpid(pid[i], &status, 0);
        printf("rank %d: %s %.2f s, %s; compiles %llu, disk hits %llu, "
               "compile %.0f ms\n", i,
               r.status == KDTREE_OK ? "done" : kdtree_status_name(r.status),
               r.done_s, r.cached ? "found" : "compiled",
               (unsigned long long)r.stats.compiles,
               (unsigned long long)r.stats.disk_hits, r.stats.compile_ms);
        compiles += r.stats.compiles;
        if (r.status != KDTREE_OK)
            failed = 1;
    }
    slowest = now_s() - t0;
    printf("%d ranks, %s %s: %.2f s wall, %llu compiles\n", n, kernel, arch,
           slowest, (unsigned long long)compiles);
    return failed;
}
