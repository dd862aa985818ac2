// cuda_check.h: CK(call) for the development tools built with nvcc: a
// failing CUDA runtime call prints itself and its error, and exits.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                             \
    do {                                                                  \
        cudaError_t e_ = (x);                                             \
        if (e_ != cudaSuccess) {                                          \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));      \
            exit(1);                                                      \
        }                                                                 \
    } while (0)
