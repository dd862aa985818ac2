// Minimal host emulation of the CUDA features our kernels use: one pthread
// per CUDA thread, barriers for __syncthreads and warp ops.
#pragma once
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <vector>
#include <algorithm>

struct dim3e { unsigned x, y, z; };
extern thread_local dim3e threadIdx;
extern dim3e blockIdx;
extern dim3e blockDim;
extern pthread_barrier_t emu_block_bar;
extern pthread_barrier_t emu_warp_bar[32];
extern unsigned long long emu_slot[32][32];
extern unsigned char emu_dyn_smem[256 * 1024];
extern unsigned emu_dyn_size;

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(x) __attribute__((aligned(x)))
#define __shared__ static

struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline void __trap() { fprintf(stderr, "__trap\n"); abort(); }
extern long emu_bars; // block barriers thread 0 passed (statistics)
static inline void __syncthreads() { if (threadIdx.x == 0) emu_bars++; pthread_barrier_wait(&emu_block_bar); }
static inline int emu_warp() { return threadIdx.x >> 5; }
static inline int emu_lane() { return threadIdx.x & 31; }
static inline void __syncwarp(unsigned m = 0xffffffffu) { pthread_barrier_wait(&emu_warp_bar[emu_warp()]); }
template <class T> static inline T emu_xchg(T v, int src) {
    unsigned long long u = 0; memcpy(&u, &v, sizeof v);
    emu_slot[emu_warp()][emu_lane()] = u;
    __syncwarp();
    unsigned long long r = emu_slot[emu_warp()][src & 31];
    __syncwarp();
    T out; memcpy(&out, &r, sizeof out); return out;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_xchg(v, src); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_xchg(v, emu_lane() ^ o); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, int o) {
    int src = emu_lane() - o; T r = emu_xchg(v, src < 0 ? emu_lane() : src); return src < 0 ? v : r; }
static inline unsigned __ballot_sync(unsigned, int p) {
    unsigned m = 0;
    emu_slot[emu_warp()][emu_lane()] = p ? 1 : 0; __syncwarp();
    for (int l = 0; l < 32; l++) if (emu_slot[emu_warp()][l]) m |= 1u << l;
    __syncwarp(); return m; }
static inline int __any_sync(unsigned mk, int p) { return __ballot_sync(mk, p) != 0; }
template <class T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicMax(T *p, T v) { T o = __atomic_load_n(p, __ATOMIC_SEQ_CST); while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} return o; }
