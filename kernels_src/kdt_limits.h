/*
 * kdt_limits.h: the largest shapes the kernels are built for.  The host C
 * compiler reads it (the registry's ranges, kdtree_max_qlen()) and so does
 * NVRTC (the kernels' static_asserts), so a limit is written once and a
 * kernel that cannot hold it does not compile.  Plain macros: C and C++.
 *
 * KDT_CONSTEXPR is how the plan headers (kdt_*_plan.h) write a function
 * that the host calls at launch and a kernel evaluates at compile time:
 * constexpr (and __host__ __device__) under C++, nothing under C.
 */
#ifndef KDT_LIMITS_H
#define KDT_LIMITS_H

/* Rows of a request's tree, root included (the N_MAX of build_ddtree,
 * verify_attn and tree_accept; kdtree_max_qlen()): a budget of 1024 draft
 * nodes plus the root, 33 ancestor-mask words a row. */
#define KDT_LIMIT_N_MAX 1025
/* Draft depths (L of build_ddtree and tree_accept). */
#define KDT_LIMIT_L 1024
/* Kept per row (draft_topk's K), candidates per depth (build_ddtree's). */
#define KDT_LIMIT_K 1024
/* Vocabulary (draft_topk's V): a logit's id fits 24 bits. */
#define KDT_LIMIT_V (1 << 24)
/* build_ddtree's L * K: the request's log-probs (64 KiB of f32) are kept
 * in shared memory. */
#define KDT_LIMIT_LK 16384

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KDT_CONSTEXPR __host__ __device__ constexpr
#elif defined(__cplusplus)
#define KDT_CONSTEXPR constexpr
#else
#define KDT_CONSTEXPR
#endif

#endif /* KDT_LIMITS_H */
