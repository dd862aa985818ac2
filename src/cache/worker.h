/*
 * cache/worker.h: the process's publishing thread and its queue of
 * publish jobs (cache/job.h).  Why it exists, how it survives fork() and
 * exit: cache/worker.c.
 *
 * Layer 7 of the cache (see cache/cache.h): includes cache/job.h and
 * base/ only.
 */
#ifndef KDT_CACHE_WORKER_H
#define KDT_CACHE_WORKER_H

#include "cache/job.h"

/* At most this many jobs wait; beyond that the caller publishes itself. */
#define KDT_CACHE_QUEUE_MAX 64
/* The publishing thread's name (/proc/<pid>/task/<tid>/comm). */
#define KDT_CACHE_THREAD_NAME "kdtree-publish"

/* Hands `job` to the publishing thread (started on the first call).
 * Returns 0 when it was queued (the thread now owns it), -1 when the
 * caller must run it itself: the queue is full, the thread cannot be
 * started, or the library is being unloaded. */
int kdt_worker_submit(kdt_publish_job *job);

/* Waits until every job queued by this process before the call is
 * published and its lock released.  Cheap when none is queued.  In a
 * child after fork() the parent's jobs are not waited for: they are the
 * parent's. */
void kdt_worker_flush(void);

#endif /* KDT_CACHE_WORKER_H */
