/*
 * bench.c: kdtree-bench's context (see bench_ctx.h for how the tool is
 * split): the bench's own runtime on the GPU, device memory for the
 * cases, aborting a case that fails, the rows and notes the report
 * prints, and the cases' timings, which hand bench_time what to time and
 * act on what it reports.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ctx.h"
#include "base/error.h"
#include "cuda/nvrtc.h"
#include "runtime/runtime.h"

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

void *
bench_xcalloc(size_t n, size_t size)
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


/* ---- context ---------------------------------------------------------- */

bench_ctx *
bench_create(int quick)
{
    bench_ctx *b = bench_xcalloc(1, sizeof *b);
    b->quick = quick;
    b->rng = 0x9E3779B97F4A7C15ULL;
    b->gpu_mhz = NAN;
    /* verify_attn as it was always measured: bf16, pages of 64 */
    b->attn_kv = 1u << KDTREE_KV_BF16;
    b->attn_math = 1u << KDTREE_ATTN_MATH_BF16;
    b->attn_pages[0] = 64;
    b->n_attn_pages = 1;
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
        if (b->spin_clock)
            b->drv->mem_free(b->spin_clock);
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

void
bench_set_only(bench_ctx *b, const char *text)
{
    if (text && b->n_only < BENCH_MAX_ONLY)
        b->only[b->n_only++] = text;
}

void
bench_set_attn(bench_ctx *b, unsigned kv_mask, unsigned math_mask,
               const int *pages, int n_pages)
{
    b->attn_kv = kv_mask;
    b->attn_math = math_mask;
    b->n_attn_pages = n_pages < BENCH_MAX_PAGES ? n_pages : BENCH_MAX_PAGES;
    for (int i = 0; i < b->n_attn_pages; i++)
        b->attn_pages[i] = pages[i];
}

int
bench_attn_wants(const bench_ctx *b, int kv, int math)
{
    /* the API's own rule: e4m3 arithmetic reads an e4m3 cache */
    if (math == KDTREE_ATTN_MATH_E4M3 && kv != KDTREE_KV_E4M3)
        return 0;
    return kv >= 0 && kv < 32 && math >= 0 && math < 32 &&
           (b->attn_kv >> kv & 1) && (b->attn_math >> math & 1);
}

int
bench_attn_pages(const bench_ctx *b, int *pages, int max)
{
    int n = b->n_attn_pages < max ? b->n_attn_pages : max;
    for (int i = 0; i < n; i++)
        pages[i] = b->attn_pages[i];
    return n;
}

void
bench_set_peak(bench_ctx *b, const bench_peak *peak)
{
    b->peak = *peak;
}

int
bench_cases_measured(const bench_ctx *b)
{
    return b->n_rows + b->n_over;
}

int
bench_wants(const bench_ctx *b, const char *config)
{
    for (int i = 0; i < b->n_only; i++)
        if (!strstr(config, b->only[i]))
            return 0;
    return 1;
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

void
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

void
bench_cu_check(bench_ctx *b, CUresult r, const char *call)
{
    if (r != CUDA_SUCCESS) {
        kdt_cuda_fail(b->drv, r, call);
        bench_check(b, KDTREE_ERROR_CUDA, call);
    }
}

/* Compiles and loads the spin kernel the GPU batches start behind
 * (bench_time.h); without it b->spin_fn stays NULL and a note says so. */
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
        st = kdt_nvrtc_compile(n, bench_spin_source, "kdt_bench_spin.cu", 0,
                               NULL, NULL, 1, opts, kind, &blob);
    }
    if (!st && (b->drv->module_load_data(&b->spin_mod, blob.data) ||
                b->drv->module_get_function(&b->spin_fn, b->spin_mod,
                                            BENCH_SPIN_NAME) ||
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
    const bench_peak *peak = bench_peak_of(b->device_name);
    if (!b->peak.source && peak)
        b->peak = *peak;
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
    bench_cu_check(b, b->drv->mem_alloc(&p, size ? size : 1), "cuMemAlloc");
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
    uint64_t *h = bench_xcalloc(words, 8);
    for (size_t i = 0; i < words; i++)
        h[i] = rng_next(&b->rng);
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        bench_cu_check(b, b->drv->memcpy_htod(p + off, h, n), "cuMemcpyHtoD");
    }
    free(h);
    return p;
}

uint64_t
bench_upload(bench_ctx *b, const void *host, size_t size)
{
    uint64_t p = raw_alloc(b, size);
    if (size)
        bench_cu_check(b, b->drv->memcpy_htod(p, host, size), "cuMemcpyHtoD");
    return p;
}

void
bench_download(bench_ctx *b, void *host, uint64_t dev, size_t size)
{
    bench_make_current(b);
    /* The stream is non-blocking: a plain copy would not wait for it. */
    bench_cu_check(b, b->drv->stream_synchronize(b->stream),
                   "cuStreamSynchronize");
    if (size)
        bench_cu_check(b, b->drv->memcpy_dtoh(host, dev, size),
                       "cuMemcpyDtoH");
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

/* ---- timings ---------------------------------------------------------- */

/* The longest rest before a GPU timing (the longest a case keeps the GPU
 * busy is about a second). */
#define BENCH_REST_MAX_US 2e6

double
bench_gpu_us(bench_ctx *b, int (*fn)(void *arg, void *stream), void *arg)
{
    bench_gpu_result res;
    if (!b->rt)
        bench_abort(b, "GPU timing asked for without a GPU");
    /* A batch should last well over the events' ~0.5 µs resolution; it is
     * capped so that the queue behind the spin kernel never fills.  The
     * rest before it is a duty cycle of at most one half, case by case
     * (none with --quick). */
    bench_gpu_timer t = {
        .drv = b->drv, .ctx = b->rt->ctx, .stream = b->stream,
        .ev0 = b->ev0, .ev1 = b->ev1, .spin = b->spin_fn,
        .spin_clock = b->spin_clock, .launch = fn, .arg = arg,
        .rest_us = b->quick ? 0
                   : b->gpu_busy_us < BENCH_REST_MAX_US ? b->gpu_busy_us
                                                        : BENCH_REST_MAX_US,
        .want_us = b->quick ? 200 : 1000, .max_n = 512,
        .reps = b->quick ? 5 : 21,
    };
    if (bench_time_gpu(&t, &res)) {
        if (res.cu != CUDA_SUCCESS)
            bench_cu_check(b, res.cu, res.what);
        bench_check(b, res.status, res.what);
    }
    b->gpu_mhz = res.mhz;
    b->gpu_busy_us = res.busy_us;
    return res.us;
}

double
bench_cpu_us(bench_ctx *b, void (*fn)(void *arg), void *arg)
{
    return bench_time_host(fn, arg, b->quick ? 100 : 500, b->quick ? 7 : 21);
}

/* ---- rows ------------------------------------------------------------- */

void
bench_row(bench_ctx *b, const char *kernel, const char *config, double us,
          double bytes, double flops, const char *baseline,
          double baseline_us)
{
    kernel_row *r;
    b->last_row_kept = b->n_rows < MAX_ROWS;
    if (!b->last_row_kept)
        return;
    r = &b->rows[b->n_rows++];
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    snprintf(r->config, sizeof r->config, "%s", config ? config : "");
    r->kv[0] = r->math[0] = 0;
    r->us = us;
    r->bytes = bytes;
    r->flops = flops;
    r->mhz = b->gpu_mhz;
    b->gpu_mhz = NAN; /* a row's clock is its own timing's */
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
bench_row_types(bench_ctx *b, const char *kv, const char *math)
{
    kernel_row *r;
    if (!b->last_row_kept)
        return;
    r = &b->rows[b->n_rows - 1];
    snprintf(r->kv, sizeof r->kv, "%s", kv ? kv : "");
    snprintf(r->math, sizeof r->math, "%s", math ? math : "");
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
