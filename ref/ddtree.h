/*
 * ref/ddtree.h: CPU references for draft_topk, build_ddtree and
 * tree_accept (docs/contract.md §1, §2, §4).  Plain C, written to be
 * obviously right rather than fast; the GPU suites compare the kernels
 * against them bit for bit (draft_topk's log-probs within a tolerance, its
 * ids exactly).  ref_build_ddtree_one() is also the bench's CPU baseline: a
 * plain binary heap, O(B log B), no allocation.
 *
 * Conventions the kernels share with these references where the spec is
 * silent:
 *  - NaN logits / log-probs count as -inf; a score that comes out NaN
 *    (only +inf + -inf can) also counts as -inf.
 *  - draft_topk: a row whose maximum is -inf gets lp = -inf throughout;
 *    -0 and +0 are the same logit.  +inf logits are outside the contract
 *    (the log-probs are NaN; the ids still follow the order).
 *  - build_ddtree: device-side arguments are clamped, never trusted:
 *    budget to [0, N_MAX-1], depth_limit to [1, L].  Padded rows (past
 *    n_nodes) get score -inf and position = past_len.
 *  - tree_accept: n_nodes is clamped to [1, N_MAX], the cap max_accept to
 *    [1, L+1]; a link that does not point forward inside [0, n_nodes) ends
 *    the walk or the sibling scan (build_ddtree's links always do).
 */
#ifndef KDT_REF_DDTREE_H
#define KDT_REF_DDTREE_H

#include <stdint.h>

#include "kdt_limits.h"

/* The largest N_MAX the references handle: the kernels' limit. */
#define REF_N_MAX_LIMIT KDT_LIMIT_N_MAX

/* bf16 <-> f32: bf16 is the upper half of an f32; to_bf16 rounds to
 * nearest even (NaN stays NaN). */
float ref_bf16_to_f32(uint16_t h);
uint16_t ref_f32_to_bf16(float f);

/* The order-preserving map of an f32 onto uint32 that the kernels use:
 * a < b  <=>  key(a) < key(b) for non-NaN values (-0 sorts just below +0,
 * which never matters: scores and logits are canonicalised first). */
uint32_t ref_f32_key(float f);

/* §1.  logits is float (dtype 0) or uint16_t bf16 (dtype 1),
 * [n_rows][V]; writes lp [n_rows][K] and ids [n_rows][K]. */
void ref_draft_topk(float *lp, int32_t *ids, const void *logits, int dtype,
                    int n_rows, int V, int K);

/* §2, one request.  lp, ids: this request's [L][K]; outputs: this
 * request's rows ([N_MAX], anc_mask [N_MAX][W]); score may be NULL.
 * Returns n_nodes. */
int ref_build_ddtree_one(int32_t *token, int32_t *parent, int32_t *depth,
                         int32_t *position, int32_t *first_child,
                         int32_t *next_sibling, float *score,
                         uint32_t *anc_mask, const float *lp,
                         const int32_t *ids, int budget, int depth_limit,
                         int root_token, int past_len, int L, int K,
                         int N_MAX);

/* §2, a batch, with the public API's layout (depth_limit, past_len and
 * score may be NULL). */
void ref_build_ddtree(int32_t *n_nodes, int32_t *token, int32_t *parent,
                      int32_t *depth, int32_t *position,
                      int32_t *first_child, int32_t *next_sibling,
                      float *score, uint32_t *anc_mask, const float *lp,
                      const int32_t *ids, const int32_t *budget,
                      const int32_t *depth_limit, const int32_t *root_token,
                      const int32_t *past_len, int R, int L, int K,
                      int N_MAX);

/* §4, a batch (max_accept may be NULL). */
void ref_tree_accept(int32_t *accept_len, int32_t *accept_idx,
                     int32_t *accept_token, int32_t *bonus,
                     const int32_t *token, const int32_t *first_child,
                     const int32_t *next_sibling, const int32_t *n_nodes,
                     const int32_t *target, const int32_t *max_accept, int R,
                     int L, int N_MAX);

#endif /* KDT_REF_DDTREE_H */
