/*
 * cache/job.h: publish jobs, everything one store writes, self-contained.
 *
 * A job is built on the storing thread: it owns encoded copies of the
 * entries (the caller's buffers are free once it is built) and the
 * settings it needs, read from the environment then (the publishing thread
 * must not call getenv(), which races a setenv() elsewhere).  It names one
 * or two directories: the user's cache directory and, where that cannot
 * take the entry, the spill store (cache/settings.h), tried in order.
 * Running it opens a directory (creating and trust-checking it:
 * cache/file.h), publishes each entry, then does the housekeeping once for
 * all of them, with all of them kept: an entry and its alias are one unit,
 * and neither is ever the victim of its own publish's eviction.  The entry
 * goes first and its aliases only once it is durable (fsync'ed and
 * renamed): an alias never names an entry that a failed publish left out.
 * A directory that could not take the entry is marked unwritable for this
 * process (cache/notice.h) until a publish there succeeds, and the next
 * one is tried.
 *
 * `lock` (may be NULL) is released by kdt_job_free(), after the last entry
 * is published, so a process waiting on it finds every entry complete.
 * When the entry did not land in the directory the lock is for, the lock
 * file says so first (kdt_cache_lock_publish_failed), after the spill
 * store has it: the waiters then stop waiting for that directory and find
 * the entry in the spill store.
 *
 * Layer 6 of the cache (see cache/cache.h): includes cache/publish.h,
 * cache/housekeep.h, cache/lock.h, cache/file.h, cache/entry.h,
 * cache/layout.h, cache/settings.h, cache/notice.h, cache/testhook.h.
 */
#ifndef KDT_CACHE_JOB_H
#define KDT_CACHE_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "base/blob.h"
#include "cache/key.h"
#include "cache/lock.h"
#include "cache/testhook.h"

/* One entry to store: a key, the preimage it was made from, the blob. */
typedef struct kdt_cache_item {
    const kdt_key *key;
    const char *preimage;
    size_t preimage_len;
    const kdt_blob *blob;
} kdt_cache_item;

/* One encoded entry of a job. */
typedef struct kdt_publish_entry {
    kdt_key key;
    void *enc; /* kdt_entry_encode()'s buffer, owned by the job */
    size_t size;
    int durable; /* 0 for an alias (see kdt_cache_publish) */
} kdt_publish_entry;

/* A directory a job may publish to. */
typedef struct kdt_publish_dir {
    char *base;         /* a cache directory (malloc'ed) */
    char *dir_id;       /* its identity (kdt_cache_dir_id; malloc'ed) */
    uint64_t max_bytes; /* its cap: KDTREE_CACHE_MAX_BYTES, or
                         * KDTREE_CACHE_SPILL_MAX_BYTES for the spill */
    int spill;          /* 1: the spill store (no links; the test hooks'
                         * failures are not for it) */
} kdt_publish_dir;

typedef struct kdt_publish_job {
    struct kdt_publish_job *next; /* the publishing thread's queue link */
    kdt_publish_dir dir[2];       /* tried in order */
    int n_dirs;
    kdt_cache_hooks hooks;        /* cache/testhook.h */
    kdt_cache_lock *lock;
    int n;
    kdt_publish_entry e[];
} kdt_publish_job;

/* Builds the job that writes items[0..n) (at most 32) to the first of
 * dirs[0..n_dirs) (1 or 2) that takes its entry, and releases `lock`;
 * items[0] is the entry, the rest its aliases.  Items that cannot be
 * encoded are left out (a bad blob stays in memory only), all of them
 * when items[0] cannot be.  Takes the directories' strings and `lock`
 * only when it returns a job (else the caller frees them).  Returns 0
 * with *job (NULL when nothing is left to write), or
 * KDTREE_ERROR_OUT_OF_MEMORY when items[0] cannot be encoded, or the job
 * not made, for want of memory. */
int kdt_job_build(const kdt_cache_item *items, int n,
                  const kdt_publish_dir *dirs, int n_dirs,
                  kdt_cache_lock *lock, kdt_publish_job **job);

/* Publishes the job's entries and does the housekeeping that follows.
 * Failures are reported as notices (cache/notice.h) and leave the entries
 * in memory only; nothing is returned and no last error is set.  Leaves
 * `job` itself unchanged. */
void kdt_job_run(kdt_publish_job *job);

/* Releases the job's lock and frees it.  NULL is fine. */
void kdt_job_free(kdt_publish_job *job);

/* Frees a job inherited over fork() without publishing it or releasing
 * its lock: both are the parent's (kdt_cache_lock_forget). */
void kdt_job_discard(kdt_publish_job *job);

#endif /* KDT_CACHE_JOB_H */
