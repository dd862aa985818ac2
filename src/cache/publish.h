/*
 * cache/publish.h: writing one entry into an entry directory so that no
 * reader, and no crash, ever sees a partial file.
 *
 * The entry goes to a temp file in the same directory (same file system,
 * so the rename is atomic), is fsync'ed and renamed over its final name.
 * The writer holds an flock() on its temp file from creation until the
 * rename, so a sweep anywhere on the node (in any PID namespace) can tell
 * a live writer's file from one left by a writer that died: the kernel
 * drops the lock with its holder (cache/housekeep.c).  The directory is
 * not fsync'ed: the entry's bytes are durable before the rename, so after
 * a power cut its name holds the whole entry or nothing, and a lost rename
 * costs one recompile (the fsync cost a cold start ~0.3 ms a publish).
 *
 * Runs on the publishing thread for the miss path: reads no environment,
 * logs nothing, sets no last error.
 *
 * Layer 5 of the cache (see cache/cache.h): includes cache/file.h,
 * cache/layout.h, cache/testhook.h, cache/key.h.
 */
#ifndef KDT_CACHE_PUBLISH_H
#define KDT_CACHE_PUBLISH_H

#include <stddef.h>

#include "cache/key.h"
#include "cache/testhook.h"

/* Writes `data` (an encoded entry) as the entry of `key` in the entry
 * directory `dir_fd` (named `dir` in reasons: "v1" for one the caller
 * names).  With `durable` the temp
 * file is fsync'ed before the rename; only alias entries go without: a
 * hint, verified like any entry, so one left empty by a power cut is a
 * miss, and skipping its fsync keeps ~0.7 ms off every cold compile.
 * `hooks` (may be NULL) hold the write between its halves
 * (cache/testhook.h).  Returns 0, or -1 with errno set and the reason in
 * `why`. */
int kdt_cache_publish(int dir_fd, const char *dir, const kdt_key *key,
                      const void *data, size_t size, int durable,
                      const kdt_cache_hooks *hooks, char *why,
                      size_t why_size);

#endif /* KDT_CACHE_PUBLISH_H */
