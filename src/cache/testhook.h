/*
 * cache/testhook.h: the test hooks of publishing, apart from everything
 * else.  They let a test land a kill or a fork in the middle of a publish,
 * or decide when an in-flight publish may finish, whatever the machine's
 * load.  Both act between writing the two halves of an entry's temp file:
 *
 *   KDTREE_CACHE_TEST_PUBLISH_DELAY_US  microseconds slept there
 *   KDTREE_CACHE_TEST_PUBLISH_GATE      a path: the publish waits there
 *                                       until it exists (at most 30 s)
 *
 * The environment is read by kdt_cache_hooks_read() on the thread that
 * stores (the publishing thread must never call getenv(), which races a
 * setenv() elsewhere); the hooks travel with the publish job.
 *
 * Layer 1 of the cache (see cache/cache.h): includes nothing of the cache.
 */
#ifndef KDT_CACHE_TESTHOOK_H
#define KDT_CACHE_TESTHOOK_H

typedef struct kdt_cache_hooks {
    unsigned long delay_us; /* 0: none */
    char *gate;             /* malloc'ed; NULL: none */
} kdt_cache_hooks;

/* Reads both variables into *h (all zero when unset; a gate that cannot be
 * copied for want of memory is just not set). */
void kdt_cache_hooks_read(kdt_cache_hooks *h);
void kdt_cache_hooks_free(kdt_cache_hooks *h);
/* 1 when either hook is set. */
int kdt_cache_hooks_set(const kdt_cache_hooks *h);
/* Where a publish is held: sleeps the delay, then waits for the gate. */
void kdt_cache_hooks_pause(const kdt_cache_hooks *h);

#endif /* KDT_CACHE_TESTHOOK_H */
