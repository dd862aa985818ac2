/*
 * kernels/build_ddtree.c: the build_ddtree kernel's registry definition and
 * its launch function kdtree_build_ddtree() (docs/contract.md §2).
 */
#include "config.h"

#include <stdint.h>

#include "base/error.h"
#include "kdt_build_ddtree_plan.h"
#include "kdt_limits.h"
#include "kdt_params.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "base/validate.h"

static int
bd_check(const int64_t *vals)
{
    if (vals[0] * vals[1] > KDT_LIMIT_LK)
        return kdt_fail(KDTREE_ERROR_SHAPE,
                        "build_ddtree: L*K = %lld exceeds %d (the "
                        "request's log-probs are kept in shared memory)",
                        (long long)(vals[0] * vals[1]), KDT_LIMIT_LK);
    return KDTREE_OK;
}

static const char *const bd_headers[] = {
    "kdt_params.h",          "kdt_limits.h",
    "kdt_math.cuh",          "kdt_build_ddtree_plan.h",
    "build_ddtree_rows.cuh", "build_ddtree_threshold.cuh",
    "build_ddtree_loop.cuh", NULL};
static const char *const bd_functions[] = {"kdt_build_ddtree", NULL};

const kdt_kernel_def kdt_def_build_ddtree = {
    .name = "build_ddtree",
    .source = "build_ddtree.cu",
    .headers = bd_headers,
    .functions = bd_functions,
    .n_consts = 3,
    .consts =
        {
            /* Draft depths (with the rule L*K <= KDT_LIMIT_LK). */
            {"L", 1, KDT_LIMIT_L, NULL},
            /* Candidates per depth. */
            {"K", 1, KDT_LIMIT_K, NULL},
            /* Rows per tree, root included: B_MAX + 1. */
            {"N_MAX", 1, KDT_LIMIT_N_MAX, NULL},
        },
    .check = bd_check,
    .default_shape = "L=15,K=64,N_MAX=65",
    .min_arch = 0, /* compiles for sm_75, NVRTC 13's oldest */
};

KDT_EXPORT int32_t
kdtree_build_ddtree(kdtree_runtime *rt, const kdtree_tree *tree,
                    const kdtree_draft *draft, const kdtree_requests *req,
                    void *stream)
{
    static const char fn[] = "kdtree_build_ddtree";
    int st;
    kdt_clear_error();
    if ((st = kdt_check_runtime(rt, fn)) ||
        (st = kdt_check_tree(fn, tree, KDT_TREE_ALL)) ||
        (st = kdt_check_host(fn, "draft", draft)) ||
        (st = kdt_check_ptr(fn, "draft->lp", draft->lp, 4)) ||
        (st = kdt_check_ptr(fn, "draft->ids", draft->ids, 4)) ||
        (st = kdt_check_requests(fn, req, tree->n_requests)) ||
        (st = kdt_check_ptr(fn, "req->budget", req->budget, 4)) ||
        (st = kdt_check_opt_ptr(fn, "req->depth_limit", req->depth_limit,
                                4)) ||
        (st = kdt_check_ptr(fn, "req->root_token", req->root_token, 4)) ||
        (st = kdt_check_opt_ptr(fn, "req->past_len", req->past_len, 4)))
        return st;
    if (draft->n_requests != tree->n_requests)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: draft->n_requests = %d but tree->n_requests = "
                        "%d",
                        fn, draft->n_requests, tree->n_requests);
    int32_t L = draft->depth, k = draft->k, n_max = tree->n_max;
    int64_t vals[3] = {L, k, n_max};
    if ((st = kdt_kernel_check(KDT_KERNEL_BUILD_DDTREE, vals)))
        return st;
    /* a block a request, its shared memory laid out by the plan */
    const kdt_launch_config c = {
        .grid = {(unsigned)tree->n_requests, 1, 1},
        .block = KDT_BD_THREADS,
        .smem = (unsigned)kdt_bd_smem_bytes(L, k, n_max),
        .stream = stream,
    };
    kdt_loaded *m;
    if ((st = kdt_runtime_ready(&m, rt, fn, KDT_KERNEL_BUILD_DDTREE, vals,
                                c.smem, KDTREE_ERROR_SHAPE)))
        return st;
    kdt_build_ddtree_params p = {
        .lp = (const float *)(uintptr_t)draft->lp,
        .ids = (const int32_t *)(uintptr_t)draft->ids,
        .budget = (const int32_t *)(uintptr_t)req->budget,
        .depth_limit = (const int32_t *)(uintptr_t)req->depth_limit,
        .root_token = (const int32_t *)(uintptr_t)req->root_token,
        .past_len = (const int32_t *)(uintptr_t)req->past_len,
        .n_nodes = (int32_t *)(uintptr_t)tree->n_nodes,
        .token = (int32_t *)(uintptr_t)tree->token,
        .parent = (int32_t *)(uintptr_t)tree->parent,
        .depth = (int32_t *)(uintptr_t)tree->depth,
        .position = (int32_t *)(uintptr_t)tree->position,
        .first_child = (int32_t *)(uintptr_t)tree->first_child,
        .next_sibling = (int32_t *)(uintptr_t)tree->next_sibling,
        .score = (float *)(uintptr_t)tree->score,
        .anc_mask = (uint32_t *)(uintptr_t)tree->anc_mask,
        .n_requests = tree->n_requests,
    };
    return kdt_launch(rt, m->fn[0], &c, &p);
}
