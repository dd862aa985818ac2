/*
 * kernel_verify_attn.c: the verify_attn kernel's registry definition, its
 * workspace size and its launch function kdtree_verify_attn()
 * (specs/kernels.md §3).
 *
 * The kernel (kernels_src/verify_attn.cu) runs one block per (row tile of
 * 64 folded node*head rows, KV split, request).  The split count is chosen
 * here, on the host, from the shape and the device alone, never from the
 * device-side past_len, so that one workspace size serves every round of a
 * shape and the launch reads nothing back from the GPU.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "error.h"
#include "kdt_attn_tiles.h"
#include "kdt_params.h"
#include "kdtree.h"
#include "kernels.h"
#include "runtime.h"
#include "validate.h"

/* Test hook: when > 0, the split count every later call uses (tests force
 * the split and unsplit paths whatever the GPU).  0 = the rule below. */
int kdt_verify_attn_splits_override;

static const char *const va_headers[] = {"kdt_params.h", "kdt_attn_tiles.h",
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

/* Blocks of the attention kernel that one SM runs at a time: registers
 * allow 64 / BM; shared memory allows what the per-block opt-in limit says
 * (about one 95 KB block on sm_120's 99 KB, two under Hopper's 227 KB). */
static int
blocks_per_sm(const kdtree_runtime *rt)
{
    int by_regs = 64 / KDT_ATTN_BM;
    int by_smem = (rt->max_smem_optin + 1024) / (KDT_ATTN_SMEM + 1024);
    int n = by_regs < by_smem ? by_regs : by_smem;
    return n > 0 ? n : 1;
}

/*
 * The KV split count S.  base = (row tiles) x (requests) blocks fill
 * base / (SMs x blocks per SM) of one wave; S splits make ceil(base * S /
 * slots) waves of 1/S the work each.  Take the fewest splits within 5% of
 * the best waves/S over 1..64 (each split costs a partial write and the
 * merge, so ties go to fewer), with at least 8 KV tiles (128 tokens) per
 * split at the cache's capacity.  Depends only on the arguments and the
 * device: a workspace sized once fits every round.
 */
static int
va_splits(const kdtree_runtime *rt, int32_t R, int32_t H, int32_t n_max,
          int64_t cap)
{
    if (kdt_verify_attn_splits_override > 0)
        return kdt_verify_attn_splits_override;
    int64_t base =
        ((int64_t)n_max * H + KDT_ATTN_BM - 1) / KDT_ATTN_BM * (int64_t)R;
    int64_t slots = (int64_t)(rt->sm_count > 0 ? rt->sm_count : 1) *
                    blocks_per_sm(rt);
    int64_t cap_tiles = (cap + KDT_ATTN_BN - 1) / KDT_ATTN_BN;
    int64_t smax = cap_tiles / 8;
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
    if (m->max_dynamic_smem < KDT_ATTN_SMEM)
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s: the kernel needs %d bytes of shared memory per "
                        "block, this device allows %d", fn, KDT_ATTN_SMEM,
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
    unsigned tiles = (unsigned)((rows + KDT_ATTN_BM - 1) / KDT_ATTN_BM);
    st = kdt_launch(rt, m->fn[0], tiles, (unsigned)splits,
                    (unsigned)n_requests, KDT_ATTN_THREADS, KDT_ATTN_SMEM,
                    stream, &p);
    if (st || splits == 1)
        return st;
    int64_t per = KDT_ATTN_MERGE_THREADS / 32;
    unsigned mgrid = (unsigned)((rows * n_requests + per - 1) / per);
    return kdt_launch(rt, m->fn[1], mgrid, 1, 1, KDT_ATTN_MERGE_THREADS, 0,
                      stream, &p);
}
