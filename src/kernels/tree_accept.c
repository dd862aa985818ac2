/*
 * kernels/tree_accept.c: the tree_accept kernel's registry definition and
 * its launch function kdtree_tree_accept() (docs/contract.md §4).
 */
#include "config.h"

#include <stdint.h>

#include "base/error.h"
#include "kdt_limits.h"
#include "kdt_params.h"
#include "kdt_tree_accept_plan.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "base/validate.h"

static const char *const ta_headers[] = {"kdt_params.h", "kdt_limits.h",
                                         "kdt_math.cuh",
                                         "kdt_tree_accept_plan.h", NULL};
static const char *const ta_functions[] = {"kdt_tree_accept", NULL};

const kdt_kernel_def kdt_def_tree_accept = {
    .name = "tree_accept",
    .source = "tree_accept.cu",
    .headers = ta_headers,
    .functions = ta_functions,
    .n_consts = 2,
    .consts =
        {
            /* Tree rows per request, root included (kdtree_max_qlen()). */
            {"N_MAX", 1, KDT_LIMIT_N_MAX, NULL},
            /* Draft depth: a path holds at most L + 1 rows. */
            {"L", 1, KDT_LIMIT_L, NULL},
        },
    .check = NULL,
    .default_shape = "N_MAX=65,L=15",
    .min_arch = 0, /* compiles for sm_75, NVRTC 13's oldest */
};

KDT_EXPORT int32_t
kdtree_tree_accept(kdtree_runtime *rt, const kdtree_accept *acc,
                   const kdtree_tree *tree, uint64_t target,
                   const kdtree_requests *req, void *stream)
{
    static const char fn[] = "kdtree_tree_accept";
    int st;
    kdt_clear_error();
    if ((st = kdt_check_runtime(rt, fn)) ||
        (st = kdt_check_host(fn, "acc", acc)) ||
        (st = kdt_check_ptr(fn, "acc->accept_len", acc->accept_len, 4)) ||
        (st = kdt_check_ptr(fn, "acc->accept_idx", acc->accept_idx, 4)) ||
        (st = kdt_check_ptr(fn, "acc->accept_token", acc->accept_token,
                            4)) ||
        (st = kdt_check_ptr(fn, "acc->bonus", acc->bonus, 4)) ||
        (st = kdt_check_tree(fn, tree, KDT_TREE_LINKS)) ||
        (st = kdt_check_ptr(fn, "target", target, 4)) ||
        (st = kdt_check_requests(fn, req, tree->n_requests)) ||
        (st = kdt_check_opt_ptr(fn, "req->max_accept", req->max_accept, 4)))
        return st;
    if (acc->n_requests != tree->n_requests)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: acc->n_requests = %d but tree->n_requests = %d",
                        fn, acc->n_requests, tree->n_requests);
    int64_t vals[2] = {tree->n_max, acc->depth};
    if ((st = kdt_kernel_check(KDT_KERNEL_TREE_ACCEPT, vals)))
        return st;
    kdt_loaded *m;
    if ((st = kdt_runtime_ready(&m, rt, fn, KDT_KERNEL_TREE_ACCEPT, vals, 0,
                                KDTREE_ERROR_SHAPE)))
        return st;
    kdt_tree_accept_params p = {
        .token = (const int32_t *)(uintptr_t)tree->token,
        .first_child = (const int32_t *)(uintptr_t)tree->first_child,
        .next_sibling = (const int32_t *)(uintptr_t)tree->next_sibling,
        .n_nodes = (const int32_t *)(uintptr_t)tree->n_nodes,
        .target = (const int32_t *)(uintptr_t)target,
        .max_accept = (const int32_t *)(uintptr_t)req->max_accept,
        .accept_len = (int32_t *)(uintptr_t)acc->accept_len,
        .accept_idx = (int32_t *)(uintptr_t)acc->accept_idx,
        .accept_token = (int32_t *)(uintptr_t)acc->accept_token,
        .bonus = (int32_t *)(uintptr_t)acc->bonus,
        .n_requests = tree->n_requests,
    };
    /* a thread a request */
    const kdt_launch_config c = {
        .grid = {(unsigned)((tree->n_requests + KDT_TA_THREADS - 1) /
                            KDT_TA_THREADS),
                 1, 1},
        .block = KDT_TA_THREADS,
        .stream = stream,
    };
    return kdt_launch(rt, m->fn[0], &c, &p);
}
