/*
 * test_compile_ddtree.c: compile-only builds (kdtree_compile, NVRTC, no
 * GPU) of draft_topk, build_ddtree and tree_accept for sm_90 and sm_120 at
 * the extremes of their constants, so CI catches a kernel that NVRTC
 * rejects at some shape; and the rules between constants, refused before
 * any compile.  Exits 77 when NVRTC is missing.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kdtree.h"

static const char *const shapes[][2] = {
    {"draft_topk", "V=163840,K=1024,DTYPE=f32"},
    {"draft_topk", "V=163840,K=16,DTYPE=bf16"},
    {"draft_topk", "V=1,K=1,DTYPE=bf16"},
    {"draft_topk", "V=16777216,K=1024,DTYPE=bf16"},
    {"build_ddtree", "L=15,K=1024,N_MAX=1025"}, /* threshold, 512 ranks kept */
    {"build_ddtree", "L=1,K=1,N_MAX=1"},
    {"build_ddtree", "L=128,K=128,N_MAX=513"},
    {"build_ddtree", "L=15,K=512,N_MAX=513"}, /* threshold path, CAP 2048 */
    {"build_ddtree", "L=15,K=64,N_MAX=65"},
    {"build_ddtree", "L=2,K=16,N_MAX=18"},    /* threshold path, CAP 256 */
    {"tree_accept", "N_MAX=1025,L=1024"},
    {"tree_accept", "N_MAX=1,L=1"},
};

START_TEST(compile_extremes)
{
    static const char *const arch[] = {"sm_90", "sm_120"};
    for (int a = 0; a < 2; a++)
        for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int cached = -1;
            int st = kdtree_compile(&cached, arch[a], shapes[i][0],
                                    shapes[i][1]);
            ck_assert_msg(st == KDTREE_OK, "%s %s %s: %s: %s", arch[a],
                          shapes[i][0], shapes[i][1], kdtree_status_name(st),
                          kdtree_last_error());
        }
}
END_TEST

START_TEST(rules_refused)
{
    int st = kdtree_compile(NULL, "sm_90", "draft_topk", "V=8,K=9,DTYPE=f32");
    ck_assert_int_eq(st, KDTREE_ERROR_SHAPE);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "K"));
    st = kdtree_compile(NULL, "sm_90", "build_ddtree", "L=128,K=256,N_MAX=65");
    ck_assert_int_eq(st, KDTREE_ERROR_SHAPE);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "L*K"));
    st = kdtree_compile(NULL, "sm_90", "draft_topk", "V=100,K=8,DTYPE=f16");
    ck_assert_int_ne(st, KDTREE_OK);
    ck_assert_str_eq(kdtree_kernel_default_shape("draft_topk"),
                     "V=163840,K=64,DTYPE=bf16");
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("compile_ddtree");
    TCase *tc = tcase_create("compile_ddtree");
    /* NVRTC on a 2-core CI machine: seconds a kernel. */
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, compile_extremes);
    tcase_add_test(tc, rules_refused);
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
