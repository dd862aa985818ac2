/*
 * kdt_draft_topk_plan.h: draft_topk's block size, shared memory and the
 * split of a row over a cluster.  The launcher (src/kernels/draft_topk.c)
 * launches with them and the kernel (draft_topk.cu) is built for them, so
 * the two cannot disagree.  C and C++ (see KDT_CONSTEXPR in kdt_limits.h).
 */
#ifndef KDT_DRAFT_TOPK_PLAN_H
#define KDT_DRAFT_TOPK_PLAN_H

#include "kdt_limits.h"
#include "kdt_params.h" /* the fixed-width types, under NVRTC too */

/* Threads per block. */
#define KDT_DT_THREADS 512
/* Blocks per row at most: the portable cluster size. */
#define KDT_DT_MAX_SPLIT 8
/* The candidate buffer, in 8-byte keys (a power of two); the merge
 * gathers every block's top K into it. */
#define KDT_DT_CAP 4096
/* Width of a key's digit: the digit histogram has 2^12 bins. */
#define KDT_DT_DIGIT_BITS 12
/* The shortest chunk worth a block of its own: two 512-thread steps of 8
 * logits (below that a block spends more on its set-up and sort than on
 * streaming). */
#define KDT_DT_MIN_CHUNK 8192
/* Dynamic shared memory per block: the candidate buffer, the digit
 * histogram and 256 bytes for the block's counters and reductions (the
 * kernel's topk_smem; it static_asserts the fit).  Two blocks fit an SM. */
#define KDT_DT_SMEM \
    (8 * KDT_DT_CAP + 4 * (1 << KDT_DT_DIGIT_BITS) + 256)

/* Blocks per row (the cluster size S): the largest power of two that
 * keeps one block per SM (few rows: a row spread over up to 8 SMs instead
 * of one), chunks of at least KDT_DT_MIN_CHUNK logits, and every block's
 * top in the merge buffer (S * K <= KDT_DT_CAP), on a device whose
 * clusters hold max_cluster blocks.  Many rows: 1, no cluster. */
KDT_CONSTEXPR static inline int64_t
kdt_dt_split(int64_t max_cluster, int64_t sm_count, int64_t n_rows,
             int64_t vocab, int64_t k)
{
    int64_t s = 1;
    while (s * 2 <= max_cluster && s * 2 <= KDT_DT_MAX_SPLIT &&
           n_rows * s * 2 <= sm_count && vocab / (s * 2) >= KDT_DT_MIN_CHUNK &&
           k * s * 2 <= KDT_DT_CAP)
        s *= 2;
    return s;
}

#endif /* KDT_DRAFT_TOPK_PLAN_H */
