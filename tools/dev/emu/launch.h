#pragma once
#include "cuda_emu.h"
template <class P> struct emu_arg { void (*k)(P); P *p; int tid; };
template <class P> static void *emu_thread(void *a) {
    emu_arg<P> *x = (emu_arg<P> *)a;
    threadIdx.x = x->tid; threadIdx.y = threadIdx.z = 0;
    x->k(*x->p);
    return NULL;
}
template <class P> static void emu_launch(void (*k)(P), P p, unsigned grid, unsigned block, unsigned smem) {
    blockDim.x = block; blockDim.y = blockDim.z = 1;
    emu_dyn_size = smem;
    pthread_barrier_init(&emu_block_bar, NULL, block);
    for (unsigned w = 0; w < (block + 31) / 32; w++) pthread_barrier_init(&emu_warp_bar[w], NULL, 32);
    std::vector<pthread_t> th(block);
    std::vector<emu_arg<P>> args(block);
    pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, 256 * 1024);
    for (unsigned b = 0; b < grid; b++) {
        blockIdx.x = b;
        memset(emu_dyn_smem, 0x5A, smem);
        for (unsigned t = 0; t < block; t++) { args[t] = {k, &p, (int)t}; pthread_create(&th[t], &at, emu_thread<P>, &args[t]); }
        for (unsigned t = 0; t < block; t++) pthread_join(th[t], NULL);
    }
    pthread_barrier_destroy(&emu_block_bar);
    for (unsigned w = 0; w < (block + 31) / 32; w++) pthread_barrier_destroy(&emu_warp_bar[w]);
}
