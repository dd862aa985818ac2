/*
 * cuda/cuda_api.h: the parts of the CUDA Driver API and of NVRTC that
 * libkdtree uses, declared here instead of taken from the toolkit's cuda.h
 * and nvrtc.h.
 *
 * The library dlopens both at run time and calls a few dozen functions; it
 * needs only their types, a handful of enum values and two launch structs.
 * Declaring those ourselves lets the library (and the pip package) build
 * with a C compiler alone, on a machine with no CUDA toolkit.  The values
 * and layouts are fixed by NVIDIA's ABI, which never renumbers an enum or
 * moves a field of a released struct; tests/test_cuda_api checks every
 * one declared here against the toolkit's headers wherever they are
 * installed.
 *
 * Only what the library uses is here: add a value with its test entry
 * (tests/cuda_api_list.h), never a whole header.  Never include this
 * together with cuda.h or nvrtc.h: the names are the same.
 */
#ifndef KDT_CUDA_API_H
#define KDT_CUDA_API_H

#if defined(__cuda_cuda_h__) || defined(__NVRTC_H__)
#error "cuda/cuda_api.h replaces cuda.h and nvrtc.h; include one or the other"
#endif

#include <stddef.h>

/* ---- Driver API ---------------------------------------------------------- */

/* CUDA's CUdeviceptr is unsigned long long on every 64-bit platform, the
 * only ones the kernels run on. */
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NO_DEVICE = 100
} CUresult;

typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH = 120
} CUdevice_attribute;

typedef enum CUfunction_attribute_enum {
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
} CUfunction_attribute;

/* cuStreamCreate and cuEventCreate flags. */
enum {
    CU_STREAM_NON_BLOCKING = 1,
    CU_EVENT_DEFAULT = 0
};

/* cuLaunchKernelEx's configuration (CUDA 12.0+).  Of the attribute value
 * union only the cluster dimension is used; `pad` gives the union the
 * toolkit's 64 bytes and `align` the alignment its pointer members give
 * it. */
typedef enum CUlaunchAttributeID_enum {
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
} CUlaunchAttributeID;

typedef union CUlaunchAttributeValue_union {
    char pad[64];
    void *align;
    struct {
        unsigned int x;
        unsigned int y;
        unsigned int z;
    } clusterDim;
} CUlaunchAttributeValue;

typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* ---- NVRTC --------------------------------------------------------------- */

typedef enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1
} nvrtcResult;

typedef struct _nvrtcProgram *nvrtcProgram;

#endif /* KDT_CUDA_API_H */
