/*
 * test_compile_attn.c: host-only checks of verify_attn (no GPU):
 *  - compile-only builds (kdtree_compile, NVRTC) for sm_90a (the wgmma
 *    body Hopper runs), sm_90 and sm_120 (the mma.sync body) at the
 *    extremes of H, PAGE and N_MAX, so CI catches a shape NVRTC rejects
 *    (or a register spill turned error); the mma.sync body over an e4m3
 *    cache in both arithmetics for sm_89 (the oldest part it serves),
 *    sm_90 and sm_120; every sm_120 build without a register spill (its
 *    cubin's stack 0: docs/performance.md, the portable body's bounds);
 *  - the split rule and workspace size on a runtime that only pretends to
 *    be an H200 or an RTX PRO 6000 (no launch ever happens): a pure
 *    function of the shape and the device, the unsplit case needing none;
 *  - the same shapes over an e4m3 cache for sm_90a (the wgmma body),
 *    both arithmetics, and MATH=e4m3 for compute_90a.
 * Exits 77 when NVRTC is missing (the workspace part still needs no GPU,
 * but the whole file is about this kernel's build, so it skips as one).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kdtree.h"
#include "cuda/nvrtc.h"
#include "jit/cubin_info.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "kernels/verify_attn_splits.h"

/* The kernel kdt_verify_attn of the build of verify_attn `shape` for
 * `arch` (compiled already: the cache's) holds nothing in local memory:
 * ptxas spilled no register.  sm_120 is asked for no spill at all
 * (docs/performance.md); the other targets' bodies are not. */
static void
assert_no_spill(const char *arch, const char *shape)
{
    int kind;
    ck_assert_int_ge(kdt_target_parse(arch, &kind, NULL), 0);
    const int id = kdt_kernel_find("verify_attn");
    int64_t vals[KDT_MAX_CONSTS] = {0};
    ck_assert_int_eq(kdt_shape_parse(id, shape, vals), KDTREE_OK);
    kdt_blob blob = {0};
    int from;
    ck_assert_int_eq(kdt_kernel_obtain(id, vals, arch, kind, &blob, &from),
                     KDTREE_OK);
    kdt_cubin_kernel k[4];
    int n = 0, found = 0;
    char why[128];
    ck_assert_msg(kdt_cubin_kernels(blob.data, blob.size, k, 4, &n, why,
                                    sizeof why) == 0,
                  "%s %s: %s", arch, shape, why);
    for (int i = 0; i < n && i < 4; i++) {
        if (strcmp(k[i].name, "kdt_verify_attn") != 0)
            continue;
        found = 1;
        ck_assert_msg(k[i].stack_bytes == 0,
                      "%s verify_attn %s: %u bytes of stack a thread "
                      "(%u registers): a spill", arch, shape,
                      k[i].stack_bytes, k[i].registers);
    }
    ck_assert_msg(found, "%s %s: no kdt_verify_attn in the cubin", arch,
                  shape);
    kdt_blob_free(&blob);
}

static const char *const shapes[] = {
    "H=8,PAGE=64,N_MAX=65",    "H=1,PAGE=1,N_MAX=1",
    "H=128,PAGE=256,N_MAX=1025", "H=3,PAGE=7,N_MAX=33",
    "H=64,PAGE=16,N_MAX=65",   "H=128,PAGE=1,N_MAX=2",
};

START_TEST(compile_extremes)
{
    static const char *const arch[] = {"sm_90a", "sm_90", "sm_120"};
    for (int a = 0; a < 3; a++)
        for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int cached = -1;
            int st = kdtree_compile(&cached, arch[a], "verify_attn",
                                    shapes[i]);
            ck_assert_msg(st == KDTREE_OK, "%s verify_attn %s: %s: %s",
                          arch[a], shapes[i], kdtree_status_name(st),
                          kdtree_last_error());
            if (strcmp(arch[a], "sm_120") == 0)
                assert_no_spill(arch[a], shapes[i]);
        }
    ck_assert_str_eq(kdtree_kernel_default_shape("verify_attn"),
                     "H=8,PAGE=64,N_MAX=65");
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90", "verify_attn",
                                    "H=129,PAGE=64,N_MAX=65"),
                     KDTREE_ERROR_SHAPE);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90", "verify_attn",
                                    "H=8,PAGE=257,N_MAX=65"),
                     KDTREE_ERROR_SHAPE);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90", "verify_attn",
                                    "H=8,PAGE=64,N_MAX=1026"),
                     KDTREE_ERROR_SHAPE);
}
END_TEST

/* The mma.sync body over an e4m3 cache, both arithmetics, at the same
 * extremes (each shape class: H 1 to 128, PAGE 1 to 256, N_MAX 1 to
 * 1025), where it runs: every sm_89-or-newer target but sm_90a. */
START_TEST(compile_e4m3)
{
    static const char *const arch[] = {"sm_89", "sm_90", "sm_120"};
    static const char *const kinds[] = {",KV=e4m3,MATH=bf16",
                                        ",KV=e4m3,MATH=e4m3"};
    char shape[96];
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 2; k++)
            for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                snprintf(shape, sizeof shape, "%s%s", shapes[i], kinds[k]);
                int st = kdtree_compile(NULL, arch[a], "verify_attn", shape);
                ck_assert_msg(st == KDTREE_OK, "%s verify_attn %s: %s: %s",
                              arch[a], shape, kdtree_status_name(st),
                              kdtree_last_error());
                if (strcmp(arch[a], "sm_120") == 0)
                    assert_no_spill(arch[a], shape);
            }
}
END_TEST

/* Runtimes that only carry what the split rule reads. */
static kdtree_runtime h200, rtx;

static uint64_t
ws(kdtree_runtime *rt, int R, int H, int N, int page, int max_pages)
{
    uint64_t bytes = 12345;
    kdtree_attn at = {.n_heads = H};
    kdtree_tree tree = {.n_requests = R, .n_max = N};
    kdtree_kv_cache kv = {.page_size = page, .max_pages = max_pages};
    int st = kdtree_verify_attn_workspace_size(&bytes, rt, &at, &tree, &kv);
    ck_assert_msg(st == KDTREE_OK, "%s", kdtree_last_error());
    return bytes;
}

START_TEST(split_rule)
{
    /* the wgmma body (64-token tiles) on the H200, the mma.sync one on
     * the RTX PRO 6000: the body follows the runtime's target */
    h200.cc_major = 9;
    ck_assert_int_eq(kdt_runtime_set_target(&h200, "sm_90a", "test"),
                     KDTREE_OK);
    h200.sm_count = 132;
    h200.max_smem_optin = 232448;
    rtx.cc_major = 12;
    ck_assert_int_eq(kdt_runtime_set_target(&rtx, "sm_120", "test"),
                     KDTREE_OK);
    rtx.sm_count = 188;
    rtx.max_smem_optin = 101376;
    /* the R = 1 target: 9 row tiles of 64 fill 9 of 132 SMs, so
     * the KV is split 14 ways (126 blocks, one wave) */
    ck_assert_uint_eq(ws(&h200, 1, 8, 65, 64, 600),
                      14ull * 65 * 8 * 513 * 4);
    /* 520 row tiles: four waves already; no split, no workspace */
    ck_assert_uint_eq(ws(&h200, 8, 64, 65, 64, 600), 0);
    /* H = 128, 65 rows: 130 blocks on 132 SMs; no split */
    ck_assert_uint_eq(ws(&h200, 1, 128, 65, 64, 600), 0);
    /* a short cache allows few splits: at least 4 tiles of 64 tokens a
     * split on Hopper (8 of 32 elsewhere), so 3 pages of 64 tokens make
     * one split at most; 8 pages would allow two, but the merge's launch
     * costs more (about four tiles) than halving 8 tiles saves; 16 pages
     * split 4 ways (4 tiles each) */
    ck_assert_uint_eq(ws(&h200, 1, 8, 65, 64, 3), 0);
    ck_assert_uint_eq(ws(&h200, 1, 8, 65, 64, 8), 0);
    ck_assert_uint_eq(ws(&h200, 1, 8, 65, 64, 16), 4ull * 65 * 8 * 513 * 4);
    /* the partials' traffic counts: 17 row tiles over 66 pages split
     * 6 ways (102 blocks, one wave), not the 15 (two waves) that filled
     * the most SMs, whose 15.9k partial rows outweighed the gain */
    ck_assert_uint_eq(ws(&h200, 1, 16, 65, 64, 66),
                      6ull * 65 * 16 * 513 * 4);
    /* eight requests of 9 row tiles at 4k: 3 ways (216 blocks) */
    ck_assert_uint_eq(ws(&h200, 8, 8, 65, 64, 66),
                      3ull * 8 * 65 * 8 * 513 * 4);
    ck_assert_uint_eq(ws(&rtx, 1, 8, 65, 64, 2), 0);
    /* the same shape on another device may split differently, but always
     * the same way for the same device */
    uint64_t a = ws(&rtx, 1, 8, 65, 64, 600), b = ws(&rtx, 1, 8, 65, 64, 600);
    ck_assert_uint_eq(a, b);
    ck_assert_uint_gt(a, 0);
    ck_assert_uint_eq(a % (65ull * 8 * 513 * 4), 0);
    /* arguments the size refuses */
    uint64_t bytes;
    kdtree_attn at = {.n_heads = 8};
    kdtree_tree tree = {.n_requests = 0, .n_max = 65};
    kdtree_kv_cache kv = {.page_size = 64, .max_pages = 600};
    ck_assert_int_eq(
        kdtree_verify_attn_workspace_size(&bytes, &h200, &at, &tree, &kv),
        KDTREE_ERROR_INVALID_ARGUMENT);
    tree.n_requests = 1;
    kv.max_pages = 0;
    ck_assert_int_eq(
        kdtree_verify_attn_workspace_size(&bytes, &h200, &at, &tree, &kv),
        KDTREE_ERROR_INVALID_ARGUMENT);
    kv.max_pages = 600;
    at.n_heads = 0;
    ck_assert_int_eq(
        kdtree_verify_attn_workspace_size(&bytes, &h200, &at, &tree, &kv),
        KDTREE_ERROR_SHAPE);
}
END_TEST

/* When the splits run as one cluster a row tile (the wgmma body's
 * in-cluster merge): the cases the rule was read off, and the limits, on
 * the H200 (132 SMs), with the clusters of each size its driver says run
 * at once (cuOccupancyMaxActiveClusters; docs/performance.md, "Ideas
 * tried": cluster sizes, 94014bd). */
static int
cluster_of(const kdt_va_split_costs *c, int R, int H, int n_max, int pages,
           int max_cluster)
{
    static const int64_t fit[9] = {0, 0, 66, 39, 30, 22, 17, 15, 15};
    const int64_t cap = (int64_t)pages * 64;
    int s = kdt_va_pick_splits(c, R, n_max, H, cap, 132);
    return kdt_va_pick_cluster(c, s, R, n_max, H, cap, 132, fit, max_cluster);
}

START_TEST(cluster_rule)
{
    const kdt_va_split_costs *wg = &kdt_va_costs_wgmma;
    /* 9 row tiles at 4k: 11 splits through the workspace, or 8 as one
     * cluster (72 blocks): the cluster, measured 1.11x */
    ck_assert_int_eq(kdt_va_pick_splits(wg, 1, 65, 8, 66 * 64, 132), 11);
    ck_assert_int_eq(cluster_of(wg, 1, 8, 65, 66, 8), 8);
    /* no clusters on the device, or a body without the merge */
    ck_assert_int_eq(cluster_of(wg, 1, 8, 65, 66, 1), 1);
    ck_assert_int_eq(cluster_of(&kdt_va_costs_mma, 1, 8, 65, 66, 8), 1);
    /* 65 row tiles at 4k: 2 ways either way, the cluster (1.09x) */
    ck_assert_int_eq(cluster_of(wg, 1, 64, 65, 66, 8), 2);
    /* 17 row tiles at 4k: 6 through the workspace beat 4 clustered
     * (0.92x); 6 clustered (the 17 clusters of 6 that fit) beat them
     * (1.08-1.10x); 8 clustered would be two waves */
    ck_assert_int_eq(cluster_of(wg, 1, 16, 65, 66, 8), 6);
    ck_assert_int_eq(cluster_of(wg, 1, 16, 65, 66, 4), 1);
    /* ... and one more row tile than fit as clusters of 6: the workspace */
    ck_assert_int_eq(cluster_of(wg, 1, 8, 144, 66, 8), 1);
    /* 33 row tiles: 4 clustered is 132 blocks, but only 30 clusters of 4
     * fit at once (measured 0.52x), and 3 clustered (odd) ran 0.87x:
     * the workspace, at 4k and 32k */
    ck_assert_int_eq(cluster_of(wg, 1, 8, 257, 66, 8), 1);
    ck_assert_int_eq(cluster_of(wg, 1, 8, 257, 514, 8), 1);
    /* 8 requests of 9 row tiles: 2 clustered is 144 blocks, two waves */
    ck_assert_int_eq(cluster_of(wg, 8, 8, 65, 66, 8), 1);
    /* 9 row tiles at 32k: 14 splits beat 8 clustered (0.70x) */
    ck_assert_int_eq(cluster_of(wg, 1, 8, 65, 514, 8), 1);
    /* unsplit (130 row tiles): nothing to cluster */
    ck_assert_int_eq(cluster_of(wg, 1, 128, 65, 66, 8), 1);
    /* at least 4 tiles a split: 16 tiles make 4 clustered at most */
    ck_assert_int_eq(cluster_of(wg, 1, 8, 65, 16, 8), 4);
    ck_assert_int_eq(cluster_of(wg, 1, 8, 65, 8, 8), 1);
}
END_TEST

/* A runtime made without a target gets one on first use; the workspace
 * size fixes it then, so the split it sizes for is the one every launch
 * takes (the launch reads the same target, whatever loads first). */
START_TEST(size_fixes_target)
{
    static kdtree_runtime fresh;
    fresh.cc_major = 9;
    strcpy(fresh.arch, "sm_90a");
    fresh.sm_count = 132;
    fresh.max_smem_optin = 232448;
    ck_assert_int_eq(atomic_load(&fresh.target_ready), 0);
    (void)ws(&fresh, 1, 8, 65, 64, 600);
    ck_assert_int_eq(atomic_load(&fresh.target_ready), 1);
    /* NVRTC builds sm_90a: the wgmma body, 14 splits as on the H200 */
    ck_assert_str_eq(kdtree_runtime_target(&fresh), "sm_90a");
    ck_assert_uint_eq(ws(&fresh, 1, 8, 65, 64, 600),
                      14ull * 65 * 8 * 513 * 4);
}
END_TEST

/* The wgmma body over an e4m3 cache, both arithmetics (MATH=bf16: the
 * cache widened on chip; MATH=e4m3: FP8 wgmma), at every shape above;
 * and MATH=e4m3 as PTX for compute_90a. */
START_TEST(compile_e4m3_wgmma)
{
    static const char *const kinds[] = {",KV=e4m3", ",KV=e4m3,MATH=e4m3"};
    char shape[96];
    for (int k = 0; k < 2; k++)
        for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            snprintf(shape, sizeof shape, "%s%s", shapes[i], kinds[k]);
            int cached = -1;
            int st = kdtree_compile(&cached, "sm_90a", "verify_attn", shape);
            ck_assert_msg(st == KDTREE_OK, "sm_90a verify_attn %s: %s: %s",
                          shape, kdtree_status_name(st), kdtree_last_error());
        }
    int st = kdtree_compile(NULL, "compute_90a", "verify_attn",
                            "H=8,PAGE=64,N_MAX=65,KV=e4m3,MATH=e4m3");
    ck_assert_msg(st == KDTREE_OK, "compute_90a MATH=e4m3: %s: %s",
                  kdtree_status_name(st), kdtree_last_error());
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("compile_attn");
    TCase *tc = tcase_create("compile_attn");
    /* NVRTC on a 2-core CI machine: seconds a kernel. */
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, compile_extremes);
    tcase_add_test(tc, compile_e4m3);
    tcase_add_test(tc, split_rule);
    tcase_add_test(tc, cluster_rule);
    tcase_add_test(tc, size_fixes_target);
    tcase_add_test(tc, compile_e4m3_wgmma);
    suite_add_tcase(s, tc);
    return s;
}

/* One process (the compiles share NVRTC and one cache), in a temporary
 * cache directory; skipped without NVRTC. */
int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_NO_FORK | KDT_TEST_NVRTC |
                                    KDT_TEST_TEMP_CACHE);
}
