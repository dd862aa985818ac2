/*
 * kdt_build_ddtree_plan.h: build_ddtree's block size and shared-memory
 * plan.  The launcher (src/kernels/build_ddtree.c) reads it for the
 * threads and bytes it launches with, the kernel (build_ddtree.cu) for its
 * offsets and capacities at compile time, so the two cannot disagree.
 * C and C++ (see KDT_CONSTEXPR in kdt_limits.h).
 *
 * Dynamic shared memory, in this order:
 *   float lp[L*KS]           the request's log-probs, NaN -> -inf: the
 *                            first KS ranks of each row
 *   float node_score[N_MAX]
 *   short parent, rank, depth, first_child, next_sibling, last_child
 *         [N_MAX] each
 *   then one region used by either path:
 *   loop:      float slot_score, slot_next_lp, slot_child_lp [N_MAX],
 *              int slot_dk [N_MAX]  (16 bytes a row)
 *   threshold: CAP elements of KDT_BD_ELEM_BYTES (prefixes scoring >= T,
 *              level by level): 8 bytes of scratch; float score; short
 *              node, first child's element, children in the set, parent
 *              element, rank, depth
 * The region holds CAP elements only where the shape leaves room for
 * CAP >= 2 (N_MAX - 1) under KDT_BD_SMEM_LIMIT; then the threshold path
 * exists (kdt_bd_fast).  KS is K where that leaves room; otherwise the
 * largest power of two (down to KDT_BD_KS_MIN) that does: L = 15, K =
 * N_MAX - 1 = 1024 keeps 512 ranks a row (30 of the 60 KiB), and the
 * kernel reads the ranks past KS from global memory.
 */
#ifndef KDT_BUILD_DDTREE_PLAN_H
#define KDT_BUILD_DDTREE_PLAN_H

#include "kdt_limits.h"
#include "kdt_params.h" /* the fixed-width types, under NVRTC too */

/* Threads per block (one block a request). */
#define KDT_BD_THREADS 256
/* The threshold path is used for budgets above this.  The loop costs
 * about 1.5 + 0.4 B us on an H200 (7.8 us at B = 16, 26.9 at B = 64); the
 * threshold path about 6-8 us for small trees (an enumeration round or
 * two of a few levels at ~0.5 us each, the ranking, the well-formedness
 * check): even at B = 16. */
#define KDT_BD_LOOP_MAX_B 16
/* Fewest ranks a row kept in shared memory when K does not fit. */
#define KDT_BD_KS_MIN 64
/* Bytes of a threshold-path element (the layout above). */
#define KDT_BD_ELEM_BYTES 24
/* sd_bound's histogram bins (one a thread: KDT_BD_THREADS of them). */
#define KDT_BD_SD_BINS 256
/* What every allowed shape must fit: sm_120's 99 KiB per block, less
 * 1 KiB for the kernel's static shared variables. */
#define KDT_BD_SMEM_LIMIT (99 * 1024 - 1024)

KDT_CONSTEXPR static inline int64_t
kdt_bd_pad16(int64_t x)
{
    return (x + 15) & ~(int64_t)15;
}

/* Offsets of node_score, of the six short arrays and of the region when
 * ks ranks of each row are kept. */
KDT_CONSTEXPR static inline int64_t
kdt_bd_off_node(int64_t L, int64_t ks)
{
    return kdt_bd_pad16(4 * L * ks);
}

KDT_CONSTEXPR static inline int64_t
kdt_bd_off_short(int64_t L, int64_t ks, int64_t n_max)
{
    return kdt_bd_off_node(L, ks) + kdt_bd_pad16(4 * n_max);
}

KDT_CONSTEXPR static inline int64_t
kdt_bd_off_region(int64_t L, int64_t ks, int64_t n_max)
{
    return kdt_bd_off_short(L, ks, n_max) + kdt_bd_pad16(12 * n_max);
}

/* The threshold path's element capacity there: the largest power of two
 * from 32 that fits, at most 16 N_MAX and 16384 (element indices are
 * int16); 0 when none does. */
KDT_CONSTEXPR static inline int64_t
kdt_bd_cap(int64_t L, int64_t ks, int64_t n_max)
{
    int64_t cap = 0;
    for (int64_t c = 32; c <= 16384 && c <= 16 * n_max; c *= 2)
        if (kdt_bd_off_region(L, ks, n_max) + KDT_BD_ELEM_BYTES * c <=
            KDT_BD_SMEM_LIMIT)
            cap = c;
    return cap;
}

/* Does the threshold path exist with cap elements?  The search wants a
 * window [B, CAP] at least twice as wide as B, and sd_bound's scratch
 * (KDT_BD_SD_BINS ints and L floats) must fit the 8 bytes an element of
 * scratch, with a bin a thread (CAP >= KDT_BD_THREADS); budgets up to
 * KDT_BD_LOOP_MAX_B take the loop anyway. */
KDT_CONSTEXPR static inline int
kdt_bd_fast(int64_t L, int64_t n_max, int64_t cap)
{
    return cap >= 2 * (n_max - 1) && cap >= KDT_BD_THREADS &&
           (KDT_BD_SD_BINS + L) * 4 <= 8 * cap &&
           n_max - 1 > KDT_BD_LOOP_MAX_B;
}

/* KS: K where the threshold path fits beside all ranks, else the largest
 * power of two below K, down to KDT_BD_KS_MIN, where it does; K when none
 * does (then only the loop runs, and all ranks fit). */
KDT_CONSTEXPR static inline int64_t
kdt_bd_ks(int64_t L, int64_t K, int64_t n_max)
{
    if (kdt_bd_fast(L, n_max, kdt_bd_cap(L, K, n_max)))
        return K;
    int64_t ks = 1;
    while (2 * ks < K)
        ks *= 2;
    for (; ks >= KDT_BD_KS_MIN; ks /= 2)
        if (kdt_bd_fast(L, n_max, kdt_bd_cap(L, ks, n_max)))
            return ks;
    return K;
}

/* The region's size: the loop's slots or the threshold path's elements,
 * whichever is larger. */
KDT_CONSTEXPR static inline int64_t
kdt_bd_region_bytes(int64_t L, int64_t K, int64_t n_max)
{
    const int64_t ks = kdt_bd_ks(L, K, n_max);
    const int64_t cap = kdt_bd_cap(L, ks, n_max);
    const int64_t loop = 16 * n_max;
    const int64_t fast =
        kdt_bd_fast(L, n_max, cap) ? cap * KDT_BD_ELEM_BYTES : 0;
    return fast > loop ? fast : loop;
}

/* The dynamic shared memory a block is launched with. */
KDT_CONSTEXPR static inline int64_t
kdt_bd_smem_bytes(int64_t L, int64_t K, int64_t n_max)
{
    return kdt_bd_off_region(L, kdt_bd_ks(L, K, n_max), n_max) +
           kdt_bd_region_bytes(L, K, n_max);
}

#endif /* KDT_BUILD_DDTREE_PLAN_H */
