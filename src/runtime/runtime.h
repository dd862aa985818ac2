/*
 * runtime/runtime.h: a device's runtime: its primary context, architecture and the
 * table of loaded (kernel, constants) -> module and functions.
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
    /* What NVRTC builds for it: the target the runtime was created for,
     * else chosen on the first load (under load_lock).  target_ready
     * (release, once target and kind are written) lets other threads read
     * them without the lock. */
    char target[16];
    int kind;           /* the payload kind target makes */
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

/* The target the runtime builds for (see kdtree_runtime_target): before
 * kdt_runtime_resolve_target or the first load, the device's own arch. */
const char *kdt_runtime_target(const kdtree_runtime *rt);

/* Fixes the target now if the runtime has none yet (the choice the first
 * load would make), so that a caller's host-side decisions that depend
 * on it (verify_attn's body, hence its splits and workspace) are the
 * ones every later launch sees.  KDTREE_OK, or the choice's error. */
int kdt_runtime_resolve_target(kdtree_runtime *rt);

/* kdt_runtime_find(), and on a miss the load path (obtain the blob, load it
 * in the primary context, resolve its functions, publish to the table). */
int kdt_runtime_get(kdt_loaded **out, kdtree_runtime *rt, int kernel,
                    const int64_t *vals);

/* cuLaunchKernel of `fn` with one by-value parameter struct, on `stream`,
 * in the runtime's primary context; the caller's current context is
 * restored.  Driver failures become KDTREE_ERROR_CUDA with the call named. */
int kdt_launch(kdtree_runtime *rt, CUfunction fn, unsigned grid_x,
               unsigned grid_y, unsigned grid_z, unsigned block_x,
               unsigned smem, void *stream, void *params);

/* kdt_launch with clusters of cluster_x x cluster_y blocks (their
 * product at most rt->max_cluster, each dividing its grid dimension;
 * 1 x 1 is kdt_launch). */
int kdt_launch_cluster(kdtree_runtime *rt, CUfunction fn, unsigned grid_x,
                       unsigned grid_y, unsigned grid_z, unsigned cluster_x,
                       unsigned cluster_y, unsigned block_x, unsigned smem,
                       void *stream, void *params);

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
