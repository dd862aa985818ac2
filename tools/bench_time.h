/*
 * bench_time.h: kdtree-bench's timing, a leaf: it knows nothing of the
 * bench's context and calls nothing of it.  What is timed comes in as a
 * callback and its argument, what the GPU timing needs (driver, context,
 * stream, events, spin kernel) as plain fields, and a failure comes back
 * in the result for the caller to act on, the way zstd's benchfn takes
 * its functions and returns its outcome.
 *
 * Every figure is a median.  A GPU time is measured with CUDA events
 * around a batch of back-to-back launches queued behind a spin kernel (see
 * bench_time.c), so launch gaps do not inflate a kernel of a few
 * microseconds; the batch size doubles until one batch lasts want_us.
 */
#ifndef KDT_BENCH_TIME_H
#define KDT_BENCH_TIME_H

#include "cuda/driver.h"

/* CLOCK_MONOTONIC in microseconds. */
double bench_now_us(void);
/* Median of v[0..n) (sorts v); NAN for n = 0.  After it, v[0] and
 * v[n - 1] are the smallest and the largest. */
double bench_median(double *v, int n);

/* A measurement repeated n times: its median, smallest and largest (all
 * NAN for n = 0), so that a report can say how far the runs spread. */
typedef struct bench_stat {
    double median, min, max;
    int n;
} bench_stat;
/* The stat of v[0..n) (sorts v). */
bench_stat bench_stat_of(double *v, int n);

/* Median wall-clock microseconds per call of fn(arg), over `reps`
 * batches of calls each lasting about want_us (the first call untimed). */
double bench_time_host(void (*fn)(void *arg), void *arg, double want_us,
                       int reps);

/* The spin kernel a GPU batch starts behind, as source for NVRTC, and its
 * function name: it waits `ns` nanoseconds of the GPU's global timer,
 * then writes the SM cycles and nanoseconds that took to out[0], out[1]. */
extern const char bench_spin_source[];
#define BENCH_SPIN_NAME "kdt_bench_spin"

/* A GPU timing: launch(arg, stream) enqueues one launch and returns 0 or
 * a kdtree status. */
typedef struct bench_gpu_timer {
    const kdt_driver *drv;
    CUcontext ctx;          /* made current before each batch */
    CUstream stream;
    CUevent ev0, ev1;
    CUfunction spin;        /* NULL: batches start without a head start */
    CUdeviceptr spin_clock; /* 16 bytes for the spin's cycles and ns */
    int (*launch)(void *arg, void *stream);
    void *arg;
    double rest_us;         /* let the GPU idle this long first */
    double want_us;         /* a batch lasts at least this ... */
    long max_n;             /* ... or has this many launches */
    int reps;               /* timed batches (at most 64) */
} bench_gpu_timer;

typedef struct bench_gpu_result {
    double us;          /* median µs a launch; NAN on a failure */
    double mhz;         /* median SM clock the timed batches started at */
    double busy_us;     /* how long the timing kept the GPU busy */
    int status;         /* 0, or the first failure's kdtree status */
    CUresult cu;        /* its driver result (CUDA_SUCCESS: the launch
                           callback failed) */
    const char *what;   /* the call that failed */
} bench_gpu_result;

/* Times t's launches: the rest, three warm-up launches, then the batches.
 * Returns res->status. */
int bench_time_gpu(const bench_gpu_timer *t, bench_gpu_result *res);

#endif /* KDT_BENCH_TIME_H */
