/*
 * bench_suite.h: what kdtree-bench's CLI (kdtree-bench.c) asks of the
 * core (bench_ctx.h: context, timing, load path, baselines, report),
 * beyond bench.h's interface for the per-kernel cases.  Kept apart so the
 * case files see only what they need.
 */
#ifndef KDT_BENCH_SUITE_H
#define KDT_BENCH_SUITE_H

#include <stdio.h>

#include "bench.h"
#include "bench_peaks.h"

/* A context; quick = 1 for --quick.  Never NULL (aborts on no memory). */
bench_ctx *bench_create(int quick);
void bench_destroy(bench_ctx *b);
/* --only: measure only the GPU cases whose config contains `text` (kept,
 * not copied), and every other text given (repeated --only: all of them;
 * at most BENCH_MAX_ONLY); bench_wants() reads them.  bench_cases_measured() says how
 * many cases made a row. */
#define BENCH_MAX_ONLY 4
void bench_set_only(bench_ctx *b, const char *text);
int bench_cases_measured(const bench_ctx *b);
/* --kv, --math, --page: verify_attn's variants (bench_attn_wants):
 * masks of 1 << kdtree_kv_dtype and 1 << kdtree_attn_math, and the page
 * sizes (n of them, 1..256 each, at most BENCH_MAX_PAGES).  A combination
 * the API refuses (MATH=e4m3 on a bf16 cache) is never measured. */
#define BENCH_MAX_PAGES 4
void bench_set_attn(bench_ctx *b, unsigned kv_mask, unsigned math_mask,
                    const int *pages, int n_pages);
/* --peak: the limits the report's percentages are of, instead of the
 * device's entry in the table of bench_peaks.c. */
void bench_set_peak(bench_ctx *b, const bench_peak *peak);

/* Opens device `device` for GPU measurements: the bench's own runtime, its
 * stream and events.  Returns 0, or a kdtree status when there is no
 * driver or no device (the reason is kept for the report), after which the
 * bench runs compile-only. */
int bench_open_gpu(bench_ctx *b, int device);
int bench_has_gpu(const bench_ctx *b);
/* The device's architecture ("sm_90"), or NULL without a GPU. */
const char *bench_gpu_arch(const bench_ctx *b);

/* The load path of kernel `index` at its default shape (and the other
 * shapes bench_load.c lists for it), on the GPU: cold (empty cache
 * directory, NVRTC compile + load), warm (fresh runtime, entry on disk),
 * hot (in-memory lookup), and the bare NVRTC compile of the same source
 * for the device's target.  One row of the load table a shape. */
int bench_load_gpu(bench_ctx *b, int index);
/* The same without a GPU, through kdtree_compile() for `arch`: cold (empty
 * cache directory), warm (memory forgotten, entry on disk), bare NVRTC. */
int bench_load_compile(bench_ctx *b, int index, const char *arch);

/* Runs one GPU case (bench_<kernel>), catching a failure of a timed call
 * and freeing the case's buffers.  Records the outcome for the report. */
int bench_run_case(bench_ctx *b, const char *name,
                   int (*fn)(bench_ctx *b));

/* --list-attn: verify_attn's cases a GPU run of these options would
 * measure, one a line on `out` ("verify_attn", config, cache type,
 * arithmetic, bytes, FLOPs, tab-separated), with no GPU; returns how
 * many. */
int bench_verify_attn_list(bench_ctx *b, FILE *out);

/* The API's host cost over a bare cuLaunchKernel, measured by the
 * tree_accept case file (it knows that kernel's parameters). */
int bench_tree_accept_overhead(bench_ctx *b);
/* Records one overhead row: host µs per call through the API and through a
 * bare cuLaunchKernel of the same loaded function and parameters. */
void bench_overhead_row(bench_ctx *b, const char *kernel, const char *config,
                        double api_us, double bare_us, int calls);
/* For bench_tree_accept_overhead: the driver table, the runtime's primary
 * context made current on this thread. */
const struct kdt_driver *bench_driver(bench_ctx *b);
void bench_make_current(bench_ctx *b);
/* Aborts the running case with the library's last error when st != 0. */
void bench_check(bench_ctx *b, int st, const char *what);

/* Runs the baseline scripts in `tools_dir` (baseline_topk.py: torch;
 * baseline_attn.py: torch and FlashInfer, on the verify_attn cases this run
 * measured) with python3 and keeps their medians, each under its label,
 * for the report, and each script's outcome: ok, skipped (with the
 * script's reason: no torch, no CUDA device) or failed (no python3, no
 * script), never fatal. */
void bench_run_baselines(bench_ctx *b, const char *tools_dir, int topk,
                         int attn);

/* Free-form note printed under the report (and in the JSON). */
void bench_note(bench_ctx *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The report: a table on `out`, or with json = 1 one JSON object. */
void bench_report(bench_ctx *b, FILE *out, int json);

#endif /* KDT_BENCH_SUITE_H */
