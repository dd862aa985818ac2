/*
 * ref/build_ddtree.h: the CPU reference of build_ddtree
 * (docs/contract.md §2).  Plain C, written to be obviously right rather
 * than fast; the GPU suite compares the kernel against it bit for bit on
 * every output buffer.  ref_build_ddtree_one() is also the bench's CPU
 * baseline: a plain binary heap, O(B log B), no allocation.
 *
 * Where the spec is silent, the kernel and this reference agree: NaN
 * log-probs count as -inf, and so does a score that comes out NaN (only
 * +inf + -inf can); device-side arguments are clamped, never trusted:
 * budget to [0, N_MAX-1], depth_limit to [1, L].  Padded rows (past
 * n_nodes) get score -inf and position = past_len.
 */
#ifndef KDT_REF_BUILD_DDTREE_H
#define KDT_REF_BUILD_DDTREE_H

#include <stdint.h>

#include "kdt_limits.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest N_MAX the reference handles: the kernel's limit. */
#define REF_N_MAX_LIMIT KDT_LIMIT_N_MAX

/* One request.  lp, ids: this request's [L][K]; outputs: this request's
 * rows ([N_MAX], anc_mask [N_MAX][W]); score may be NULL.  Returns
 * n_nodes. */
int ref_build_ddtree_one(int32_t *token, int32_t *parent, int32_t *depth,
                         int32_t *position, int32_t *first_child,
                         int32_t *next_sibling, float *score,
                         uint32_t *anc_mask, const float *lp,
                         const int32_t *ids, int budget, int depth_limit,
                         int root_token, int past_len, int L, int K,
                         int N_MAX);

/* A batch, with the public API's layout (depth_limit, past_len and score
 * may be NULL). */
void ref_build_ddtree(int32_t *n_nodes, int32_t *token, int32_t *parent,
                      int32_t *depth, int32_t *position,
                      int32_t *first_child, int32_t *next_sibling,
                      float *score, uint32_t *anc_mask, const float *lp,
                      const int32_t *ids, const int32_t *budget,
                      const int32_t *depth_limit, const int32_t *root_token,
                      const int32_t *past_len, int R, int L, int K,
                      int N_MAX);

#ifdef __cplusplus
}
#endif

#endif /* KDT_REF_BUILD_DDTREE_H */
