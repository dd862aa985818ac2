#!/bin/sh
# prep.sh IN OUT: make a kernel source (or a header it includes) compile
# on the host: cuda_emu.h first, then one sed rule per inline-asm line the
# three kernels use.  The emulator runs one block at a time, so a cluster
# is always one block (the cluster loads trap if they are ever reached).
sed -e '1i #include "cuda_emu.h"' \
    -e 's|extern __shared__ __align__(16) unsigned char smem\[\];|unsigned char *smem = emu_dyn_smem;|' \
    -e 's|asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));|dyn = emu_dyn_size;|' \
    -e 's|asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));|y = exp2f(x);|' \
    -e 's|asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));|y = log2f(x);|' \
    -e 's|asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));|d = emu_max2_nan(a, b);|' \
    -e 's|asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));|d = emu_max_nan(a, b);|' \
    -e 's|asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));|r = 1;|' \
    -e 's|asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));|r = 0;|' \
    -e 's|asm volatile("barrier.cluster.[a-z.]*;" ::: "memory");||' \
    -e '/cvta.to.shared.u64 t, %1; cvt.u32.u64/,+1d' \
    -e 's|asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(rank));|a = 0; d = a + rank; __trap();|' \
    -e 's|asm volatile("ld.shared::cluster.\([uf][0-9]*\) %0, \[%1\];" : "=[lf]"(v) : "r"(addr) : "memory");|v = 0; (void)addr; __trap();|' "$1" > "$2"
