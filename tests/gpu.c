/*
 * gpu.c: the GPU suites' shared set-up (see gpu.h).
 */
#include "config.h"

#include <dlfcn.h>
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

/* The graph calls, by their ABI: graphs and their executables are opaque
 * handles; CU_STREAM_CAPTURE_MODE_GLOBAL is 0 in cuda.h's
 * CUstreamCaptureMode. */
typedef void *gpu_graph;
typedef void *gpu_graph_exec;
static struct {
    CUresult (*begin)(CUstream, int mode);
    CUresult (*end)(CUstream, gpu_graph *);
    CUresult (*instantiate)(gpu_graph_exec *, gpu_graph, unsigned long long);
    CUresult (*launch)(gpu_graph_exec, CUstream);
    CUresult (*exec_destroy)(gpu_graph_exec);
    CUresult (*destroy)(gpu_graph);
} graph;

static void
graph_symbols(void)
{
    if (graph.begin)
        return;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        exit(1);
    }
    static const struct {
        const char *name;
        void **slot;
    } sym[] = {
        {"cuStreamBeginCapture_v2", (void **)&graph.begin},
        {"cuStreamEndCapture", (void **)&graph.end},
        {"cuGraphInstantiateWithFlags", (void **)&graph.instantiate},
        {"cuGraphLaunch", (void **)&graph.launch},
        {"cuGraphExecDestroy", (void **)&graph.exec_destroy},
        {"cuGraphDestroy", (void **)&graph.destroy},
    };
    for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++)
        if (!(*sym[i].slot = dlsym(h, sym[i].name))) {
            fprintf(stderr, "libcuda.so.1 has no %s\n", sym[i].name);
            exit(1);
        }
}

void
gpu_capture_begin(void *stream)
{
    graph_symbols();
    gpu_check_cu(graph.begin((CUstream)stream, 0), "cuStreamBeginCapture");
}

void
gpu_capture_replay(void *stream)
{
    gpu_graph g;
    gpu_graph_exec e;
    gpu_check_cu(graph.end((CUstream)stream, &g), "cuStreamEndCapture");
    gpu_check_cu(graph.instantiate(&e, g, 0), "cuGraphInstantiate");
    gpu_check_cu(graph.launch(e, (CUstream)stream), "cuGraphLaunch");
    gpu_sync();
    gpu_check_cu(graph.exec_destroy(e), "cuGraphExecDestroy");
    gpu_check_cu(graph.destroy(g), "cuGraphDestroy");
}
