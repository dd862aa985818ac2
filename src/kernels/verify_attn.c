/*
 * kernels/verify_attn.c: the verify_attn kernel's registry definition, its
 * workspace size and its launch function kdtree_verify_attn()
 * (specs/kernels.md §3).
 *
 * The kernel (kernels_src/verify_attn.cu) runs one block per (row tile of
 * 64 folded node*head rows, KV split, request), with one of two bodies
 * (va_geometry below).  The split count is chosen
 * here, on the host, from the shape and the device alone, never from the
 * device-side past_len, so that one workspace size serves every round of a
 * shape and the launch reads nothing back from the GPU.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "kdt_attn_tiles.h"
#include "kdt_params.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "base/validate.h"

/* Test hook: when > 0, the split count every later call uses (tests force
 * the split and unsplit paths whatever the GPU).  0 = the rule below. */
int kdt_verify_attn_splits_override;

static const char *const va_headers[] = {"kdt_params.h", "kdt_attn_tiles.h",
                                         "verify_attn_wgmma.cuh",
                                         "kdt_mma.cuh", NULL};
static const char *const va_functions[] = {"kdt_verify_attn",
                                           "kdt_verify_attn_merge", NULL};

const kdt_kernel_def kdt_def_verify_attn = {
    .name = "verify_attn",
    .source = "verify_attn.cu",
    .headers = va_headers,
    .functions = va_functions,
    .n_consts = 3,
    .consts =
        {
            /* Query heads sharing the latent KV head (Kimi-K2: 64, or 8
             * per GPU at tensor-parallel 8). */
            {"H", 1, 128, NULL},
            /* Tokens per KV-cache page. */
            {"PAGE", 1, 256, NULL},
            /* Tree rows per request, root included (kdtree_max_qlen()). */
            {"N_MAX", 1, 1025, NULL},
        },
    .check = NULL,
    .default_shape = "H=8,PAGE=64,N_MAX=65",
};

/*
 * The two bodies of verify_attn.cu and their launch geometry: the wgmma
 * body wherever the runtime builds for sm_90a (Hopper), the mma.sync body
 * elsewhere (sm_120 and the rest).  The choice follows the runtime's
 * target, so the host and the compiled kernel always agree.
 */
typedef struct va_geom {
    int bm, bn;      /* folded rows per block, tokens per KV tile */
    int threads;
    int smem;        /* dynamic shared memory per block */
    int by_regs;     /* blocks an SM's registers hold */
    int min_tiles;   /* KV tiles a split covers at least */
} va_geom;

static va_geom
va_geometry(const kdtree_runtime *rt)
{
    const char *target = rt->target[0] ? rt->target : rt->arch;
    if (strcmp(target, "sm_90a") == 0)
        /* at least 4 tiles (256 tokens) a split: each split reloads the
         * 72 KB Q tile and writes a 128 KB partial O */
        return (va_geom){KDT_ATTN_WG_BM, KDT_ATTN_WG_BN, KDT_ATTN_WG_THREADS,
                         KDT_ATTN_WG_SMEM, 1, 4};
    /* at least 8 tiles (128 tokens) a split */
    return (va_geom){KDT_ATTN_BM, KDT_ATTN_BN, KDT_ATTN_THREADS,
                     KDT_ATTN_SMEM, 64 / KDT_ATTN_BM, 8};
}

/* Blocks of the attention kernel that one SM runs at a time: what the
 * registers allow and what the per-block opt-in limit of shared memory
 * says (one 95 KB mma.sync block on sm_120's 99 KB; one 225 KB wgmma
 * block on Hopper's 227 KB). */
static int
blocks_per_sm(const kdtree_runtime *rt, const va_geom *g)
{
    int by_smem = (rt->max_smem_optin + 1024) / (g->smem + 1024);
    int n = g->by_regs < by_smem ? g->by_regs : by_smem;
    return n > 0 ? n : 1;
}

/*
 * The KV split count S.  base = (row tiles) x (requests) blocks fill
 * base / (SMs x blocks per SM) of one wave; S splits make ceil(base * S /
 * slots) waves of 1/S the work each.  Take the fewest splits within 5% of
 * the best waves/S over 1..64 (each split costs a partial write and the
 * merge, so ties go to fewer), with at least min_tiles KV tiles per split
 * at the cache's capacity.  Depends only on the arguments and the device:
 * a workspace sized once fits every round.
 */
static int
va_splits(const kdtree_runtime *rt, int32_t R, int32_t H, int32_t n_max,
          int64_t cap)
{
    if (kdt_verify_attn_splits_override > 0)
        return kdt_verify_attn_splits_override;
    va_geom g = va_geometry(rt);
    int64_t base = ((int64_t)n_max * H + g.bm - 1) / g.bm * (int64_t)R;
    int64_t slots = (int64_t)(rt->sm_count > 0 ? rt->sm_count : 1) *
                    blocks_per_sm(rt, &g);
    int64_t cap_tiles = (cap + g.bn - 1) / g.bn;
    int64_t smax = cap_tiles / g.min_tiles;
    if (smax > KDT_ATTN_MAX_SPLITS)
        smax = KDT_ATTN_MAX_SPLITS;
    if (smax < 1)
        smax = 1;
    double cost[KDT_ATTN_MAX_SPLITS + 1], best = INFINITY;
    for (int s = 1; s <= smax; s++) {
        int64_t waves = (base * s + slots - 1) / slots;
        cost[s] = (double)waves / s;
        if (cost[s] < best)
            best = cost[s];
    }
    for (int s = 1; s <= smax; s++)
        if (cost[s] <= best * 1.05)
            return s;
    return 1;
}

static uint64_t
va_workspace(int splits, int32_t R, int32_t H, int32_t n_max)
{
    if (splits <= 1)
        return 0;
    /* partial O f32 [S][R][N_MAX*H][512], then partial LSE f32 [S][R][N_MAX*H] */
    return (uint64_t)splits * (uint64_t)R * (uint64_t)n_max * (uint64_t)H *
           (KDT_ATTN_D_V + 1) * 4u;
}

/* The checks both entry points share: R, the shape, the page count. */
static int
va_check_shape(const char *fn, int64_t *vals, int32_t n_requests,
               int32_t n_heads, int32_t n_max, int32_t page_size,
               int32_t max_pages)
{
    int st;
    /* gridDim.z holds the request: at most 65535 */
    if ((st = kdt_check_arg(fn, "n_requests", n_requests, 1, 65535)))
        return st;
    vals[0] = n_heads;
    vals[1] = page_size;
    vals[2] = n_max;
    if ((st = kdt_kernel_check(KDT_KERNEL_VERIFY_ATTN, vals)))
        return st;
    /* positions are int32 in the kernel */
    if ((st = kdt_check_arg(fn, "max_pages", max_pages, 1,
                            INT32_MAX / page_size)))
        return st;
    return 0;
}

KDT_EXPORT int32_t
kdtree_verify_attn_workspace_size(uint64_t *out_bytes, kdtree_runtime *rt,
                                  int32_t n_requests, int32_t n_heads,
                                  int32_t n_max, int32_t page_size,
                                  int32_t max_pages)
{
    static const char fn[] = "kdtree_verify_attn_workspace_size";
    int64_t vals[3];
    int st;
    kdt_clear_error();
    if ((st = kdt_check_host(fn, "out_bytes", out_bytes)) ||
        (st = kdt_check_runtime(rt, fn)) ||
        (st = va_check_shape(fn, vals, n_requests, n_heads, n_max, page_size,
                             max_pages)))
        return st;
    int splits = va_splits(rt, n_requests, n_heads, n_max,
                           (int64_t)max_pages * page_size);
    *out_bytes = va_workspace(splits, n_requests, n_heads, n_max);
    return KDTREE_OK;
}

KDT_EXPORT int32_t
kdtree_verify_attn(kdtree_runtime *rt, uint64_t o, uint64_t lse, uint64_t q,
                   uint64_t kv_cache, uint64_t block_table, uint64_t past_len,
                   uint64_t n_nodes, uint64_t anc_mask, uint64_t workspace,
                   uint64_t workspace_bytes, int32_t n_requests,
                   int32_t n_heads, int32_t n_max, int32_t page_size,
                   int32_t max_pages, float scale, void *stream)
{
    static const char fn[] = "kdtree_verify_attn";
    int64_t vals[3];
    int st;
    kdt_clear_error();
    /* q, kv_cache and o move in 16-byte pieces (cp.async, uint4 stores) */
    if ((st = kdt_check_runtime(rt, fn)) ||
        (st = kdt_check_ptr(fn, "o", o, 16)) ||
        (st = kdt_check_opt_ptr(fn, "lse", lse, 4)) ||
        (st = kdt_check_ptr(fn, "q", q, 16)) ||
        (st = kdt_check_ptr(fn, "kv_cache", kv_cache, 16)) ||
        (st = kdt_check_ptr(fn, "block_table", block_table, 4)) ||
        (st = kdt_check_ptr(fn, "past_len", past_len, 4)) ||
        (st = kdt_check_ptr(fn, "n_nodes", n_nodes, 4)) ||
        (st = kdt_check_ptr(fn, "anc_mask", anc_mask, 4)) ||
        (st = va_check_shape(fn, vals, n_requests, n_heads, n_max, page_size,
                             max_pages)))
        return st;
    if (!isfinite(scale))
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: scale must be finite (got %g)", fn,
                        (double)scale);
    int splits = va_splits(rt, n_requests, n_heads, n_max,
                           (int64_t)max_pages * page_size);
    uint64_t need = va_workspace(splits, n_requests, n_heads, n_max);
    if (need) {
        if ((st = kdt_check_ptr(fn, "workspace", workspace, 16)))
            return st;
        if (workspace_bytes < need)
            return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                            "%s: workspace_bytes is %llu, this shape needs "
                            "%llu (kdtree_verify_attn_workspace_size)",
                            fn, (unsigned long long)workspace_bytes,
                            (unsigned long long)need);
    }

    kdt_loaded *m;
    /* The lock-free lookup first; a miss loads (or compiles) the shape. */
    if ((st = kdt_runtime_get(&m, rt, KDT_KERNEL_VERIFY_ATTN, vals)))
        return st;
    va_geom g = va_geometry(rt);
    if (m->max_dynamic_smem < g.smem)
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s: the kernel needs %d bytes of shared memory per "
                        "block, this device allows %d", fn, g.smem,
                        m->max_dynamic_smem);
    kdt_verify_attn_params p = {
        .q = (const uint16_t *)(uintptr_t)q,
        .kv_cache = (const uint16_t *)(uintptr_t)kv_cache,
        .block_table = (const int32_t *)(uintptr_t)block_table,
        .past_len = (const int32_t *)(uintptr_t)past_len,
        .n_nodes = (const int32_t *)(uintptr_t)n_nodes,
        .anc_mask = (const uint32_t *)(uintptr_t)anc_mask,
        .o = (uint16_t *)(uintptr_t)o,
        .lse = (float *)(uintptr_t)lse,
        .workspace = need ? (float *)(uintptr_t)workspace : NULL,
        .n_requests = n_requests,
        .max_pages = max_pages,
        .num_splits = splits,
        .scale = scale,
    };
    int64_t rows = (int64_t)n_max * n_heads;
    unsigned tiles = (unsigned)((rows + g.bm - 1) / g.bm);
    st = kdt_launch(rt, m->fn[0], tiles, (unsigned)splits,
                    (unsigned)n_requests, (unsigned)g.threads,
                    (unsigned)g.smem, stream, &p);
    if (st || splits == 1)
        return st;
    /* the merge: a block per folded row */
    return kdt_launch(rt, m->fn[1], (unsigned)rows, (unsigned)n_requests, 1,
                      KDT_ATTN_MERGE_THREADS, 0, stream, &p);
}
