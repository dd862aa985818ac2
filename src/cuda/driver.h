/*
 * cuda/driver.h: the CUDA Driver API, dlopen'ed from libcuda.so.1 on first use.
 *
 * The library never links to libcuda, so it loads on machines without a
 * driver (compile-only and cache tools still work there).  Fields are named
 * without the "cu" prefix because cuda.h #defines many cu* names to their
 * _v2 symbols.
 */
#ifndef KDT_DRIVER_H
#define KDT_DRIVER_H

#include "cuda/cuda_api.h"
#include "kdtree.h"

typedef struct kdt_driver {
    int version; /* cuDriverGetVersion: 13000 for CUDA 13.0 */
    CUresult (*init)(unsigned int);
    CUresult (*driver_get_version)(int *);
    CUresult (*get_error_name)(CUresult, const char **);
    CUresult (*get_error_string)(CUresult, const char **);
    CUresult (*device_get_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*device_get_name)(char *, int, CUdevice);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*primary_ctx_release)(CUdevice);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*ctx_push_current)(CUcontext);
    CUresult (*ctx_pop_current)(CUcontext *);
    CUresult (*ctx_synchronize)(void);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*func_get_attribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*launch_kernel)(CUfunction, unsigned int, unsigned int,
                              unsigned int, unsigned int, unsigned int,
                              unsigned int, unsigned int, CUstream, void **,
                              void **);
    /* cuLaunchKernelEx (CUDA 12.0+): thread-block clusters.  Optional: NULL
     * where the driver lacks it, and then no kernel is launched with a
     * cluster (draft_topk runs one block per row). */
    CUresult (*launch_kernel_ex)(const CUlaunchConfig *, CUfunction, void **,
                                 void **);
    /* cuOccupancyMaxActiveClusters (CUDA 12.0+): how many clusters of a
     * launch run at once.  Optional: NULL where the driver lacks it, and
     * then no launch counts on a cluster size fitting. */
    CUresult (*occupancy_max_active_clusters)(int *, CUfunction,
                                              const CUlaunchConfig *);
    /* Used by the tests, the bench and the tools, not by the launch path. */
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*memcpy_htod)(CUdeviceptr, const void *, size_t);
    CUresult (*memcpy_dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*stream_create)(CUstream *, unsigned int);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_destroy)(CUevent);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_synchronize)(CUevent);
    CUresult (*event_elapsed_time)(float *, CUevent, CUevent);
} kdt_driver;

/* The driver table, loaded and cuInit'ed once per process; NULL with
 * *status set (KDTREE_ERROR_NO_DRIVER, or KDTREE_ERROR_CUDA when cuInit
 * fails) and the last error recorded.  Thread-safe. */
const kdt_driver *kdt_driver_get(int *status);

/* Records a failed driver call as this thread's last error: the call, the
 * CUresult's name and text.  Returns KDTREE_ERROR_CUDA, or
 * KDTREE_ERROR_OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY. */
int kdt_cuda_fail(const kdt_driver *d, CUresult r, const char *call);

/* Test hook: the library name to dlopen instead of libcuda.so.1 (NULL
 * restores it).  Only before the first kdt_driver_get(). */
void kdt_driver_set_library(const char *name);

/* The driver's CUDA version (13000 for 13.0) when this process has loaded
 * and initialised it, else 0; never loads it. */
int kdt_driver_loaded_version(void);

/* Loads the driver (as kdt_driver_get) and describes it: which file, found
 * how, which version, or why it could not be loaded.  Returns the load
 * status.  The strings live as long as the process. */
int kdt_driver_describe(kdtree_library_info *out);

#endif /* KDT_DRIVER_H */
