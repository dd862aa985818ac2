/*
 * runtime/runtime.h: a device's runtime: its primary context, its target
 * and the table of loaded (kernel, constants) -> module and functions; and
 * the launch, which every kernel's launch function reaches through the
 * same two calls (kdt_runtime_ready, then kdt_launch with a
 * kdt_launch_config).
 *
 * The table is an open-addressed array of atomic pointers that only ever
 * gains entries while the runtime lives.  Readers (the launch path) take no
 * lock and allocate nothing: they hash the few constants, probe, and
 * compare.  Writers (the miss path) serialise on the runtime's load mutex,
 * which readers never touch.
 */
#ifndef KDT_RUNTIME_H
#define KDT_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cuda/driver.h"
#include "cuda/nvrtc.h"
#include "jit/registry.h"

#define KDT_TABLE_SIZE 512 /* a power of two; at most 3/4 of it is filled */

/* Blocks a cluster may hold: the portable size. */
#define KDT_MAX_CLUSTER 8

typedef struct kdt_loaded {
    int kernel;
    int64_t vals[KDT_MAX_CONSTS];
    CUmodule module;
    CUfunction fn[KDT_MAX_FUNCS];
    int max_dynamic_smem; /* bytes a launch of fn[i] may ask for */
    /* kdt_cluster_fit's answers for fn[0], by blocks a cluster: 0 not
     * asked yet, -1 none */
    _Atomic int cluster_fit[KDT_MAX_CLUSTER + 1];
} kdt_loaded;

struct kdtree_runtime {
    const kdt_driver *drv;
    int ordinal;
    CUdevice dev;
    CUcontext ctx; /* the device's primary context, retained */
    int cc_major, cc_minor;
    int sm_count;
    int max_smem_optin; /* per block, bytes */
    int max_cluster;    /* blocks a launch's cluster may hold:
                         * KDT_MAX_CLUSTER with cluster launch, else 1 */
    char arch[16];      /* "sm_90a": the device's own architecture */
    /* What NVRTC builds for it, read once from its name: the target the
     * runtime was created for, else chosen on the first load (under
     * load_lock).  target_ready (release, once target is written) lets
     * other threads read it without the lock. */
    kdt_target target;
    _Atomic int target_ready;
    pthread_mutex_t load_lock;
    int n_loaded;
    _Atomic(kdt_loaded *) table[KDT_TABLE_SIZE];
};

/* Hot path: the loaded entry for (kernel, vals), or NULL.  No lock, no
 * allocation. */
kdt_loaded *kdt_runtime_find(kdtree_runtime *rt, int kernel,
                             const int64_t *vals);

/* Fixes the runtime's target to `target` after checking that what it
 * makes runs on the device (cc_major, cc_minor): a cubin for the device's
 * major version and no newer (an arch-specific one, sm_90a, for exactly
 * the device's), or PTX no newer than the device; else
 * KDTREE_ERROR_ARCH naming `fn`.  Only before the runtime is shared. */
int kdt_runtime_set_target(kdtree_runtime *rt, const char *target,
                           const char *fn);

/* Fixes the target now if the runtime has none yet (the choice the first
 * load would make), so that a caller's host-side decisions that depend
 * on it (verify_attn's body, hence its splits and workspace) are the
 * ones every later launch sees: once it returns KDTREE_OK, rt->target
 * holds them.  KDTREE_OK, or the choice's error. */
int kdt_runtime_resolve_target(kdtree_runtime *rt);

/* kdt_runtime_find(), and on a miss the load path (obtain the blob, load it
 * in the primary context, resolve its functions, publish to the table). */
int kdt_runtime_get(kdt_loaded **out, kdtree_runtime *rt, int kernel,
                    const int64_t *vals);

/* The prelude every kernel's launch shares, once its arguments and
 * constants are checked: the loaded entry for (kernel, vals)
 * (kdt_runtime_get: the lock-free lookup; a miss loads or compiles), and
 * `smem`, the dynamic shared memory a block will ask for, against what
 * the entry's functions allow.  When it does not fit: `too_big` (the
 * status docs/contract.md gives the kernel: KDTREE_ERROR_SHAPE where the
 * shape sets smem, KDTREE_ERROR_ARCH where the target's body does),
 * naming `fn`, the shape, the target and both sizes. */
int kdt_runtime_ready(kdt_loaded **out, kdtree_runtime *rt, const char *fn,
                      int kernel, const int64_t *vals, unsigned smem,
                      int too_big);

/* A grid's or a cluster's three dimensions, as the driver takes them. */
typedef struct kdt_dim3 {
    unsigned x, y, z;
} kdt_dim3;

/* What one launch asks of the driver.  Every grid dimension is at least
 * 1.  A cluster dimension of 0 counts as 1, so a config that names no
 * cluster launches without one (cuLaunchKernel); a cluster of more than
 * one block (at most rt->max_cluster, each dimension dividing the
 * grid's) goes through cuLaunchKernelEx. */
typedef struct kdt_launch_config {
    kdt_dim3 grid;
    unsigned block;   /* threads a block, along x */
    unsigned smem;    /* dynamic shared memory a block, bytes */
    kdt_dim3 cluster; /* blocks a cluster */
    void *stream;     /* the caller's CUstream; NULL: the legacy default */
} kdt_launch_config;

/* Launches `fn` as `c` says, with one by-value parameter struct, in the
 * runtime's primary context; the caller's current context is restored.
 * Driver failures become KDTREE_ERROR_CUDA with the call named. */
int kdt_launch(kdtree_runtime *rt, CUfunction fn, const kdt_launch_config *c,
               void *params);

/* How many clusters of `cluster` blocks (dims 1 x cluster x 1) of
 * e->fn[0], `block_x` threads and `smem` bytes a block, the device runs
 * at once (cuOccupancyMaxActiveClusters: a cluster's blocks share a GPC,
 * so this is less than SMs / cluster where GPCs do not divide evenly).
 * 0 when none, when cluster is 1 or past rt->max_cluster, or when the
 * driver cannot say.  Asked once an entry and size (a caller passes the
 * same block and smem every time), then read from e. */
int kdt_cluster_fit(kdtree_runtime *rt, kdt_loaded *e, unsigned cluster,
                    unsigned block_x, unsigned smem);

#endif /* KDT_RUNTIME_H */
