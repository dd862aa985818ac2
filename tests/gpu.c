/*
 * gpu.c: the GPU suites' shared set-up (see gpu.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/driver.h"
#include "gpu.h"
#include "runtime/runtime.h"

static kdtree_runtime *rt;
static const kdt_driver *drv;

kdtree_runtime *
gpu_runtime(void)
{
    if (rt)
        return rt;
    int st;
    drv = kdt_driver_get(&st);
    if (!drv) {
        printf("SKIP: no CUDA driver or device: %s\n", kdtree_last_error());
        exit(77);
    }
    int count = 0;
    if (drv->device_get_count(&count) != CUDA_SUCCESS || count == 0) {
        printf("SKIP: no CUDA device\n");
        exit(77);
    }
    st = kdtree_runtime_create(&rt, 0);
    if (st) {
        fprintf(stderr, "kdtree_runtime_create: %s: %s\n",
                kdtree_status_name(st), kdtree_last_error());
        exit(1);
    }
    /* Tests use the driver's memory calls directly: make the runtime's
     * primary context current for them. */
    gpu_check_cu(drv->ctx_set_current(rt->ctx), "cuCtxSetCurrent");
    return rt;
}

void
gpu_check_cu(int r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        if (drv)
            drv->get_error_name((CUresult)r, &name);
        fprintf(stderr, "%s failed: %s (%d)\n", what, name, r);
        exit(1);
    }
}

uint64_t
gpu_alloc(size_t size)
{
    CUdeviceptr p;
    if (size == 0)
        size = 1;
    gpu_check_cu(drv->mem_alloc(&p, size), "cuMemAlloc");
    gpu_check_cu(drv->memset_d8(p, 0xA5, size), "cuMemsetD8");
    /* cuMemsetD8 may still be running when it returns; a kernel on a
     * non-blocking stream would not wait for it. */
    gpu_sync();
    return (uint64_t)p;
}

uint64_t
gpu_upload(const void *host, size_t size)
{
    uint64_t p = gpu_alloc(size);
    if (size)
        gpu_check_cu(drv->memcpy_htod((CUdeviceptr)p, host, size),
                     "cuMemcpyHtoD");
    /* From pageable memory the copy can return before its DMA lands; a
     * kernel on a non-blocking stream (gpu_stream) would not wait. */
    gpu_sync();
    return p;
}

void
gpu_download(void *host, uint64_t dev, size_t size)
{
    gpu_sync();
    if (size)
        gpu_check_cu(drv->memcpy_dtoh(host, (CUdeviceptr)dev, size),
                     "cuMemcpyDtoH");
}

void
gpu_free(uint64_t dev)
{
    if (dev)
        gpu_check_cu(drv->mem_free((CUdeviceptr)dev), "cuMemFree");
}

void
gpu_sync(void)
{
    gpu_check_cu(drv->ctx_synchronize(), "cuCtxSynchronize");
}

void *
gpu_stream(void)
{
    CUstream s;
    gpu_check_cu(drv->stream_create(&s, CU_STREAM_NON_BLOCKING),
                 "cuStreamCreate");
    return s;
}
