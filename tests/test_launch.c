/*
 * test_launch.c: what each kernel's launch function hands the driver, on a
 * runtime that pretends to be a device (no GPU, no NVRTC): the function,
 * the grid, the block, the dynamic shared memory, the cluster, the stream,
 * the parameter struct, the context it runs in; and the launches refused
 * before the driver is called (shared memory the loaded function cannot
 * give, a driver that fails).
 *
 * The pretend runtime's driver is a table of recorders, and its table of
 * loaded shapes holds one entry in every slot, so that the lock-free
 * lookup finds it wherever the shape hashes: a case may launch that one
 * shape only (any other would take the miss path, which needs NVRTC).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda/nvrtc.h"
#include "harness.h"
#include "kdt_attn_tiles.h"
#include "kdt_build_ddtree_plan.h"
#include "kdt_draft_topk_plan.h"
#include "kdt_params.h"
#include "kdt_tree_accept_plan.h"
#include "kdtree.h"
#include "kernels/verify_attn_splits.h"
#include "runtime/runtime.h"

extern int kdt_verify_attn_splits_override;

/* ---- the pretend driver ---------------------------------------------- */

typedef struct launch_rec {
    CUfunction fn;
    unsigned grid[3], block[3], smem;
    unsigned cluster[3]; /* {0, 0, 0}: cuLaunchKernel */
    CUstream stream;
    CUcontext ctx; /* current at the launch */
    unsigned char params[sizeof(kdt_build_ddtree_params) +
                         sizeof(kdt_verify_attn_params)];
} launch_rec;

static launch_rec recs[4];
static int n_recs;
/* How many bytes of the one parameter struct a launch passes: set by each
 * case to its kernel's struct. */
static size_t param_size;
static CUcontext current, stack[4];
static int depth;
static CUresult launch_result;

static CUresult
fake_ctx_get_current(CUcontext *c)
{
    *c = current;
    return CUDA_SUCCESS;
}

static CUresult
fake_ctx_push_current(CUcontext c)
{
    ck_assert_int_lt(depth, 4);
    stack[depth++] = current;
    current = c;
    return CUDA_SUCCESS;
}

static CUresult
fake_ctx_pop_current(CUcontext *c)
{
    ck_assert_int_gt(depth, 0);
    if (c)
        *c = current;
    current = stack[--depth];
    return CUDA_SUCCESS;
}

static launch_rec *
record(CUfunction fn, CUstream stream, void **args)
{
    ck_assert_int_lt(n_recs, 4);
    launch_rec *r = &recs[n_recs++];
    memset(r, 0, sizeof *r);
    r->fn = fn;
    r->stream = stream;
    r->ctx = current;
    ck_assert_uint_le(param_size, sizeof r->params);
    memcpy(r->params, args[0], param_size);
    return r;
}

static CUresult
fake_launch_kernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz, unsigned smem,
                   CUstream stream, void **args, void **extra)
{
    ck_assert_ptr_null(extra);
    launch_rec *r = record(fn, stream, args);
    r->grid[0] = gx, r->grid[1] = gy, r->grid[2] = gz;
    r->block[0] = bx, r->block[1] = by, r->block[2] = bz;
    r->smem = smem;
    return launch_result;
}

static CUresult
fake_launch_kernel_ex(const CUlaunchConfig *c, CUfunction fn, void **args,
                      void **extra)
{
    ck_assert_ptr_null(extra);
    ck_assert_uint_eq(c->numAttrs, 1);
    ck_assert_int_eq(c->attrs[0].id, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
    launch_rec *r = record(fn, c->hStream, args);
    r->grid[0] = c->gridDimX, r->grid[1] = c->gridDimY;
    r->grid[2] = c->gridDimZ;
    r->block[0] = c->blockDimX, r->block[1] = c->blockDimY;
    r->block[2] = c->blockDimZ;
    r->smem = c->sharedMemBytes;
    r->cluster[0] = c->attrs[0].value.clusterDim.x;
    r->cluster[1] = c->attrs[0].value.clusterDim.y;
    r->cluster[2] = c->attrs[0].value.clusterDim.z;
    return launch_result;
}

/* Clusters of 2..8 blocks that run at once: the H200's answers for the
 * wgmma body (tests/test_compile_attn.c), enough for any split. */
static CUresult
fake_occupancy(int *n, CUfunction fn, const CUlaunchConfig *c)
{
    static const int fit[9] = {0, 0, 66, 39, 30, 22, 17, 15, 15};
    unsigned blocks = c->attrs[0].value.clusterDim.x *
                      c->attrs[0].value.clusterDim.y;
    *n = blocks <= 8 ? fit[blocks] : 0;
    return CUDA_SUCCESS;
}

static CUresult
fake_error_name(CUresult r, const char **s)
{
    *s = "CUDA_ERROR_INVALID_VALUE";
    return CUDA_SUCCESS;
}

static const kdt_driver fake = {
    .get_error_name = fake_error_name,
    .get_error_string = fake_error_name,
    .ctx_get_current = fake_ctx_get_current,
    .ctx_push_current = fake_ctx_push_current,
    .ctx_pop_current = fake_ctx_pop_current,
    .launch_kernel = fake_launch_kernel,
    .launch_kernel_ex = fake_launch_kernel_ex,
    .occupancy_max_active_clusters = fake_occupancy,
};

#define PRIMARY ((CUcontext)(uintptr_t)0x100)
#define OTHER ((CUcontext)(uintptr_t)0x200)
#define STREAM ((void *)(uintptr_t)0x300)
#define FN0 ((CUfunction)(uintptr_t)0x400)
#define FN1 ((CUfunction)(uintptr_t)0x500)

static kdtree_runtime rt;
static kdt_loaded entry;

/* An H200 (or, with `target` "sm_120", what an RTX PRO 6000 would be
 * asked) whose table holds (kernel, vals) loaded, its functions allowed
 * max_smem bytes of dynamic shared memory. */
static void
pretend(const char *target, int kernel, const int64_t *vals, int n_vals,
        int max_smem)
{
    memset(&rt, 0, sizeof rt);
    memset(&entry, 0, sizeof entry);
    rt.drv = &fake;
    rt.ctx = PRIMARY;
    rt.cc_major = target && strcmp(target, "sm_120") == 0 ? 12 : 9;
    rt.sm_count = rt.cc_major == 9 ? 132 : 188;
    rt.max_smem_optin = rt.cc_major == 9 ? 232448 : 101376;
    rt.max_cluster = KDT_MAX_CLUSTER;
    strcpy(rt.arch, rt.cc_major == 9 ? "sm_90a" : "sm_120");
    if (target)
        ck_assert_int_eq(kdt_runtime_set_target(&rt, target, "test"),
                         KDTREE_OK);
    entry.kernel = kernel;
    memcpy(entry.vals, vals, sizeof(int64_t) * (size_t)n_vals);
    entry.fn[0] = FN0;
    entry.fn[1] = FN1;
    entry.max_dynamic_smem = max_smem;
    for (int i = 0; i < KDT_TABLE_SIZE; i++)
        atomic_init(&rt.table[i], &entry);
    n_recs = 0;
    current = PRIMARY;
    depth = 0;
    launch_result = CUDA_SUCCESS;
    kdt_verify_attn_splits_override = 0;
}

static void
check_rec(const launch_rec *r, CUfunction fn, unsigned gx, unsigned gy,
          unsigned gz, unsigned block, unsigned smem)
{
    ck_assert_ptr_eq(r->fn, fn);
    ck_assert_uint_eq(r->grid[0], gx);
    ck_assert_uint_eq(r->grid[1], gy);
    ck_assert_uint_eq(r->grid[2], gz);
    ck_assert_uint_eq(r->block[0], block);
    ck_assert_uint_eq(r->block[1], 1);
    ck_assert_uint_eq(r->block[2], 1);
    ck_assert_uint_eq(r->smem, smem);
    ck_assert_ptr_eq(r->stream, STREAM);
    ck_assert_ptr_eq(r->ctx, PRIMARY);
}

/* Device pointers the host-side checks accept: 256-byte aligned and
 * distinct, never dereferenced. */
#define DP(i) ((uint64_t)0x10000 + 0x100 * (uint64_t)(i))

/* ---- tree_accept --------------------------------------------------------- */

static const int64_t ta_vals[2] = {65, 15};

static int32_t
call_tree_accept(int R)
{
    kdtree_accept acc = {DP(1), DP(2), DP(3), DP(4), R, 15};
    kdtree_tree tree = {.n_nodes = DP(5), .token = DP(6),
                        .first_child = DP(7), .next_sibling = DP(8),
                        .n_requests = R, .n_max = 65};
    kdtree_requests req = {.max_accept = DP(9), .n_requests = R};
    param_size = sizeof(kdt_tree_accept_params);
    return kdtree_tree_accept(&rt, &acc, &tree, DP(10), &req, STREAM);
}

START_TEST(tree_accept_launch)
{
    pretend(NULL, KDT_KERNEL_TREE_ACCEPT, ta_vals, 2, 0);
    ck_assert_int_eq(call_tree_accept(300), KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    /* one thread a request */
    check_rec(&recs[0], FN0, (300 + KDT_TA_THREADS - 1) / KDT_TA_THREADS, 1,
              1, KDT_TA_THREADS, 0);
    ck_assert_uint_eq(recs[0].cluster[0], 0);
    kdt_tree_accept_params p;
    memcpy(&p, recs[0].params, sizeof p);
    ck_assert_ptr_eq(p.accept_len, (void *)(uintptr_t)DP(1));
    ck_assert_ptr_eq(p.accept_idx, (void *)(uintptr_t)DP(2));
    ck_assert_ptr_eq(p.accept_token, (void *)(uintptr_t)DP(3));
    ck_assert_ptr_eq(p.bonus, (void *)(uintptr_t)DP(4));
    ck_assert_ptr_eq(p.n_nodes, (void *)(uintptr_t)DP(5));
    ck_assert_ptr_eq(p.token, (void *)(uintptr_t)DP(6));
    ck_assert_ptr_eq(p.first_child, (void *)(uintptr_t)DP(7));
    ck_assert_ptr_eq(p.next_sibling, (void *)(uintptr_t)DP(8));
    ck_assert_ptr_eq(p.max_accept, (void *)(uintptr_t)DP(9));
    ck_assert_ptr_eq(p.target, (void *)(uintptr_t)DP(10));
    ck_assert_int_eq(p.n_requests, 300);
    /* the primary context was current: nothing pushed */
    ck_assert_int_eq(depth, 0);
}
END_TEST

/* Another context current: the launch runs in the primary one, and the
 * caller's is current again afterwards, also when the launch fails. */
START_TEST(other_context)
{
    pretend(NULL, KDT_KERNEL_TREE_ACCEPT, ta_vals, 2, 0);
    current = OTHER;
    ck_assert_int_eq(call_tree_accept(1), KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    check_rec(&recs[0], FN0, 1, 1, 1, KDT_TA_THREADS, 0);
    ck_assert_ptr_eq(current, OTHER);
    ck_assert_int_eq(depth, 0);

    launch_result = (CUresult)1; /* CUDA_ERROR_INVALID_VALUE */
    ck_assert_int_eq(call_tree_accept(1), KDTREE_ERROR_CUDA);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "cuLaunchKernel"));
    ck_assert_ptr_nonnull(
        strstr(kdtree_last_error(), "CUDA_ERROR_INVALID_VALUE"));
    ck_assert_ptr_eq(current, OTHER);
    ck_assert_int_eq(depth, 0);
}
END_TEST

/* ---- build_ddtree -------------------------------------------------------- */

static int32_t
call_build_ddtree(int R, int L, int K, int n_max)
{
    kdtree_tree tree = {DP(1), DP(2), DP(3), DP(4), DP(5), DP(6), DP(7),
                        DP(8), DP(9), R, n_max};
    kdtree_draft draft = {DP(10), DP(11), R, L, K};
    kdtree_requests req = {.budget = DP(12), .root_token = DP(13),
                           .n_requests = R};
    param_size = sizeof(kdt_build_ddtree_params);
    return kdtree_build_ddtree(&rt, &tree, &draft, &req, STREAM);
}

START_TEST(build_ddtree_launch)
{
    const int64_t vals[3] = {15, 64, 65};
    const unsigned smem = (unsigned)kdt_bd_smem_bytes(15, 64, 65);
    pretend(NULL, KDT_KERNEL_BUILD_DDTREE, vals, 3, (int)smem);
    ck_assert_int_eq(call_build_ddtree(7, 15, 64, 65), KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    /* one block a request, its shared memory from the plan */
    check_rec(&recs[0], FN0, 7, 1, 1, KDT_BD_THREADS, smem);
    kdt_build_ddtree_params p;
    memcpy(&p, recs[0].params, sizeof p);
    ck_assert_ptr_eq(p.n_nodes, (void *)(uintptr_t)DP(1));
    ck_assert_ptr_eq(p.anc_mask, (void *)(uintptr_t)DP(9));
    ck_assert_ptr_eq(p.lp, (void *)(uintptr_t)DP(10));
    ck_assert_ptr_eq(p.ids, (void *)(uintptr_t)DP(11));
    ck_assert_ptr_eq(p.budget, (void *)(uintptr_t)DP(12));
    ck_assert_ptr_eq(p.root_token, (void *)(uintptr_t)DP(13));
    ck_assert_ptr_null(p.depth_limit);
    ck_assert_ptr_null(p.past_len);
    ck_assert_int_eq(p.n_requests, 7);
}
END_TEST

/* A shape whose shared memory the loaded function cannot give is refused
 * before the driver is asked: KDTREE_ERROR_SHAPE (docs/contract.md). */
START_TEST(build_ddtree_smem_refused)
{
    const int64_t vals[3] = {15, 64, 65};
    const int smem = (int)kdt_bd_smem_bytes(15, 64, 65);
    pretend("sm_90a", KDT_KERNEL_BUILD_DDTREE, vals, 3, smem - 1);
    ck_assert_int_eq(call_build_ddtree(7, 15, 64, 65), KDTREE_ERROR_SHAPE);
    ck_assert_int_eq(n_recs, 0);
    /* the function, the shape, the target and both sizes */
    char want[256];
    snprintf(want, sizeof want,
             "kdtree_build_ddtree: build_ddtree (L=15,K=64,N_MAX=65) built "
             "for sm_90a needs %d bytes of shared memory a block; device 0 "
             "(sm_90a) allows %d",
             smem, smem - 1);
    ck_assert_str_eq(kdtree_last_error(), want);
}
END_TEST

/* ---- draft_topk ---------------------------------------------------------- */

static int32_t
call_draft_topk(int R, int L, int K, int V)
{
    kdtree_draft draft = {DP(1), DP(2), R, L, K};
    param_size = sizeof(kdt_draft_topk_params);
    return kdtree_draft_topk(&rt, &draft, DP(3), KDTREE_DTYPE_BF16, V,
                             STREAM);
}

START_TEST(draft_topk_launch)
{
    /* one row: split over a cluster of blocks (kdt_dt_split) */
    const int64_t vals[3] = {163840, 64, KDTREE_DTYPE_BF16};
    pretend(NULL, KDT_KERNEL_DRAFT_TOPK, vals, 3, KDT_DT_SMEM);
    ck_assert_int_eq(call_draft_topk(1, 1, 64, 163840), KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    unsigned split = (unsigned)kdt_dt_split(KDT_MAX_CLUSTER, 132, 1, 163840,
                                            64);
    ck_assert_uint_gt(split, 1);
    check_rec(&recs[0], FN0, split, 1, 1, KDT_DT_THREADS, KDT_DT_SMEM);
    ck_assert_uint_eq(recs[0].cluster[0], split);
    ck_assert_uint_eq(recs[0].cluster[1], 1);
    ck_assert_uint_eq(recs[0].cluster[2], 1);
    kdt_draft_topk_params p;
    memcpy(&p, recs[0].params, sizeof p);
    ck_assert_ptr_eq(p.lp, (void *)(uintptr_t)DP(1));
    ck_assert_ptr_eq(p.ids, (void *)(uintptr_t)DP(2));
    ck_assert_ptr_eq(p.logits, (void *)(uintptr_t)DP(3));
    ck_assert_int_eq(p.n_rows, 1);

    /* many rows: a block each, no cluster (cuLaunchKernel) */
    n_recs = 0;
    ck_assert_int_eq(call_draft_topk(64, 15, 64, 163840), KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    check_rec(&recs[0], FN0, 64 * 15, 1, 1, KDT_DT_THREADS, KDT_DT_SMEM);
    ck_assert_uint_eq(recs[0].cluster[0], 0);

    /* a device without clusters: a block a row whatever the rows */
    rt.max_cluster = 1;
    n_recs = 0;
    ck_assert_int_eq(call_draft_topk(1, 1, 64, 163840), KDTREE_OK);
    check_rec(&recs[0], FN0, 1, 1, 1, KDT_DT_THREADS, KDT_DT_SMEM);
    ck_assert_uint_eq(recs[0].cluster[0], 0);

    /* less shared memory than the plan's: refused, KDTREE_ERROR_SHAPE */
    entry.max_dynamic_smem = KDT_DT_SMEM - 1;
    n_recs = 0;
    ck_assert_int_eq(call_draft_topk(1, 1, 64, 163840), KDTREE_ERROR_SHAPE);
    ck_assert_int_eq(n_recs, 0);
}
END_TEST

/* ---- verify_attn --------------------------------------------------------- */

static const int64_t va_vals[3] = {8, 64, 65};

static int32_t
call_verify_attn(int R, uint64_t workspace_bytes)
{
    kdtree_attn attn = {.q = DP(1), .o = DP(2), .lse = DP(3),
                        .workspace = DP(4),
                        .workspace_bytes = workspace_bytes, .n_heads = 8,
                        .scale = 0.07f};
    kdtree_tree tree = {.n_nodes = DP(5), .anc_mask = DP(6),
                        .n_requests = R, .n_max = 65};
    kdtree_requests req = {.past_len = DP(7), .n_requests = R};
    kdtree_kv_cache kv = {.data = DP(8), .block_table = DP(9),
                          .page_size = 64, .max_pages = 66};
    param_size = sizeof(kdt_verify_attn_params);
    return kdtree_verify_attn(&rt, &attn, &tree, &req, &kv, STREAM);
}

/* The wgmma body (sm_90a): 3 splits through the workspace, then the
 * merge (a block a folded row); 4 splits as one cluster, merged there. */
START_TEST(verify_attn_wgmma_launch)
{
    const unsigned tiles = (65 * 8 + KDT_ATTN_WG_BM - 1) / KDT_ATTN_WG_BM;
    const uint64_t ws3 = 3ull * 2 * 65 * 8 * (KDT_ATTN_D_V + 1) * 4;
    pretend("sm_90a", KDT_KERNEL_VERIFY_ATTN, va_vals, 3, KDT_ATTN_WG_SMEM);
    kdt_verify_attn_splits_override = 3;
    ck_assert_int_eq(call_verify_attn(2, ws3), KDTREE_OK);
    ck_assert_int_eq(n_recs, 2);
    check_rec(&recs[0], FN0, tiles, 3, 2, KDT_ATTN_WG_THREADS,
              KDT_ATTN_WG_SMEM);
    ck_assert_uint_eq(recs[0].cluster[0], 0);
    check_rec(&recs[1], FN1, 65 * 8, 2, 1, KDT_ATTN_MERGE_THREADS, 0);
    kdt_verify_attn_params p;
    memcpy(&p, recs[0].params, sizeof p);
    ck_assert_int_eq(p.num_splits, 3);
    ck_assert_ptr_eq(p.workspace, (void *)(uintptr_t)DP(4));
    ck_assert_ptr_eq(p.q, (void *)(uintptr_t)DP(1));
    ck_assert_ptr_eq(p.o, (void *)(uintptr_t)DP(2));
    ck_assert_ptr_eq(p.lse, (void *)(uintptr_t)DP(3));
    ck_assert_ptr_eq(p.n_nodes, (void *)(uintptr_t)DP(5));
    ck_assert_ptr_eq(p.anc_mask, (void *)(uintptr_t)DP(6));
    ck_assert_ptr_eq(p.past_len, (void *)(uintptr_t)DP(7));
    ck_assert_ptr_eq((const void *)p.kv_cache, (void *)(uintptr_t)DP(8));
    ck_assert_ptr_eq(p.block_table, (void *)(uintptr_t)DP(9));
    ck_assert_int_eq(p.n_requests, 2);
    ck_assert_int_eq(p.max_pages, 66);
    ck_assert(p.scale == 0.07f);
    /* the merge reads the same struct */
    ck_assert_int_eq(memcmp(recs[1].params, recs[0].params, sizeof p), 0);

    /* too small a workspace: refused before any launch */
    n_recs = 0;
    ck_assert_int_eq(call_verify_attn(2, ws3 - 1),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(n_recs, 0);

    kdt_verify_attn_splits_override = -4;
    n_recs = 0;
    ck_assert_int_eq(call_verify_attn(2, 0), KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(call_verify_attn(2, 4ull * 2 * 65 * 8 * 513 * 4),
                     KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    check_rec(&recs[0], FN0, tiles, 4, 2, KDT_ATTN_WG_THREADS,
              KDT_ATTN_WG_SMEM);
    ck_assert_uint_eq(recs[0].cluster[0], 1);
    ck_assert_uint_eq(recs[0].cluster[1], 4);
    ck_assert_uint_eq(recs[0].cluster[2], 1);
    memcpy(&p, recs[0].params, sizeof p);
    ck_assert_int_eq(p.num_splits, 4);
    ck_assert_ptr_null(p.workspace);
    kdt_verify_attn_splits_override = 0;
}
END_TEST

/* The mma.sync body (sm_120, or any target but sm_90a): its own block and
 * shared memory, and no in-cluster merge, so splits go through the
 * workspace even where clustering was asked for; a device that gives
 * less shared memory than the body needs: KDTREE_ERROR_ARCH. */
START_TEST(verify_attn_mma_launch)
{
    const unsigned tiles = (65 * 8 + KDT_ATTN_BM - 1) / KDT_ATTN_BM;
    pretend("sm_120", KDT_KERNEL_VERIFY_ATTN, va_vals, 3, KDT_ATTN_SMEM);
    kdt_verify_attn_splits_override = 1;
    ck_assert_int_eq(call_verify_attn(1, 0), KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    check_rec(&recs[0], FN0, tiles, 1, 1, KDT_ATTN_THREADS, KDT_ATTN_SMEM);
    kdt_verify_attn_params p;
    memcpy(&p, recs[0].params, sizeof p);
    ck_assert_int_eq(p.num_splits, 1);
    ck_assert_ptr_null(p.workspace);

    kdt_verify_attn_splits_override = -4;
    n_recs = 0;
    ck_assert_int_eq(call_verify_attn(1, 4ull * 65 * 8 * 513 * 4),
                     KDTREE_OK);
    ck_assert_int_eq(n_recs, 2);
    check_rec(&recs[0], FN0, tiles, 4, 1, KDT_ATTN_THREADS, KDT_ATTN_SMEM);
    ck_assert_uint_eq(recs[0].cluster[0], 0);
    check_rec(&recs[1], FN1, 65 * 8, 1, 1, KDT_ATTN_MERGE_THREADS, 0);

    entry.max_dynamic_smem = KDT_ATTN_SMEM - 1;
    n_recs = 0;
    ck_assert_int_eq(call_verify_attn(1, 4ull * 65 * 8 * 513 * 4),
                     KDTREE_ERROR_ARCH);
    ck_assert_int_eq(n_recs, 0);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "shared memory"));
    kdt_verify_attn_splits_override = 0;
}
END_TEST

/* One request of 65 rows over an e4m3 cache (scale 0.5) in arithmetic
 * `math`. */
static int32_t
call_verify_attn_e4m3(int32_t math)
{
    kdtree_attn attn = {.q = DP(1), .o = DP(2), .n_heads = 8,
                        .scale = 0.07f, .math = math};
    kdtree_tree tree = {.n_nodes = DP(5), .anc_mask = DP(6),
                        .n_requests = 1, .n_max = 65};
    kdtree_requests req = {.past_len = DP(7), .n_requests = 1};
    kdtree_kv_cache kv = {.data = DP(8), .block_table = DP(9),
                          .page_size = 64, .max_pages = 66,
                          .dtype = KDTREE_KV_E4M3, .scale = 0.5f};
    param_size = sizeof(kdt_verify_attn_params);
    return kdtree_verify_attn(&rt, &attn, &tree, &req, &kv, STREAM);
}

/* The mma.sync body over an e4m3 cache: its own plan's shared memory
 * (kdt_attn_mma_kv8_smem, more than the bf16 one's), the cache's scale in
 * the parameters; a device that gives less: KDTREE_ERROR_ARCH. */
START_TEST(verify_attn_mma_e4m3_launch)
{
    static const int64_t vals[5] = {8, 64, 65, KDTREE_KV_E4M3,
                                    KDTREE_ATTN_MATH_E4M3};
    const unsigned tiles = (65 * 8 + KDT_ATTN_BM - 1) / KDT_ATTN_BM;
    ck_assert_int_gt(KDT_ATTN_KV8_SMEM, KDT_ATTN_SMEM);
    pretend("sm_120", KDT_KERNEL_VERIFY_ATTN, vals, 5, KDT_ATTN_KV8_SMEM);
    kdt_verify_attn_splits_override = 1;
    ck_assert_int_eq(call_verify_attn_e4m3(KDTREE_ATTN_MATH_E4M3),
                     KDTREE_OK);
    ck_assert_int_eq(n_recs, 1);
    check_rec(&recs[0], FN0, tiles, 1, 1, KDT_ATTN_THREADS,
              KDT_ATTN_KV8_SMEM);
    kdt_verify_attn_params p;
    memcpy(&p, recs[0].params, sizeof p);
    ck_assert(p.kv_scale == 0.5f);

    entry.max_dynamic_smem = KDT_ATTN_KV8_SMEM - 1;
    n_recs = 0;
    ck_assert_int_eq(call_verify_attn_e4m3(KDTREE_ATTN_MATH_E4M3),
                     KDTREE_ERROR_ARCH);
    ck_assert_int_eq(n_recs, 0);
    kdt_verify_attn_splits_override = 0;
}
END_TEST

/* The wgmma body over an e4m3 cache: 384 threads in bf16 arithmetic (the
 * producer warpgroup that widens the tiles), 256 in FP8 arithmetic. */
START_TEST(verify_attn_wgmma_e4m3_launch)
{
    const unsigned tiles = (65 * 8 + KDT_ATTN_WG_BM - 1) / KDT_ATTN_WG_BM;
    static const int32_t maths[2] = {KDTREE_ATTN_MATH_BF16,
                                     KDTREE_ATTN_MATH_E4M3};
    static const unsigned threads[2] = {384, 256};
    ck_assert_int_eq(KDT_ATTN_WG_LAUNCH_THREADS(0, 0), KDT_ATTN_WG_THREADS);
    for (int i = 0; i < 2; i++) {
        const int64_t vals[5] = {8, 64, 65, KDTREE_KV_E4M3, maths[i]};
        pretend("sm_90a", KDT_KERNEL_VERIFY_ATTN, vals, 5, KDT_ATTN_WG_SMEM);
        kdt_verify_attn_splits_override = 1;
        ck_assert_int_eq(call_verify_attn_e4m3(maths[i]), KDTREE_OK);
        ck_assert_int_eq(n_recs, 1);
        ck_assert_uint_eq(KDT_ATTN_WG_LAUNCH_THREADS(KDTREE_KV_E4M3,
                                                     maths[i]),
                          threads[i]);
        check_rec(&recs[0], FN0, tiles, 1, 1, threads[i], KDT_ATTN_WG_SMEM);
    }
    kdt_verify_attn_splits_override = 0;
}
END_TEST

/* The same target, fixed at creation or chosen on first use, gives the
 * same body: a runtime without one, in a process without NVRTC, builds
 * for the device's own cubin target (sm_90a on Hopper: the wgmma
 * body). */
START_TEST(verify_attn_target_on_first_use)
{
    const unsigned tiles = (65 * 8 + KDT_ATTN_WG_BM - 1) / KDT_ATTN_WG_BM;
    kdt_nvrtc_set_library("");
    pretend(NULL, KDT_KERNEL_VERIFY_ATTN, va_vals, 3, KDT_ATTN_WG_SMEM);
    kdt_verify_attn_splits_override = 1;
    ck_assert_int_eq(call_verify_attn(1, 0), KDTREE_OK);
    ck_assert_str_eq(kdtree_runtime_target(&rt), "sm_90a");
    check_rec(&recs[0], FN0, tiles, 1, 1, KDT_ATTN_WG_THREADS,
              KDT_ATTN_WG_SMEM);
    kdt_verify_attn_splits_override = 0;
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("launch");
    TCase *t = tcase_create("launch");
    tcase_add_test(t, tree_accept_launch);
    tcase_add_test(t, other_context);
    tcase_add_test(t, build_ddtree_launch);
    tcase_add_test(t, build_ddtree_smem_refused);
    tcase_add_test(t, draft_topk_launch);
    tcase_add_test(t, verify_attn_wgmma_launch);
    tcase_add_test(t, verify_attn_mma_launch);
    tcase_add_test(t, verify_attn_mma_e4m3_launch);
    tcase_add_test(t, verify_attn_wgmma_e4m3_launch);
    tcase_add_test(t, verify_attn_target_on_first_use);
    suite_add_tcase(s, t);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
