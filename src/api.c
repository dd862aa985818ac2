/*
 * api.c: the library-level entry points: versions, limits, prepare and
 * compile-only.  Each kernel's own entry point is in src/kernels/<name>.c.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cache/cache.h"
#include "cache/settings.h"
#include "base/error.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "jit/target.h"
#include "cuda/nvrtc.h"
#include "kdt_limits.h"
#include "runtime/runtime.h"
#include "base/validate.h"

#define STR2(x) #x
#define STR(x) STR2(x)

KDT_EXPORT const char *
kdtree_version_string(void)
{
    return STR(KDTREE_VERSION_MAJOR) "." STR(KDTREE_VERSION_MINOR) "." STR(
        KDTREE_VERSION_PATCH);
}

KDT_EXPORT int32_t
kdtree_abi_version(void)
{
    return KDTREE_ABI_VERSION;
}

KDT_EXPORT int32_t
kdtree_max_qlen(void)
{
    return KDT_LIMIT_N_MAX;
}

static int
find_kernel(const char *fn, const char *kernel)
{
    int st = kdt_check_host(fn, "kernel", kernel);
    if (st)
        return st;
    int id = kdt_kernel_find(kernel);
    if (id < 0) {
        char names[256] = "";
        for (int i = 0; i < KDT_KERNEL_COUNT; i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, kdt_kernel_def_get(i)->name,
                    sizeof names - strlen(names) - 1);
        }
        return kdt_fail(KDTREE_ERROR_UNKNOWN_KERNEL,
                        "%s: no kernel \"%s\" (known: %s)", fn, kernel,
                        names);
    }
    return id;
}

KDT_EXPORT int32_t
kdtree_prepare(kdtree_runtime *rt, const char *kernel, const char *shape)
{
    static const char fn[] = "kdtree_prepare";
    kdt_clear_error();
    int st = kdt_check_runtime(rt, fn);
    if (st)
        return st;
    int id = find_kernel(fn, kernel);
    if (id < 0)
        return id;
    int64_t vals[KDT_MAX_CONSTS] = {0};
    if ((st = kdt_shape_parse(id, shape, vals)))
        return st;
    kdt_loaded *m;
    return kdt_runtime_get(&m, rt, id, vals);
}

KDT_EXPORT int32_t
kdtree_compile(int32_t *out_cached, const char *arch, const char *kernel,
               const char *shape)
{
    static const char fn[] = "kdtree_compile";
    kdt_clear_error();
    if (out_cached)
        *out_cached = 0;
    int st = kdt_check_host(fn, "arch", arch);
    if (st)
        return st;
    int kind;
    int n = kdt_target_parse(arch, &kind, NULL);
    if (n < 0)
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s: arch \"%s\" is not of the form sm_XY or "
                        "compute_XY (e.g. sm_90, sm_120)",
                        fn, arch);
    int id = find_kernel(fn, kernel);
    if (id < 0)
        return id;
    if ((st = kdt_target_check(fn, id, NULL, arch)))
        return st;
    int64_t vals[KDT_MAX_CONSTS] = {0};
    if ((st = kdt_shape_parse(id, shape, vals)) ||
        (st = kdt_target_check(fn, id, vals, arch)))
        return st;
    const kdt_nvrtc *nv = kdt_nvrtc_get(&st);
    if (nv && !kdt_nvrtc_supports(nv, n))
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s: NVRTC %s cannot target %s", fn,
                        kdt_nvrtc_version(nv), arch);
    kdt_blob blob = {0};
    int from;
    st = kdt_kernel_obtain(id, vals, arch, kind, &blob, &from);
    /* Compile-only exists to fill the cache: the entry is on disk when it
     * returns, not just queued for the publishing thread. */
    kdt_cache_flush();
    if (st)
        return st;
    kdt_blob_free(&blob);
    if (out_cached)
        *out_cached = from != KDT_FROM_NONE;
    return KDTREE_OK;
}

KDT_EXPORT int32_t
kdtree_add_cache_layer(const char *dir, const char *name)
{
    static const char fn[] = "kdtree_add_cache_layer";
    kdt_clear_error();
    int st = kdt_check_host(fn, "dir", dir);
    if (st)
        return st;
    if ((st = kdt_check_host(fn, "name", name)))
        return st;
    /* A relative path would name another directory whenever the process
     * changed its working directory. */
    if (dir[0] != '/')
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: \"%s\" is not an absolute path", fn, dir);
    int r = kdt_cache_add_package_layer(dir, name);
    if (r < 0)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: %s not added: %d layers already, or no memory",
                        fn, dir, KDT_CACHE_MAX_PACKAGE_LAYERS);
    kdt_log(KDT_LOG_INFO, "cache: read-only layer %s (%s)%s", dir, name,
            r ? " was added already" : " added");
    return KDTREE_OK;
}
