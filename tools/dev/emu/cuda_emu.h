// Minimal host emulation of the CUDA features our kernels use: one pthread
// per CUDA thread, barriers for __syncthreads and warp ops.
//
// A block's state (shared memory, barriers, warp exchange slots, wgmma
// queues, the race checker's shadow) lives in an emu_block that each
// thread reaches through the thread-local emu_blk, so that the blocks of
// one thread-block cluster run at the same time, each with its own
// shared memory (launch.h runs a grid a cluster at a time).  blockIdx is
// the block's; blockDim is the launch's.
#pragma once
#include <pthread.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <atomic>
#include <deque>
#include <string>
#include <vector>
#include <algorithm>

struct dim3e { unsigned x, y, z; };
extern thread_local dim3e threadIdx;
extern dim3e blockDim;
struct emu_block;
extern thread_local emu_block *emu_blk;
#define blockIdx (emu_blk->idx)

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(x) __attribute__((aligned(x)))
// static shared variables are process-wide: right for the kernels that run
// one block at a time (prep.sh); prep_attn.sh refuses them
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
// the low 32 bits of hi:lo shifted right by sh & 31 (funnel shift, wrap)
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    uint64_t v = (uint64_t)hi << 32 | lo; return (unsigned)(v >> (sh & 31)); }
static inline void __trap() { fprintf(stderr, "__trap\n"); abort(); }
extern long emu_bars; // block barriers thread 0 passed (statistics)

[[noreturn]] void emu_die(const std::string &what, const std::string &s);

#include "emu_race.h"

// ---- barriers -------------------------------------------------------------
// One kind for all: barriers counted in threads, that can arrive without
// waiting (bar.arrive), OR a predicate over a generation (bar.red.or), and
// carry vector clocks for the race checker.  Waiters sleep on the
// generation word (a futex), not on a condition variable, whose broadcast
// would make all of them take the mutex again, one after another.
struct emu_bar {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER; // barrier.cluster's waiters
    int arrived = 0, red = 0, res[4] = {};
    std::atomic<unsigned> gen{0};
    emu_vc acc, vres[4]; // the clocks joined so far, and of the last generations
};

// A cluster: its blocks, run together, and what the watchdog watches.
struct emu_cluster {
    unsigned n = 1;                  // blocks
    emu_block **blocks = nullptr;    // by rank
    emu_bar bar;                     // barrier.cluster
    std::atomic<int> live{0}, blocked{0};
    std::atomic<long> progress{0};   // barrier generations completed
};

struct emu_wg_log; // emu_wgmma.h: a warpgroup's wgmma issue queue

// Shared memory: a window of EMU_SMEM_WINDOW bytes a block, shared address
// = offset in it.  Dynamic shared memory starts at EMU_SMEM_DYN, not at
// 0: the hardware puts it after reserved and static shared memory, so a
// kernel that needs more alignment than 16 bytes must make it itself.
constexpr unsigned EMU_SMEM_DYN = 16;
constexpr unsigned EMU_SMEM_MAX = 232448; // Hopper's per-block opt-in limit
constexpr unsigned EMU_SMEM_WINDOW = 256 * 1024;

struct emu_block {
    dim3e idx;
    unsigned rank = 0;               // in its cluster
    emu_cluster *cl = nullptr;
    unsigned nthreads = 0;
    std::atomic<unsigned> exited{0};
    unsigned dyn_size = 0;
    alignas(1024) unsigned char win[EMU_SMEM_WINDOW];
    emu_bar nbar[16];                // bar.sync 0 is __syncthreads
    emu_bar wbar[32];                // __syncwarp
    emu_bar clacc;                   // this block's clocks at barrier.cluster
    unsigned long long slot[32][32];
    uint32_t wslot[2][32][32][8];
    int or_acc[2] = {};
    emu_wg_log *wg = nullptr;        // one a warpgroup
    emu_shadow shadow;
    std::vector<const char *> waiting; // per thread: what it blocks on
};
#define emu_dyn_smem (emu_blk->win + EMU_SMEM_DYN)
#define emu_dyn_size (emu_blk->dyn_size)

inline void emu_die(const std::string &what, const std::string &s) {
    if (emu_blk)
        fprintf(stderr, "emu: %s: %s (block %u,%u,%u thread %u)\n", what.c_str(), s.c_str(), blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
    else
        fprintf(stderr, "emu: %s: %s\n", what.c_str(), s.c_str());
    abort();
}

// Blocks until pred() under m's lock; counted for the watchdog, which
// calls it a deadlock when every live thread of the cluster is blocked
// and no barrier has completed for a while.
template <class F> static inline void emu_block_wait(pthread_cond_t &cv, pthread_mutex_t &m, const char *what, F pred) {
    if (pred()) return;
    emu_blk->waiting[threadIdx.x] = what;
    emu_blk->cl->blocked++;
    while (!pred()) pthread_cond_wait(&cv, &m);
    emu_blk->cl->blocked--;
    emu_blk->waiting[threadIdx.x] = nullptr;
}

// Arrives at b, a barrier of `count` threads; with `wait`, also waits for
// the generation to complete.  Returns the OR of `pred` over the
// generation (bar.red.or).  A generation's results stay in slot g % 4:
// generation g + 4 cannot complete before this thread arrives again.
static inline int emu_bar_go(emu_bar &b, int count, bool wait, int pred = 0, const char *what = "a barrier") {
    pthread_mutex_lock(&b.mu);
    const unsigned g = b.gen.load();
    b.red |= pred != 0;
    emu_race_release(b.acc);
    if (++b.arrived == count) {
        b.res[g & 3] = b.red; b.red = 0; b.arrived = 0;
        emu_race_publish(b.acc, b.vres[g & 3]);
        b.gen.store(g + 1);
        emu_blk->cl->progress++;
        pthread_mutex_unlock(&b.mu);
        syscall(SYS_futex, &b.gen, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
    } else {
        pthread_mutex_unlock(&b.mu);
        if (wait && b.gen.load() == g) {
            emu_blk->waiting[threadIdx.x] = what;
            emu_blk->cl->blocked++;
            while (b.gen.load() == g) syscall(SYS_futex, &b.gen, FUTEX_WAIT_PRIVATE, g, nullptr, nullptr, 0);
            emu_blk->cl->blocked--;
            emu_blk->waiting[threadIdx.x] = nullptr;
        }
    }
    if (wait) emu_race_acquire(b.vres[g & 3]);
    emu_race_tick();
    return wait ? b.res[g & 3] : 0;
}

static inline int emu_warp() { return threadIdx.x >> 5; }
static inline int emu_lane() { return threadIdx.x & 31; }
static inline void __syncthreads() {
    if (threadIdx.x == 0) __atomic_fetch_add(&emu_bars, 1, __ATOMIC_RELAXED);
    emu_bar_go(emu_blk->nbar[0], (int)blockDim.x, true, 0, "__syncthreads");
}
static inline void __syncwarp(unsigned m = 0xffffffffu) {
    if (m != 0xffffffffu) emu_die("__syncwarp of a partial mask", std::to_string(m));
    emu_bar_go(emu_blk->wbar[emu_warp()], 32, true, 0, "__syncwarp");
}
template <class T> static inline T emu_xchg(T v, int src) {
    unsigned long long u = 0; memcpy(&u, &v, sizeof v);
    emu_blk->slot[emu_warp()][emu_lane()] = u;
    __syncwarp();
    unsigned long long r = emu_blk->slot[emu_warp()][src & 31];
    __syncwarp();
    T out; memcpy(&out, &r, sizeof out); return out;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_xchg(v, src); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_xchg(v, emu_lane() ^ o); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, int o) {
    int src = emu_lane() - o; T r = emu_xchg(v, src < 0 ? emu_lane() : src); return src < 0 ? v : r; }
static inline unsigned __ballot_sync(unsigned, int p) {
    unsigned m = 0;
    emu_blk->slot[emu_warp()][emu_lane()] = p ? 1 : 0; __syncwarp();
    for (int l = 0; l < 32; l++) if (emu_blk->slot[emu_warp()][l]) m |= 1u << l;
    __syncwarp(); return m; }
static inline int __any_sync(unsigned mk, int p) { return __ballot_sync(mk, p) != 0; }
static inline unsigned __reduce_max_sync(unsigned mk, unsigned v) {
    for (int o = 16; o; o >>= 1) { unsigned y = emu_xchg(v, emu_lane() ^ o); v = v > y ? v : y; }
    return v; }
template <class T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicMax(T *p, T v) { T o = __atomic_load_n(p, __ATOMIC_SEQ_CST); while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} return o; }

// ---- for verify_attn (tools/dev/emu/prep_attn.sh, t_attn.cc) ---------------
// Vector types, __syncthreads_or, and a small interpreter of the PTX that
// the kernels write as inline asm (emu_ptx.h).
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
inline thread_local unsigned emu_or_par;
static inline int __syncthreads_or(int p) {
    int *acc = emu_blk->or_acc;
    unsigned par = emu_or_par++ & 1;
    if (p) __atomic_store_n(&acc[par], 1, __ATOMIC_SEQ_CST);
    __syncthreads();
    int r = __atomic_load_n(&acc[par], __ATOMIC_SEQ_CST);
    if (threadIdx.x == 0) acc[par ^ 1] = 0; // read by all before the last barrier
    __syncthreads();
    return r;
}

#include "emu_ptx.h"
