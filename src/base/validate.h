/*
 * base/validate.h: argument checks shared by every public entry point.  Each
 * returns 0 or records which argument was wrong and why, and returns the
 * status, so an entry point reads as a list of checks.
 */
#ifndef KDT_VALIDATE_H
#define KDT_VALIDATE_H

#include <stdint.h>

#include "kdtree.h"

/* rt is not NULL. */
int kdt_check_runtime(const kdtree_runtime *rt, const char *fn);
/* A required device pointer: not 0, and a multiple of `align` bytes. */
int kdt_check_ptr(const char *fn, const char *name, uint64_t ptr,
                  unsigned align);
/* An optional device pointer: 0, or a multiple of `align` bytes. */
int kdt_check_opt_ptr(const char *fn, const char *name, uint64_t ptr,
                      unsigned align);
/* lo <= v <= hi, else KDTREE_ERROR_INVALID_ARGUMENT naming the argument. */
int kdt_check_arg(const char *fn, const char *name, int64_t v, int64_t lo,
                  int64_t hi);
/* A non-NULL host pointer (an out-parameter, a string). */
int kdt_check_host(const char *fn, const char *name, const void *p);

/* The fields of a kdtree_tree a kernel reads or writes (bits). */
enum kdt_tree_fields {
    KDT_TREE_N_NODES = 1 << 0,
    KDT_TREE_TOKEN = 1 << 1,
    KDT_TREE_PARENT = 1 << 2,
    KDT_TREE_DEPTH = 1 << 3,
    KDT_TREE_POSITION = 1 << 4,
    KDT_TREE_FIRST_CHILD = 1 << 5,
    KDT_TREE_NEXT_SIBLING = 1 << 6,
    KDT_TREE_SCORE = 1 << 7, /* optional wherever it is named */
    KDT_TREE_ANC_MASK = 1 << 8,
    /* build_ddtree writes all of them */
    KDT_TREE_ALL = (1 << 9) - 1,
    /* tree_accept walks the links */
    KDT_TREE_LINKS = KDT_TREE_N_NODES | KDT_TREE_TOKEN |
                     KDT_TREE_FIRST_CHILD | KDT_TREE_NEXT_SIBLING,
    /* verify_attn masks by the ancestors */
    KDT_TREE_MASK = KDT_TREE_N_NODES | KDT_TREE_ANC_MASK
};

/* tree is not NULL, tree->n_requests >= 1, and each field in `fields` is
 * a 4-byte aligned device pointer (score may be 0).  Names the field
 * ("tree->token") when one is wrong.  tree->n_max is the kernel's
 * constant N_MAX, checked against its range by kdt_kernel_check. */
int kdt_check_tree(const char *fn, const kdtree_tree *tree, unsigned fields);
/* req is not NULL and req->n_requests == n_requests (the tree's). */
int kdt_check_requests(const char *fn, const kdtree_requests *req,
                       int32_t n_requests);

#endif /* KDT_VALIDATE_H */
