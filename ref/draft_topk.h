/*
 * ref/draft_topk.h: the CPU reference of draft_topk (docs/contract.md §1).
 * Plain C, written to be obviously right rather than fast; the GPU suite
 * compares the kernel against it (ids exactly, log-probs within a
 * tolerance), and the bench checks its rows with it.
 *
 * Where the spec is silent, the kernel and this reference agree: NaN
 * logits count as -inf; a row whose maximum is -inf gets lp = -inf
 * throughout; -0 and +0 are the same logit.  +inf logits are outside the
 * contract (the log-probs are NaN; the ids still follow the order).
 */
#ifndef KDT_REF_DRAFT_TOPK_H
#define KDT_REF_DRAFT_TOPK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* logits is float (dtype 0) or uint16_t bf16 (dtype 1), [n_rows][V];
 * writes lp [n_rows][K] and ids [n_rows][K]. */
void ref_draft_topk(float *lp, int32_t *ids, const void *logits, int dtype,
                    int n_rows, int V, int K);

#ifdef __cplusplus
}
#endif

#endif /* KDT_REF_DRAFT_TOPK_H */
