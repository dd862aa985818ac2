/*
 * kernels/draft_topk.c: the draft_topk kernel's registry definition and its
 * launch function kdtree_draft_topk() (docs/contract.md §1).
 */
#include "config.h"

#include <stdint.h>

#include "base/error.h"
#include "kdt_draft_topk_plan.h"
#include "kdt_limits.h"
#include "kdt_params.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "base/validate.h"

static int
dt_check(const int64_t *vals)
{
    if (vals[1] > vals[0])
        return kdt_fail(KDTREE_ERROR_SHAPE,
                        "draft_topk: constant K = %lld exceeds V = %lld "
                        "(the rule is K <= V)",
                        (long long)vals[1], (long long)vals[0]);
    return KDTREE_OK;
}

static const char *const dt_headers[] = {
    "kdt_params.h",          "kdt_limits.h",          "kdt_math.cuh",
    "kdt_draft_topk_plan.h", "draft_topk_keys.cuh",   "draft_topk_pass1.cuh",
    "draft_topk_select.cuh", "draft_topk_merge.cuh",  NULL};
static const char *const dt_functions[] = {"kdt_draft_topk", NULL};
static const char *const dt_dtype_names[] = {"f32", "bf16", NULL};

const kdt_kernel_def kdt_def_draft_topk = {
    .name = "draft_topk",
    .source = "draft_topk.cu",
    .headers = dt_headers,
    .functions = dt_functions,
    .n_consts = 3,
    .consts =
        {
            /* Vocabulary: logits per row. */
            {"V", 1, KDT_LIMIT_V, NULL},
            /* Kept per row (with the rule K <= V). */
            {"K", 1, KDT_LIMIT_K, NULL},
            /* Logit type: kdtree_dtype. */
            {"DTYPE", 0, 1, dt_dtype_names},
        },
    .check = dt_check,
    .default_shape = "V=163840,K=64,DTYPE=bf16",
    .min_arch = 90, /* thread-block clusters */
};

/* Blocks per row on this device (kdt_dt_split). */
static unsigned
dt_split(const kdtree_runtime *rt, int32_t n_rows, int32_t vocab, int32_t k)
{
    return (unsigned)kdt_dt_split(rt->max_cluster, rt->sm_count, n_rows,
                                  vocab, k);
}

KDT_EXPORT int32_t
kdtree_draft_topk(kdtree_runtime *rt, const kdtree_draft *draft,
                  uint64_t logits, int32_t dtype, int32_t vocab, void *stream)
{
    static const char fn[] = "kdtree_draft_topk";
    int st;
    kdt_clear_error();
    if ((st = kdt_check_runtime(rt, fn)) ||
        (st = kdt_check_host(fn, "draft", draft)) ||
        (st = kdt_check_ptr(fn, "draft->lp", draft->lp, 4)) ||
        (st = kdt_check_ptr(fn, "draft->ids", draft->ids, 4)) ||
        (st = kdt_check_arg(fn, "draft->n_requests", draft->n_requests, 1,
                            INT32_MAX)) ||
        (st = kdt_check_arg(fn, "draft->depth", draft->depth, 1,
                            INT32_MAX)) ||
        (st = kdt_check_arg(fn, "dtype", dtype, KDTREE_DTYPE_F32,
                            KDTREE_DTYPE_BF16)) ||
        /* Element alignment is enough: the kernel finds each row's first
         * 16-byte boundary itself. */
        (st = kdt_check_ptr(fn, "logits", logits,
                            dtype == KDTREE_DTYPE_BF16 ? 2 : 4)))
        return st;
    int64_t rows = (int64_t)draft->n_requests * draft->depth;
    if (rows > INT32_MAX)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: draft->n_requests * draft->depth = %lld rows; "
                        "at most %d",
                        fn, (long long)rows, INT32_MAX);
    int64_t vals[3] = {vocab, draft->k, dtype};
    if ((st = kdt_kernel_check(KDT_KERNEL_DRAFT_TOPK, vals)))
        return st;
    kdt_loaded *m;
    if ((st = kdt_runtime_ready(&m, rt, fn, KDT_KERNEL_DRAFT_TOPK, vals,
                                KDT_DT_SMEM, KDTREE_ERROR_SHAPE)))
        return st;
    kdt_draft_topk_params p = {
        .logits = (const void *)(uintptr_t)logits,
        .lp = (float *)(uintptr_t)draft->lp,
        .ids = (int32_t *)(uintptr_t)draft->ids,
        .n_rows = (int32_t)rows,
    };
    /* a row's blocks as one cluster (none when split is 1) */
    unsigned split = dt_split(rt, (int32_t)rows, vocab, draft->k);
    const kdt_launch_config c = {
        .grid = {(unsigned)rows * split, 1, 1},
        .block = KDT_DT_THREADS,
        .smem = KDT_DT_SMEM,
        .cluster = {split, 1, 1},
        .stream = stream,
    };
    return kdt_launch(rt, m->fn[0], &c, &p);
}
