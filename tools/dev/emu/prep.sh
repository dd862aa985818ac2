#!/bin/sh
# prep.sh IN.cu OUT.cc: make a kernel source compile on the host.
sed -e 's|extern __shared__ __align__(16) unsigned char smem\[\];|unsigned char *smem = emu_dyn_smem;|' \
    -e 's|asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));|dyn = emu_dyn_size;|' \
    -e 's|asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));|y = exp2f(x);|' \
    -e 's|#include "kdt_params.h"|#include "cuda_emu.h"\n#include "kdt_params.h"|' "$1" > "$2"
