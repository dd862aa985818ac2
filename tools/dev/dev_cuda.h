// dev_cuda.h: helpers for the development tools built with nvcc.  CK(call):
// a failing CUDA runtime call prints itself and its error, and exits.
// median_us(launch, reps, n): the median over reps batches of n
// back-to-back launch() calls of the µs per launch, by CUDA events.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                             \
    do {                                                                  \
        cudaError_t e_ = (x);                                             \
        if (e_ != cudaSuccess) {                                          \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));      \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

template <class F>
static float
median_us(F launch, int reps, int n)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int rep = 0; rep < reps; rep++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < n; i++)
            launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.0f / n);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
