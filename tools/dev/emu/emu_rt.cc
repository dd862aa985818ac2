#include "cuda_emu.h"
thread_local dim3e threadIdx;
dim3e blockIdx, blockDim;
pthread_barrier_t emu_block_bar;
pthread_barrier_t emu_warp_bar[32];
unsigned long long emu_slot[32][32];
unsigned char emu_dyn_smem[256 * 1024] __attribute__((aligned(16)));
unsigned emu_dyn_size;
long emu_bars;
