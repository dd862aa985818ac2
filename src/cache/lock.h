/*
 * cache/lock.h: one compile per key and cache directory across the
 * processes of a node.
 *
 * The lock is flock() on <lockdir>/<32 hex>.lock, the hex naming both the
 * cache directory (as configured, trailing slashes dropped) and the key:
 * processes that publish to different directories never wait on each
 * other.  The lock directory is node-local (cache/settings.h: tmpfs under
 * $XDG_RUNTIME_DIR or /dev/shm), never the cache directory, which may be
 * on NFS where flock is emulated or absent.  The kernel drops a flock when
 * its holder dies, so a crash never leaves a stuck lock.
 *
 * Layer 5 of the cache (see cache/cache.h): includes cache/settings.h,
 * cache/file.h, cache/notice.h, cache/key.h.
 */
#ifndef KDT_CACHE_LOCK_H
#define KDT_CACHE_LOCK_H

#include "cache/key.h"

typedef struct kdt_cache_lock kdt_cache_lock;

/* Takes the lock of (`dir`, `key`), waiting for a holder at most
 * `timeout_s` seconds.  Returns NULL after the wait (logged) or when no
 * lock can be taken at all (an unusable lock directory: a notice). */
kdt_cache_lock *kdt_lock_acquire(const char *dir, const kdt_key *key,
                                 double timeout_s);

/* Unlinks the lock file and releases the lock.  NULL is fine. */
void kdt_cache_lock_release(kdt_cache_lock *lock);

/* A child's copy of a lock its parent holds, after fork(): closes the
 * child's descriptor and frees the handle, but neither unlocks nor unlinks
 * (that would release the parent's).  NULL is fine. */
void kdt_cache_lock_forget(kdt_cache_lock *lock);

#endif /* KDT_CACHE_LOCK_H */
