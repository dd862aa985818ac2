/*
 * ref/tree_accept.h: the CPU reference of tree_accept (docs/contract.md
 * §4).  Plain C, written to be obviously right; the GPU suite compares the
 * kernel against it bit for bit.
 *
 * Device-side arguments are clamped, never trusted, as the kernel does:
 * n_nodes to [1, N_MAX], the cap max_accept to [1, L+1]; a link that does
 * not point forward inside [0, n_nodes) ends the walk or the sibling scan
 * (build_ddtree's links always do).
 */
#ifndef KDT_REF_TREE_ACCEPT_H
#define KDT_REF_TREE_ACCEPT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A batch of R requests (max_accept may be NULL). */
void ref_tree_accept(int32_t *accept_len, int32_t *accept_idx,
                     int32_t *accept_token, int32_t *bonus,
                     const int32_t *token, const int32_t *first_child,
                     const int32_t *next_sibling, const int32_t *n_nodes,
                     const int32_t *target, const int32_t *max_accept, int R,
                     int L, int N_MAX);

#ifdef __cplusplus
}
#endif

#endif /* KDT_REF_TREE_ACCEPT_H */
