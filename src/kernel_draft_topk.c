/*
 * kernel_draft_topk.c: the draft_topk kernel's registry definition and its
 * launch function kdtree_draft_topk() (specs/kernels.md §1).
 */
#include "config.h"

#include <stdint.h>

#include "error.h"
#include "kdt_params.h"
#include "kdtree.h"
#include "kernels.h"
#include "runtime.h"
#include "validate.h"

/* Threads per block (one block per row): THREADS in draft_topk.cu. */
#define DT_THREADS 512
/* Dynamic shared memory per block: SMEM_BYTES in draft_topk.cu (its
 * candidate buffer, 4096 keys, and its 4096-bin digit histogram); two
 * blocks fit an SM. */
#define DT_SMEM 49408

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

static const char *const dt_headers[] = {"kdt_params.h", NULL};
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
            {"V", 1, 1 << 24, NULL},
            /* Kept per row (with the rule K <= V). */
            {"K", 1, 1024, NULL},
            /* Logit type: kdtree_dtype. */
            {"DTYPE", 0, 1, dt_dtype_names},
        },
    .check = dt_check,
    .default_shape = "V=163840,K=64,DTYPE=bf16",
};

KDT_EXPORT int32_t
kdtree_draft_topk(kdtree_runtime *rt, uint64_t lp, uint64_t ids,
                  uint64_t logits, int32_t dtype, int32_t n_rows,
                  int32_t vocab, int32_t k, void *stream)
{
    static const char fn[] = "kdtree_draft_topk";
    int st;
    kdt_clear_error();
    if ((st = kdt_check_runtime(rt, fn)) ||
        (st = kdt_check_ptr(fn, "lp", lp, 4)) ||
        (st = kdt_check_ptr(fn, "ids", ids, 4)) ||
        (st = kdt_check_arg(fn, "dtype", dtype, KDTREE_DTYPE_F32,
                            KDTREE_DTYPE_BF16)) ||
        /* Element alignment is enough: the kernel finds each row's first
         * 16-byte boundary itself. */
        (st = kdt_check_ptr(fn, "logits", logits,
                            dtype == KDTREE_DTYPE_BF16 ? 2 : 4)) ||
        (st = kdt_check_arg(fn, "n_rows", n_rows, 1, INT32_MAX)))
        return st;
    int64_t vals[3] = {vocab, k, dtype};
    if ((st = kdt_kernel_check(KDT_KERNEL_DRAFT_TOPK, vals)))
        return st;
    kdt_loaded *m = kdt_runtime_find(rt, KDT_KERNEL_DRAFT_TOPK, vals);
    if (!m) {
        st = kdt_runtime_get(&m, rt, KDT_KERNEL_DRAFT_TOPK, vals);
        if (st)
            return st;
    }
    if (m->max_dynamic_smem < DT_SMEM)
        return kdt_fail(KDTREE_ERROR_SHAPE,
                        "%s: needs %d bytes of shared memory per block; this "
                        "device allows %d",
                        fn, DT_SMEM, m->max_dynamic_smem);
    kdt_draft_topk_params p = {
        .logits = (const void *)(uintptr_t)logits,
        .lp = (float *)(uintptr_t)lp,
        .ids = (int32_t *)(uintptr_t)ids,
        .n_rows = n_rows,
    };
    return kdt_launch(rt, m->fn[0], (unsigned)n_rows, 1, 1, DT_THREADS,
                      DT_SMEM, stream, &p);
}
