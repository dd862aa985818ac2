/*
 * test_cuda_api.c: src/cuda/cuda_api.h, our declarations of the CUDA
 * Driver API and NVRTC, agree with the toolkit's headers: every enum
 * value, size, alignment and field offset listed in cuda_api_list.h.
 * Exit 77 (skip) where the toolkit's headers are not installed.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cuda/cuda_api.h"
#include "cuda_api_facts.h"

static const cuda_api_fact ours[] = {
#include "cuda_api_list.h"
};

int
main(void)
{
    int n = (int)(sizeof ours / sizeof ours[0]);
    if (cuda_api_toolkit_count < 0) {
        fprintf(stderr, "test_cuda_api: no CUDA toolkit headers at configure "
                        "time (--with-cuda=DIR); skipped\n");
        return 77;
    }
    if (cuda_api_toolkit_count != n) {
        fprintf(stderr, "test_cuda_api: %d facts here, %d from the toolkit\n",
                n, cuda_api_toolkit_count);
        return 1;
    }
    int bad = 0;
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
    return bad ? 1 : 0;
}
