/*
 * cache/job.h: publish jobs, everything one store writes to the user's
 * directory, self-contained.
 *
 * A job is built on the storing thread: it owns encoded copies of the
 * entries (the caller's buffers are free once it is built) and the
 * settings it needs, read from the environment then (the publishing thread
 * must not call getenv(), which races a setenv() elsewhere).  Running it
 * opens the directory (creating and trust-checking it: cache/file.h),
 * publishes each entry, then does the housekeeping once for all of them,
 * with all of them kept: an entry and its alias are one unit, and neither
 * is ever the victim of its own publish's eviction.  The entry goes first
 * and its aliases only once it is durable (fsync'ed and renamed): an
 * alias never names an entry that a failed publish left out.  `lock` (may
 * be NULL) is released by kdt_job_free(), after the last entry is
 * published, so a process waiting on it finds every entry complete; when
 * the entry could not be published, the lock file says so first
 * (kdt_cache_lock_publish_failed), and the directory is marked
 * unwritable for this process (cache/notice.h) until a publish there
 * succeeds.
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

typedef struct kdt_publish_job {
    struct kdt_publish_job *next; /* the publishing thread's queue link */
    char *base;                   /* the user's cache directory */
    char *dir_id;                 /* its identity (kdt_cache_dir_id) */
    uint64_t max_bytes;           /* KDTREE_CACHE_MAX_BYTES */
    kdt_cache_hooks hooks;        /* cache/testhook.h */
    kdt_cache_lock *lock;
    int n;
    kdt_publish_entry e[];
} kdt_publish_job;

/* Builds the job that writes items[0..n) (at most 32) to `base` and
 * releases `lock`; items[0] is the entry, the rest its aliases.  Items
 * that cannot be encoded are left out (a bad blob stays in memory only),
 * all of them when items[0] cannot be.  Takes `base` (malloc'ed) and
 * `lock` only when it returns a job.  Returns 0 with *job (NULL when
 * nothing is left to write), or KDTREE_ERROR_OUT_OF_MEMORY when items[0]
 * cannot be encoded, or the job not made, for want of memory. */
int kdt_job_build(const kdt_cache_item *items, int n, char *base,
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
