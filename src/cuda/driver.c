/*
 * cuda/driver.c: the CUDA Driver API, dlopen'ed from libcuda.so.1 on first use.
 *
 * The library links to no CUDA library, so it loads on any machine; with no
 * driver, compile-only still works and every launch path returns
 * KDTREE_ERROR_NO_DRIVER with the loader's message.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/dl.h"
#include "cuda/driver.h"
#include "base/error.h"

static kdt_driver drv;
static int load_status = KDTREE_ERROR_INTERNAL;
static char load_error[768];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *library_override;
/* What was loaded, for kdt_driver_describe() and the log. */
static char loaded_path[1024];
static const char *loaded_source = "";
/* drv.version once the driver is initialised, 0 before: read without the
 * once-lock by kdt_driver_loaded_version(). */
static atomic_int published_version;

void
kdt_driver_set_library(const char *name)
{
    library_override = name;
}

/* The symbols we need, by their exported (versioned) names.  Where CUDA
 * has a _v2 of a function, the _v2 is what cuda.h's macro names. */
#define SYM(field, name) {(void **)&drv.field, name}
static const struct {
    void **slot;
    const char *name;
} symbols[] = {
    SYM(init, "cuInit"),
    SYM(driver_get_version, "cuDriverGetVersion"),
    SYM(get_error_name, "cuGetErrorName"),
    SYM(get_error_string, "cuGetErrorString"),
    SYM(device_get_count, "cuDeviceGetCount"),
    SYM(device_get, "cuDeviceGet"),
    SYM(device_get_attribute, "cuDeviceGetAttribute"),
    SYM(device_get_name, "cuDeviceGetName"),
    SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
    SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
    SYM(ctx_get_current, "cuCtxGetCurrent"),
    SYM(ctx_set_current, "cuCtxSetCurrent"),
    SYM(ctx_push_current, "cuCtxPushCurrent_v2"),
    SYM(ctx_pop_current, "cuCtxPopCurrent_v2"),
    SYM(ctx_synchronize, "cuCtxSynchronize"),
    SYM(module_load_data, "cuModuleLoadData"),
    SYM(module_unload, "cuModuleUnload"),
    SYM(module_get_function, "cuModuleGetFunction"),
    SYM(func_get_attribute, "cuFuncGetAttribute"),
    SYM(func_set_attribute, "cuFuncSetAttribute"),
    SYM(launch_kernel, "cuLaunchKernel"),
    SYM(mem_alloc, "cuMemAlloc_v2"),
    SYM(mem_free, "cuMemFree_v2"),
    SYM(memcpy_htod, "cuMemcpyHtoD_v2"),
    SYM(memcpy_dtoh, "cuMemcpyDtoH_v2"),
    SYM(memset_d8, "cuMemsetD8_v2"),
    SYM(stream_create, "cuStreamCreate"),
    SYM(stream_destroy, "cuStreamDestroy_v2"),
    SYM(stream_synchronize, "cuStreamSynchronize"),
    SYM(event_create, "cuEventCreate"),
    SYM(event_destroy, "cuEventDestroy_v2"),
    SYM(event_record, "cuEventRecord"),
    SYM(event_synchronize, "cuEventSynchronize"),
    SYM(event_elapsed_time, "cuEventElapsedTime"),
};
#undef SYM

static void
load(void)
{
    const char *name = library_override;
    loaded_source = library_override ? "test override" : "";
    if (!name) {
        name = getenv("KDTREE_CUDA_LIBRARY");
        if (name && *name)
            loaded_source = "KDTREE_CUDA_LIBRARY";
    }
    if (!name || !*name) {
        name = "libcuda.so.1";
        loaded_source = "the system's loader";
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error,
                 "the CUDA driver could not be loaded (%s): %s", name,
                 e ? e : "unknown error");
        load_status = KDTREE_ERROR_NO_DRIVER;
        return;
    }
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(h, symbols[i].name);
        if (!*symbols[i].slot) {
            /* No cuInit at all: some other library, not an old driver. */
            if (i == 0)
                snprintf(load_error, sizeof load_error,
                         "%s is not the CUDA driver (it has no cuInit); "
                         "KDTREE_CUDA_LIBRARY names the driver's "
                         "libcuda.so.1",
                         name);
            else
                snprintf(load_error, sizeof load_error,
                         "the CUDA driver %s lacks %s (too old a driver?)",
                         name, symbols[i].name);
            load_status = KDTREE_ERROR_NO_DRIVER;
            dlclose(h);
            return;
        }
    }
    kdt_dl_path(h, name, loaded_path, sizeof loaded_path);
    /* Optional: see kdt_driver.launch_kernel_ex. */
    *(void **)&drv.launch_kernel_ex = dlsym(h, "cuLaunchKernelEx");
    *(void **)&drv.occupancy_max_active_clusters =
        dlsym(h, "cuOccupancyMaxActiveClusters");
    /* cuEventElapsedTime_v2 replaces the plain one from CUDA 12.8 on;
     * prefer it where the driver has it (same signature). */
    void *v2 = dlsym(h, "cuEventElapsedTime_v2");
    if (v2)
        *(void **)&drv.event_elapsed_time = v2;

    /* Before cuInit, which may fail: the version says which driver this is
     * either way. */
    drv.driver_get_version(&drv.version);
    CUresult r = drv.init(0);
    if (r != CUDA_SUCCESS) {
        const char *rn = NULL;
        drv.get_error_name(r, &rn);
        snprintf(load_error, sizeof load_error,
                 "cuInit failed: %s (%d); no usable GPU or driver",
                 rn ? rn : "?", (int)r);
        /* No device at all reads as "no driver" to a caller that only
         * wants to know whether it can launch. */
        load_status = r == CUDA_ERROR_NO_DEVICE ? KDTREE_ERROR_NO_DEVICE
                                                 : KDTREE_ERROR_NO_DRIVER;
        return;
    }
    kdt_log(KDT_LOG_INFO, "CUDA driver %d.%d loaded from %s (%s)",
            drv.version / 1000, drv.version % 1000 / 10, loaded_path,
            loaded_source);
    load_status = KDTREE_OK;
    atomic_store(&published_version, drv.version);
}

int
kdt_driver_loaded_version(void)
{
    return atomic_load(&published_version);
}

int
kdt_driver_describe(kdtree_library_info *out)
{
    int st;
    const kdt_driver *d = kdt_driver_get(&st);
    memset(out, 0, sizeof *out);
    out->status = st;
    /* A driver that loaded but whose cuInit failed is still named. */
    out->version = loaded_path[0] ? drv.version : 0;
    out->path = loaded_path;
    out->source = loaded_path[0] ? loaded_source : "";
    out->detail = d ? "" : load_error;
    return st;
}

const kdt_driver *
kdt_driver_get(int *status)
{
    pthread_once(&load_once, load);
    *status = load_status;
    if (load_status != KDTREE_OK) {
        kdt_fail(load_status, "%s", load_error);
        return NULL;
    }
    return &drv;
}

int
kdt_cuda_fail(const kdt_driver *d, CUresult r, const char *call)
{
    const char *name = NULL, *text = NULL;
    if (d) {
        d->get_error_name(r, &name);
        d->get_error_string(r, &text);
    }
    return kdt_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? KDTREE_ERROR_OUT_OF_MEMORY
                                                  : KDTREE_ERROR_CUDA,
                    "%s failed: %s (%d): %s", call, name ? name : "?", (int)r,
                    text ? text : "");
}
