/*
 * bench_time.c: kdtree-bench's timing (see bench_time.h): the clock,
 * medians, the one batch loop that GPU and host timings share, and the
 * GPU's events and spin kernel.
 *
 * GPU times come from CUDA events around a batch of back-to-back launches.
 * So that the batch measures the kernels and not how fast this thread can
 * enqueue them, a "spin" kernel that waits on the GPU's global timer is
 * launched first: while it runs, the whole batch is queued behind it, and
 * the first event fires only when the spin ends.  The spin also counts its
 * SM's cycles against the timer, so each batch says the clock the GPU ran
 * at just before it: a GPU that slows down (power or heat, after minutes
 * of heavy kernels) shows in the report instead of reading as slower
 * kernels.  And so that one case's figures do not depend on the cases
 * before it, the caller may ask for a rest before a GPU timing (the bench
 * rests as long as the timing before kept the GPU busy): the H200 holds
 * its 700 W limit by lowering its clock (to 1700-1800 MHz from 1980) when
 * heavy kernels run back to back for a second or more, which read as
 * 6-13% slower kernels on the heavy verify_attn shapes of a whole run
 * than the same shapes alone.  Host times are wall-clock times of
 * batches of calls.  Every figure is a median.
 */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "bench_time.h"
#include "kdtree.h"

double
bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double
bench_median(double *v, int n)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bench_stat
bench_stat_of(double *v, int n)
{
    bench_stat s = {bench_median(v, n), NAN, NAN, n > 0 ? n : 0};
    if (n > 0) {
        s.min = v[0];
        s.max = v[n - 1];
    }
    return s;
}

/* The loop both timers share: the batch size doubles until one batch of n
 * calls lasts want_us (or n reaches max_n), then the median over reps
 * batches of that size of the microseconds per call.  batch(ctx, n)
 * returns the total microseconds of n calls, or a negative number when a
 * call failed, which ends the loop with NAN. */
static double
timed_median(double (*batch)(void *ctx, long n), void *ctx, double want_us,
             long max_n, int reps)
{
    double per[64], t;
    long n = 1;
    if (reps > 64)
        reps = 64;
    while (n < max_n && (t = batch(ctx, n)) < want_us) {
        if (t < 0)
            return NAN;
        n *= 2;
    }
    for (int r = 0; r < reps; r++) {
        if ((t = batch(ctx, n)) < 0)
            return NAN;
        per[r] = t / (double)n;
    }
    return bench_median(per, reps);
}

/* ---- the GPU ------------------------------------------------------------ */

const char bench_spin_source[] =
    "extern \"C\" __global__ void\n"
    BENCH_SPIN_NAME "(unsigned long long ns, unsigned long long *out)\n"
    "{\n"
    "    unsigned long long t0, t;\n"
    "    const long long c0 = clock64();\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "    do {\n"
    "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "    } while (t - t0 < ns);\n"
    "    out[0] = (unsigned long long)(clock64() - c0);\n"
    "    out[1] = t - t0;\n"
    "}\n";

typedef struct gpu_timed {
    const bench_gpu_timer *t;
    bench_gpu_result *res;
    /* the SM clock before each batch, in order (the spin's count) */
    double mhz[96];
    int n_mhz;
} gpu_timed;

/* Records the first failure; always returns -1 (a failed batch). */
static double
gpu_failed(gpu_timed *g, int status, CUresult cu, const char *what)
{
    if (!g->res->status) {
        g->res->status = status;
        g->res->cu = cu;
        g->res->what = what;
    }
    return -1;
}

/* A driver call that must succeed inside a batch. */
#define GPU_CALL(g, call, what)                                              \
    do {                                                                     \
        CUresult r_ = (call);                                                \
        if (r_ != CUDA_SUCCESS)                                              \
            return gpu_failed((g), KDTREE_ERROR_CUDA, r_, (what));           \
    } while (0)

/* µs of one batch of n launches, by events; -1 when a call failed. */
static double
gpu_batch_us(void *ctx, long n)
{
    gpu_timed *g = ctx;
    const bench_gpu_timer *t = g->t;
    const kdt_driver *d = t->drv;
    float ms = 0;
    int st;
    GPU_CALL(g, d->ctx_set_current(t->ctx), "cuCtxSetCurrent");
    if (t->spin) {
        /* Head start: long enough for this thread to queue the batch at a
         * pessimistic 10 µs per launch. */
        unsigned long long ns = 50000ULL + 10000ULL * (unsigned long long)n;
        CUdeviceptr clock = t->spin_clock;
        void *params[] = {&ns, &clock};
        GPU_CALL(g, d->launch_kernel(t->spin, 1, 1, 1, 1, 1, 1, 0, t->stream,
                                     params, NULL),
                 "cuLaunchKernel(spin)");
    }
    GPU_CALL(g, d->event_record(t->ev0, t->stream), "cuEventRecord");
    for (long i = 0; i < n; i++)
        if ((st = t->launch(t->arg, t->stream)))
            return gpu_failed(g, st, CUDA_SUCCESS, "timed launch");
    GPU_CALL(g, d->event_record(t->ev1, t->stream), "cuEventRecord");
    GPU_CALL(g, d->event_synchronize(t->ev1), "cuEventSynchronize");
    GPU_CALL(g, d->event_elapsed_time(&ms, t->ev0, t->ev1),
             "cuEventElapsedTime");
    if (t->spin && g->n_mhz < (int)(sizeof g->mhz / sizeof g->mhz[0])) {
        unsigned long long clk[2];
        GPU_CALL(g, d->memcpy_dtoh(clk, t->spin_clock, sizeof clk),
                 "cuMemcpyDtoH(spin clock)");
        g->mhz[g->n_mhz++] = clk[1] ? 1e3 * (double)clk[0] / clk[1] : NAN;
    }
    return ms * 1e3;
}

int
bench_time_gpu(const bench_gpu_timer *t, bench_gpu_result *res)
{
    gpu_timed g = {.t = t, .res = res};
    int reps = t->reps > 64 ? 64 : t->reps;
    *res = (bench_gpu_result){.us = NAN, .mhz = NAN, .cu = CUDA_SUCCESS};
    if (t->rest_us > 0) {
        struct timespec ts = {(time_t)(t->rest_us / 1e6),
                              (long)(fmod(t->rest_us, 1e6) * 1e3)};
        nanosleep(&ts, NULL);
    }
    const double t0 = bench_now_us();
    CUresult r = t->drv->ctx_set_current(t->ctx);
    if (r != CUDA_SUCCESS)
        gpu_failed(&g, KDTREE_ERROR_CUDA, r, "cuCtxSetCurrent");
    for (int i = 0; i < 3 && !res->status; i++) {
        int st = t->launch(t->arg, t->stream);
        if (st)
            gpu_failed(&g, st, CUDA_SUCCESS, "warm-up launch");
    }
    if (!res->status) {
        r = t->drv->stream_synchronize(t->stream);
        if (r != CUDA_SUCCESS)
            gpu_failed(&g, KDTREE_ERROR_CUDA, r, "cuStreamSynchronize");
    }
    if (res->status)
        return res->status;
    res->us = timed_median(gpu_batch_us, &g, t->want_us, t->max_n, reps);
    /* the clock of the timed batches: the last `reps` (before them, the
     * batches that chose the size) */
    const int from = g.n_mhz > reps ? g.n_mhz - reps : 0;
    res->mhz = bench_median(g.mhz + from, g.n_mhz - from);
    res->busy_us = bench_now_us() - t0;
    return res->status;
}

/* ---- the host ----------------------------------------------------------- */

typedef struct cpu_timed {
    void (*fn)(void *arg);
    void *arg;
} cpu_timed;

/* Wall-clock µs of one batch of n calls. */
static double
cpu_batch_us(void *ctx, long n)
{
    cpu_timed *c = ctx;
    double t0 = bench_now_us();
    for (long i = 0; i < n; i++)
        c->fn(c->arg);
    return bench_now_us() - t0;
}

double
bench_time_host(void (*fn)(void *arg), void *arg, double want_us, int reps)
{
    cpu_timed c = {fn, arg};
    fn(arg);
    return timed_median(cpu_batch_us, &c, want_us, 1L << 24, reps);
}
