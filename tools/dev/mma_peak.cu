/* mma_peak.cu: the ceiling of mma.sync m16n8k16 bf16 on this GPU (every
 * warp issues independent MMAs on register operands; no memory). */
#include <cstdio>
#include <cuda_runtime.h>
#include "kdt_mma.cuh"

__global__ void __launch_bounds__(256) peak(float *out, int iters, uint32_t seed)
{
    uint32_t a[4] = {seed, seed ^ 1u, seed ^ 2u, seed ^ 3u};
    uint32_t b0 = seed * 7u, b1 = seed * 13u;
    float c[8][4] = {};
    for (int i = 0; i < iters; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
            kdt_mma_bf16(c[j], a, b0, b1);
    float s = 0;
    for (int j = 0; j < 8; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 12345.f) out[0] = s;
}

int main()
{
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float *d; cudaMalloc(&d, 4);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int bps = 1; bps <= 2; ++bps) {
        int iters = 4096;
        peak<<<sms * bps, 256>>>(d, iters, 0x3f803f80u);
        cudaEventRecord(a);
        peak<<<sms * bps, 256>>>(d, iters, 0x3f803f80u);
        cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b);
        double fl = (double)sms * bps * 8 * iters * 8 * 4096.0;
        printf("mma.sync peak, %d blocks/SM of 8 warps: %.1f TFLOP/s\n", bps, fl / ms * 1e-9);
    }
    return 0;
}
