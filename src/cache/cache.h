/*
 * cache/cache.h: the compiled-kernel cache as the rest of the library
 * uses it: lookup and store over the in-process memory layer, the
 * read-only layers, the user's cache directory and the spill store that
 * stands in for it when it cannot be written, the miss path's per-key
 * lock, and the background publish.
 *
 * One file per entry, named by its key (<dir>/v<FORMAT>/<32 hex>.kdt,
 * cache/layout.h; the format: cache/entry.h).  Every load verifies all of
 * it and the trust of the directories it sits in (cache/file.h); anything
 * wrong is a logged miss (the caller recompiles and replaces the entry).
 * Entries are published by temp file + fsync + rename (cache/publish.h),
 * so no reader ever sees a partial one.  Directories are created 0700.
 * Where, and the modes: cache/settings.h.
 *
 * The spill store (cache/settings.h: kdt_cache_spill_dir) is a node-local
 * cache directory of the user's, on tmpfs beside the locks.  In readwrite
 * mode it stands in for a user's directory this process cannot write (a
 * read-only or full file system, one the trust rules refuse, a publish
 * there that failed): what would go there goes to the spill store, the
 * claim on a key is the spill store's lock, and a miss searches it after
 * the user's directory.  So the processes of a node still share one
 * compile of each key.  readonly mode writes nothing, there either.
 *
 * The miss path publishes in the background (kdt_cache_store_async): the
 * blob is in this process's memory layer at once, and one publishing
 * thread per process writes it to disk (cache/worker.h), so a cold
 * compile does not wait for the fsync.  kdt_cache_flush() waits for that;
 * kdtree_compile(), kdt_cache_memory_clear(), kdtree_runtime_destroy() and
 * a normal exit call it.
 *
 * The modules of src/cache/, by layer; each includes only modules of
 * lower layers (and base/), so no call goes up (tests/test_layers.sh
 * checks it, and that no include circle exists anywhere in src/):
 *
 *   1  key       preimage, key, the alias rule
 *      settings  the settings, from the environment
 *      notice    warn-once notices, the record of failed writes
 *      testhook  the publish hooks tests use (env-driven delays, gates)
 *   2  entry     the entry codec (pure)
 *      memory    the in-process layer
 *      gate      one compile per key inside a process
 *   3  layout    names in a cache directory
 *   4  file      trust rules, opening directories, reading entries
 *   5  publish   one entry, atomically, its temp file locked
 *      housekeep stamps, temp sweep, removal, eviction
 *      lock      the miss path's claim: the gate, the node-wide lock
 *   6  job       what one store writes, and running it
 *   7  worker    the publishing thread
 *   8  cache     this: lookup and store on top
 *
 * Layer 8 of the cache: includes the modules below.
 */
#ifndef KDT_CACHE_H
#define KDT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/blob.h"
#include "cache/job.h"
#include "cache/key.h"
#include "cache/lock.h"

/* Where a lookup was served from. */
enum kdt_cache_source {
    KDT_FROM_NONE = 0,
    KDT_FROM_MEMORY = 1,
    KDT_FROM_LAYER = 2, /* a read-only layer */
    KDT_FROM_USER = 3,  /* the user's cache directory */
    KDT_FROM_SPILL = 4  /* the spill store, standing in for it */
};

/* Looks `key` up in memory, then each layer, then the user's directory,
 * then the spill store when it stands in for the user's directory.
 * `preimage` is the text the key was made from: an entry must carry the
 * same.  Returns 1 with *out filled (caller frees) and *from set, 0 on a
 * miss (each rejected entry logged with its reason; a directory refused
 * by the trust rules is a notice, cache/notice.h), or a negative status
 * (only KDTREE_ERROR_OUT_OF_MEMORY). */
int kdt_cache_lookup(const kdt_key *key, const char *preimage,
                     size_t preimage_len, kdt_blob *out, int *from);

/* Keeps the blob in process memory and publishes it to the user's cache
 * directory (unless KDTREE_CACHE is off or readonly) before returning.  A
 * directory that cannot be written, or a full disk, warns once per process
 * and the entry goes to the spill store instead (or stays in memory when
 * there is none): that is not an error.  Returns 0 or
 * KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_cache_store(const kdt_key *key, const char *preimage,
                    size_t preimage_len, const kdt_blob *blob);

/* The miss path's store: keeps items[0..n) in process memory now (this
 * process's later lookups, from any thread or runtime, hit at once), then
 * hands their disk publish, and `lock` (may be NULL), to the process's
 * publishing thread, which releases the lock only after the last item is
 * durable on disk, so another process waiting on the lock finds complete
 * entries exactly as if the caller had published them.  All data is
 * copied: the caller's buffers are free when this returns.  Publishes in
 * the calling thread instead when KDT_CACHE_QUEUE_MAX publishes are
 * already waiting (memory stays bounded) or while the library is being
 * unloaded; with KDTREE_CACHE=off|readonly or no directory nothing is
 * queued and the lock is released here.  Disk failures are handled as in
 * kdt_cache_store.  items[0] is the entry: returns
 * KDTREE_ERROR_OUT_OF_MEMORY when it cannot be kept (nothing is queued,
 * the lock is released); later items are hints (aliases), dropped when
 * they cannot be kept.  Otherwise 0.  The lock is always taken over: the
 * caller never releases it. */
int kdt_cache_store_async(const kdt_cache_item *items, int n,
                          kdt_cache_lock *lock);

/* Waits until every publish queued by this process before the call is on
 * disk (fsync'ed and renamed) and its lock released.  Cheap when none is
 * queued.  In a child after fork() the parent's queue is not waited for:
 * it is the parent's. */
void kdt_cache_flush(void);

/* The miss path's claim on a key (cache/lock.h): one compile per key in
 * this process in every mode (the gate: another thread's compile of the
 * key is waited for), and across the processes of a node that publish to
 * the same directory (the node-wide lock).  Only a process that will
 * publish takes the node-wide lock: not with KDTREE_CACHE=off or
 * readonly, nor without a directory.  For a directory the trust rules
 * refuse, or one it cannot write (a read-only or full file system, a
 * publish of this process that failed there, or a holder's word that it
 * could not publish: cache/notice.h), it takes the spill store's lock
 * instead (none when there is no spill store).  A wait for another
 * process lasts at most
 * KDTREE_CACHE_LOCK_TIMEOUT seconds on any one holder (default 120), and
 * one waiter takes over a holder that is stopped, gone or too slow; the
 * wait says at info whom it waits for after a second, at warn after
 * KDT_LOCK_WARN_S.  `what` names the compile for those messages.  Returns
 * the claim, NULL only without memory; kdt_cache_lock_held() says whether
 * it holds the node-wide lock, kdt_cache_lock_recheck() whether to look
 * the key up again before compiling.  Release with
 * kdt_cache_lock_release(), or hand it to kdt_cache_store_async(). */
kdt_cache_lock *kdt_cache_lock_acquire(const kdt_key *key, const char *what);

/* Forgets the in-process entries (tests, and the bench between phases),
 * after kdt_cache_flush(): the disk is then the source of every entry. */
void kdt_cache_memory_clear(void);

#endif /* KDT_CACHE_H */
