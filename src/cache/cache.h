/*
 * cache/cache.h: the compiled-kernel cache: in-process memory, read-only layers,
 * and the user's cache directory.
 *
 * One file per entry, named by its key (<dir>/v<FORMAT>/<32 hex>.kdt):
 * a fixed header (magic, format version, key, payload kind, the preimage's
 * and the payload's sizes, XXH3-64 checksums), the preimage text, then the
 * payload (cubin or PTX).  Every load verifies all of it; anything wrong is
 * a logged miss (the caller recompiles and replaces the entry).  Entries are
 * published by temp file + fsync + rename, so no reader ever sees a partial
 * one.  Directories are created 0700.
 *
 * The miss path publishes in the background (kdt_cache_store_async): the
 * blob is in this process's memory layer at once, and one publishing
 * thread per process writes it to disk, so a cold compile does not wait
 * for the fsync.  kdt_cache_flush() waits for that; kdtree_compile(),
 * kdt_cache_memory_clear(), kdtree_runtime_destroy() and a normal exit
 * call it.
 *
 * Where: $KDTREE_CACHE_DIR, else $XDG_CACHE_HOME/kdtree-jit, else
 * $HOME/.cache/kdtree-jit.  KDTREE_CACHE=off|readonly|readwrite (default
 * readwrite).  Read-only layers, searched first: $KDTREE_CACHE_PATH
 * (colon-separated), then the installed prebuilt layer.  Environment
 * variables are read on each lookup (the miss path only), so tests may
 * change them between calls.
 */
#ifndef KDT_CACHE_H
#define KDT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/blob.h"
#include "cache/key.h"


/* Entry format version: part of every key and of the directory name.
 * Bump it when the entry layout or the preimage's fields change. */
#define KDT_CACHE_FORMAT 1

/* Where a lookup was served from. */
enum kdt_cache_source {
    KDT_FROM_NONE = 0,
    KDT_FROM_MEMORY = 1,
    KDT_FROM_LAYER = 2, /* a read-only layer */
    KDT_FROM_USER = 3   /* the user's cache directory */
};

/* Looks `key` up in memory, then each layer, then the user's directory.
 * `preimage` is the text the key was made from: an entry must carry the
 * same.  Returns 1 with *out filled (caller frees) and *from set, 0 on a
 * miss (each rejected entry logged with its reason), or a negative status
 * (only KDTREE_ERROR_OUT_OF_MEMORY). */
int kdt_cache_lookup(const kdt_key *key, const char *preimage,
                     size_t preimage_len, kdt_blob *out, int *from);

/* Keeps the blob in process memory and publishes it to the user's cache
 * directory (unless KDTREE_CACHE is off or readonly) before returning.  A
 * directory that cannot be written, or a full disk, warns once per process
 * and carries on in memory: that is not an error.  Returns 0 or
 * KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_cache_store(const kdt_key *key, const char *preimage,
                    size_t preimage_len, const kdt_blob *blob);

/* One entry to store: a key, the preimage it was made from, the blob. */
typedef struct kdt_cache_item {
    const kdt_key *key;
    const char *preimage;
    size_t preimage_len;
    const kdt_blob *blob;
} kdt_cache_item;

typedef struct kdt_cache_lock kdt_cache_lock;

/* The miss path's store: keeps items[0..n) in process memory now (this
 * process's later lookups, from any thread or runtime, hit at once), then
 * hands their disk publish, and `lock` (may be NULL), to the process's
 * publishing thread, which releases the lock only after the last item is
 * durable on disk, so another process waiting on the lock finds complete
 * entries exactly as if the caller had published them.  All data is copied:
 * the caller's buffers are free when this returns.  Publishes in the
 * calling thread instead when KDT_CACHE_QUEUE_MAX publishes are already
 * waiting (memory stays bounded) or while the library is being unloaded;
 * with KDTREE_CACHE=off|readonly or no directory nothing is queued and the
 * lock is released here.  Disk failures are handled as in kdt_cache_store.
 * items[0] is the entry: returns KDTREE_ERROR_OUT_OF_MEMORY when it cannot
 * be kept (nothing is queued, the lock is released); later items are hints
 * (aliases), dropped when they cannot be kept.  Otherwise 0.  The lock is
 * always taken over: the caller never releases it. */
int kdt_cache_store_async(const kdt_cache_item *items, int n,
                          kdt_cache_lock *lock);

/* Waits until every publish queued by this process before the call is on
 * disk (fsync'ed and renamed) and its lock released.  Cheap when none is
 * queued.  In a child after fork() the parent's queue is not waited for:
 * it is the parent's (cache/async.c). */
void kdt_cache_flush(void);

/* One compile per key across the processes of a node: the miss path takes
 * this advisory lock (a file in a node-local directory: $XDG_RUNTIME_DIR or
 * /dev/shm, never the cache directory, which may be on a network file
 * system), looks the key up again, and only then compiles and publishes.
 * Waits for a holder at most $KDTREE_CACHE_LOCK_TIMEOUT seconds (default
 * 120), then returns NULL and the caller compiles anyway; NULL too when no
 * lock can be taken at all (logged).  A lock dies with its process. */
kdt_cache_lock *kdt_cache_lock_acquire(const kdt_key *key);
void kdt_cache_lock_release(kdt_cache_lock *lock);

/* Forgets the in-process entries (tests, and the bench between phases),
 * after kdt_cache_flush(): the disk is then the source of every entry. */
void kdt_cache_memory_clear(void);

/* ---- entry codec (pure functions; the fuzz target drives decode) ------ */

/* Serialises one entry into a malloc'ed buffer. */
int kdt_entry_encode(const kdt_key *key, const char *preimage,
                     size_t preimage_len, const kdt_blob *blob, void **out,
                     size_t *out_size);

/* A decoded entry: pointers into the buffer given to kdt_entry_decode. */
typedef struct kdt_entry_view {
    kdt_key key;
    int kind;
    const char *preimage;
    size_t preimage_len;
    const void *payload;
    size_t payload_size;
} kdt_entry_view;

/* Verifies and decodes `buf`: magic, format, sizes against `size`, both
 * checksums, the payload kind, and that the preimage hashes to the stored
 * key.  When `expect` is not NULL the stored key must equal it.  Returns 0,
 * or -1 with a short reason in `why` ("bad magic", "payload checksum
 * mismatch", ...). */
int kdt_entry_decode(const void *buf, size_t size, const kdt_key *expect,
                     kdt_entry_view *out, char *why, size_t why_size);

/* The user's cache directory as configured now, or NULL when KDTREE_CACHE
 * is off or no directory can be named ($HOME unset).  The string is
 * malloc'ed; free it. */
char *kdt_cache_user_dir(void);

#endif /* KDT_CACHE_H */
