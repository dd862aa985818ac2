/*
 * kernels/verify_attn.c: the verify_attn kernel's registry definition, its
 * workspace size and its launch function kdtree_verify_attn()
 * (docs/contract.md §3).
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
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kdt_attn_tiles.h"
#include "kdt_limits.h"
#include "kdt_params.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "base/validate.h"
#include "cuda/nvrtc.h"
#include "kernels/verify_attn_splits.h"

/* Test hook: when > 0, the split count every later call uses through the
 * workspace, when < 0, -S splits as one cluster where the body merges in
 * clusters (else through the workspace); tests force every path whatever
 * the GPU.  0 = the rules below. */
int kdt_verify_attn_splits_override;

static const char *const va_headers[] = {"kdt_params.h", "kdt_limits.h",
                                         "kdt_math.cuh", "kdt_attn_tiles.h",
                                         "verify_attn_mma.cuh",
                                         "verify_attn_mma_e4m3.cuh",
                                         "verify_attn_wgmma.cuh",
                                         "verify_attn_wgmma_ptx.cuh",
                                         "verify_attn_wgmma_e4m3.cuh",
                                         "kdt_mma.cuh", "kdt_fp8.cuh", NULL};
static const char *const va_functions[] = {"kdt_verify_attn",
                                           "kdt_verify_attn_merge", NULL};
/* KV: kdtree_kv_dtype; MATH: kdtree_attn_math (value i <-> name i) */
static const char *const va_type_names[] = {"bf16", "e4m3", NULL};

/* The constants in declaration order. */
enum { VA_H, VA_PAGE, VA_N_MAX, VA_KV, VA_MATH, VA_NCONST };

/* e4m3 arithmetic reads an e4m3 cache: the query side is quantized in
 * the kernel, and quantizing a bf16 cache there too would read it in
 * full precision to throw the precision away. */
static int
va_check_consts(const int64_t *vals)
{
    if (vals[VA_MATH] == KDTREE_ATTN_MATH_E4M3 &&
        vals[VA_KV] != KDTREE_KV_E4M3)
        return kdt_fail(KDTREE_ERROR_SHAPE,
                        "verify_attn: MATH=e4m3 needs KV=e4m3 (an FP8 "
                        "cache); a bf16 cache takes MATH=bf16");
    return KDTREE_OK;
}

/* FP8 conversions (cvt ... e4m3x2) and e4m3 mma.sync are sm_89's. */
static int
va_min_arch(const int64_t *vals)
{
    return vals[VA_KV] == KDTREE_KV_E4M3 ? 89 : 0;
}

const kdt_kernel_def kdt_def_verify_attn = {
    .name = "verify_attn",
    .source = "verify_attn.cu",
    .headers = va_headers,
    .functions = va_functions,
    .n_consts = VA_NCONST,
    .consts =
        {
            /* Query heads sharing the latent KV head (Kimi-K2: 64, or 8
             * per GPU at tensor-parallel 8). */
            [VA_H] = {"H", 1, 128, NULL},
            /* Tokens per KV-cache page. */
            [VA_PAGE] = {"PAGE", 1, 256, NULL},
            /* Tree rows per request, root included (kdtree_max_qlen()). */
            [VA_N_MAX] = {"N_MAX", 1, KDT_LIMIT_N_MAX, NULL},
            /* The cache's element type (kv->dtype). */
            [VA_KV] = {"KV", 0, 1, va_type_names, 1, KDTREE_KV_BF16},
            /* The tensor cores' operand type (attn->math). */
            [VA_MATH] = {"MATH", 0, 1, va_type_names, 1,
                         KDTREE_ATTN_MATH_BF16},
        },
    .check = va_check_consts,
    .default_shape = "H=8,PAGE=64,N_MAX=65",
    .min_arch = 80, /* bf16 mma, cp.async */
    .min_arch_of = va_min_arch,
};

/*
 * The two bodies of verify_attn.cu and their launch geometry: the wgmma
 * body wherever the runtime builds for sm_90a (Hopper), the mma.sync body
 * elsewhere (sm_120 and the rest).  The choice follows the runtime's
 * target, so the host and the compiled kernel always agree.
 */
typedef struct va_geom {
    int threads;
    int smem;        /* dynamic shared memory per block */
    int by_regs;     /* blocks an SM's registers hold */
    /* the tile shape (folded rows a block, tokens a KV tile) and the
     * split rule's constants */
    const kdt_va_split_costs *costs;
} va_geom;

static va_geom
va_geometry(const kdt_target *t, int32_t kv_dtype, int32_t math)
{
    /* sm_90a or compute_90a: where NVRTC defines the arch-specific
     * features of 9.0 that select the wgmma body (kdt_attn_tiles.h) */
    if (t->major == 9 && t->minor == 0 && t->suffix == 'a')
        return (va_geom){KDT_ATTN_WG_LAUNCH_THREADS(kv_dtype, math),
                         KDT_ATTN_WG_SMEM, 1, &kdt_va_costs_wgmma};
    /* one block an SM (8 warps of 255 registers fill the register file);
     * an e4m3 cache's ring holds more, smaller tiles */
    return (va_geom){KDT_ATTN_THREADS, KDT_ATTN_MMA_SMEM(kv_dtype), 1,
                     &kdt_va_costs_mma};
}

/* Blocks of the attention kernel that one SM runs at a time: what the
 * registers allow and what the per-block opt-in limit of shared memory
 * says (one 94 KB mma.sync block on sm_120's 99 KB; one 225 KB wgmma
 * block on Hopper's 227 KB). */
static int
blocks_per_sm(const kdtree_runtime *rt, const va_geom *g)
{
    int by_smem = (rt->max_smem_optin + 1024) / (g->smem + 1024);
    int n = g->by_regs < by_smem ? g->by_regs : by_smem;
    return n > 0 ? n : 1;
}

static int64_t
va_slots(const kdtree_runtime *rt, const va_geom *g)
{
    return (int64_t)(rt->sm_count > 0 ? rt->sm_count : 1) *
           blocks_per_sm(rt, g);
}

/* The KV split count S (kernels/verify_attn_splits.h): from the
 * arguments and the device only, so a workspace sized once fits every
 * round (the workspace is sized for S even when the splits run as a
 * cluster and leave it unused). */
static int
va_splits(const kdtree_runtime *rt, const va_geom *g, int32_t R, int32_t H,
          int32_t n_max, int64_t cap)
{
    if (kdt_verify_attn_splits_override)
        return abs(kdt_verify_attn_splits_override);
    return kdt_va_pick_splits(g->costs, R, n_max, H, cap, va_slots(rt, g));
}

/* Blocks a row tile's cluster holds (1: the splits, if any, go through
 * the workspace and the merge kernel), for the loaded kernel m: how many
 * clusters of each size fit at once comes from the device. */
static int
va_cluster(kdtree_runtime *rt, kdt_loaded *m, const va_geom *g, int splits,
           int32_t R, int32_t H, int32_t n_max, int64_t cap)
{
    if (kdt_verify_attn_splits_override < 0) {
        int ok = g->costs->cluster_cost > 0 && splits <= rt->max_cluster;
        return ok ? splits : 1;
    }
    if (kdt_verify_attn_splits_override > 0 || splits <= 1 ||
        g->costs->cluster_cost <= 0)
        return 1;
    /* the sizes the rule weighs, no others: each is a driver call at the
     * shape's first split launch */
    int64_t fit[KDT_MAX_CLUSTER + 1] = {0};
    for (int n = KDT_VA_CLUSTER_STEP; n <= rt->max_cluster;
         n += KDT_VA_CLUSTER_STEP)
        fit[n] = kdt_cluster_fit(rt, m, (unsigned)n, (unsigned)g->threads,
                                 (unsigned)g->smem);
    return kdt_va_pick_cluster(g->costs, splits, R, n_max, H, cap,
                               va_slots(rt, g), fit, rt->max_cluster);
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

/* The cache's type and scale and the arithmetic (kv->dtype, kv->scale,
 * attn->math), named as the user wrote them, before the constant check
 * would word them as numbers. */
static int
va_check_types(const char *fn, const kdtree_attn *attn,
               const kdtree_kv_cache *kv)
{
    if (kv->dtype != KDTREE_KV_BF16 && kv->dtype != KDTREE_KV_E4M3)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: kv->dtype = %d is not a KV cache type: "
                        "KDTREE_KV_BF16 (0) or KDTREE_KV_E4M3 (1)",
                        fn, (int)kv->dtype);
    if (attn->math != KDTREE_ATTN_MATH_BF16 &&
        attn->math != KDTREE_ATTN_MATH_E4M3)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: attn->math = %d is not an arithmetic: "
                        "KDTREE_ATTN_MATH_BF16 (0) or KDTREE_ATTN_MATH_E4M3 "
                        "(1)", fn, (int)attn->math);
    if (attn->pad0 != 0)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: attn->pad0 = %d must be 0 (reserved)", fn,
                        (int)attn->pad0);
    if (attn->math == KDTREE_ATTN_MATH_E4M3 && kv->dtype != KDTREE_KV_E4M3)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: attn->math = KDTREE_ATTN_MATH_E4M3 needs an "
                        "e4m3 cache (kv->dtype = KDTREE_KV_E4M3); a bf16 "
                        "cache takes KDTREE_ATTN_MATH_BF16", fn);
    if (kv->dtype == KDTREE_KV_E4M3 &&
        !(isfinite(kv->scale) && kv->scale > 0.f))
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: kv->scale = %g must be finite and > 0 for an "
                        "e4m3 cache (a token's value is scale x its e4m3 "
                        "number; an unscaled cache has scale 1)",
                        fn, (double)kv->scale);
    if (kv->dtype == KDTREE_KV_BF16 && kv->scale != 0.f && kv->scale != 1.f)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: kv->scale = %g is not 0 or 1: a bf16 cache has "
                        "no scale (it applies to an e4m3 cache, kv->dtype = "
                        "KDTREE_KV_E4M3)", fn, (double)kv->scale);
    return KDTREE_OK;
}

/* The checks both entry points share: the sizes and types of attn, tree
 * and kv (R, the shape, the page count). */
static int
va_check_shape(const char *fn, int64_t *vals, const kdtree_attn *attn,
               const kdtree_tree *tree, const kdtree_kv_cache *kv)
{
    int st;
    if ((st = kdt_check_host(fn, "attn", attn)) ||
        (st = kdt_check_host(fn, "tree", tree)) ||
        (st = kdt_check_host(fn, "kv", kv)) ||
        /* gridDim.z holds the request: at most 65535 */
        (st = kdt_check_arg(fn, "tree->n_requests", tree->n_requests, 1,
                            65535)) ||
        (st = va_check_types(fn, attn, kv)))
        return st;
    vals[VA_H] = attn->n_heads;
    vals[VA_PAGE] = kv->page_size;
    vals[VA_N_MAX] = tree->n_max;
    vals[VA_KV] = kv->dtype;
    vals[VA_MATH] = attn->math;
    if ((st = kdt_kernel_check(KDT_KERNEL_VERIFY_ATTN, vals)))
        return st;
    /* positions are int32 in the kernel */
    if ((st = kdt_check_arg(fn, "kv->max_pages", kv->max_pages, 1,
                            INT32_MAX / kv->page_size)))
        return st;
    return 0;
}

KDT_EXPORT int32_t
kdtree_verify_attn_workspace_size(uint64_t *out_bytes, kdtree_runtime *rt,
                                  const kdtree_attn *attn,
                                  const kdtree_tree *tree,
                                  const kdtree_kv_cache *kv)
{
    static const char fn[] = "kdtree_verify_attn_workspace_size";
    int64_t vals[VA_NCONST];
    int st;
    kdt_clear_error();
    if ((st = kdt_check_host(fn, "out_bytes", out_bytes)) ||
        (st = kdt_check_runtime(rt, fn)) ||
        (st = va_check_shape(fn, vals, attn, tree, kv)) ||
        (st = kdt_runtime_resolve_target(rt)))
        return st;
    va_geom g = va_geometry(&rt->target, kv->dtype, attn->math);
    int splits = va_splits(rt, &g, tree->n_requests, attn->n_heads,
                           tree->n_max, (int64_t)kv->max_pages * kv->page_size);
    *out_bytes =
        va_workspace(splits, tree->n_requests, attn->n_heads, tree->n_max);
    return KDTREE_OK;
}

KDT_EXPORT int32_t
kdtree_verify_attn(kdtree_runtime *rt, const kdtree_attn *attn,
                   const kdtree_tree *tree, const kdtree_requests *req,
                   const kdtree_kv_cache *kv, void *stream)
{
    static const char fn[] = "kdtree_verify_attn";
    int64_t vals[VA_NCONST];
    int st;
    kdt_clear_error();
    /* q, kv->data and o move in 16-byte pieces (cp.async, uint4 stores) */
    if ((st = kdt_check_runtime(rt, fn)) ||
        (st = va_check_shape(fn, vals, attn, tree, kv)) ||
        (st = kdt_check_ptr(fn, "attn->o", attn->o, 16)) ||
        (st = kdt_check_opt_ptr(fn, "attn->lse", attn->lse, 4)) ||
        (st = kdt_check_ptr(fn, "attn->q", attn->q, 16)) ||
        (st = kdt_check_tree(fn, tree, KDT_TREE_MASK)) ||
        (st = kdt_check_requests(fn, req, tree->n_requests)) ||
        (st = kdt_check_ptr(fn, "req->past_len", req->past_len, 4)) ||
        (st = kdt_check_ptr(fn, "kv->data", kv->data, 16)) ||
        (st = kdt_check_ptr(fn, "kv->block_table", kv->block_table, 4)))
        return st;
    if (!isfinite(attn->scale))
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: attn->scale must be finite (got %g)", fn,
                        (double)attn->scale);
    if ((st = kdt_runtime_resolve_target(rt)))
        return st;
    int32_t R = tree->n_requests, H = attn->n_heads, n_max = tree->n_max;
    const int64_t cap = (int64_t)kv->max_pages * kv->page_size;
    /* the body, hence the tile shape and the split rule, from the target
     * fixed above: the same one kdtree_verify_attn_workspace_size saw */
    const va_geom g = va_geometry(&rt->target, kv->dtype, attn->math);
    int splits = va_splits(rt, &g, R, H, n_max, cap);
    uint64_t need = va_workspace(splits, R, H, n_max);
    if (need) {
        if ((st = kdt_check_ptr(fn, "attn->workspace", attn->workspace, 16)))
            return st;
        if (attn->workspace_bytes < need)
            return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                            "%s: attn->workspace_bytes is %llu, this shape "
                            "needs %llu (kdtree_verify_attn_workspace_size)",
                            fn, (unsigned long long)attn->workspace_bytes,
                            (unsigned long long)need);
    }

    kdt_loaded *m;
    if ((st = kdt_runtime_ready(&m, rt, fn, KDT_KERNEL_VERIFY_ATTN, vals,
                                (unsigned)g.smem, KDTREE_ERROR_ARCH)))
        return st;
    kdt_verify_attn_params p = {
        .q = (const uint16_t *)(uintptr_t)attn->q,
        .kv_cache = (const uint16_t *)(uintptr_t)kv->data,
        .block_table = (const int32_t *)(uintptr_t)kv->block_table,
        .past_len = (const int32_t *)(uintptr_t)req->past_len,
        .n_nodes = (const int32_t *)(uintptr_t)tree->n_nodes,
        .anc_mask = (const uint32_t *)(uintptr_t)tree->anc_mask,
        .o = (uint16_t *)(uintptr_t)attn->o,
        .lse = (float *)(uintptr_t)attn->lse,
        .workspace = NULL,
        .n_requests = R,
        .max_pages = kv->max_pages,
        .num_splits = splits,
        .scale = attn->scale,
        /* the cache's scale, applied to the logits and the output rather
         * than to each element (a bf16 cache: 1) */
        .kv_scale = kv->dtype == KDTREE_KV_E4M3 ? kv->scale : 1.f,
    };
    int64_t rows = (int64_t)n_max * H;
    const int bm = g.costs->bm;
    unsigned tiles = (unsigned)((rows + bm - 1) / bm);
    /* a row tile's splits as one cluster (of its own count, which
     * kdt_va_pick_cluster may make other than the workspace's): merged
     * there, no workspace, no merge kernel */
    const int cluster = va_cluster(rt, m, &g, splits, R, H, n_max, cap);
    kdt_launch_config c = {
        .grid = {tiles, (unsigned)splits, (unsigned)R},
        .block = (unsigned)g.threads,
        .smem = (unsigned)g.smem,
        .stream = stream,
    };
    if (cluster > 1) {
        p.num_splits = cluster;
        c.grid.y = (unsigned)cluster;
        c.cluster = (kdt_dim3){1, (unsigned)cluster, 1};
        return kdt_launch(rt, m->fn[0], &c, &p);
    }
    p.workspace = need ? (float *)(uintptr_t)attn->workspace : NULL;
    st = kdt_launch(rt, m->fn[0], &c, &p);
    if (st || splits == 1)
        return st;
    /* the merge: a block per folded row */
    const kdt_launch_config merge = {
        .grid = {(unsigned)rows, (unsigned)R, 1},
        .block = KDT_ATTN_MERGE_THREADS,
        .stream = stream,
    };
    return kdt_launch(rt, m->fn[1], &merge, &p);
}
