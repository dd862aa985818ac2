/*
 * base/validate.c: the argument checks every public entry point shares.
 */
#include "config.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "base/error.h"
#include "base/validate.h"

int
kdt_check_runtime(const kdtree_runtime *rt, const char *fn)
{
    if (!rt)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: rt is NULL (create one with "
                        "kdtree_runtime_create)",
                        fn);
    return KDTREE_OK;
}

int
kdt_check_ptr(const char *fn, const char *name, uint64_t ptr, unsigned align)
{
    if (ptr == 0)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: %s is 0 (a device pointer is required)", fn,
                        name);
    return kdt_check_opt_ptr(fn, name, ptr, align);
}

int
kdt_check_opt_ptr(const char *fn, const char *name, uint64_t ptr,
                  unsigned align)
{
    if (align > 1 && ptr % align != 0)
        return kdt_fail(KDTREE_ERROR_MISALIGNED,
                        "%s: %s = 0x%" PRIx64
                        " is not aligned to %u bytes",
                        fn, name, ptr, align);
    return KDTREE_OK;
}

int
kdt_check_arg(const char *fn, const char *name, int64_t v, int64_t lo,
              int64_t hi)
{
    if (v < lo || v > hi)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: %s = %" PRId64 " is outside %" PRId64
                        "..%" PRId64,
                        fn, name, v, lo, hi);
    return KDTREE_OK;
}

int
kdt_check_host(const char *fn, const char *name, const void *p)
{
    if (!p)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                        name);
    return KDTREE_OK;
}

int
kdt_check_tree(const char *fn, const kdtree_tree *tree, unsigned fields)
{
    int st;
    if ((st = kdt_check_host(fn, "tree", tree)) ||
        (st = kdt_check_arg(fn, "tree->n_requests", tree->n_requests, 1,
                            INT32_MAX)))
        return st;
    static const struct {
        unsigned bit;
        const char *name;
        size_t offset;
    } ptrs[] = {
        {KDT_TREE_N_NODES, "tree->n_nodes", offsetof(kdtree_tree, n_nodes)},
        {KDT_TREE_TOKEN, "tree->token", offsetof(kdtree_tree, token)},
        {KDT_TREE_PARENT, "tree->parent", offsetof(kdtree_tree, parent)},
        {KDT_TREE_DEPTH, "tree->depth", offsetof(kdtree_tree, depth)},
        {KDT_TREE_POSITION, "tree->position",
         offsetof(kdtree_tree, position)},
        {KDT_TREE_FIRST_CHILD, "tree->first_child",
         offsetof(kdtree_tree, first_child)},
        {KDT_TREE_NEXT_SIBLING, "tree->next_sibling",
         offsetof(kdtree_tree, next_sibling)},
        {KDT_TREE_SCORE, "tree->score", offsetof(kdtree_tree, score)},
        {KDT_TREE_ANC_MASK, "tree->anc_mask",
         offsetof(kdtree_tree, anc_mask)},
    };
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) {
        if (!(fields & ptrs[i].bit))
            continue;
        uint64_t v;
        memcpy(&v, (const char *)tree + ptrs[i].offset, sizeof v);
        st = ptrs[i].bit == KDT_TREE_SCORE
                 ? kdt_check_opt_ptr(fn, ptrs[i].name, v, 4)
                 : kdt_check_ptr(fn, ptrs[i].name, v, 4);
        if (st)
            return st;
    }
    return KDTREE_OK;
}

int
kdt_check_requests(const char *fn, const kdtree_requests *req,
                   int32_t n_requests)
{
    int st = kdt_check_host(fn, "req", req);
    if (st)
        return st;
    if (req->n_requests != n_requests)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: req->n_requests = %d but tree->n_requests = %d",
                        fn, req->n_requests, n_requests);
    return KDTREE_OK;
}
