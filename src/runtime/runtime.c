/*
 * runtime/runtime.c: a device's runtime (primary context, architecture,
 * target), its table of loaded shapes, and the launch.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "base/error.h"
#include "cuda/nvrtc.h"
#include "jit/obtain.h"
#include "runtime/runtime.h"
#include "base/stats.h"
#include "base/validate.h"

/* ---- create / destroy ---------------------------------------------------- */

/* Publishes the runtime's target: a reader that sees target_ready (an
 * acquire load) sees the whole struct. */
static void
fix_target(kdtree_runtime *rt, const kdt_target *t)
{
    rt->target = *t;
    atomic_store_explicit(&rt->target_ready, 1, memory_order_release);
}

int
kdt_runtime_set_target(kdtree_runtime *rt, const char *target,
                       const char *fn)
{
    kdt_target t;
    if (kdt_target_read(&t, target))
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s: target \"%s\" is not of the form sm_XY, "
                        "sm_XYa or compute_XY (e.g. sm_90, sm_90a, "
                        "compute_90)",
                        fn, target);
    int cc = rt->cc_major * 10 + rt->cc_minor, n = t.major * 10 + t.minor;
    /* Arch-specific code (sm_90a, compute_90a) runs on exactly its own
     * capability, as PTX or as a cubin. */
    int runs = (t.suffix != 'a' || n == cc) &&
               (t.kind == KDT_PAYLOAD_PTX
                    ? n <= cc
                    : t.major == rt->cc_major && n <= cc);
    if (!runs)
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s: target %s does not run on device %d (%s): a "
                        "cubin must be sm_%d0..sm_%d, PTX compute_XY with XY "
                        "<= %d (sm_%da and compute_%da only as themselves)",
                        fn, target, rt->ordinal, rt->arch, rt->cc_major, cc,
                        cc, cc, cc);
    fix_target(rt, &t);
    return KDTREE_OK;
}

/* Both public constructors; `fn` names the caller (and where the target
 * came from) in messages. */
static int
runtime_create(kdtree_runtime **out, int32_t device, const char *target,
               const char *fn)
{
    kdt_clear_error();
    int st = kdt_check_host(fn, "out", out);
    if (st)
        return st;
    *out = NULL;
    const kdt_driver *d = kdt_driver_get(&st);
    if (!d)
        return st;
    int count = 0;
    CUresult r = d->device_get_count(&count);
    if (r != CUDA_SUCCESS)
        return kdt_cuda_fail(d, r, "cuDeviceGetCount");
    if (device < 0 || device >= count)
        return kdt_fail(KDTREE_ERROR_NO_DEVICE,
                        "%s: device = %d, but CUDA sees %d device%s (valid: "
                        "0..%d)",
                        fn, (int)device, count, count == 1 ? "" : "s",
                        count - 1);
    kdtree_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "%s: %zu bytes", fn,
                        sizeof *rt);
    rt->drv = d;
    rt->ordinal = device;
    if ((r = d->device_get(&rt->dev, device)) != CUDA_SUCCESS) {
        free(rt);
        return kdt_cuda_fail(d, r, "cuDeviceGet");
    }
    struct {
        int *dst;
        CUdevice_attribute attr;
    } attrs[] = {
        {&rt->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
        {&rt->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
        {&rt->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
        {&rt->max_smem_optin,
         CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        r = d->device_get_attribute(attrs[i].dst, attrs[i].attr, rt->dev);
        if (r != CUDA_SUCCESS) {
            free(rt);
            return kdt_cuda_fail(d, r, "cuDeviceGetAttribute");
        }
    }
    /* Clusters need the device's support and cuLaunchKernelEx; an old
     * driver that cannot even answer the attribute has neither. */
    int clusters = 0;
    if (d->device_get_attribute(&clusters, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
                                rt->dev) != CUDA_SUCCESS)
        clusters = 0;
    rt->max_cluster = clusters && d->launch_kernel_ex ? KDT_MAX_CLUSTER : 1;
    /* "sm_90a" on Hopper (kdt_arch_suffix) */
    int cc = rt->cc_major * 10 + rt->cc_minor;
    snprintf(rt->arch, sizeof rt->arch, "sm_%d%s", cc, kdt_arch_suffix(cc));
    /* The primary context is the one PyTorch and CuPy use, so our modules
     * and their allocations live in the same context. */
    if ((r = d->primary_ctx_retain(&rt->ctx, rt->dev)) != CUDA_SUCCESS) {
        free(rt);
        return kdt_cuda_fail(d, r, "cuDevicePrimaryCtxRetain");
    }
    pthread_mutex_init(&rt->load_lock, NULL);
    for (int i = 0; i < KDT_TABLE_SIZE; i++)
        atomic_init(&rt->table[i], NULL);
    atomic_init(&rt->target_ready, 0);
    if (target && *target && (st = kdt_runtime_set_target(rt, target, fn))) {
        pthread_mutex_destroy(&rt->load_lock);
        d->primary_ctx_release(rt->dev);
        free(rt);
        return st;
    }
    char name[128] = "";
    d->device_get_name(name, sizeof name, rt->dev);
    kdt_log(KDT_LOG_INFO, "runtime for device %d: %s (%s, %d SMs)%s%s",
            device, name, rt->arch, rt->sm_count,
            rt->target.name[0] ? ", building for " : "", rt->target.name);
    *out = rt;
    return KDTREE_OK;
}

KDT_EXPORT int32_t
kdtree_runtime_create(kdtree_runtime **out, int32_t device)
{
    const char *target = getenv("KDTREE_TARGET");
    return runtime_create(out, device, target,
                          target && *target
                              ? "kdtree_runtime_create (KDTREE_TARGET)"
                              : "kdtree_runtime_create");
}

KDT_EXPORT int32_t
kdtree_runtime_create_for(kdtree_runtime **out, int32_t device,
                          const char *target)
{
    return runtime_create(out, device, target, "kdtree_runtime_create_for");
}

KDT_EXPORT void
kdtree_runtime_destroy(kdtree_runtime *rt)
{
    if (!rt)
        return;
    const kdt_driver *d = rt->drv;
    CUcontext prev = NULL;
    int pushed = d->ctx_push_current(rt->ctx) == CUDA_SUCCESS;
    for (int i = 0; i < KDT_TABLE_SIZE; i++) {
        kdt_loaded *e = atomic_load_explicit(&rt->table[i],
                                             memory_order_acquire);
        if (!e)
            continue;
        d->module_unload(e->module);
        free(e);
    }
    if (pushed)
        d->ctx_pop_current(&prev);
    d->primary_ctx_release(rt->dev);
    pthread_mutex_destroy(&rt->load_lock);
    free(rt);
    /* What this runtime compiled is on disk when destroy returns (the
     * publishing thread may still hold it): a caller may remove the cache
     * directory or start another process next. */
    kdt_cache_flush();
}

KDT_EXPORT const char *
kdtree_runtime_arch(const kdtree_runtime *rt)
{
    return rt ? rt->arch : "";
}

KDT_EXPORT const char *
kdtree_runtime_target(const kdtree_runtime *rt)
{
    if (!rt)
        return "";
    /* Before a target is fixed: the device's own architecture. */
    return atomic_load_explicit(&rt->target_ready, memory_order_acquire)
               ? rt->target.name
               : rt->arch;
}

KDT_EXPORT int32_t
kdtree_runtime_device(const kdtree_runtime *rt)
{
    return rt ? rt->ordinal : -1;
}

/* ---- the table ------------------------------------------------------------ */

static unsigned
shape_hash(int kernel, const int64_t *vals, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)kernel;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)vals[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return (unsigned)h;
}

static int
shape_equal(const kdt_loaded *e, int kernel, const int64_t *vals, int n)
{
    if (e->kernel != kernel)
        return 0;
    for (int i = 0; i < n; i++)
        if (e->vals[i] != vals[i])
            return 0;
    return 1;
}

kdt_loaded *
kdt_runtime_find(kdtree_runtime *rt, int kernel, const int64_t *vals)
{
    int n = kdt_kernel_def_get(kernel)->n_consts;
    unsigned h = shape_hash(kernel, vals, n);
    for (unsigned probe = 0; probe < KDT_TABLE_SIZE; probe++) {
        kdt_loaded *e = atomic_load_explicit(
            &rt->table[(h + probe) & (KDT_TABLE_SIZE - 1)],
            memory_order_acquire);
        if (!e)
            return NULL;
        if (shape_equal(e, kernel, vals, n))
            return e;
    }
    return NULL;
}

/* Loads a blob as a module in the primary context and resolves the
 * kernel's functions.  Called with load_lock held. */
static int
load_module(kdtree_runtime *rt, int kernel, const int64_t *vals,
            const kdt_blob *blob, kdt_loaded **out)
{
    const kdt_driver *d = rt->drv;
    const kdt_kernel_def *def = kdt_kernel_def_get(kernel);
    kdt_loaded *e = calloc(1, sizeof *e);
    if (!e)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "a loaded module");
    e->kernel = kernel;
    memcpy(e->vals, vals, sizeof(int64_t) * (size_t)def->n_consts);
    CUresult r = d->ctx_push_current(rt->ctx);
    if (r != CUDA_SUCCESS) {
        free(e);
        return kdt_cuda_fail(d, r, "cuCtxPushCurrent");
    }
    int st = KDTREE_OK;
    /* cuModuleLoadData wants PTX NUL-terminated; our blob's size counts
     * the NUL NVRTC wrote, so the text is already terminated. */
    double t0 = kdt_now_ms();
    r = d->module_load_data(&e->module, blob->data);
    kdt_time_add(KDT_TIME_LOAD, kdt_now_ms() - t0);
    kdt_stat_add(KDT_STAT_LOADS, 1);
    if (r != CUDA_SUCCESS) {
        st = kdt_cuda_fail(d, r, "cuModuleLoadData");
        goto out;
    }
    for (int i = 0; def->functions[i]; i++) {
        r = d->module_get_function(&e->fn[i], e->module, def->functions[i]);
        if (r != CUDA_SUCCESS) {
            st = kdt_cuda_fail(d, r, "cuModuleGetFunction");
            d->module_unload(e->module);
            goto out;
        }
        /* Let every launch ask for up to the device's opt-in shared
         * memory; what a launch actually asks for is its own business. */
        int static_smem = 0;
        d->func_get_attribute(&static_smem,
                              CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, e->fn[i]);
        int dyn = rt->max_smem_optin - static_smem;
        if (dyn > 0)
            d->func_set_attribute(
                e->fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dyn);
        if (i == 0 || dyn < e->max_dynamic_smem)
            e->max_dynamic_smem = dyn;
    }
out : {
    CUcontext prev;
    d->ctx_pop_current(&prev);
}
    if (st) {
        free(e);
        return st;
    }
    *out = e;
    return KDTREE_OK;
}

/* The target's choice on first use (a runtime created without one):
 * what NVRTC can build for the device, or with no compiler the device's
 * own cubin.  Under load_lock. */
static int
pick_target_locked(kdtree_runtime *rt)
{
    if (atomic_load_explicit(&rt->target_ready, memory_order_relaxed))
        return KDTREE_OK;
    int st = KDTREE_OK, kind;
    /* No compiler: only a cached cubin for the device's own architecture
     * can serve. */
    char name[sizeof rt->target.name];
    snprintf(name, sizeof name, "%s", rt->arch);
    const kdt_nvrtc *nv = kdt_nvrtc_get(&st);
    if (nv && (st = kdt_nvrtc_pick_target(nv, rt->cc_major, rt->cc_minor,
                                          name, sizeof name, &kind)))
        return st;
    kdt_target t;
    if (kdt_target_read(&t, name))
        return kdt_fail(KDTREE_ERROR_INTERNAL,
                        "device %d: no target could be read from \"%s\"",
                        rt->ordinal, name);
    fix_target(rt, &t);
    return KDTREE_OK;
}

int
kdt_runtime_resolve_target(kdtree_runtime *rt)
{
    if (atomic_load_explicit(&rt->target_ready, memory_order_acquire))
        return KDTREE_OK;
    pthread_mutex_lock(&rt->load_lock);
    int st = pick_target_locked(rt);
    pthread_mutex_unlock(&rt->load_lock);
    return st;
}

int
kdt_runtime_get(kdt_loaded **out, kdtree_runtime *rt, int kernel,
                const int64_t *vals)
{
    kdt_loaded *e = kdt_runtime_find(rt, kernel, vals);
    if (e) {
        *out = e;
        return KDTREE_OK;
    }
    int st = KDTREE_OK;
    pthread_mutex_lock(&rt->load_lock);
    e = kdt_runtime_find(rt, kernel, vals);
    if (e)
        goto done;
    if (rt->n_loaded >= KDT_TABLE_SIZE * 3 / 4) {
        st = kdt_fail(KDTREE_ERROR_TOO_MANY_SHAPES,
                      "the runtime of device %d holds %d shapes already, "
                      "its limit",
                      rt->ordinal, rt->n_loaded);
        goto done;
    }
    if ((st = pick_target_locked(rt)))
        goto done;
    kdt_blob blob = {0};
    int from;
    double t0 = kdt_now_ms();
    st = kdt_kernel_obtain(kernel, vals, rt->target.name, rt->target.kind,
                           &blob, &from);
    if (st)
        goto done;
    st = load_module(rt, kernel, vals, &blob, &e);
    kdt_blob_free(&blob);
    if (st)
        goto done;
    unsigned h = shape_hash(kernel, vals, kdt_kernel_def_get(kernel)->n_consts);
    for (unsigned probe = 0;; probe++) {
        unsigned slot = (h + probe) & (KDT_TABLE_SIZE - 1);
        if (!atomic_load_explicit(&rt->table[slot], memory_order_relaxed)) {
            /* Release: a reader that sees the pointer sees the entry. */
            atomic_store_explicit(&rt->table[slot], e, memory_order_release);
            break;
        }
    }
    rt->n_loaded++;
    if (kdt_log_enabled(KDT_LOG_INFO)) {
        static const char *const src[] = {"compiled", "memory", "layer",
                                          "cache"};
        char shape[256];
        kdt_shape_format(kernel, vals, shape, sizeof shape);
        kdt_log(KDT_LOG_INFO, "loaded %s (%s) for %s from %s in %.2f ms",
                kdt_kernel_def_get(kernel)->name, shape, rt->target.name,
                src[from], kdt_now_ms() - t0);
    }
done:
    pthread_mutex_unlock(&rt->load_lock);
    if (st == KDTREE_OK)
        *out = e;
    return st;
}

/* ---- launch ---------------------------------------------------------------- */

int
kdt_runtime_ready(kdt_loaded **out, kdtree_runtime *rt, const char *fn,
                  int kernel, const int64_t *vals, unsigned smem, int too_big)
{
    kdt_loaded *e;
    int st = kdt_runtime_get(&e, rt, kernel, vals);
    if (st)
        return st;
    if ((int64_t)smem > e->max_dynamic_smem) {
        char shape[256];
        kdt_shape_format(kernel, vals, shape, sizeof shape);
        return kdt_fail(too_big,
                        "%s: %s (%s) built for %s needs %u bytes of shared "
                        "memory a block; device %d (%s) allows %d",
                        fn, kdt_kernel_def_get(kernel)->name, shape,
                        rt->target.name, smem, rt->ordinal, rt->arch,
                        e->max_dynamic_smem);
    }
    *out = e;
    return KDTREE_OK;
}

/* A cluster dimension as the driver takes it: 0 counts as 1. */
static unsigned
cluster_dim(unsigned n)
{
    return n ? n : 1;
}

/* Whether c asks for clusters of more than one block. */
static int
clustered(const kdt_launch_config *c)
{
    return cluster_dim(c->cluster.x) * cluster_dim(c->cluster.y) *
               cluster_dim(c->cluster.z) >
           1;
}

/* c as cuLaunchKernelEx takes it (`attr` holds the cluster). */
static CUlaunchConfig
driver_config(CUlaunchAttribute *attr, const kdt_launch_config *c)
{
    memset(attr, 0, sizeof *attr);
    attr->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr->value.clusterDim.x = cluster_dim(c->cluster.x);
    attr->value.clusterDim.y = cluster_dim(c->cluster.y);
    attr->value.clusterDim.z = cluster_dim(c->cluster.z);
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = c->grid.x;
    cfg.gridDimY = c->grid.y;
    cfg.gridDimZ = c->grid.z;
    cfg.blockDimX = c->block;
    cfg.blockDimY = 1;
    cfg.blockDimZ = 1;
    cfg.sharedMemBytes = c->smem;
    cfg.hStream = (CUstream)c->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

int
kdt_cluster_fit(kdtree_runtime *rt, kdt_loaded *e, unsigned cluster,
                unsigned block_x, unsigned smem)
{
    if (cluster < 2 || cluster > (unsigned)rt->max_cluster)
        return 0;
    int n = atomic_load_explicit(&e->cluster_fit[cluster],
                                 memory_order_relaxed);
    if (n)
        return n > 0 ? n : 0;
    /* Racing callers ask the same question and store the same answer. */
    const kdt_driver *d = rt->drv;
    n = -1;
    if (d->occupancy_max_active_clusters &&
        d->ctx_push_current(rt->ctx) == CUDA_SUCCESS) {
        const kdt_launch_config one = {
            .grid = {1, cluster, 1},
            .block = block_x,
            .smem = smem,
            .cluster = {1, cluster, 1},
        };
        CUlaunchAttribute attr;
        CUlaunchConfig cfg = driver_config(&attr, &one);
        int got = 0;
        if (d->occupancy_max_active_clusters(&got, e->fn[0], &cfg) ==
                CUDA_SUCCESS &&
            got > 0)
            n = got;
        CUcontext prev;
        d->ctx_pop_current(&prev);
    }
    atomic_store_explicit(&e->cluster_fit[cluster], n, memory_order_relaxed);
    return n > 0 ? n : 0;
}

/* One launch in whatever context is current. */
static CUresult
launch_now(const kdt_driver *d, CUfunction fn, const kdt_launch_config *c,
           void **args)
{
    if (!clustered(c))
        return d->launch_kernel(fn, c->grid.x, c->grid.y, c->grid.z,
                                c->block, 1, 1, c->smem, (CUstream)c->stream,
                                args, NULL);
    CUlaunchAttribute attr;
    CUlaunchConfig cfg = driver_config(&attr, c);
    return d->launch_kernel_ex(&cfg, fn, args, NULL);
}

int
kdt_launch(kdtree_runtime *rt, CUfunction fn, const kdt_launch_config *c,
           void *params)
{
    const kdt_driver *d = rt->drv;
    void *args[1] = {params};
    CUcontext cur = NULL;
    d->ctx_get_current(&cur);
    CUresult r;
    if (cur == rt->ctx) {
        /* The common case (PyTorch made the primary context current):
         * nothing to switch. */
        r = launch_now(d, fn, c, args);
    } else {
        r = d->ctx_push_current(rt->ctx);
        if (r != CUDA_SUCCESS)
            return kdt_cuda_fail(d, r, "cuCtxPushCurrent");
        r = launch_now(d, fn, c, args);
        CUcontext prev;
        d->ctx_pop_current(&prev);
    }
    if (r != CUDA_SUCCESS)
        return kdt_cuda_fail(d, r,
                             clustered(c) ? "cuLaunchKernelEx"
                                          : "cuLaunchKernel");
    return KDTREE_OK;
}
