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
    KDT_NOTICE_COUNT = 3
};

/* Logs one line, at warn the first time for `topic` in this process,
 * at info afterwards. */
void kdt_cache_notice(enum kdt_notice topic, const char *fmt, ...)
    KDT_PRINTF(2, 3);

/* Records a publish that failed (`why` says how) and logs it as a
 * KDT_NOTICE_USER_DIR notice. */
void kdt_cache_write_failed(const char *dir, const char *why);

/* How many publishes of this process have failed so far; the last one's
 * reason goes to `why` (when size > 0; "" when none failed). */
unsigned long kdt_cache_write_failures(char *why, size_t why_size);

#endif /* KDT_CACHE_NOTICE_H */
