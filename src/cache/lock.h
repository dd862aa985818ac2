/*
 * cache/lock.h: the miss path's claim on a key: one compile per key in a
 * process (its place in cache/gate.h) and, where a publish will follow,
 * one per key and cache directory across the processes of a node.
 *
 * The node-wide lock is flock() on <lockdir>/<32 hex>.lock, the hex naming
 * the cache directory by its identity (cache/file.h: kdt_cache_dir_id, so
 * /x/c, /x//c and a link to it are one lock) and the key: processes that
 * publish to different directories never wait on each other.  The lock
 * directory is node-local (cache/settings.h: tmpfs under $XDG_RUNTIME_DIR
 * or /dev/shm), never the cache directory, which may be on NFS where flock
 * is emulated or absent.  It is opened once per claim, checked (ours, not
 * writable by others, not a link), and used only through that descriptor
 * from then on (openat, unlinkat): a lock directory swapped for a link
 * during a wait cannot send the waiter, or the holder's release, anywhere
 * else.  The kernel drops a flock when its holder dies, so a crash never
 * leaves a stuck lock.
 *
 * The holder writes one line into its lock file: who it is (pid, its PID
 * namespace and start time), what it compiles, since when, and whether it
 * will publish (a holder that wrote none is found in /proc/locks).  A
 * waiter reads it to say whom it waits for (at info after
 * a second, at warn after KDT_LOCK_WARN_S), to notice a holder that is
 * stopped (SIGSTOP, a debugger) or gone (its descriptor inherited by
 * another process) and not wait for it, and to stop waiting for a holder
 * that could not publish (the directory cannot be written: nobody will;
 * the holder's entry is in the spill store, whose lock the caller takes
 * next: cache/cache.h).
 * A holder that is stopped or gone for half a second, or has held the lock
 * longer than the timeout, is taken over by exactly one waiter: under a
 * second lock (flock of the lock directory itself), the waiter unlinks the
 * holder's file and locks a new one, which the other waiters then wait
 * for.
 *
 * Layer 5 of the cache (see cache/cache.h): includes cache/gate.h,
 * cache/settings.h, cache/file.h, cache/notice.h, cache/key.h.
 */
#ifndef KDT_CACHE_LOCK_H
#define KDT_CACHE_LOCK_H

#include "cache/gate.h"
#include "cache/key.h"

/* A wait longer than this warns (once per process; info afterwards). */
#define KDT_LOCK_WARN_S 5.0
/* A holder stopped or gone this long is taken over. */
#define KDT_LOCK_DEAD_S 0.5
/* A holder's word that it could not publish counts this long: a
 * directory may be mended meanwhile (cleared from a full disk, remounted
 * read-write). */
#define KDT_LOCK_NOPUBLISH_S 60.0

typedef struct kdt_cache_lock kdt_cache_lock;

/* A claim that holds `gate` (may be NULL) and no node-wide lock yet;
 * `waited`: another thread was in the gate first.  NULL without memory
 * (the gate is then left). */
kdt_cache_lock *kdt_lock_new(kdt_gate *gate, int waited);

/* Takes the node-wide lock of (`dir_id`, `key`) into `l`, waiting for a
 * holder as the top of this file says, at most `timeout_s` seconds on any
 * one holder (0: not at all).  `what` names the compile in the lock file
 * and in messages ("draft_topk (K=8,...) for sm_90a").  Returns 1 when the
 * lock is held; 0 when it is not: the wait was not made (timeout 0), the
 * holder will not publish (`dir_id` is then marked unwritable,
 * cache/notice.h), or no lock can be taken at all (an unusable lock
 * directory, a file system without flock: a notice).  The caller then
 * compiles without it. */
int kdt_lock_node(kdt_cache_lock *l, const char *dir_id, const kdt_key *key,
                  const char *what, double timeout_s);

/* 1 when `l` holds the node-wide lock. */
int kdt_cache_lock_held(const kdt_cache_lock *l);

/* The identity of the cache directory `l` holds the node-wide lock for
 * (the user's, or the spill store: cache/cache.h), or NULL when it holds
 * none.  Valid while `l` is. */
const char *kdt_cache_lock_dir_id(const kdt_cache_lock *l);

/* 1 when the key may have reached a cache since the caller missed it:
 * the claim waited for another thread, or holds the node-wide lock (whose
 * last holder may have published).  The caller then looks it up again
 * before it compiles. */
int kdt_cache_lock_recheck(const kdt_cache_lock *l);

/* Leaves the claim's place in the gate, keeping the node-wide lock: once
 * the blob is in the memory layer, this process's other threads need not
 * wait for the disk.  NULL is fine. */
void kdt_cache_lock_open_gate(kdt_cache_lock *l);

/* Says in the lock file that this holder could not publish into the
 * directory it locked for (its entry, if anywhere, is in the spill store
 * by then): the release then leaves the file with that word in it, so
 * that the processes waiting for this key stop waiting for that directory
 * (and take no lock for it again) instead of compiling one after another.
 * NULL is fine. */
void kdt_cache_lock_publish_failed(kdt_cache_lock *l);

/* Releases the claim: leaves the gate, unlinks the lock file (while still
 * holding it, and only if its name still leads to it) and unlocks it.
 * NULL is fine. */
void kdt_cache_lock_release(kdt_cache_lock *lock);

/* A child's copy of a claim its parent holds, after fork(): closes the
 * child's descriptors and frees the handle, but neither unlocks nor
 * unlinks (that would release the parent's).  NULL is fine. */
void kdt_cache_lock_forget(kdt_cache_lock *lock);

/* Removes the lock files nobody holds from the lock directory (left by
 * processes killed before their release, or by a holder that could not
 * publish), each while holding it, as a release would.  Sets *removed and
 * *failed (with the first failure's reason in `why`).  Returns 0, 1 when
 * there is no lock directory, or -1 when it is unusable (reason in
 * `why`). */
int kdt_cache_lock_sweep(int *removed, int *failed, char *why,
                         size_t why_size);

#endif /* KDT_CACHE_LOCK_H */
