/*
 * cache/memory.h: the in-process memory layer: every blob this process
 * compiled or read, by key, for its later lookups from any thread or
 * runtime.  Safe across fork() (the child keeps a consistent copy).
 *
 * Layer 2 of the cache (see cache/cache.h): includes cache/key.h and
 * base/ only.
 */
#ifndef KDT_CACHE_MEMORY_H
#define KDT_CACHE_MEMORY_H

#include "base/blob.h"
#include "cache/key.h"

/* Returns 1 with a copy in *out (caller frees), 0 when absent, or
 * KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_mem_get(const kdt_key *key, kdt_blob *out);
/* 1 when a blob is kept under `key`, else 0. */
int kdt_mem_has(const kdt_key *key);
/* Keeps a copy of `blob` under `key` (replacing one kept before).  Returns
 * 0 or KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_mem_put(const kdt_key *key, const kdt_blob *blob);
/* Forgets everything. */
void kdt_mem_clear(void);

#endif /* KDT_CACHE_MEMORY_H */
