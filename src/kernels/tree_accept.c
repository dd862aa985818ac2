/*
 * kernels/tree_accept.c: the tree_accept kernel's registry definition and
 * its launch function kdtree_tree_accept() (specs/kernels.md §4).
 */
#include "config.h"

#include <stdint.h>

#include "base/error.h"
#include "kdt_params.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "base/validate.h"

/* Requests per block: must match THREADS in kernels_src/tree_accept.cu. */
#define TA_THREADS 128

static const char *const ta_headers[] = {"kdt_params.h", NULL};
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
            {"N_MAX", 1, 1025, NULL},
            /* Draft depth: a path holds at most L + 1 rows. */
            {"L", 1, 1024, NULL},
        },
    .check = NULL,
    .default_shape = "N_MAX=65,L=15",
};

KDT_EXPORT int32_t
kdtree_tree_accept(kdtree_runtime *rt, uint64_t accept_len,
                   uint64_t accept_idx, uint64_t accept_token, uint64_t bonus,
                   uint64_t token, uint64_t first_child,
                   uint64_t next_sibling, uint64_t n_nodes, uint64_t target,
                   uint64_t max_accept, int32_t n_requests, int32_t L,
                   int32_t n_max, void *stream)
{
    static const char fn[] = "kdtree_tree_accept";
    int st;
    kdt_clear_error();
    if ((st = kdt_check_runtime(rt, fn)) ||
        (st = kdt_check_ptr(fn, "accept_len", accept_len, 4)) ||
        (st = kdt_check_ptr(fn, "accept_idx", accept_idx, 4)) ||
        (st = kdt_check_ptr(fn, "accept_token", accept_token, 4)) ||
        (st = kdt_check_ptr(fn, "bonus", bonus, 4)) ||
        (st = kdt_check_ptr(fn, "token", token, 4)) ||
        (st = kdt_check_ptr(fn, "first_child", first_child, 4)) ||
        (st = kdt_check_ptr(fn, "next_sibling", next_sibling, 4)) ||
        (st = kdt_check_ptr(fn, "n_nodes", n_nodes, 4)) ||
        (st = kdt_check_ptr(fn, "target", target, 4)) ||
        (st = kdt_check_opt_ptr(fn, "max_accept", max_accept, 4)) ||
        (st = kdt_check_arg(fn, "n_requests", n_requests, 1, INT32_MAX)))
        return st;
    int64_t vals[2] = {n_max, L};
    if ((st = kdt_kernel_check(KDT_KERNEL_TREE_ACCEPT, vals)))
        return st;
    kdt_loaded *m;
    /* The lock-free lookup first; a miss loads (or compiles) the shape. */
    if ((st = kdt_runtime_get(&m, rt, KDT_KERNEL_TREE_ACCEPT, vals)))
        return st;
    kdt_tree_accept_params p = {
        .token = (const int32_t *)(uintptr_t)token,
        .first_child = (const int32_t *)(uintptr_t)first_child,
        .next_sibling = (const int32_t *)(uintptr_t)next_sibling,
        .n_nodes = (const int32_t *)(uintptr_t)n_nodes,
        .target = (const int32_t *)(uintptr_t)target,
        .max_accept = (const int32_t *)(uintptr_t)max_accept,
        .accept_len = (int32_t *)(uintptr_t)accept_len,
        .accept_idx = (int32_t *)(uintptr_t)accept_idx,
        .accept_token = (int32_t *)(uintptr_t)accept_token,
        .bonus = (int32_t *)(uintptr_t)bonus,
        .n_requests = n_requests,
    };
    unsigned grid = (unsigned)((n_requests + TA_THREADS - 1) / TA_THREADS);
    return kdt_launch(rt, m->fn[0], grid, 1, 1, TA_THREADS, 0, stream, &p);
}
