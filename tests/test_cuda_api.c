/*
 * test_cuda_api.c: src/cuda/cuda_api.h, our declarations of the CUDA
 * Driver API and NVRTC, agree with the toolkit's headers: every enum
 * value, size, alignment and field offset listed in cuda_api_list.h.
 * Exit 77 (skip) where the toolkit's headers are not installed.
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_api.h"
#include "cuda_api_facts.h"
#include "harness.h"

static const cuda_api_fact ours[] = {
#include "cuda_api_list.h"
};

/* Every fact of cuda_api_list.h, ours against the toolkit's. */
START_TEST(declarations_agree)
{
    int n = (int)(sizeof ours / sizeof ours[0]), bad = 0;
    ck_assert_msg(cuda_api_toolkit_count == n,
                  "%d facts here, %d from the toolkit", n,
                  cuda_api_toolkit_count);
    for (int i = 0; i < n; i++) {
        const cuda_api_fact *a = &ours[i], *t = &cuda_api_toolkit_facts[i];
        if (strcmp(a->what, t->what) != 0 || a->value != t->value) {
            fprintf(stderr, "MISMATCH %s: ours %lld, the toolkit's %lld\n",
                    a->what, a->value, t->value);
            bad++;
        }
    }
    printf("test_cuda_api: %d of %d declarations agree with the toolkit\n",
           n - bad, n);
    ck_assert_int_eq(bad, 0);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("cuda_api");
    TCase *tc = tcase_create("cuda_api");
    tcase_add_test(tc, declarations_agree);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    if (cuda_api_toolkit_count < 0) {
        printf("SKIP: no CUDA toolkit headers at configure time "
               "(--with-cuda=DIR)\n");
        return 77;
    }
    return kdt_test_main(suite, KDT_TEST_FORK);
}
