/*
 * bench_time.c: kdtree-bench's timing (see bench.h): the clock, medians,
 * the one batch loop that GPU and host timings share, and the GPU's
 * events and spin kernel.
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
 * before it, each GPU timing first lets the GPU idle as long as the one
 * before kept it busy (up to BENCH_REST_MAX_US): the H200 holds its
 * 700 W limit by lowering its clock (to 1700-1800 MHz from 1980) when
 * heavy kernels run back to back for a second or more, which read as
 * 6-13% slower kernels on the heavy verify_attn shapes of a whole run
 * than the same shapes alone.  Host times are wall-clock times of
 * batches of calls.  Every figure is a median.
 */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "bench_ctx.h"
#include "cuda/nvrtc.h"
#include "runtime/runtime.h"

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

/* The loop both timers share: the batch size doubles until one batch of n
 * calls lasts want_us (or n reaches max_n), then the median over reps
 * batches of that size of the microseconds per call.  batch(ctx, n)
 * returns the total microseconds of n calls. */
static double
timed_median(double (*batch)(void *ctx, long n), void *ctx, double want_us,
             long max_n, int reps)
{
    double per[64];
    long n = 1;
    if (reps > 64)
        reps = 64;
    while (n < max_n && batch(ctx, n) < want_us)
        n *= 2;
    for (int r = 0; r < reps; r++)
        per[r] = batch(ctx, n) / (double)n;
    return bench_median(per, reps);
}

/* ---- the GPU ------------------------------------------------------------ */

/* The spin kernel: waits `ns` nanoseconds of the GPU's global timer, then
 * writes the SM cycles and the nanoseconds that took to out[0], out[1]. */
static const char spin_source[] =
    "extern \"C\" __global__ void\n"
    "kdt_bench_spin(unsigned long long ns, unsigned long long *out)\n"
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

void
bench_load_spin(bench_ctx *b)
{
    int st = 0, kind = 0;
    char target[32], opt[48];
    const kdt_nvrtc *n = kdt_nvrtc_get(&st);
    kdt_blob blob = {0};
    if (n)
        st = kdt_nvrtc_pick_target(n, b->rt->cc_major, b->rt->cc_minor,
                                   target, sizeof target, &kind);
    if (!st) {
        const char *opts[1];
        snprintf(opt, sizeof opt, "-arch=%s", target);
        opts[0] = opt;
        st = kdt_nvrtc_compile(n, spin_source, "kdt_bench_spin.cu", 0, NULL,
                               NULL, 1, opts, kind, &blob);
    }
    if (!st && (b->drv->module_load_data(&b->spin_mod, blob.data) ||
                b->drv->module_get_function(&b->spin_fn, b->spin_mod,
                                            "kdt_bench_spin") ||
                b->drv->mem_alloc(&b->spin_clock, 16))) {
        b->spin_fn = NULL;
        st = KDTREE_ERROR_CUDA;
    }
    kdt_blob_free(&blob);
    if (st)
        bench_note(b, "no spin kernel (%s): GPU batches start without a "
                   "head start, so kernels shorter than a launch read as "
                   "the launch rate", kdtree_status_name(st));
}

typedef struct gpu_timed {
    bench_ctx *b;
    int (*fn)(void *arg, void *stream);
    void *arg;
    /* the SM clock before each batch, in order (the spin's count) */
    double mhz[96];
    int n_mhz;
} gpu_timed;

/* µs of one batch of n launches, by events. */
static double
gpu_batch_us(void *ctx, long n)
{
    gpu_timed *g = ctx;
    bench_ctx *b = g->b;
    const kdt_driver *d = b->drv;
    float ms = 0;
    bench_make_current(b);
    if (b->spin_fn) {
        /* Head start: long enough for this thread to queue the batch at a
         * pessimistic 10 µs per launch. */
        unsigned long long ns = 50000ULL + 10000ULL * (unsigned long long)n;
        void *params[] = {&ns, &b->spin_clock};
        bench_cu_check(b, d->launch_kernel(b->spin_fn, 1, 1, 1, 1, 1, 1, 0,
                                           b->stream, params, NULL),
                       "cuLaunchKernel(spin)");
    }
    bench_cu_check(b, d->event_record(b->ev0, b->stream), "cuEventRecord");
    for (long i = 0; i < n; i++)
        bench_check(b, g->fn(g->arg, b->stream), "timed launch");
    bench_cu_check(b, d->event_record(b->ev1, b->stream), "cuEventRecord");
    bench_cu_check(b, d->event_synchronize(b->ev1), "cuEventSynchronize");
    bench_cu_check(b, d->event_elapsed_time(&ms, b->ev0, b->ev1),
                   "cuEventElapsedTime");
    if (b->spin_fn && g->n_mhz < (int)(sizeof g->mhz / sizeof g->mhz[0])) {
        unsigned long long clk[2];
        bench_cu_check(b, d->memcpy_dtoh(clk, b->spin_clock, sizeof clk),
                       "cuMemcpyDtoH(spin clock)");
        g->mhz[g->n_mhz++] = clk[1] ? 1e3 * (double)clk[0] / clk[1] : NAN;
    }
    return ms * 1e3;
}

/* The longest idle before a GPU timing (the longest a case keeps the GPU
 * busy is about a second). */
#define BENCH_REST_MAX_US 2e6

double
bench_gpu_us(bench_ctx *b, int (*fn)(void *arg, void *stream), void *arg)
{
    /* A batch should last well over the events' ~0.5 µs resolution; it is
     * capped so that the queue behind the spin kernel never fills. */
    gpu_timed g = {.b = b, .fn = fn, .arg = arg};
    const int reps = b->quick ? 5 : 21;
    if (!b->rt)
        bench_abort(b, "GPU timing asked for without a GPU");
    if (!b->quick && b->gpu_busy_us > 0) {
        /* the rest: a duty cycle of at most one half, case by case */
        double rest = b->gpu_busy_us < BENCH_REST_MAX_US ? b->gpu_busy_us
                                                         : BENCH_REST_MAX_US;
        struct timespec ts = {(time_t)(rest / 1e6),
                              (long)(fmod(rest, 1e6) * 1e3)};
        nanosleep(&ts, NULL);
    }
    const double t0 = bench_now_us();
    for (int i = 0; i < 3; i++)
        bench_check(b, fn(arg, b->stream), "warm-up launch");
    bench_cu_check(b, b->drv->stream_synchronize(b->stream),
                   "cuStreamSynchronize");
    double us = timed_median(gpu_batch_us, &g, b->quick ? 200 : 1000, 512,
                             reps);
    /* the clock of the timed batches: the last `reps` (before them, the
     * batches that chose the size) */
    const int from = g.n_mhz > reps ? g.n_mhz - reps : 0;
    b->gpu_mhz = bench_median(g.mhz + from, g.n_mhz - from);
    b->gpu_busy_us = bench_now_us() - t0;
    return us;
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
bench_cpu_us(bench_ctx *b, void (*fn)(void *arg), void *arg)
{
    cpu_timed c = {fn, arg};
    fn(arg);
    return timed_median(cpu_batch_us, &c, b->quick ? 100 : 500, 1L << 24,
                        b->quick ? 7 : 21);
}
