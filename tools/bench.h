/*
 * bench.h: what a kernel's cases (bench_<kernel>.c) may ask of
 * kdtree-bench.  The tool is split by job like zstd's timefn/benchfn/
 * benchzstd: the core (context, timing, load path, baselines, report: see
 * bench_ctx.h), one file per kernel's GPU cases, and a thin command line
 * (kdtree-bench.c).
 *
 * Every figure is a median of repeated runs.  A GPU time is measured with
 * CUDA events around a batch of back-to-back launches, so launch gaps do
 * not inflate a kernel of a few microseconds; the batch size is chosen so
 * that one batch lasts well over the event resolution.
 */
#ifndef KDT_BENCH_H
#define KDT_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "kdtree.h"

typedef struct bench_ctx bench_ctx;

/* The runtime the GPU cases use, and its stream. */
kdtree_runtime *bench_runtime(bench_ctx *b);
void *bench_stream(bench_ctx *b);
/* 1 with --quick: the smallest useful set of sizes (for tests). */
int bench_quick(const bench_ctx *b);
/* Whether a case of this configuration (its report row's config) is to
 * be measured: always, unless --only TEXT was given and config does not
 * contain TEXT.  A case asks before it times anything. */
int bench_wants(const bench_ctx *b, const char *config);

/* Device memory for a case; freed by bench_free_all() after the case.
 * bench_alloc fills with random bytes (never zeros: they hide bugs and run
 * faster than real data). */
uint64_t bench_alloc(bench_ctx *b, size_t size);
uint64_t bench_upload(bench_ctx *b, const void *host, size_t size);
void bench_download(bench_ctx *b, void *host, uint64_t dev, size_t size);
void bench_free_all(bench_ctx *b);

/* Median microseconds per call of fn(arg, stream), which enqueues one
 * launch and returns a kdtree status (a failure aborts the case with the
 * library's message).  Warms up first. */
double bench_gpu_us(bench_ctx *b, int (*fn)(void *arg, void *stream),
                    void *arg);
/* Median wall-clock microseconds per call of a host function. */
double bench_cpu_us(bench_ctx *b, void (*fn)(void *arg), void *arg);

/* One row of the report.  bytes and flops may be 0 (not meaningful); the
 * report derives TB/s, TFLOP/s and the fractions of the device's limits
 * (bench_peaks.h).  baseline may be NULL; else baseline_us is the same
 * work done the way a user does it without this library, measured in the
 * same run. */
void bench_row(bench_ctx *b, const char *kernel, const char *config,
               double us, double bytes, double flops, const char *baseline,
               double baseline_us);
/* The element types of the row bench_row() added last: the KV cache's
 * ("bf16", "e4m3") and the tensor cores' operands, which pick the peak
 * its %peak is of ("e4m3": the device's dense FP8 peak, else bf16's).
 * Rows of kernels without them name neither. */
void bench_row_types(bench_ctx *b, const char *kv, const char *math);

/* verify_attn's variants to measure (--kv, --math, --page): whether a
 * cache of type kv (kdtree_kv_dtype) read with arithmetic math
 * (kdtree_attn_math) is asked for, and the page sizes asked for, in the
 * order given (n of them into pages, at most max).  Default: bf16 and
 * pages of 64. */
int bench_attn_wants(const bench_ctx *b, int kv, int math);
int bench_attn_pages(const bench_ctx *b, int *pages, int max);

/* The per-kernel GPU cases; each returns 0 or a kdtree status. */
int bench_draft_topk(bench_ctx *b);
int bench_build_ddtree(bench_ctx *b);
int bench_verify_attn(bench_ctx *b);
int bench_tree_accept(bench_ctx *b);

#endif /* KDT_BENCH_H */
