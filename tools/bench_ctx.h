/*
 * bench_ctx.h: what the parts of kdtree-bench's core share and nobody
 * else sees: the context, the rows it collects, and the few calls one part
 * makes into another.  The parts, one job each (the split of zstd's
 * timefn/benchfn/benchzstd):
 *
 *   bench.c           the context: the GPU, device memory, failures, rows,
 *                     and the timings of bench.h through bench_time
 *   bench_time.c      timing: medians, the batch loop, CUDA events, host;
 *                     a leaf that sees none of this (bench_time.h)
 *   bench_load.c      the load path: cold, warm, hot, the bare compile
 *   bench_baseline.c  the torch baseline scripts
 *   bench_report.c    the table and the JSON
 *   bench_peaks.c     the limits of each device the report compares with
 *
 * The kernels' cases (bench_<kernel>.c) see only bench.h, the command line
 * (kdtree-bench.c) bench_suite.h.
 */
#ifndef KDT_BENCH_CTX_H
#define KDT_BENCH_CTX_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "bench_peaks.h"
#include "bench_suite.h"
#include "bench_time.h"
#include "cuda/driver.h"
#include "jit/cubin_info.h"
#include "jit/registry.h"

#define MAX_LOAD_ROWS 64
#define MAX_ROWS 512
#define MAX_OVERHEAD 16
#define MAX_BASE 2048
#define MAX_ROW_BASELINES 8
#define MAX_BASE_RUNS 8
#define MAX_CASES 16
#define MAX_NOTES 64

typedef struct load_row {
    char kernel[32];
    char arch[32];
    char shape[160];
    int gpu;           /* 1: through a runtime; 0: kdtree_compile() */
    /* Milliseconds, with how many runs and how far they spread. */
    bench_stat cold;   /* empty cache: NVRTC compile + publish (+ load) */
    double cold_nvrtc_ms; /* the compile's own NVRTC time (stats) */
    bench_stat bare;   /* kdt_kernel_compile() of the same source alone */
    bench_stat warm;   /* entry on disk: read, verify (+ load) */
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
    double mhz; /* the SM clock it was timed at; NAN: not said */
} row_baseline;

typedef struct kernel_row {
    char kernel[32];
    char config[96];
    /* element types (bench_row_types), "" where the kernel has none */
    char kv[8], math[8];
    double us, bytes, flops;
    double mhz; /* the SM clock over its timed batches; NAN: unknown */
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
    double mhz; /* the row's sm_mhz; NAN: not given */
    int matched; /* shown beside a kernel row */
} base_row;

/* One baseline script's run: "ok", "skipped: why" (exit 77: no torch, no
 * CUDA device) or "failed: why", so that a report without baseline
 * figures says why they are missing. */
typedef struct base_run {
    char script[48];
    char outcome[300];
    int rows;
} base_run;

typedef struct case_row {
    char name[32];
    char outcome[600]; /* "ok", or the failure */
} case_row;

struct bench_ctx {
    int quick;
    /* --only's texts (a case must contain each), none: every case */
    const char *only[BENCH_MAX_ONLY];
    int n_only;
    /* verify_attn's variants (bench_set_attn) */
    unsigned attn_kv, attn_math;
    int attn_pages[BENCH_MAX_PAGES], n_attn_pages;
    /* GPU state; rt is NULL in compile-only mode. */
    kdtree_runtime *rt;
    const kdt_driver *drv;
    CUstream stream;
    CUevent ev0, ev1;
    CUmodule spin_mod;
    CUfunction spin_fn; /* NULL: batches run without a head start */
    CUdeviceptr spin_clock; /* the spin's SM cycles and timer ns */
    double gpu_mhz; /* the last bench_gpu_us's clock, for its row */
    double gpu_busy_us; /* how long the last bench_gpu_us kept it busy */
    char device_name[128];
    char no_gpu_reason[512];
    /* What the report's percentages are of: --peak's, else the table's
     * entry for the device (bench_peaks.c); peak.source NULL: none. */
    bench_peak peak;
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
    int last_row_kept; /* the last bench_row() found room */
    overhead_row over[MAX_OVERHEAD];
    int n_over;
    base_row base[MAX_BASE];
    int n_base;
    base_run runs[MAX_BASE_RUNS];
    int n_runs;
    case_row cases[MAX_CASES];
    int n_cases;
    char *notes[MAX_NOTES];
    int n_notes;
};

/* ---- bench.c ------------------------------------------------------------ */

/* calloc that exits on no memory (a bench that cannot allocate its rows
 * has nothing to report). */
void *bench_xcalloc(size_t n, size_t size);
/* Leaves the running case (or the process, outside a case) with `msg`. */
void bench_abort(bench_ctx *b, const char *msg)
    __attribute__((noreturn));
/* Aborts the running case when a driver call failed. */
void bench_cu_check(bench_ctx *b, CUresult r, const char *call);

#endif /* KDT_BENCH_CTX_H */
