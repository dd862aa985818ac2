/*
 * cache/notice.h: what the cache tells the user about directories it
 * cannot use, and the record of failed writes that tools/kdtree-cache
 * reports.
 *
 * A directory that cannot be used is never the caller's failure: the
 * process carries on in memory.  The first such notice of each kind is a
 * warning, the rest info lines (every later miss would say the same), so
 * a misconfigured cache costs one line on stderr, not one a compile.
 * Safe from any thread (the publishing thread's failures land here too)
 * and across fork().
 *
 * Layer 1 of the cache (see cache/cache.h): includes only base/.
 */
#ifndef KDT_CACHE_NOTICE_H
#define KDT_CACHE_NOTICE_H

#include <stddef.h>

#include "base/error.h"

enum kdt_notice {
    KDT_NOTICE_USER_DIR = 0, /* the user's directory: not read or written */
    KDT_NOTICE_LAYER = 1,    /* a read-only layer refused */
    KDT_NOTICE_LOCK_DIR = 2, /* no per-key lock: compiling without */
    KDT_NOTICE_SPILL = 3,    /* the spill store refused or unusable */
    KDT_NOTICE_COUNT = 4
};

/* Logs one line, at warn the first time for `topic` in this process,
 * at info afterwards. */
void kdt_cache_notice(enum kdt_notice topic, const char *fmt, ...)
    KDT_PRINTF(2, 3);

/* Records a publish into `dir` that failed (`why` says how) and logs it
 * as a KDT_NOTICE_USER_DIR notice, which names `instead`, the directory
 * the entry goes to next (the spill store), or says that it stays in
 * memory (`instead` NULL). */
void kdt_cache_write_failed(const char *dir, const char *why,
                            const char *instead);

/* How many publishes of this process have failed so far; the last one's
 * reason goes to `why` (when size > 0; "" when none failed). */
unsigned long kdt_cache_write_failures(char *why, size_t why_size);

/* The directories this process found it cannot publish into, by their
 * identity (cache/file.h: kdt_cache_dir_id): a publish that failed, a
 * directory on a read-only or full file system, or another process's word
 * in a lock file (cache/lock.h).  The miss path takes no node-wide lock
 * for such a directory: nobody would publish what the others wait for.
 * A later publish that succeeds there clears the mark, and
 * kdt_cache_written_at() says when (seconds since the epoch; 0: never):
 * a word in a lock file older than that is out of date.
 * kdt_cache_mark_unwritable() returns 1 when the mark is new, 0 when it
 * was there (or cannot be kept for want of memory). */
int kdt_cache_mark_unwritable(const char *dir_id);
void kdt_cache_mark_writable(const char *dir_id);
int kdt_cache_is_unwritable(const char *dir_id);
double kdt_cache_written_at(const char *dir_id);

#endif /* KDT_CACHE_NOTICE_H */
