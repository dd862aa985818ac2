/*
 * bench.c: kdtree-bench's timing, generic loop and report (see bench.h and
 * bench_suite.h).
 *
 * GPU times come from CUDA events around a batch of back-to-back launches.
 * So that the batch measures the kernels and not how fast this thread can
 * enqueue them, a "spin" kernel that waits on the GPU's global timer is
 * launched first: while it runs, the whole batch is queued behind it, and
 * the first event fires only when the spin ends.  Host times are wall-clock
 * times of batches of calls.  Every figure is a median.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_suite.h"
#include "cache/cache.h"
#include "cuda/driver.h"
#include "base/error.h"
#include "jit/cubin_info.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "jit/sources.h"
#include "cuda/nvrtc.h"
#include "runtime/runtime.h"

/* The H200 limits the report compares against: measured device-to-device
 * copy bandwidth and dense bf16 tensor throughput. */
#define H200_BYTES_PER_S 4.3e12
#define H200_FLOPS_PER_S 989e12

#define MAX_LOAD_ROWS 64
#define MAX_ROWS 256
#define MAX_OVERHEAD 16
#define MAX_BASE 512
#define MAX_ROW_BASELINES 4
#define MAX_CASES 16
#define MAX_NOTES 64

typedef struct load_row {
    char kernel[32];
    char arch[32];
    char shape[160];
    int gpu;           /* 1: through a runtime; 0: kdtree_compile() */
    int reps_cold, reps_warm;
    double cold_ms;    /* empty cache: NVRTC compile + publish (+ load) */
    double cold_nvrtc_ms; /* the compile's own NVRTC time (stats) */
    double bare_ms;    /* kdt_nvrtc_compile() of the same source alone */
    double warm_ms;    /* entry on disk: read, verify (+ load) */
    double warm_load_ms; /* of which cuModuleLoadData (stats) */
    double hot_find_us;  /* kdt_runtime_find() of a loaded shape */
    double hot_prepare_us; /* kdtree_prepare() of a loaded shape */
    /* The cached cubin's kernel functions (n_fn = -1: not read, a PTX
     * entry or unreadable). */
    kdt_cubin_kernel fn[KDT_MAX_FUNCS];
    int n_fn;
    char problem[256]; /* what went wrong or looked wrong, or "" */
} load_row;

/* The same work done another way, timed in the same run. */
typedef struct row_baseline {
    char name[48];
    double us;
} row_baseline;

typedef struct kernel_row {
    char kernel[32];
    char config[96];
    double us, bytes, flops;
    row_baseline base[MAX_ROW_BASELINES];
    int n_base;
} kernel_row;

typedef struct overhead_row {
    char kernel[32];
    char config[96];
    double api_us, bare_us;
    int calls;
} overhead_row;

typedef struct base_row {
    char script[48];
    char label[48]; /* "torch", "flashinfer-bound", ... */
    char kernel[48];
    char config[128];
    double us;
    int matched; /* shown beside a kernel row */
} base_row;

typedef struct case_row {
    char name[32];
    char outcome[600]; /* "ok", or the failure */
} case_row;

struct bench_ctx {
    int quick;
    /* GPU state; rt is NULL in compile-only mode. */
    kdtree_runtime *rt;
    const kdt_driver *drv;
    CUstream stream;
    CUevent ev0, ev1;
    CUmodule spin_mod;
    CUfunction spin_fn; /* NULL: batches run without a head start */
    char device_name[128];
    char no_gpu_reason[512];
    /* The running case's buffers and its abort point. */
    uint64_t *allocs;
    size_t n_allocs, cap_allocs;
    jmp_buf *abort_to;
    char abort_msg[512];
    uint64_t rng;
    int nvrtc_warmed;
    load_row load[MAX_LOAD_ROWS];
    int n_load;
    kernel_row rows[MAX_ROWS];
    int n_rows;
    overhead_row over[MAX_OVERHEAD];
    int n_over;
    base_row base[MAX_BASE];
    int n_base;
    case_row cases[MAX_CASES];
    int n_cases;
    char *notes[MAX_NOTES];
    int n_notes;
};

/* ---- small helpers ---------------------------------------------------- */

static double
now_us(void)
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

/* Median of v[0..n) (sorts v); NAN for n = 0. */
static double
median(double *v, int n)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t
rng_next(uint64_t *s)
{
    /* xorshift64*: plenty for filling buffers. */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void *
xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "kdtree-bench: out of memory\n");
        exit(2);
    }
    return p;
}

void
bench_note(bench_ctx *b, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (b->n_notes < MAX_NOTES)
        b->notes[b->n_notes++] = strdup(buf);
    fprintf(stderr, "kdtree-bench: %s\n", buf);
}

/* "KDTREE_ERROR_X: last error" for status st. */
static void
status_text(char *out, size_t size, int st)
{
    snprintf(out, size, "%s: %s", kdtree_status_name(st), kdtree_last_error());
}

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void
rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh empty directory under $TMPDIR, made the cache directory. */
static char *
fresh_cache_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/kdtree-bench.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(path)) {
        fprintf(stderr, "kdtree-bench: mkdtemp %s: %s\n", path,
                strerror(errno));
        exit(2);
    }
    setenv("KDTREE_CACHE_DIR", path, 1);
    return strdup(path);
}

/* The cache environment of the user, put back after each load phase. */
typedef struct saved_env {
    char *dir, *mode, *path;
} saved_env;

static char *
dup_env(const char *name)
{
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}

static void
restore_one(const char *name, char *v)
{
    if (v)
        setenv(name, v, 1);
    else
        unsetenv(name);
    free(v);
}

/* Saves the user's cache settings and sets those of a load measurement:
 * read-write, and no read-only layers (a prebuilt layer would turn a cold
 * measurement into a disk hit). */
static void
env_isolate(saved_env *s)
{
    s->dir = dup_env("KDTREE_CACHE_DIR");
    s->mode = dup_env("KDTREE_CACHE");
    s->path = dup_env("KDTREE_CACHE_PATH");
    setenv("KDTREE_CACHE", "readwrite", 1);
    unsetenv("KDTREE_CACHE_PATH");
}

static void
env_restore(saved_env *s)
{
    restore_one("KDTREE_CACHE_DIR", s->dir);
    restore_one("KDTREE_CACHE", s->mode);
    restore_one("KDTREE_CACHE_PATH", s->path);
}

/* ---- context ---------------------------------------------------------- */

bench_ctx *
bench_create(int quick)
{
    bench_ctx *b = xcalloc(1, sizeof *b);
    b->quick = quick;
    b->rng = 0x9E3779B97F4A7C15ULL;
    snprintf(b->no_gpu_reason, sizeof b->no_gpu_reason, "not used");
    return b;
}

void
bench_destroy(bench_ctx *b)
{
    if (!b)
        return;
    if (b->rt) {
        bench_free_all(b);
        bench_make_current(b);
        if (b->spin_mod)
            b->drv->module_unload(b->spin_mod);
        b->drv->event_destroy(b->ev0);
        b->drv->event_destroy(b->ev1);
        b->drv->stream_destroy(b->stream);
        kdtree_runtime_destroy(b->rt);
    }
    for (int i = 0; i < b->n_notes; i++)
        free(b->notes[i]);
    free(b->allocs);
    free(b);
}

kdtree_runtime *
bench_runtime(bench_ctx *b)
{
    return b->rt;
}

void *
bench_stream(bench_ctx *b)
{
    return b->stream;
}

int
bench_quick(const bench_ctx *b)
{
    return b->quick;
}

int
bench_has_gpu(const bench_ctx *b)
{
    return b->rt != NULL;
}

const char *
bench_gpu_arch(const bench_ctx *b)
{
    return b->rt ? kdtree_runtime_arch(b->rt) : NULL;
}

const kdt_driver *
bench_driver(bench_ctx *b)
{
    return b->drv;
}

void
bench_make_current(bench_ctx *b)
{
    if (b->rt)
        b->drv->ctx_set_current(b->rt->ctx);
}

/* Leaves the running case (or the process, outside a case) with `msg`. */
static void
bench_abort(bench_ctx *b, const char *msg)
{
    snprintf(b->abort_msg, sizeof b->abort_msg, "%s", msg);
    if (b->abort_to)
        longjmp(*b->abort_to, 1);
    fprintf(stderr, "kdtree-bench: %s\n", msg);
    exit(2);
}

void
bench_check(bench_ctx *b, int st, const char *what)
{
    char msg[512];
    if (!st)
        return;
    snprintf(msg, sizeof msg, "%s: %s: %s", what, kdtree_status_name(st),
             kdtree_last_error());
    bench_abort(b, msg);
}

static void
cu_check(bench_ctx *b, CUresult r, const char *call)
{
    if (r != CUDA_SUCCESS) {
        kdt_cuda_fail(b->drv, r, call);
        bench_check(b, KDTREE_ERROR_CUDA, call);
    }
}

/* The spin kernel: waits `ns` nanoseconds of the GPU's global timer. */
static const char spin_source[] =
    "extern \"C\" __global__ void kdt_bench_spin(unsigned long long ns)\n"
    "{\n"
    "    unsigned long long t0, t;\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "    do {\n"
    "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "    } while (t - t0 < ns);\n"
    "}\n";

static void
load_spin(bench_ctx *b)
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
                                            "kdt_bench_spin"))) {
        b->spin_fn = NULL;
        st = KDTREE_ERROR_CUDA;
    }
    kdt_blob_free(&blob);
    if (st)
        bench_note(b, "no spin kernel (%s): GPU batches start without a "
                   "head start, so kernels shorter than a launch read as "
                   "the launch rate", kdtree_status_name(st));
}

int
bench_open_gpu(bench_ctx *b, int device)
{
    int st = kdtree_runtime_create(&b->rt, device);
    if (st) {
        status_text(b->no_gpu_reason, sizeof b->no_gpu_reason, st);
        b->rt = NULL;
        return st;
    }
    b->drv = b->rt->drv;
    b->no_gpu_reason[0] = 0;
    /* The bench's own driver calls (allocations, events) run in the
     * runtime's primary context, the one the launches use. */
    bench_make_current(b);
    if (b->drv->device_get_name(b->device_name, sizeof b->device_name,
                                b->rt->dev))
        snprintf(b->device_name, sizeof b->device_name, "device %d", device);
    if (b->drv->stream_create(&b->stream, CU_STREAM_NON_BLOCKING) ||
        b->drv->event_create(&b->ev0, CU_EVENT_DEFAULT) ||
        b->drv->event_create(&b->ev1, CU_EVENT_DEFAULT)) {
        snprintf(b->no_gpu_reason, sizeof b->no_gpu_reason,
                 "could not create a stream or events");
        kdtree_runtime_destroy(b->rt);
        b->rt = NULL;
        return KDTREE_ERROR_CUDA;
    }
    load_spin(b);
    return 0;
}

/* ---- device memory ---------------------------------------------------- */

static void
track(bench_ctx *b, uint64_t p)
{
    if (b->n_allocs == b->cap_allocs) {
        size_t cap = b->cap_allocs ? 2 * b->cap_allocs : 32;
        uint64_t *a = realloc(b->allocs, cap * sizeof *a);
        if (!a)
            bench_abort(b, "out of host memory");
        b->allocs = a;
        b->cap_allocs = cap;
    }
    b->allocs[b->n_allocs++] = p;
}

static uint64_t
raw_alloc(bench_ctx *b, size_t size)
{
    CUdeviceptr p = 0;
    if (!b->rt)
        bench_abort(b, "device memory asked for without a GPU");
    bench_make_current(b);
    cu_check(b, b->drv->mem_alloc(&p, size ? size : 1), "cuMemAlloc");
    track(b, (uint64_t)p);
    return (uint64_t)p;
}

uint64_t
bench_alloc(bench_ctx *b, size_t size)
{
    /* Random bytes, never zeros.  A chunk of up to 16 MiB is filled on the
     * host and copied over the buffer as often as it takes. */
    uint64_t p = raw_alloc(b, size);
    size_t chunk = size < (16u << 20) ? size : (16u << 20);
    size_t words = (chunk + 7) / 8;
    uint64_t *h = xcalloc(words, 8);
    for (size_t i = 0; i < words; i++)
        h[i] = rng_next(&b->rng);
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        cu_check(b, b->drv->memcpy_htod(p + off, h, n), "cuMemcpyHtoD");
    }
    free(h);
    return p;
}

uint64_t
bench_upload(bench_ctx *b, const void *host, size_t size)
{
    uint64_t p = raw_alloc(b, size);
    if (size)
        cu_check(b, b->drv->memcpy_htod(p, host, size), "cuMemcpyHtoD");
    return p;
}

void
bench_download(bench_ctx *b, void *host, uint64_t dev, size_t size)
{
    bench_make_current(b);
    /* The stream is non-blocking: a plain copy would not wait for it. */
    cu_check(b, b->drv->stream_synchronize(b->stream), "cuStreamSynchronize");
    if (size)
        cu_check(b, b->drv->memcpy_dtoh(host, dev, size), "cuMemcpyDtoH");
}

void
bench_free_all(bench_ctx *b)
{
    if (!b->rt)
        return;
    bench_make_current(b);
    b->drv->stream_synchronize(b->stream);
    for (size_t i = 0; i < b->n_allocs; i++)
        b->drv->mem_free(b->allocs[i]);
    b->n_allocs = 0;
}

/* ---- timing ----------------------------------------------------------- */

/* µs of one batch of n launches of fn, by events. */
static double
gpu_batch_us(bench_ctx *b, int (*fn)(void *, void *), void *arg, int n)
{
    const kdt_driver *d = b->drv;
    float ms = 0;
    bench_make_current(b);
    if (b->spin_fn) {
        /* Head start: long enough for this thread to queue the batch at a
         * pessimistic 10 µs per launch. */
        unsigned long long ns = 50000ULL + 10000ULL * (unsigned)n;
        void *params[] = {&ns};
        cu_check(b, d->launch_kernel(b->spin_fn, 1, 1, 1, 1, 1, 1, 0,
                                     b->stream, params, NULL),
                 "cuLaunchKernel(spin)");
    }
    cu_check(b, d->event_record(b->ev0, b->stream), "cuEventRecord");
    for (int i = 0; i < n; i++)
        bench_check(b, fn(arg, b->stream), "timed launch");
    cu_check(b, d->event_record(b->ev1, b->stream), "cuEventRecord");
    cu_check(b, d->event_synchronize(b->ev1), "cuEventSynchronize");
    cu_check(b, d->event_elapsed_time(&ms, b->ev0, b->ev1),
             "cuEventElapsedTime");
    return ms * 1e3;
}

double
bench_gpu_us(bench_ctx *b, int (*fn)(void *arg, void *stream), void *arg)
{
    /* A batch should last well over the events' ~0.5 µs resolution; it is
     * capped so that the queue behind the spin kernel never fills. */
    const double want_us = b->quick ? 200 : 1000;
    const int max_n = 512, reps = b->quick ? 5 : 21;
    double per[64];
    int n = 1;
    if (!b->rt)
        bench_abort(b, "GPU timing asked for without a GPU");
    for (int i = 0; i < 3; i++)
        bench_check(b, fn(arg, b->stream), "warm-up launch");
    cu_check(b, b->drv->stream_synchronize(b->stream), "cuStreamSynchronize");
    while (n < max_n && gpu_batch_us(b, fn, arg, n) < want_us)
        n *= 2;
    for (int r = 0; r < reps; r++)
        per[r] = gpu_batch_us(b, fn, arg, n) / n;
    return median(per, reps);
}

/* µs per call of fn over a batch of n calls. */
static double
cpu_batch_us(void (*fn)(void *), void *arg, long n)
{
    double t0 = now_us();
    for (long i = 0; i < n; i++)
        fn(arg);
    return (now_us() - t0) / (double)n;
}

double
bench_cpu_us(bench_ctx *b, void (*fn)(void *arg), void *arg)
{
    const double want_us = b->quick ? 100 : 500;
    const int reps = b->quick ? 7 : 21;
    double per[64];
    long n = 1;
    fn(arg);
    while (n < (1L << 24) && cpu_batch_us(fn, arg, n) * n < want_us)
        n *= 2;
    for (int r = 0; r < reps; r++)
        per[r] = cpu_batch_us(fn, arg, n);
    return median(per, reps);
}

/* ---- rows ------------------------------------------------------------- */

void
bench_row(bench_ctx *b, const char *kernel, const char *config, double us,
          double bytes, double flops, const char *baseline,
          double baseline_us)
{
    kernel_row *r;
    if (b->n_rows == MAX_ROWS)
        return;
    r = &b->rows[b->n_rows++];
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    snprintf(r->config, sizeof r->config, "%s", config ? config : "");
    r->us = us;
    r->bytes = bytes;
    r->flops = flops;
    r->n_base = 0;
    if (baseline) {
        snprintf(r->base[0].name, sizeof r->base[0].name, "%s", baseline);
        r->base[0].us = baseline_us;
        r->n_base = 1;
    }
    fprintf(stderr, "kdtree-bench: %-12s %-40s %10.2f us\n", kernel,
            r->config, us);
}

void
bench_overhead_row(bench_ctx *b, const char *kernel, const char *config,
                   double api_us, double bare_us, int calls)
{
    overhead_row *r;
    if (b->n_over == MAX_OVERHEAD)
        return;
    r = &b->over[b->n_over++];
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    snprintf(r->config, sizeof r->config, "%s", config);
    r->api_us = api_us;
    r->bare_us = bare_us;
    r->calls = calls;
}

/* ---- cases ------------------------------------------------------------ */

int
bench_run_case(bench_ctx *b, const char *name, int (*fn)(bench_ctx *b))
{
    jmp_buf jb;
    volatile int st = 0;
    case_row *c = b->n_cases < MAX_CASES ? &b->cases[b->n_cases++] : NULL;
    fprintf(stderr, "kdtree-bench: case %s\n", name);
    b->abort_to = &jb;
    if (setjmp(jb) == 0) {
        st = fn(b);
    } else {
        st = KDTREE_ERROR_INTERNAL;
    }
    b->abort_to = NULL;
    bench_free_all(b);
    if (c) {
        snprintf(c->name, sizeof c->name, "%s", name);
        if (st == 0)
            snprintf(c->outcome, sizeof c->outcome, "ok");
        else if (b->abort_msg[0])
            snprintf(c->outcome, sizeof c->outcome, "failed: %s",
                     b->abort_msg);
        else
            snprintf(c->outcome, sizeof c->outcome, "failed: %s: %s",
                     kdtree_status_name(st), kdtree_last_error());
    }
    if (st && c)
        fprintf(stderr, "kdtree-bench: case %s %s\n", name, c->outcome);
    b->abort_msg[0] = 0;
    return st;
}

/* ---- the load path ---------------------------------------------------- */

static load_row *
new_load_row(bench_ctx *b, const char *kernel, const char *arch,
             const char *shape, int gpu)
{
    load_row *r;
    if (b->n_load == MAX_LOAD_ROWS)
        return NULL;
    r = &b->load[b->n_load++];
    memset(r, 0, sizeof *r);
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    snprintf(r->arch, sizeof r->arch, "%s", arch);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->gpu = gpu;
    r->cold_ms = r->cold_nvrtc_ms = r->bare_ms = r->warm_ms = NAN;
    r->warm_load_ms = r->hot_find_us = r->hot_prepare_us = NAN;
    r->n_fn = -1;
    return r;
}

static void
problem(load_row *r, const char *fmt, ...)
{
    size_t len = strlen(r->problem);
    va_list ap;
    if (len && len + 2 < sizeof r->problem) {
        strcpy(r->problem + len, "; ");
        len += 2;
    }
    va_start(ap, fmt);
    vsnprintf(r->problem + len, sizeof r->problem - len, fmt, ap);
    va_end(ap);
    /* One line per row: an NVRTC log keeps its first line only. */
    r->problem[len + strcspn(r->problem + len, "\n")] = 0;
}

/* The bare compile: kdt_nvrtc_compile() of the kernel's source, headers
 * and options, exactly as the load path passes them, with nothing around
 * it (no key, no cache, no load).  Returns milliseconds, or NAN. */
static double
bare_compile_ms(load_row *r, int id, const int64_t *vals, const char *target,
                int kind)
{
    const kdt_kernel_def *def = kdt_kernel_def_get(id);
    const char *hsrc[16], *hname[16], *opts[4 + KDT_MAX_CONSTS];
    char optbuf[KDT_MAX_CONSTS][80], archopt[48];
    int nh = 0, no = 0, st = 0;
    const kdt_nvrtc *n = kdt_nvrtc_get(&st);
    const char *src = def ? kdt_source_text(def->source, NULL) : NULL;
    kdt_blob blob = {0};
    double t0, t1;
    if (!n || !src) {
        problem(r, "bare NVRTC: %s", n ? "no source" : kdtree_last_error());
        return NAN;
    }
    for (; def->headers && def->headers[nh] && nh < 16; nh++) {
        hname[nh] = def->headers[nh];
        hsrc[nh] = kdt_source_text(def->headers[nh], NULL);
        if (!hsrc[nh]) {
            problem(r, "bare NVRTC: header %s not embedded", hname[nh]);
            return NAN;
        }
    }
    snprintf(archopt, sizeof archopt, "-arch=%s", target);
    opts[no++] = "-std=c++17";
    opts[no++] = archopt;
    opts[no++] = "-lineinfo";
    for (int i = 0; i < def->n_consts; i++) {
        snprintf(optbuf[i], sizeof optbuf[i], "-DKDT_%s=%lld",
                 def->consts[i].name, (long long)vals[i]);
        opts[no++] = optbuf[i];
    }
    t0 = now_us();
    st = kdt_nvrtc_compile(n, src, def->source, nh, hsrc, hname, no, opts,
                           kind, &blob);
    t1 = now_us();
    kdt_blob_free(&blob);
    if (st) {
        problem(r, "bare NVRTC: %s", kdtree_status_name(st));
        return NAN;
    }
    return (t1 - t0) / 1e3;
}

/* NVRTC's first compile in a process loads its builtins; keep that out of
 * every measurement by compiling once, untimed, before the first one. */
static void
warm_nvrtc(bench_ctx *b, load_row *r, int id, const int64_t *vals,
           const char *target, int kind)
{
    if (b->nvrtc_warmed)
        return;
    b->nvrtc_warmed = 1;
    (void)bare_compile_ms(r, id, vals, target, kind);
}

/* The registers, stack and shared memory of the cubin the cache holds for
 * the row's shape (what its load measured), read while its cache
 * directory is still the current one. */
static void
read_resources(load_row *r, int id, const int64_t *vals, const char *target,
               int kind)
{
    kdt_blob blob = {0};
    char why[200];
    int from = 0, n = 0;
    if (kind != KDT_PAYLOAD_CUBIN)
        return;
    if (kdt_kernel_obtain(id, vals, target, kind, &blob, &from)) {
        problem(r, "resources: %s", kdtree_last_error());
        return;
    }
    if (kdt_cubin_kernels(blob.data, blob.size, r->fn, KDT_MAX_FUNCS, &n,
                          why, sizeof why))
        problem(r, "resources: %s", why);
    else
        r->n_fn = n < KDT_MAX_FUNCS ? n : KDT_MAX_FUNCS;
    kdt_blob_free(&blob);
}

static int
kind_of_target(const char *target)
{
    return strncmp(target, "sm_", 3) == 0 ? KDT_PAYLOAD_CUBIN
                                          : KDT_PAYLOAD_PTX;
}

typedef struct hot_arg {
    kdtree_runtime *rt;
    int id;
    const int64_t *vals;
    const char *name, *shape;
    int failed;
} hot_arg;

static void
hot_find(void *p)
{
    hot_arg *a = p;
    if (!kdt_runtime_find(a->rt, a->id, a->vals))
        a->failed = 1;
}

static void
hot_prepare(void *p)
{
    hot_arg *a = p;
    if (kdtree_prepare(a->rt, a->name, a->shape))
        a->failed = 1;
}

int
bench_load_gpu(bench_ctx *b, int index)
{
    const char *name = kdtree_kernel_name(index);
    const char *shape = name ? kdtree_kernel_default_shape(name) : NULL;
    int id = name ? kdt_kernel_find(name) : -1;
    int reps_cold = b->quick ? 1 : 7, reps_warm = b->quick ? 5 : 21;
    double cold[16], bare[16], cnv[16], warm[64], wload[64];
    int nc = 0, nb = 0, nw = 0, st = 0, kind = 0;
    int64_t vals[KDT_MAX_CONSTS];
    char target[32];
    char *dir = NULL;
    saved_env env;
    load_row *r;
    kdtree_cache_stats s;
    const kdt_nvrtc *nv;

    if (!b->rt || id < 0 || !shape)
        return KDTREE_ERROR_INVALID_ARGUMENT;
    r = new_load_row(b, name, kdtree_runtime_arch(b->rt), shape, 1);
    if (!r)
        return 0;
    r->reps_cold = reps_cold;
    r->reps_warm = reps_warm;
    if ((st = kdt_shape_parse(id, shape, vals))) {
        problem(r, "shape: %s", kdtree_last_error());
        return st;
    }
    nv = kdt_nvrtc_get(&st);
    if (nv)
        st = kdt_nvrtc_pick_target(nv, b->rt->cc_major, b->rt->cc_minor,
                                   target, sizeof target, &kind);
    if (st) {
        problem(r, "NVRTC: %s", kdtree_last_error());
        return st;
    }
    snprintf(r->arch, sizeof r->arch, "%s", target);
    env_isolate(&env);
    warm_nvrtc(b, r, id, vals, target, kind);

    /* Cold, interleaved with the bare compile so drift hits both alike. */
    for (int i = 0; i < reps_cold && !st; i++) {
        kdtree_runtime *rt = NULL;
        double t0, t1;
        if (dir) {
            rm_tree(dir);
            free(dir);
        }
        dir = fresh_cache_dir();
        kdt_cache_memory_clear();
        kdtree_cache_stats_reset();
        if ((st = kdtree_runtime_create(&rt, b->rt->ordinal))) {
            problem(r, "runtime: %s", kdtree_last_error());
            break;
        }
        t0 = now_us();
        st = kdtree_prepare(rt, name, shape);
        t1 = now_us();
        kdtree_runtime_destroy(rt);
        if (st) {
            problem(r, "cold prepare: %s: %s", kdtree_status_name(st),
                    kdtree_last_error());
            break;
        }
        kdtree_cache_stats_get(&s);
        if (s.compiles != 1 && i == 0)
            problem(r, "cold run compiled %llu times (disk hits %llu)",
                    (unsigned long long)s.compiles,
                    (unsigned long long)s.disk_hits);
        cold[nc] = (t1 - t0) / 1e3;
        cnv[nc++] = s.compile_ms;
        bare[nb] = bare_compile_ms(r, id, vals, target, kind);
        if (isfinite(bare[nb]))
            nb++;
    }
    /* Warm: the entry the last cold run published is on disk. */
    for (int i = 0; i < reps_warm && !st; i++) {
        kdtree_runtime *rt = NULL;
        double t0, t1;
        kdt_cache_memory_clear();
        kdtree_cache_stats_reset();
        if ((st = kdtree_runtime_create(&rt, b->rt->ordinal)))
            break;
        t0 = now_us();
        st = kdtree_prepare(rt, name, shape);
        t1 = now_us();
        kdtree_runtime_destroy(rt);
        if (st) {
            problem(r, "warm prepare: %s: %s", kdtree_status_name(st),
                    kdtree_last_error());
            break;
        }
        kdtree_cache_stats_get(&s);
        if ((s.disk_hits != 1 || s.compiles != 0) && i == 0)
            problem(r, "warm run: %llu disk hits, %llu compiles",
                    (unsigned long long)s.disk_hits,
                    (unsigned long long)s.compiles);
        warm[nw] = (t1 - t0) / 1e3;
        wload[nw++] = s.load_ms;
    }
    /* Hot: the shape loaded in the bench's runtime. */
    if (!st && !(st = kdtree_prepare(b->rt, name, shape))) {
        hot_arg a = {b->rt, id, vals, name, shape, 0};
        r->hot_find_us = bench_cpu_us(b, hot_find, &a);
        r->hot_prepare_us = bench_cpu_us(b, hot_prepare, &a);
        if (a.failed)
            problem(r, "hot lookup missed");
    } else if (st && !r->problem[0]) {
        problem(r, "%s", kdtree_last_error());
    }
    r->cold_ms = median(cold, nc);
    r->cold_nvrtc_ms = median(cnv, nc);
    r->bare_ms = median(bare, nb);
    r->warm_ms = median(warm, nw);
    r->warm_load_ms = median(wload, nw);
    if (!st)
        read_resources(r, id, vals, target, kind);
    if (dir) {
        rm_tree(dir);
        free(dir);
    }
    kdt_cache_memory_clear();
    env_restore(&env);
    fprintf(stderr, "kdtree-bench: load %-12s %s cold %.1f ms (bare NVRTC "
            "%.1f ms) warm %.3f ms hot %.3f us%s%s\n", name, r->arch,
            r->cold_ms, r->bare_ms, r->warm_ms, r->hot_find_us,
            r->problem[0] ? ": " : "", r->problem);
    return st;
}

int
bench_load_compile(bench_ctx *b, int index, const char *arch)
{
    const char *name = kdtree_kernel_name(index);
    const char *shape = name ? kdtree_kernel_default_shape(name) : NULL;
    int id = name ? kdt_kernel_find(name) : -1;
    int reps_cold = b->quick ? 1 : 3, reps_warm = b->quick ? 5 : 21;
    int kind = kind_of_target(arch);
    double cold[16], bare[16], cnv[16], warm[64];
    int nc = 0, nb = 0, nw = 0, st = 0;
    int64_t vals[KDT_MAX_CONSTS];
    char *dir = NULL;
    saved_env env;
    load_row *r;
    kdtree_cache_stats s;

    if (id < 0 || !shape)
        return KDTREE_ERROR_INVALID_ARGUMENT;
    r = new_load_row(b, name, arch, shape, 0);
    if (!r)
        return 0;
    r->reps_cold = reps_cold;
    r->reps_warm = reps_warm;
    if ((st = kdt_shape_parse(id, shape, vals))) {
        problem(r, "shape: %s", kdtree_last_error());
        return st;
    }
    env_isolate(&env);
    warm_nvrtc(b, r, id, vals, arch, kind);
    for (int i = 0; i < reps_cold && !st; i++) {
        int32_t cached = -1;
        double t0, t1;
        if (dir) {
            rm_tree(dir);
            free(dir);
        }
        dir = fresh_cache_dir();
        kdt_cache_memory_clear();
        kdtree_cache_stats_reset();
        t0 = now_us();
        st = kdtree_compile(&cached, arch, name, shape);
        t1 = now_us();
        if (st) {
            problem(r, "cold compile: %s: %s", kdtree_status_name(st),
                    kdtree_last_error());
            break;
        }
        if (cached != 0 && i == 0)
            problem(r, "cold compile reported a cache hit");
        kdtree_cache_stats_get(&s);
        cold[nc] = (t1 - t0) / 1e3;
        cnv[nc++] = s.compile_ms;
        bare[nb] = bare_compile_ms(r, id, vals, arch, kind);
        if (isfinite(bare[nb]))
            nb++;
    }
    for (int i = 0; i < reps_warm && !st; i++) {
        int32_t cached = -1;
        double t0, t1;
        kdt_cache_memory_clear();
        t0 = now_us();
        st = kdtree_compile(&cached, arch, name, shape);
        t1 = now_us();
        if (st) {
            problem(r, "warm compile: %s: %s", kdtree_status_name(st),
                    kdtree_last_error());
            break;
        }
        if (cached != 1 && i == 0)
            problem(r, "warm compile did not find the entry on disk");
        warm[nw++] = (t1 - t0) / 1e3;
    }
    r->cold_ms = median(cold, nc);
    r->cold_nvrtc_ms = median(cnv, nc);
    r->bare_ms = median(bare, nb);
    r->warm_ms = median(warm, nw);
    if (!st)
        read_resources(r, id, vals, arch, kind);
    if (dir) {
        rm_tree(dir);
        free(dir);
    }
    kdt_cache_memory_clear();
    env_restore(&env);
    fprintf(stderr, "kdtree-bench: compile %-12s %-7s cold %.1f ms (bare "
            "NVRTC %.1f ms) warm %.3f ms%s%s\n", name, arch, r->cold_ms,
            r->bare_ms, r->warm_ms, r->problem[0] ? ": " : "", r->problem);
    return st;
}

/* ---- baselines -------------------------------------------------------- */

/* Runs one baseline script and flattens whatever JSON it writes into
 * "ROW\tkernel\tconfig\tus\tlabel" and "NOTE\ttext" lines (or one
 * "ERROR\t..." line), so that this file needs no JSON parser.  The script
 * is run as `script --json FILE [--quick]` (the baselines' convention: JSON
 * into FILE, progress on stdout); JSON printed on stdout is accepted too.
 * Rows: a list, or an object's "cases"/"rows"/"results"; an object's
 * "notes" (strings: what was skipped and why) become notes.  A row's time
 * is the first of baseline_us, median_us, us, time_us (or *_ms); its
 * kernel "kernel" or "name"; its config "config"/"shape", else its other
 * scalar fields ("H=8 R=1 past_len=4096 rows=65"); its label, the name
 * the report shows it under, "label" (default "torch"). */
static const char flatten_py[] =
    "import json, os, subprocess, sys, tempfile\n"
    "script = sys.argv[1]\n"
    "fd, out = tempfile.mkstemp(suffix='.json'); os.close(fd)\n"
    "p = subprocess.run([sys.executable, script, '--json', out] + sys.argv[2:],\n"
    "                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,\n"
    "                   universal_newlines=True)\n"
    "text = open(out).read(); os.unlink(out)\n"
    "if p.returncode == 77:\n"
    "    print('ERROR\\tskipped: ' + (p.stderr.strip().splitlines() or [''])[-1]); sys.exit(0)\n"
    "if p.returncode != 0:\n"
    "    last = (p.stderr.strip().splitlines() or ['exit %d' % p.returncode])[-1]\n"
    "    print('ERROR\\texit %d: %s' % (p.returncode, last)); sys.exit(0)\n"
    "data = None\n"
    "for src in (text, p.stdout):\n"
    "    try:\n"
    "        data = json.loads(src); break\n"
    "    except ValueError:\n"
    "        pass\n"
    "if data is None:\n"
    "    for line in reversed(p.stdout.splitlines()):\n"
    "        try:\n"
    "            data = json.loads(line); break\n"
    "        except ValueError:\n"
    "            pass\n"
    "if data is None:\n"
    "    print('ERROR\\tno JSON written'); sys.exit(0)\n"
    "rows = data\n"
    "if isinstance(data, dict):\n"
    "    rows = data.get('cases') or data.get('rows') or data.get('results') or [data]\n"
    "    for n in data.get('notes') or []:\n"
    "        print('NOTE\\t' + ' '.join(str(n).split()))\n"
    "TIME = ('baseline_us', 'median_us', 'us', 'time_us')\n"
    "def get(r, *keys):\n"
    "    for k in keys:\n"
    "        if r.get(k) is not None: return r[k]\n"
    "for r in rows:\n"
    "    if not isinstance(r, dict): continue\n"
    "    us = get(r, *TIME)\n"
    "    if us is None:\n"
    "        ms = get(r, 'median_ms', 'ms')\n"
    "        us = None if ms is None else 1e3 * float(ms)\n"
    "    if us is None: continue\n"
    "    k = str(get(r, 'kernel', 'name') or os.path.basename(script))\n"
    "    c = get(r, 'config', 'shape', 'case')\n"
    "    if c is None:\n"
    "        c = ' '.join('%s=%s' % (a, b) for a, b in r.items()\n"
    "                     if isinstance(b, (int, str)) and not isinstance(b, bool)\n"
    "                     and a not in ('kernel', 'name') and not a.endswith(('_us', '_ms', '_error'))\n"
    "                     and a not in ('flops', 'bytes', 'tflops', 'baseline', 'label'))\n"
    "    if isinstance(c, dict): c = ' '.join('%s=%s' % kv for kv in c.items())\n"
    "    c = str(c).replace('\\t', ' ').replace('\\n', ' ')\n"
    "    lab = ' '.join(str(r.get('label') or 'torch').split())\n"
    "    print('ROW\\t%s\\t%s\\t%.4f\\t%s' % (k, c, float(us), lab))\n";

/* Writes the config strings of the rows of `kernel` measured so far, one a
 * line, into a temp file whose name goes into `out`: the cases a baseline
 * script is to time (its --configs).  0, or -1 when there are none. */
static int
write_configs(bench_ctx *b, const char *kernel, char *out, size_t size)
{
    int fd, n = 0;
    FILE *f;
    snprintf(out, size, "/tmp/kdtree-bench-configs.XXXXXX");
    if ((fd = mkstemp(out)) < 0)
        return -1;
    if (!(f = fdopen(fd, "w"))) {
        close(fd);
        unlink(out);
        return -1;
    }
    for (int i = 0; i < b->n_rows; i++)
        if (strcmp(b->rows[i].kernel, kernel) == 0) {
            fprintf(f, "%s\n", b->rows[i].config);
            n++;
        }
    fclose(f);
    if (!n)
        unlink(out);
    return n ? 0 : -1;
}

/* Runs `script`; with `kernel`, on the cases of it this run measured. */
static void
run_baseline(bench_ctx *b, const char *tools_dir, const char *script,
             const char *kernel)
{
    char path[4096], cmd[8192], line[1024], configs[64] = "";
    FILE *f, *p;
    int got = 0;
    snprintf(path, sizeof path, "%s/%s", tools_dir, script);
    if (access(path, R_OK) != 0) {
        bench_note(b, "baseline %s: not found (%s)", script, path);
        return;
    }
    /* The flattener goes through a temp file: no quoting of Python code in
     * a shell command. */
    char tmp[] = "/tmp/kdtree-bench-flatten.XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        bench_note(b, "baseline %s: cannot write a temp file", script);
        return;
    }
    fputs(flatten_py, f);
    fclose(f);
    if (kernel && write_configs(b, kernel, configs, sizeof configs) != 0)
        configs[0] = 0;
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'%s%s%s%s", tmp, path,
             b->quick ? " --quick" : "", configs[0] ? " --configs '" : "",
             configs, configs[0] ? "'" : "");
    fprintf(stderr, "kdtree-bench: baseline %s\n", script);
    p = popen(cmd, "r");
    if (!p) {
        bench_note(b, "baseline %s: cannot run python3", script);
        unlink(tmp);
        if (configs[0])
            unlink(configs);
        return;
    }
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "ROW\t", 4) == 0 && b->n_base < MAX_BASE) {
            /* kernel, config (may be empty), us, label */
            char *f[4], *rest = line + 4;
            int nf = 0;
            while (nf < 4 && rest)
                f[nf++] = strsep(&rest, "\t");
            if (nf < 4 || !*f[0] || !*f[2])
                continue;
            base_row *r = &b->base[b->n_base];
            snprintf(r->script, sizeof r->script, "%s", script);
            snprintf(r->kernel, sizeof r->kernel, "%s", f[0]);
            snprintf(r->config, sizeof r->config, "%s", f[1]);
            r->us = atof(f[2]);
            snprintf(r->label, sizeof r->label, "%s", *f[3] ? f[3] : "torch");
            b->n_base++;
            got++;
        } else if (strncmp(line, "NOTE\t", 5) == 0) {
            bench_note(b, "baseline %s: %s", script, line + 5);
        } else if (strncmp(line, "ERROR\t", 6) == 0) {
            bench_note(b, "baseline %s: %s", script, line + 6);
        }
    }
    if (pclose(p) != 0)
        bench_note(b, "baseline %s: python3 missing or failed", script);
    else if (!got)
        bench_note(b, "baseline %s: no rows", script);
    unlink(tmp);
    if (configs[0])
        unlink(configs);
}

void
bench_run_baselines(bench_ctx *b, const char *tools_dir, int topk, int attn)
{
    if (topk)
        run_baseline(b, tools_dir, "baseline_topk.py", NULL);
    if (attn)
        run_baseline(b, tools_dir, "baseline_attn.py", "verify_attn");
}

/* ---- report ----------------------------------------------------------- */

static void
json_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(o, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", o);
        else if (c == '\t')
            fputs("\\t", o);
        else if (c < 0x20)
            fprintf(o, "\\u%04x", c);
        else
            fputc(c, o);
    }
    fputc('"', o);
}

static void
json_num(FILE *o, double v)
{
    if (isfinite(v))
        fprintf(o, "%.6g", v);
    else
        fputs("null", o);
}

/* A number in a table cell, "-" when not measured. */
static const char *
cell(char *buf, size_t size, const char *fmt, double v)
{
    if (isfinite(v))
        snprintf(buf, size, fmt, v);
    else
        snprintf(buf, size, "-");
    return buf;
}

typedef struct target {
    const char *what;
    char subject[64];
    double value, limit;
    const char *unit;
    int met;
} target;

/* The targets, from the GPU measurements only. */
static int
collect_targets(bench_ctx *b, target *t, int max)
{
    int n = 0;
    for (int i = 0; i < b->n_load && n + 3 <= max; i++) {
        load_row *r = &b->load[i];
        if (!r->gpu)
            continue;
        t[n] = (target){"warm load from disk", "", r->warm_ms, 1.0, "ms", 0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", r->kernel);
        t[n].met = isfinite(r->warm_ms) && r->warm_ms < 1.0;
        n++;
        t[n] = (target){"hot lookup", "", r->hot_find_us, 1.0, "us", 0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", r->kernel);
        t[n].met = isfinite(r->hot_find_us) && r->hot_find_us < 1.0;
        n++;
        t[n] = (target){"cold / bare NVRTC", "", r->cold_ms / r->bare_ms,
                        1.10, "x", 0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", r->kernel);
        t[n].met = isfinite(t[n].value) && t[n].value <= 1.10;
        n++;
    }
    for (int i = 0; i < b->n_over && n < max; i++) {
        overhead_row *o = &b->over[i];
        t[n] = (target){"API cost over cuLaunchKernel", "",
                        o->api_us - o->bare_us, 0.5, "us", 0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", o->kernel);
        t[n].met = isfinite(t[n].value) && t[n].value < 0.5;
        n++;
    }
    return n;
}

/* A load row's kernel functions: a list, or null when not read. */
static void
json_functions(FILE *o, const load_row *r)
{
    if (r->n_fn < 0) {
        fputs("null", o);
        return;
    }
    fputc('[', o);
    for (int i = 0; i < r->n_fn; i++) {
        const kdt_cubin_kernel *k = &r->fn[i];
        fputs(i ? ", {\"name\": " : "{\"name\": ", o);
        json_str(o, k->name);
        fprintf(o, ", \"registers\": %u, \"stack_bytes\": %u, "
                "\"shared_bytes\": %u, \"param_bytes\": %u, "
                "\"max_threads\": %u}", k->registers, k->stack_bytes,
                k->shared_bytes, k->param_bytes, k->max_threads);
    }
    fputc(']', o);
}

/* The resources table under the load table. */
static void
table_functions(bench_ctx *b, FILE *o)
{
    int any = 0;
    for (int i = 0; i < b->n_load; i++)
        any |= b->load[i].n_fn > 0;
    if (!any)
        return;
    fprintf(o, "\nResources per kernel function (the cached cubin of each "
            "row; stack > 0 is local memory: spills, local arrays, calls)\n");
    fprintf(o, "%-13s %-8s %-24s %5s %6s %8s %7s %8s\n", "kernel", "target",
            "function", "regs", "stack", "shared", "params", "threads");
    for (int i = 0; i < b->n_load; i++) {
        const load_row *r = &b->load[i];
        for (int f = 0; f < r->n_fn; f++)
            fprintf(o, "%-13s %-8s %-24s %5u %6u %8u %7u %8u\n", r->kernel,
                    r->arch, r->fn[f].name, r->fn[f].registers,
                    r->fn[f].stack_bytes, r->fn[f].shared_bytes,
                    r->fn[f].param_bytes, r->fn[f].max_threads);
    }
    fprintf(o, "  shared = static, with the 1 KB the system reserves; "
            "dynamic shared memory is set at launch; threads = "
            "__launch_bounds__\n");
}

static const char *
nvrtc_version_text(void)
{
    int st = 0;
    const kdt_nvrtc *n = kdt_nvrtc_get(&st);
    return n ? kdt_nvrtc_version(n) : "unavailable";
}

static void
report_json(bench_ctx *b, FILE *o)
{
    target t[MAX_LOAD_ROWS * 3 + MAX_OVERHEAD];
    int nt = collect_targets(b, t, (int)(sizeof t / sizeof t[0]));
    fputs("{\n  \"tool\": \"kdtree-bench\",\n  \"version\": ", o);
    json_str(o, kdtree_version_string());
    fprintf(o, ",\n  \"mode\": \"%s\",\n  \"quick\": %s,\n",
            b->rt ? "gpu" : "compile-only", b->quick ? "true" : "false");
    fputs("  \"device\": ", o);
    if (b->rt)
        json_str(o, b->device_name);
    else
        fputs("null", o);
    fputs(",\n  \"arch\": ", o);
    if (b->rt)
        json_str(o, kdtree_runtime_arch(b->rt));
    else
        fputs("null", o);
    fputs(",\n  \"no_gpu_reason\": ", o);
    if (b->rt)
        fputs("null", o);
    else
        json_str(o, b->no_gpu_reason);
    fputs(",\n  \"nvrtc\": ", o);
    json_str(o, nvrtc_version_text());
    fprintf(o, ",\n  \"limits\": {\"bytes_per_s\": %.4g, \"flops_per_s\": "
            "%.4g},\n", H200_BYTES_PER_S, H200_FLOPS_PER_S);

    fputs("  \"load\": [", o);
    for (int i = 0; i < b->n_load; i++) {
        load_row *r = &b->load[i];
        fputs(i ? ",\n    {" : "\n    {", o);
        fputs("\"kernel\": ", o);
        json_str(o, r->kernel);
        fputs(", \"target\": ", o);
        json_str(o, r->arch);
        fputs(", \"shape\": ", o);
        json_str(o, r->shape);
        fprintf(o, ", \"path\": \"%s\"", r->gpu ? "runtime" : "compile-only");
        fprintf(o, ", \"reps_cold\": %d, \"reps_warm\": %d", r->reps_cold,
                r->reps_warm);
        fputs(", \"cold_ms\": ", o);
        json_num(o, r->cold_ms);
        fputs(", \"cold_nvrtc_ms\": ", o);
        json_num(o, r->cold_nvrtc_ms);
        fputs(", \"bare_nvrtc_ms\": ", o);
        json_num(o, r->bare_ms);
        fputs(", \"cold_over_bare\": ", o);
        json_num(o, r->cold_ms / r->bare_ms);
        fputs(", \"warm_ms\": ", o);
        json_num(o, r->warm_ms);
        fputs(", \"warm_module_load_ms\": ", o);
        json_num(o, r->warm_load_ms);
        fputs(", \"hot_find_us\": ", o);
        json_num(o, r->hot_find_us);
        fputs(", \"hot_prepare_us\": ", o);
        json_num(o, r->hot_prepare_us);
        fputs(", \"functions\": ", o);
        json_functions(o, r);
        fputs(", \"problem\": ", o);
        if (r->problem[0])
            json_str(o, r->problem);
        else
            fputs("null", o);
        fputc('}', o);
    }
    fputs(b->n_load ? "\n  ],\n" : "],\n", o);

    fputs("  \"kernels\": [", o);
    for (int i = 0; i < b->n_rows; i++) {
        kernel_row *r = &b->rows[i];
        double s = r->us * 1e-6;
        fputs(i ? ",\n    {" : "\n    {", o);
        fputs("\"kernel\": ", o);
        json_str(o, r->kernel);
        fputs(", \"config\": ", o);
        json_str(o, r->config);
        fputs(", \"us\": ", o);
        json_num(o, r->us);
        fputs(", \"bytes\": ", o);
        json_num(o, r->bytes);
        fputs(", \"flops\": ", o);
        json_num(o, r->flops);
        fputs(", \"tb_per_s\": ", o);
        json_num(o, r->bytes > 0 ? r->bytes / s / 1e12 : NAN);
        fputs(", \"bw_fraction\": ", o);
        json_num(o, r->bytes > 0 ? r->bytes / s / H200_BYTES_PER_S : NAN);
        fputs(", \"tflop_per_s\": ", o);
        json_num(o, r->flops > 0 ? r->flops / s / 1e12 : NAN);
        fputs(", \"flop_fraction\": ", o);
        json_num(o, r->flops > 0 ? r->flops / s / H200_FLOPS_PER_S : NAN);
        /* "baseline" is the first (today's path); "baselines" all. */
        fputs(", \"baseline\": ", o);
        if (r->n_base)
            json_str(o, r->base[0].name);
        else
            fputs("null", o);
        fputs(", \"baseline_us\": ", o);
        json_num(o, r->n_base ? r->base[0].us : NAN);
        fputs(", \"baselines\": [", o);
        for (int j = 0; j < r->n_base; j++) {
            fputs(j ? ", {\"name\": " : "{\"name\": ", o);
            json_str(o, r->base[j].name);
            fputs(", \"us\": ", o);
            json_num(o, r->base[j].us);
            fputs(", \"ours_faster_by\": ", o);
            json_num(o, r->base[j].us / r->us);
            fputc('}', o);
        }
        fputs("]}", o);
    }
    fputs(b->n_rows ? "\n  ],\n" : "],\n", o);

    fputs("  \"cases\": [", o);
    for (int i = 0; i < b->n_cases; i++) {
        fputs(i ? ", {\"name\": " : "{\"name\": ", o);
        json_str(o, b->cases[i].name);
        fputs(", \"outcome\": ", o);
        json_str(o, b->cases[i].outcome);
        fputc('}', o);
    }
    fputs("],\n  \"overhead\": [", o);
    for (int i = 0; i < b->n_over; i++) {
        overhead_row *r = &b->over[i];
        fputs(i ? ", {\"kernel\": " : "{\"kernel\": ", o);
        json_str(o, r->kernel);
        fputs(", \"config\": ", o);
        json_str(o, r->config);
        fputs(", \"api_us\": ", o);
        json_num(o, r->api_us);
        fputs(", \"bare_launch_us\": ", o);
        json_num(o, r->bare_us);
        fputs(", \"added_us\": ", o);
        json_num(o, r->api_us - r->bare_us);
        fprintf(o, ", \"calls_per_batch\": %d}", r->calls);
    }
    fputs("],\n  \"baselines\": [", o);
    for (int i = 0; i < b->n_base; i++) {
        base_row *r = &b->base[i];
        fputs(i ? ", {\"script\": " : "{\"script\": ", o);
        json_str(o, r->script);
        fputs(", \"label\": ", o);
        json_str(o, r->label);
        fputs(", \"kernel\": ", o);
        json_str(o, r->kernel);
        fputs(", \"config\": ", o);
        json_str(o, r->config);
        fputs(", \"us\": ", o);
        json_num(o, r->us);
        fputc('}', o);
    }
    fputs("],\n  \"targets\": [", o);
    for (int i = 0; i < nt; i++) {
        fputs(i ? ", {\"what\": " : "{\"what\": ", o);
        json_str(o, t[i].what);
        fputs(", \"subject\": ", o);
        json_str(o, t[i].subject);
        fputs(", \"value\": ", o);
        json_num(o, t[i].value);
        fprintf(o, ", \"limit\": %g, \"unit\": \"%s\", \"met\": %s}",
                t[i].limit, t[i].unit, t[i].met ? "true" : "false");
    }
    fputs("],\n  \"notes\": [", o);
    for (int i = 0; i < b->n_notes; i++) {
        if (i)
            fputs(", ", o);
        json_str(o, b->notes[i]);
    }
    fputs("]\n}\n", o);
}

static void
report_table(bench_ctx *b, FILE *o)
{
    char c1[32], c2[32], c3[32], c4[32], c5[32], c6[32], c7[32];
    target t[MAX_LOAD_ROWS * 3 + MAX_OVERHEAD];
    int nt = collect_targets(b, t, (int)(sizeof t / sizeof t[0]));

    fprintf(o, "kdtree-bench %s   NVRTC %s\n", kdtree_version_string(),
            nvrtc_version_text());
    if (b->rt)
        fprintf(o, "device: %s (%s)%s\n", b->device_name,
                kdtree_runtime_arch(b->rt), b->quick ? "   [--quick]" : "");
    else
        fprintf(o, "device: none (%s): compile-only%s\n", b->no_gpu_reason,
                b->quick ? "   [--quick]" : "");

    if (b->n_load) {
        fprintf(o, "\nLoad path, default shapes (medians; cold = empty cache "
                "dir: NVRTC + publish%s; warm = fresh %s, entry on disk)\n",
                b->rt ? " + load" : "", b->rt ? "runtime" : "process memory");
        fprintf(o, "%-13s %-8s %10s %10s %10s %7s %9s %8s %8s  %s\n",
                "kernel", "target", "cold ms", "in NVRTC", "bare ms",
                "c/bare", "warm ms", "hot us", "prep us", "shape");
        for (int i = 0; i < b->n_load; i++) {
            load_row *r = &b->load[i];
            fprintf(o, "%-13s %-8s %10s %10s %10s %7s %9s %8s %8s  %s\n",
                    r->kernel, r->arch,
                    cell(c1, sizeof c1, "%.1f", r->cold_ms),
                    cell(c7, sizeof c7, "%.1f", r->cold_nvrtc_ms),
                    cell(c2, sizeof c2, "%.1f", r->bare_ms),
                    cell(c3, sizeof c3, "%.3f", r->cold_ms / r->bare_ms),
                    cell(c4, sizeof c4, "%.3f", r->warm_ms),
                    cell(c5, sizeof c5, "%.3f", r->hot_find_us),
                    cell(c6, sizeof c6, "%.3f", r->hot_prepare_us),
                    r->shape);
            if (r->problem[0])
                fprintf(o, "    ! %s\n", r->problem);
        }
        fprintf(o, "  in NVRTC = the cold run's own time inside NVRTC "
                "(kdtree_cache_stats_get); bare = kdt_nvrtc_compile of the same "
                "source and options alone;\n  hot = kdt_runtime_find (the "
                "launch path's lookup); prep = kdtree_prepare of a loaded "
                "shape\n");
        table_functions(b, o);
    }

    if (b->n_rows) {
        fprintf(o, "\nKernels on the GPU (median us per launch, CUDA events "
                "around back-to-back batches; H200 limits: %.1f TB/s, %.0f "
                "TFLOP/s bf16)\n", H200_BYTES_PER_S / 1e12,
                H200_FLOPS_PER_S / 1e12);
        fprintf(o, "%-13s %-38s %10s %7s %6s %8s %6s  %s\n", "kernel",
                "config", "us", "TB/s", "%bw", "TFLOP/s", "%peak",
                "baselines, same run (their us / ours)");
        for (int i = 0; i < b->n_rows; i++) {
            kernel_row *r = &b->rows[i];
            double s = r->us * 1e-6;
            char base[MAX_ROW_BASELINES * 80] = "";
            for (int j = 0, len = 0; j < r->n_base; j++)
                if (isfinite(r->base[j].us) && len < (int)sizeof base)
                    len += snprintf(base + len, sizeof base - len,
                                    "%s%s %.2f us (%.2fx)", len ? "  " : "",
                                    r->base[j].name, r->base[j].us,
                                    r->base[j].us / r->us);
            fprintf(o, "%-13s %-38s %10.2f %7s %6s %8s %6s  %s\n", r->kernel,
                    r->config, r->us,
                    cell(c1, sizeof c1, "%.2f",
                         r->bytes > 0 ? r->bytes / s / 1e12 : NAN),
                    cell(c2, sizeof c2, "%.1f%%",
                         r->bytes > 0 ? 100 * r->bytes / s / H200_BYTES_PER_S
                                      : NAN),
                    cell(c3, sizeof c3, "%.1f",
                         r->flops > 0 ? r->flops / s / 1e12 : NAN),
                    cell(c4, sizeof c4, "%.1f%%",
                         r->flops > 0 ? 100 * r->flops / s / H200_FLOPS_PER_S
                                      : NAN),
                    base);
        }
    }
    if (b->n_cases) {
        fprintf(o, "\nGPU cases:");
        for (int i = 0; i < b->n_cases; i++)
            fprintf(o, "%s %s: %s", i ? ";" : "", b->cases[i].name,
                    b->cases[i].outcome);
        fputc('\n', o);
    }
    if (b->n_over) {
        fprintf(o, "\nHost cost per launch (median wall time per call, "
                "batches of back-to-back calls)\n");
        fprintf(o, "%-13s %-24s %10s %12s %10s\n", "kernel", "config",
                "API us", "cuLaunch us", "added us");
        for (int i = 0; i < b->n_over; i++) {
            overhead_row *r = &b->over[i];
            fprintf(o, "%-13s %-24s %10.3f %12.3f %10.3f\n", r->kernel,
                    r->config, r->api_us, r->bare_us, r->api_us - r->bare_us);
        }
    }
    if (b->n_base) {
        int header = 0;
        for (int i = 0; i < b->n_base; i++) {
            const base_row *x = &b->base[i];
            if (x->matched)
                continue;
            if (!header++) {
                fprintf(o, "\nBaselines with no kernel row of ours (same "
                        "run)\n");
                fprintf(o, "%-18s %-20s %-12s %-40s %10s\n", "script",
                        "baseline", "kernel", "config", "us");
            }
            fprintf(o, "%-18s %-20s %-12s %-40s %10.2f\n", x->script,
                    x->label, x->kernel, x->config, x->us);
        }
    }
    if (nt) {
        fprintf(o, "\nTargets (issue 2)\n");
        for (int i = 0; i < nt; i++)
            fprintf(o, "  %-30s %-13s %10s %-2s (limit %g) %s\n", t[i].what,
                    t[i].subject, cell(c7, sizeof c7, "%.3f", t[i].value),
                    t[i].unit, t[i].limit, t[i].met ? "met" : "NOT MET");
    }
    if (b->n_notes) {
        fprintf(o, "\nNotes\n");
        for (int i = 0; i < b->n_notes; i++)
            fprintf(o, "  - %s\n", b->notes[i]);
    }
}

/* Puts each baseline script's medians beside the kernel row of the same
 * kernel and config (the case files and the scripts share config
 * strings), one per label, in the scripts' order. */
static void
match_baselines(bench_ctx *b)
{
    for (int i = 0; i < b->n_rows; i++) {
        kernel_row *r = &b->rows[i];
        for (int j = 0; j < b->n_base; j++) {
            base_row *x = &b->base[j];
            int have = 0;
            if (strcmp(x->kernel, r->kernel) != 0 ||
                strcmp(x->config, r->config) != 0)
                continue;
            for (int k = 0; k < r->n_base; k++)
                have |= strcmp(r->base[k].name, x->label) == 0;
            if (!have && r->n_base < MAX_ROW_BASELINES) {
                row_baseline *rb = &r->base[r->n_base++];
                snprintf(rb->name, sizeof rb->name, "%s", x->label);
                rb->us = x->us;
            }
            x->matched = 1;
        }
    }
}

void
bench_report(bench_ctx *b, FILE *out, int json)
{
    match_baselines(b);
    if (json)
        report_json(b, out);
    else
        report_table(b, out);
    fflush(out);
}
