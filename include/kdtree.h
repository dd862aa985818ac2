/*
 * kdtree.h: the public C API of libkdtree (kdtree-jit).
 *
 * libkdtree ships the CUDA kernels of one DDTree speculative-decoding round
 * (draft_topk, build_ddtree, verify_attn, tree_accept) as source text,
 * compiles them at run time with NVRTC for the GPU it finds, with the
 * problem's shapes baked in as constants, keeps the cubins in an on-disk
 * cache, and launches them through the CUDA Driver API.  The kernels'
 * contract is docs/contract.md; the architecture docs/architecture.md;
 * the conventions below are docs/conventions.md's.
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
 *  - Data that flows from one kernel to the next travels as one struct of
 *    device pointers and the sizes that go with them, passed by pointer:
 *    draft_topk writes a kdtree_draft that build_ddtree reads; build_ddtree
 *    writes a kdtree_tree that verify_attn and tree_accept read as it is;
 *    tree_accept writes a kdtree_accept.  The batch's per-request inputs
 *    are one kdtree_requests.  So a round reads draft -> tree -> verify ->
 *    accept, and no call has a row of same-typed pointers to swap.  A
 *    struct is only read during the call: it may live on the stack.
 *  - Types are named kdtree_<noun> (no _t); functions kdtree_<noun>_<verb>
 *    where they act on a type.
 *  - Kernels launch asynchronously on the caller's stream in the device's
 *    primary context; the calling thread's current context is left as it
 *    was.  Nothing on the launch path synchronises, so a round can be
 *    captured in a CUDA graph once its shapes were prepared.
 *  - The process's signal handling is the program's: the library installs
 *    no handler, and keeps NVRTC from replacing the program's while it
 *    loads and compiles (docs/architecture.md, Signals).
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
#define KDTREE_VERSION_MINOR 3
#define KDTREE_VERSION_PATCH 0
/* Bumped whenever a declaration below changes incompatibly (a struct's
 * layout, an argument list); kdtree_abi_version() gives the value the
 * loaded library was built with, so a binding can refuse a mismatch. */
#define KDTREE_ABI_VERSION 3

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
     * the constant and its allowed range), or needs more shared memory
     * than this device gives a block (draft_topk, build_ddtree). */
    KDTREE_ERROR_SHAPE = -3,
    /* No kernel of that name. */
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
    /* The architecture is unknown, NVRTC can target nothing that runs on
     * it, the kernel needs a newer one (verify_attn: sm_80, draft_topk:
     * sm_90; kdtree_last_error() names both), a runtime's explicit target
     * does not run on its device, or the device gives a block less shared
     * memory than verify_attn's body needs. */
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
    KDTREE_ERROR_INTERNAL = -14,
    /* A shape string ("N_MAX=65,L=15") that does not parse: not NAME=VALUE
     * pairs, an unknown or repeated constant, a value that is not a
     * number.  (A value outside its range is KDTREE_ERROR_SHAPE.) */
    KDTREE_ERROR_SHAPE_STRING = -15
} kdtree_status;

/* Element types of kernel inputs that come in more than one type. */
typedef enum kdtree_dtype {
    KDTREE_DTYPE_F32 = 0,
    KDTREE_DTYPE_BF16 = 1
} kdtree_dtype;

typedef struct kdtree_runtime kdtree_runtime;

/* Process-wide counters of the load path (kdtree_cache_stats_get()).  The
 * hot path (a launch whose shape is already loaded) counts nothing. */
typedef struct kdtree_cache_stats {
    uint64_t memory_hits; /* served from this process's memory */
    uint64_t disk_hits;   /* served from a cache layer on disk */
    uint64_t compiles;    /* NVRTC compiles */
    uint64_t loads;       /* cuModuleLoadData calls */
    uint64_t disk_misses; /* lookups that found no valid entry on disk */
    uint64_t disk_rejects; /* entries found but refused (corrupt, stale,
                            * untrusted), and cache directories the
                            * trust rules refused (docs/cache.md) */
    double compile_ms;    /* total wall time inside NVRTC */
    double load_ms;       /* total wall time in cuModuleLoadData */
    double disk_ms;       /* total wall time reading and verifying entries */
} kdtree_cache_stats;

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
int32_t kdtree_cache_stats_get(kdtree_cache_stats *out);
/* sizeof(kdtree_cache_stats), for bindings that allocate it. */
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

/* ---- NVRTC and the driver: which ones, from where ---------------------- */

/* What kdtree_nvrtc_info() and kdtree_driver_info() report.  The strings
 * are never NULL and live as long as the process. */
typedef struct kdtree_library_info {
    /* KDTREE_OK when loaded, else why not (KDTREE_ERROR_NO_COMPILER,
     * KDTREE_ERROR_NO_DRIVER, KDTREE_ERROR_NO_DEVICE). */
    int32_t status;
    /* The CUDA version it implements, 1000 * major + 10 * minor (13000 for
     * 13.0); 0 when nothing was loaded. */
    int32_t version;
    /* The file loaded ("" when none). */
    const char *path;
    /* How it was found: "KDTREE_NVRTC_LIBRARY", "pip wheel
     * nvidia-cuda-nvrtc (CUDA 13)", "the system's loader", "CUDA toolkit
     * directory", ... ("" when none). */
    const char *source;
    /* NVRTC: its version and build id ("13.0 build 1c2f..."); on failure,
     * why (what was tried). */
    const char *detail;
} kdtree_library_info;

/* Loads NVRTC if this process has not yet (no GPU needed) and describes
 * it.  NVRTC is looked for, in order: $KDTREE_NVRTC_LIBRARY alone when set;
 * NVIDIA's pip wheels (nvidia/cu13/lib/libnvrtc.so.13 of
 * nvidia-cuda-nvrtc, nvidia/cuda_nvrtc/lib/libnvrtc.so.12 of
 * nvidia-cuda-nvrtc-cu12) in the directories given to
 * kdtree_set_site_packages(), the one above libkdtree's own, and the
 * usual Python package directories; the system's (the loader's path and
 * ldconfig's cache, /usr/local/cuda(-X.Y)/lib64 and
 * /usr/local/cuda(-X.Y)/targets/<arch>/lib).  Where the driver is already
 * loaded, an NVRTC newer than the CUDA major it supports is passed over
 * for an older one.  Returns the load status, also in out->status. */
int32_t kdtree_nvrtc_info(kdtree_library_info *out);
/* Loads and initialises the CUDA driver ($KDTREE_CUDA_LIBRARY, else
 * libcuda.so.1) if this process has not yet, and describes it. */
int32_t kdtree_driver_info(kdtree_library_info *out);
/* sizeof(kdtree_library_info), for bindings that allocate it. */
int32_t kdtree_library_info_size(void);
/* Directories holding Python packages (site-packages), ':'-separated, to
 * search first for NVIDIA's NVRTC wheels; the Python package passes its
 * interpreter's.  Takes effect only before NVRTC is first loaded:
 * afterwards it returns KDTREE_ERROR_INVALID_ARGUMENT and changes
 * nothing. */
int32_t kdtree_set_site_packages(const char *dirs);

/* ---- the cache: read-only layers that packages ship -------------------- */

/* Adds `dir`, an absolute path, as a read-only cache layer (its entries in
 * dir/v1/, docs/cache.md) searched after $KDTREE_CACHE_PATH's layers and
 * before the prebuilt layer and the user's cache, for the rest of the
 * process.  `name` ("kdtree-jit-cubin 0.3.0") is what it is called when a
 * kernel is in no cache and cannot be compiled.  The Python package adds
 * the kdtree-jit-cubin package's layer (docs/cluster.md).  Adding a
 * directory again changes nothing and returns KDTREE_OK; a relative or
 * empty path, or a ninth layer, is KDTREE_ERROR_INVALID_ARGUMENT. */
int32_t kdtree_add_cache_layer(const char *dir, const char *name);

/* ---- runtime ---------------------------------------------------------- */

/* A runtime for CUDA device `device` (an ordinal as CUDA counts them).
 * Loads the driver, retains the device's primary context and reads its
 * architecture; compiles nothing yet.  The target the kernels are built
 * for is $KDTREE_TARGET when that is set and not empty (as for
 * kdtree_runtime_create_for), else chosen from the device. */
int32_t kdtree_runtime_create(kdtree_runtime **out, int32_t device);
/* kdtree_runtime_create with an explicit target instead of the device's
 * own: "sm_90" on a Hopper part builds the portable kernels (verify_attn's
 * mma.sync body) instead of the sm_90a ones; "compute_90" builds PTX that
 * the driver finishes.  It must run on the device: sm_XY with the
 * device's major version and XY no higher than the device's, or
 * compute_XY with XY no higher; sm_XYa and compute_XYa only on exactly XY
 * (KDTREE_ERROR_ARCH otherwise).  NULL or "" chooses from the device, as
 * kdtree_runtime_create does when $KDTREE_TARGET is not set (it is not
 * read here). */
int32_t kdtree_runtime_create_for(kdtree_runtime **out, int32_t device,
                                  const char *target);
/* Unloads every module and releases the primary context.  NULL is fine.
 * No launch may be in flight on another thread. */
void kdtree_runtime_destroy(kdtree_runtime *rt);
/* The device's architecture as the runtime names it ("sm_90a" on Hopper,
 * "sm_120"). */
const char *kdtree_runtime_arch(const kdtree_runtime *rt);
/* What the runtime builds its kernels for: the target it was created for,
 * else what it chose for the device ("sm_90a"; "compute_89" where NVRTC
 * is older than the device), or the device's own architecture until its
 * first load has chosen. */
const char *kdtree_runtime_target(const kdtree_runtime *rt);
/* The device ordinal the runtime was created for. */
int32_t kdtree_runtime_device(const kdtree_runtime *rt);

/* The load path ahead of time: compile (or fetch from the cache) and load
 * `kernel` with the constants of `shape`, so that later launches of that
 * shape are hot (for example before CUDA-graph capture). */
int32_t kdtree_prepare(kdtree_runtime *rt, const char *kernel,
                       const char *shape);

/* ---- the round's data (docs/contract.md) ------------------------------- */

/* The draft: for each of a request's `depth` (L) draft positions, its `k`
 * (K) most likely tokens.  draft_topk writes it; build_ddtree reads it. */
typedef struct kdtree_draft {
    uint64_t lp;        /* f32 [n_requests][depth][k]: log-probabilities,
                         * descending along k */
    uint64_t ids;       /* i32 [n_requests][depth][k]: their token ids */
    int32_t n_requests; /* R */
    int32_t depth;      /* L: draft positions a request */
    int32_t k;          /* K: candidates a position */
} kdtree_draft;

/* The batch's per-request inputs.  Each kernel reads the fields it names;
 * the others may be anything. */
typedef struct kdtree_requests {
    uint64_t budget;      /* i32 [R]: draft nodes to build, 0..n_max-1
                           * (build_ddtree) */
    uint64_t root_token;  /* i32 [R]: the tree's root, the last round's
                           * bonus token (build_ddtree) */
    uint64_t depth_limit; /* i32 [R], 1..depth, or 0: depth for all
                           * (build_ddtree) */
    uint64_t past_len;    /* i32 [R]: tokens cached before the tree's rows
                           * (verify_attn: required; build_ddtree: the
                           * positions, 0 = zero for all) */
    uint64_t max_accept;  /* i32 [R]: the most rows, root included, a walk
                           * accepts, or 0: no cap (tree_accept) */
    int32_t n_requests;   /* R */
} kdtree_requests;

/* A batch of trees, n_max rows a request (row 0 the root; rows past
 * n_nodes padded harmlessly).  build_ddtree writes it; verify_attn reads
 * n_nodes and anc_mask, tree_accept n_nodes, token, first_child and
 * next_sibling. */
typedef struct kdtree_tree {
    uint64_t n_nodes;      /* i32 [R]: rows used, root included */
    uint64_t token;        /* i32 [R][n_max] */
    uint64_t parent;       /* i32 [R][n_max], -1 at the root */
    uint64_t depth;        /* i32 [R][n_max], 0 at the root */
    uint64_t position;     /* i32 [R][n_max]: past_len + depth (RoPE) */
    uint64_t first_child;  /* i32 [R][n_max], -1 for none */
    uint64_t next_sibling; /* i32 [R][n_max], -1 for none; rank order */
    uint64_t score;        /* f32 [R][n_max], or 0: not wanted */
    uint64_t anc_mask;     /* u32 [R][n_max][ceil(n_max/32)]: bit j of row
                            * i set iff j is i or an ancestor of i */
    int32_t n_requests;    /* R */
    int32_t n_max;         /* N_MAX: rows a request, 1..kdtree_max_qlen() */
} kdtree_tree;

/* What kdtree_kv_cache.data holds (docs/contract.md §3).  0 is bf16, so a
 * struct that names no type is the bf16 cache. */
typedef enum kdtree_kv_dtype {
    KDTREE_KV_BF16 = 0, /* bf16 [pages][page_size][576] */
    KDTREE_KV_E4M3 = 1  /* FP8 e4m3 bytes [pages][page_size][576]; a token's
                         * value is kv->scale x its e4m3 number (sm_89+) */
} kdtree_kv_dtype;

/* The tensor-core arithmetic of verify_attn (kdtree_attn.math;
 * docs/contract.md §3 gives each one's error bound). */
typedef enum kdtree_attn_math {
    /* 16-bit operands, f32 accumulation: bf16; an e4m3 cache widened on
     * chip, exactly (to f16, with the precision of bf16 or better:
     * docs/contract.md §3) */
    KDTREE_ATTN_MATH_BF16 = 0,
    /* e4m3 operands, f32 running sums (an FP8 tensor-core step adds in
     * 13 bits on sm_90a, and the kernels add in f32 sums of a few
     * steps each: docs/contract.md §3): each query row quantized to
     * e4m3 with a scale of its own, the softmax weights quantized for P
     * V; an e4m3 cache only */
    KDTREE_ATTN_MATH_E4M3 = 1
} kdtree_attn_math;

/* The paged KV cache of absorbed MLA: one latent head of 576 dims (512
 * c_kv, then 64 k_pe) a token. */
typedef struct kdtree_kv_cache {
    uint64_t data;        /* [pages][page_size][576] of dtype */
    uint64_t block_table; /* i32 [R][max_pages]: request r's pages in
                           * logical order */
    int32_t page_size;    /* PAGE: tokens a page, 1..256 */
    int32_t max_pages;    /* entries a block_table row */
    int32_t dtype;        /* kdtree_kv_dtype: KV */
    float scale;          /* e4m3: the dequantization scale, finite and
                           * > 0 (SGLang's unscaled cache: 1; vLLM: its
                           * k_scale); bf16: 0 or 1 */
} kdtree_kv_cache;

/* verify_attn's queries, outputs and scratch. */
typedef struct kdtree_attn {
    uint64_t q;               /* bf16 [R][n_max][n_heads][576] */
    uint64_t o;               /* bf16 [R][n_max][n_heads][512] (written) */
    uint64_t lse;             /* f32 [R][n_max][n_heads] (written), or 0 */
    uint64_t workspace;       /* device memory, 16-byte aligned, of
                               * workspace_bytes; 0 when the size is 0 */
    uint64_t workspace_bytes; /* at least kdtree_verify_attn_workspace_size */
    int32_t n_heads;          /* H: query heads sharing the KV head, 1..128 */
    float scale;              /* the logits' scale, finite */
    int32_t math;             /* kdtree_attn_math: MATH */
    int32_t pad0;             /* 0 */
} kdtree_attn;

/* What tree_accept writes: each request's accepted path. */
typedef struct kdtree_accept {
    uint64_t accept_len;   /* i32 [R]: rows accepted, root included, >= 1 */
    uint64_t accept_idx;   /* i32 [R][depth+1]: the path's rows, -1 padded */
    uint64_t accept_token; /* i32 [R][depth+1]: their tokens, -1 padded */
    uint64_t bonus;        /* i32 [R]: the target's token at the path's
                            * end: the next round's root */
    int32_t n_requests;    /* R */
    int32_t depth;         /* L: a path holds at most depth + 1 rows */
} kdtree_accept;

/* ---- kernels (docs/contract.md) ---------------------------------------- */

/* §1 draft_topk.  logits [draft->n_requests * draft->depth][vocab] of
 * `dtype`; writes draft->lp and draft->ids.  Constants: V = vocab,
 * K = draft->k, DTYPE = dtype. */
int32_t kdtree_draft_topk(kdtree_runtime *rt, const kdtree_draft *draft,
                          uint64_t logits, int32_t dtype, int32_t vocab,
                          void *stream);

/* §2 build_ddtree: each request's best-first tree of req->budget[r] nodes
 * from the draft.  Reads draft and req (budget, root_token, depth_limit,
 * past_len); writes every array of *tree (score only when not 0).
 * tree->n_requests, draft->n_requests and req->n_requests must agree.
 * Constants: L = draft->depth, K = draft->k, N_MAX = tree->n_max. */
int32_t kdtree_build_ddtree(kdtree_runtime *rt, const kdtree_tree *tree,
                            const kdtree_draft *draft,
                            const kdtree_requests *req, void *stream);

/* §3 verify_attn workspace: the bytes of device memory kdtree_verify_attn
 * needs for these structs' sizes on this runtime's device (their pointers
 * are not read): attn->n_heads, tree->n_requests and n_max,
 * kv->page_size and max_pages.  0 when it needs none.  The size depends on
 * nothing else, so one allocation serves every round of a shape. */
int32_t kdtree_verify_attn_workspace_size(uint64_t *out_bytes,
                                          kdtree_runtime *rt,
                                          const kdtree_attn *attn,
                                          const kdtree_tree *tree,
                                          const kdtree_kv_cache *kv);

/* §3 verify_attn: absorbed-MLA tree attention.  Row i of request r sees
 * the cached tokens [0, past_len[r]) and the tree rows of its ancestors
 * and itself (tree->anc_mask), whose KV is already in the cache at
 * positions past_len[r] + j.  Reads attn->q, tree (n_nodes, anc_mask),
 * req->past_len and kv; writes attn->o and attn->lse.  Constants:
 * H = attn->n_heads, PAGE = kv->page_size, N_MAX = tree->n_max,
 * KV = kv->dtype, MATH = attn->math. */
int32_t kdtree_verify_attn(kdtree_runtime *rt, const kdtree_attn *attn,
                           const kdtree_tree *tree, const kdtree_requests *req,
                           const kdtree_kv_cache *kv, void *stream);

/* §4 tree_accept: walks each tree from the root, following the child
 * whose token is the target's token at the current row.  target i32
 * [R][tree->n_max]: the target model's token at each tree row.  Reads
 * tree (n_nodes, token, first_child, next_sibling) and req->max_accept;
 * writes *acc.  Constants: N_MAX = tree->n_max, L = acc->depth. */
int32_t kdtree_tree_accept(kdtree_runtime *rt, const kdtree_accept *acc,
                           const kdtree_tree *tree, uint64_t target,
                           const kdtree_requests *req, void *stream);

/* KDTREE_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* KDTREE_H */
