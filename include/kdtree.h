/*
 * kdtree.h: the public C API of libkdtree (kdtree-jit).
 *
 * libkdtree ships the CUDA kernels of one DDTree speculative-decoding round
 * (draft_topk, build_ddtree, verify_attn, tree_accept) as source text,
 * compiles them at run time with NVRTC for the GPU it finds, with the
 * problem's shapes baked in as constants, keeps the cubins in an on-disk
 * cache, and launches them through the CUDA Driver API.  The kernels'
 * contract is specs/kernels.md; the architecture is design.md.
 *
 * Conventions:
 *  - Every function that can fail returns an int32_t status: KDTREE_OK (0)
 *    or one of the negative kdtree_status values, whose meanings never
 *    change.  kdtree_status_name() names one; kdtree_last_error() gives this
 *    thread's detail for the last failure (never NULL).
 *  - Out-parameters come first.  Handles are opaque; destroy accepts NULL.
 *  - Device pointers are uint64_t (a CUdeviceptr); 0 means "none" where an
 *    argument is documented as optional.  Streams are void * (a CUstream);
 *    NULL is the legacy default stream.
 *  - Kernels launch asynchronously on the caller's stream in the device's
 *    primary context; the calling thread's current context is left as it
 *    was.  Nothing on the launch path synchronises, so a round can be
 *    captured in a CUDA graph once its shapes were prepared.
 *
 * The region between the KDTREE_CDEF markers is read by the Python binding
 * as its cffi cdef: it holds no macros, attributes, varargs, bitfields or
 * unions, and passes no struct by value.
 */
#ifndef KDTREE_H
#define KDTREE_H

#include <stddef.h>
#include <stdint.h>

/* The library's version; kdtree_version_string() gives it at run time. */
#define KDTREE_VERSION_MAJOR 0
#define KDTREE_VERSION_MINOR 1
#define KDTREE_VERSION_PATCH 0
/* Bumped whenever a declaration below changes incompatibly (a struct's
 * layout, an argument list); kdtree_abi_version() gives the value the
 * loaded library was built with, so a binding can refuse a mismatch. */
#define KDTREE_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* KDTREE_CDEF_BEGIN */

/* Status codes.  Fixed values: new ones are appended, none is renumbered. */
typedef enum kdtree_status {
    KDTREE_OK = 0,
    /* An argument is NULL, zero, negative or inconsistent with another;
     * kdtree_last_error() names it and says why. */
    KDTREE_ERROR_INVALID_ARGUMENT = -1,
    /* A device pointer is not aligned as the kernel needs. */
    KDTREE_ERROR_MISALIGNED = -2,
    /* A shape lies outside a kernel's compiled limits (the message names
     * the constant and its allowed range). */
    KDTREE_ERROR_SHAPE = -3,
    /* No kernel of that name, or a shape string that does not parse. */
    KDTREE_ERROR_UNKNOWN_KERNEL = -4,
    /* A host allocation, or a device allocation the driver refused,
     * failed. */
    KDTREE_ERROR_OUT_OF_MEMORY = -5,
    /* The CUDA driver (libcuda.so.1) could not be loaded or initialised. */
    KDTREE_ERROR_NO_DRIVER = -6,
    /* The device ordinal names no device. */
    KDTREE_ERROR_NO_DEVICE = -7,
    /* A compile was needed and NVRTC could not be loaded. */
    KDTREE_ERROR_NO_COMPILER = -8,
    /* NVRTC rejected a kernel; kdtree_last_error() holds its log. */
    KDTREE_ERROR_COMPILE = -9,
    /* The architecture is unknown or NVRTC can target nothing that runs on
     * it. */
    KDTREE_ERROR_ARCH = -10,
    /* A CUDA driver call failed; kdtree_last_error() names the call and the
     * CUresult. */
    KDTREE_ERROR_CUDA = -11,
    /* The cache could not be used and the request could not be served
     * without it. */
    KDTREE_ERROR_CACHE = -12,
    /* The runtime's table of loaded shapes is full. */
    KDTREE_ERROR_TOO_MANY_SHAPES = -13,
    /* A bug in libkdtree: please report kdtree_last_error(). */
    KDTREE_ERROR_INTERNAL = -14
} kdtree_status;

/* Element types of kernel inputs that come in more than one type. */
typedef enum kdtree_dtype {
    KDTREE_DTYPE_F32 = 0,
    KDTREE_DTYPE_BF16 = 1
} kdtree_dtype;

typedef struct kdtree_runtime kdtree_runtime;

/* Process-wide counters of the load path (kdtree_cache_stats()).  The hot
 * path (a launch whose shape is already loaded) counts nothing. */
typedef struct kdtree_cache_stats_t {
    uint64_t memory_hits; /* served from this process's memory */
    uint64_t disk_hits;   /* served from a cache layer on disk */
    uint64_t compiles;    /* NVRTC compiles */
    uint64_t loads;       /* cuModuleLoadData calls */
    uint64_t disk_misses; /* lookups that found no valid entry on disk */
    uint64_t disk_rejects; /* entries found but refused (corrupt, stale) */
    double compile_ms;    /* total wall time inside NVRTC */
    double load_ms;       /* total wall time in cuModuleLoadData */
    double disk_ms;       /* total wall time reading and verifying entries */
} kdtree_cache_stats_t;

/* ---- library ---------------------------------------------------------- */

/* "MAJOR.MINOR.PATCH". */
const char *kdtree_version_string(void);
/* KDTREE_ABI_VERSION of the loaded library. */
int32_t kdtree_abi_version(void);
/* The enumerator's name ("KDTREE_ERROR_SHAPE"), or "KDTREE_ERROR_UNKNOWN"
 * for a value that is not a status.  Never NULL. */
const char *kdtree_status_name(int32_t status);
/* This thread's detail on its last failure ("" when there was none).  Valid
 * until this thread's next call into the library.  Never NULL. */
const char *kdtree_last_error(void);
/* The largest tree, root included, that the kernels accept (N_MAX). */
int32_t kdtree_max_qlen(void);
/* The registered kernels: 0 <= index < kdtree_kernel_count(). */
int32_t kdtree_kernel_count(void);
/* Name of kernel `index` ("tree_accept"), or NULL past the end. */
const char *kdtree_kernel_name(int32_t index);
/* The kernel's constants with their allowed ranges, as a human-readable
 * line ("N_MAX=1..1025, L=1..1024"), or NULL for an unknown name. */
const char *kdtree_kernel_constants(const char *kernel);
/* A typical shape of the kernel (what the bench and the prebuilt cache
 * use), as a shape string, or NULL for an unknown name. */
const char *kdtree_kernel_default_shape(const char *kernel);

/* Copies the process-wide load-path counters into *out. */
int32_t kdtree_cache_stats(kdtree_cache_stats_t *out);
/* sizeof(kdtree_cache_stats_t), for bindings that allocate it. */
int32_t kdtree_cache_stats_size(void);
/* Zeroes the counters (the bench uses it between phases). */
void kdtree_cache_stats_reset(void);

/* Compile-only: builds `kernel` for `arch` ("sm_90", "sm_120",
 * "compute_90") with the constants of `shape` ("N_MAX=65,L=15"), and
 * publishes it to the cache unless an entry is already there.  Needs NVRTC
 * (on a hit, not even that), no driver and no GPU.  *out_cached is set to 1
 * when the entry was already cached, 0 when it was compiled (out_cached may
 * be NULL). */
int32_t kdtree_compile(int32_t *out_cached, const char *arch,
                       const char *kernel, const char *shape);

/* ---- runtime ---------------------------------------------------------- */

/* A runtime for CUDA device `device` (an ordinal as CUDA counts them).
 * Loads the driver, retains the device's primary context and reads its
 * architecture; compiles nothing yet. */
int32_t kdtree_runtime_create(kdtree_runtime **out, int32_t device);
/* Unloads every module and releases the primary context.  NULL is fine.
 * No launch may be in flight on another thread. */
void kdtree_runtime_destroy(kdtree_runtime *rt);
/* The device's architecture as the runtime targets it ("sm_90a" on
 * Hopper, "sm_120"). */
const char *kdtree_runtime_arch(const kdtree_runtime *rt);
/* The device ordinal the runtime was created for. */
int32_t kdtree_runtime_device(const kdtree_runtime *rt);

/* The load path ahead of time: compile (or fetch from the cache) and load
 * `kernel` with the constants of `shape`, so that later launches of that
 * shape are hot (for example before CUDA-graph capture). */
int32_t kdtree_prepare(kdtree_runtime *rt, const char *kernel,
                       const char *shape);

/* ---- kernels (specs/kernels.md) --------------------------------------- */

/* §1 draft_topk.  logits [n_rows][vocab] of `dtype`; writes lp f32
 * [n_rows][k] and ids i32 [n_rows][k].  Constants: V = vocab, K = k,
 * DTYPE = dtype. */
int32_t kdtree_draft_topk(kdtree_runtime *rt, uint64_t lp, uint64_t ids,
                          uint64_t logits, int32_t dtype, int32_t n_rows,
                          int32_t vocab, int32_t k, void *stream);

/* §2 build_ddtree.  Inputs lp f32 [R][L][K], ids i32 [R][L][K],
 * budget i32 [R], depth_limit i32 [R] (0 = L for all), root_token i32 [R],
 * past_len i32 [R] (0 = zero for all).  Outputs, N_MAX = n_max rows per
 * request: n_nodes [R], token, parent, depth, position, first_child,
 * next_sibling [R][N_MAX], score f32 [R][N_MAX] (0 = not wanted) and
 * anc_mask u32 [R][N_MAX][ceil(N_MAX/32)].  Constants: L, K, N_MAX. */
int32_t kdtree_build_ddtree(kdtree_runtime *rt, uint64_t n_nodes,
                            uint64_t token, uint64_t parent, uint64_t depth,
                            uint64_t position, uint64_t first_child,
                            uint64_t next_sibling, uint64_t score,
                            uint64_t anc_mask, uint64_t lp, uint64_t ids,
                            uint64_t budget, uint64_t depth_limit,
                            uint64_t root_token, uint64_t past_len,
                            int32_t n_requests, int32_t L, int32_t k,
                            int32_t n_max, void *stream);

/* §3 verify_attn workspace: the bytes of device memory (16-byte aligned)
 * that kdtree_verify_attn needs for this shape on this runtime's device;
 * 0 when it needs none.  The size depends only on its arguments and the
 * device, so one allocation serves every round of a shape. */
int32_t kdtree_verify_attn_workspace_size(uint64_t *out_bytes,
                                          kdtree_runtime *rt,
                                          int32_t n_requests, int32_t n_heads,
                                          int32_t n_max, int32_t page_size,
                                          int32_t max_pages);

/* §3 verify_attn: absorbed-MLA tree attention.  q bf16 [R][N_MAX][H][576],
 * kv_cache bf16 [pages][page_size][576], block_table i32 [R][max_pages],
 * past_len i32 [R], n_nodes i32 [R], anc_mask u32 [R][N_MAX][W];
 * writes o bf16 [R][N_MAX][H][512] and lse f32 [R][N_MAX][H] (0 = not
 * wanted).  workspace: at least kdtree_verify_attn_workspace_size() bytes
 * (0 with workspace_bytes 0 when that size is 0).  Constants: H = n_heads,
 * PAGE = page_size, N_MAX = n_max. */
int32_t kdtree_verify_attn(kdtree_runtime *rt, uint64_t o, uint64_t lse,
                           uint64_t q, uint64_t kv_cache, uint64_t block_table,
                           uint64_t past_len, uint64_t n_nodes,
                           uint64_t anc_mask, uint64_t workspace,
                           uint64_t workspace_bytes, int32_t n_requests,
                           int32_t n_heads, int32_t n_max, int32_t page_size,
                           int32_t max_pages, float scale, void *stream);

/* §4 tree_accept.  token, first_child, next_sibling i32 [R][N_MAX],
 * n_nodes i32 [R], target i32 [R][N_MAX], max_accept i32 [R] (0 = no cap);
 * writes accept_len [R], accept_idx and accept_token [R][L+1], bonus [R].
 * Constants: N_MAX = n_max, L. */
int32_t kdtree_tree_accept(kdtree_runtime *rt, uint64_t accept_len,
                           uint64_t accept_idx, uint64_t accept_token,
                           uint64_t bonus, uint64_t token,
                           uint64_t first_child, uint64_t next_sibling,
                           uint64_t n_nodes, uint64_t target,
                           uint64_t max_accept, int32_t n_requests, int32_t L,
                           int32_t n_max, void *stream);

/* KDTREE_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* KDTREE_H */
