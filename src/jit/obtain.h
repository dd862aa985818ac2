/*
 * jit/obtain.h: from (kernel, constants, target) to a compiled blob: the cache
 * key of a specialisation and the miss path through the cache and NVRTC.
 */
#ifndef KDT_JIT_OBTAIN_H
#define KDT_JIT_OBTAIN_H

#include <stdint.h>

#include "base/blob.h"
#include "cache/key.h"
#include "cuda/nvrtc.h"

/* The whole miss path short of loading: key -> memory -> layers -> user
 * cache -> NVRTC compile -> publish.  `target` is "sm_90" or
 * "compute_89" (kind says which payload that makes).  *from says where it
 * came from (KDT_FROM_NONE: compiled now).  Counts stats. */
int kdt_kernel_obtain(int id, const int64_t *vals, const char *target,
                      int kind, kdt_blob *out, int *from);

/* The compile alone, as the miss path runs it: the kernel's source and
 * headers under their fixed names, the options of the key, NVRTC `nv`;
 * no key, no cache, no load (kdtree-bench times it as the bare compile).
 * *out owns the payload on success. */
int kdt_kernel_compile(const kdt_nvrtc *nv, int id, const int64_t *vals,
                       const char *target, int kind, kdt_blob *out);

/* The preimage and key of (kernel, constants, target) with the loaded
 * NVRTC's version, or with `nvrtc_version` when not NULL (tools that
 * explain entries without NVRTC).  The caller frees pre. */
int kdt_kernel_key(int id, const int64_t *vals, const char *target,
                   const char *nvrtc_version, kdt_preimage *pre,
                   kdt_key *key);

#endif /* KDT_JIT_OBTAIN_H */
