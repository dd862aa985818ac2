/*
 * cuda_api_toolkit.c: tests/cuda_api_list.h over the CUDA toolkit's own
 * cuda.h and nvrtc.h (see test_cuda_api.c).  Built with the toolkit's
 * include directory where configure found it; elsewhere it holds nothing
 * and the test skips.
 */
#include "config.h"

#include "cuda_api_facts.h"

#if KDT_HAVE_TOOLKIT_HEADERS
#include <cuda.h>
#include <nvrtc.h>

const cuda_api_fact cuda_api_toolkit_facts[] = {
#include "cuda_api_list.h"
};
const int cuda_api_toolkit_count =
    (int)(sizeof cuda_api_toolkit_facts / sizeof cuda_api_toolkit_facts[0]);
#else
const cuda_api_fact cuda_api_toolkit_facts[1] = {{"", 0}};
const int cuda_api_toolkit_count = -1;
#endif
