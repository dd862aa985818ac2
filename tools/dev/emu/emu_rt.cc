#include "cuda_emu.h"
thread_local dim3e threadIdx;
thread_local emu_block *emu_blk;
dim3e blockDim;
long emu_bars;
