/*
 * kernels/verify_attn_splits.h: how many ways verify_attn splits the KV
 * range (docs/contract.md §3, "Workspace and splits").  One rule, read by
 * the launcher (src/kernels/verify_attn.c) and by the standalone nvcc
 * harness (tools/dev/attn_harness.cu), so what the harness times as "the
 * library's choice" is the library's choice.  Plain C, header-only.
 *
 * The cost of S splits, in units of one KV tile of one block:
 *
 *   waves(S) * ceil(tiles / S)                  the attention kernel
 *   + row_cost * S * R * row_tiles * BM         the f32 partials written
 *                                               and read back by the merge
 *   + split_cost                                the merge launch (S > 1)
 *
 * where waves(S) = ceil(row_tiles * R * S / slots).  The two constants
 * were fitted (tools/dev/attn_splits_fit.py: least squares on relative
 * error, 5% rms) to a sweep of every split count at 32 shapes on the
 * H200 (tools/dev/attn_splits_sweep.sh; docs/performance.md, "Ideas
 * tried": the split rule, 190fbc8); what they say is that a partial row costs about 1/1160 of a
 * tile (wgmma body) and the merge about four tiles.  The waves-only rule
 * before them split a 17-row-tile, 4k-token shape 15 ways (2 waves and
 * 16.3k partial rows) where 6 or 7 ways is 1.36x
 * faster.  The fewest splits within 2% of the cheapest win (fewer splits,
 * less workspace).  kdt_va_pick_cluster then says whether, on the wgmma
 * body, they run as one cluster a row tile instead.
 */
#ifndef KDT_VERIFY_ATTN_SPLITS_H
#define KDT_VERIFY_ATTN_SPLITS_H

#include <stdint.h>

#include "kdt_attn_tiles.h"

/* The cluster sizes kdt_va_pick_cluster weighs step by this many blocks
 * (2, 4, 6, 8): even sizes only (why, below); the launcher asks the
 * device about these sizes alone. */
#define KDT_VA_CLUSTER_STEP 2

typedef struct kdt_va_split_costs {
    int bm, bn;          /* folded rows a block, tokens a KV tile */
    int min_tiles;       /* KV tiles a split covers at least */
    double row_cost;     /* a partial row written and merged, in tiles */
    double split_cost;   /* the merge kernel's launch, in tiles */
    double cluster_cost; /* the in-cluster merge, in tiles; 0: the body
                          * has none */
} kdt_va_split_costs;

/* The wgmma body (sm_90a): 64 x 64 tiles; a split reloads the 72 KB Q
 * tile, so at least 4 tiles (256 tokens) a split. */
static const kdt_va_split_costs kdt_va_costs_wgmma = {
    KDT_ATTN_WG_BM, KDT_ATTN_WG_BN, 4, 8.6e-4, 4.3, 6.0};
/* The mma.sync body: 64 rows x 32 tokens; at least 8 tiles a split. */
static const kdt_va_split_costs kdt_va_costs_mma = {
    KDT_ATTN_BM, KDT_ATTN_BN, 8, 6.6e-4, 3.8, 0};

/* The model's cost of S splits through the workspace (above). */
static inline double
kdt_va_split_cost(const kdt_va_split_costs *c, int64_t R, int64_t row_tiles,
                  int64_t tiles, int64_t slots, int64_t s)
{
    const int64_t waves = (row_tiles * R * s + slots - 1) / slots;
    double cost = (double)waves * (double)((tiles + s - 1) / s);
    if (s > 1)
        cost += c->row_cost * (double)(s * R * row_tiles * c->bm) +
                c->split_cost;
    return cost;
}

/* S in 1..KDT_ATTN_MAX_SPLITS for R requests of n_max * H folded rows, a
 * cache of `cap` tokens (max_pages * page_size: never the device-side
 * past_len, so one workspace size serves every round), on `slots`
 * resident blocks (SMs x blocks an SM). */
static inline int
kdt_va_pick_splits(const kdt_va_split_costs *c, int64_t R, int64_t n_max,
                   int64_t H, int64_t cap, int64_t slots)
{
    const int64_t row_tiles = (n_max * H + c->bm - 1) / c->bm;
    const int64_t tiles = (cap + c->bn - 1) / c->bn;
    int64_t smax = tiles / c->min_tiles;
    if (smax > KDT_ATTN_MAX_SPLITS)
        smax = KDT_ATTN_MAX_SPLITS;
    if (smax < 1)
        smax = 1;
    if (slots < 1)
        slots = 1;
    double cost[KDT_ATTN_MAX_SPLITS + 1], best = 0;
    for (int64_t s = 1; s <= smax; s++) {
        cost[s] = kdt_va_split_cost(c, R, row_tiles, tiles, slots, s);
        if (s == 1 || cost[s] < best)
            best = cost[s];
    }
    int pick = 1;
    while (cost[pick] > best * 1.02) /* the fewest splits near the best */
        pick++;
    return pick;
}

/* Whether the S splits kdt_va_pick_splits chose run instead as one
 * cluster of C blocks a row tile, merged there (no partials through
 * global memory, no merge kernel): C, or 1 for the workspace path.  The
 * cluster costs ceil(tiles / C) + cluster_cost, against the workspace's
 * cost of S; C is a multiple of KDT_VA_CLUSTER_STEP up to max_cluster,
 * at least min_tiles tiles a split, and the whole grid one wave: its
 * row_tiles * R clusters at most fit[C] (fit has max_cluster + 1
 * entries; only those multiples are read), the clusters of C blocks the
 * device runs at once (more waves of clusters were not modelled, and
 * measured slower).  fit[] comes from the device
 * (cuOccupancyMaxActiveClusters), because a cluster's blocks share a GPC
 * and a GPC's SMs need not divide by C: the H200 runs 66, 30, 17 and 15
 * clusters of 2, 4, 6 and 8 at once, where 132 SMs would hold 66, 33, 22
 * and 16 (33 clusters of 4 ran as two waves: 0.52-0.62x).  The cheapest
 * C wins, the smallest on a tie.  cluster_cost was read off the H200's
 * comparisons (docs/performance.md, "Ideas tried": the cluster merge,
 * 5fdbb91, and cluster sizes, 94014bd), which it
 * orders right: 9 row tiles at 4k, 8 clustered against 10 through the
 * workspace, 1.11x; 65 row tiles at 4k, 2 ways either way, 1.06-1.09x;
 * 17 row tiles at 4k, 4 clustered against 7, 0.92x, and 6 clustered
 * against 6, 1.08-1.10x; 9 row tiles at 32k, 8 against 14, 0.70x.  Odd
 * sizes are left out: the one measured, 3 clustered against 4 splits at
 * 33 row tiles and 4k, ran 0.87x where this cost puts them level. */
static inline int
kdt_va_pick_cluster(const kdt_va_split_costs *c, int splits, int64_t R,
                    int64_t n_max, int64_t H, int64_t cap, int64_t slots,
                    const int64_t *fit, int max_cluster)
{
    if (c->cluster_cost <= 0 || splits <= 1)
        return 1;
    const int64_t row_tiles = (n_max * H + c->bm - 1) / c->bm;
    const int64_t tiles = (cap + c->bn - 1) / c->bn;
    double best = kdt_va_split_cost(c, R, row_tiles, tiles,
                                    slots < 1 ? 1 : slots, splits);
    int pick = 1;
    for (int64_t n = KDT_VA_CLUSTER_STEP; n <= max_cluster;
         n += KDT_VA_CLUSTER_STEP) {
        const double cost = (double)((tiles + n - 1) / n) + c->cluster_cost;
        if (n * c->min_tiles <= tiles && row_tiles * R <= fit[n] &&
            cost < best) {
            best = cost;
            pick = (int)n;
        }
    }
    return pick;
}

#endif /* KDT_VERIFY_ATTN_SPLITS_H */
