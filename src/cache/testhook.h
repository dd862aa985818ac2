/*
 * cache/testhook.h: the test hooks of publishing and of a lock's
 * takeover, apart from everything else.  They let a test land a kill or a
 * fork in the middle of a publish, or decide when an in-flight publish may
 * finish, whatever the machine's load, and make a publish fail the way a
 * disk does.  The first two act between writing the two halves of an
 * entry's temp file:
 *
 *   KDTREE_CACHE_TEST_PUBLISH_DELAY_US  microseconds slept there
 *   KDTREE_CACHE_TEST_PUBLISH_GATE      a path: the publish waits there
 *                                       until it exists (at most 30 s)
 *   KDTREE_CACHE_TEST_PUBLISH_FAIL      EROFS, ENOSPC, EIO or EXDEV: every
 *                                       publish fails with that error where
 *                                       a disk gives it (creating the temp
 *                                       file, writing it, its fsync, the
 *                                       rename), as on a read-only mount,
 *                                       a full disk, a failing disk or a
 *                                       rename across mounts
 *
 * and one of taking a stuck compile over (cache/lock.c):
 *
 *   KDTREE_CACHE_TEST_TAKEOVER_DELAY_US microseconds a takeover sleeps
 *                                       between creating the new lock file
 *                                       and locking it, where a newcomer
 *                                       may lock it first
 *
 * The publish hooks' environment is read by kdt_cache_hooks_read() on
 * the thread that stores (the publishing thread must never call getenv(),
 * which races a setenv() elsewhere); the hooks travel with the publish
 * job.  The takeover's is read by the waiting thread itself.
 *
 * Layer 1 of the cache (see cache/cache.h): includes nothing of the cache.
 */
#ifndef KDT_CACHE_TESTHOOK_H
#define KDT_CACHE_TESTHOOK_H

/* The steps of a publish where KDTREE_CACHE_TEST_PUBLISH_FAIL strikes. */
enum kdt_publish_step {
    KDT_STEP_CREATE = 1, /* EROFS */
    KDT_STEP_WRITE = 2,  /* ENOSPC */
    KDT_STEP_FSYNC = 3,  /* EIO (an entry's: aliases are not fsync'ed) */
    KDT_STEP_RENAME = 4  /* EXDEV */
};

typedef struct kdt_cache_hooks {
    unsigned long delay_us; /* 0: none */
    char *gate;             /* malloc'ed; NULL: none */
    int fail_step;          /* enum kdt_publish_step; 0: none */
    int fail_errno;
} kdt_cache_hooks;

/* Reads the variables into *h (all zero when unset or not understood; a
 * gate that cannot be copied for want of memory is just not set). */
void kdt_cache_hooks_read(kdt_cache_hooks *h);
void kdt_cache_hooks_free(kdt_cache_hooks *h);
/* 1 when the delay or the gate is set. */
int kdt_cache_hooks_set(const kdt_cache_hooks *h);
/* Where a publish is held: sleeps the delay, then waits for the gate. */
void kdt_cache_hooks_pause(const kdt_cache_hooks *h);
/* 1 with errno set when the publish is to fail at `step` (h may be
 * NULL), else 0. */
int kdt_cache_hooks_fail(const kdt_cache_hooks *h, int step);
/* KDTREE_CACHE_TEST_TAKEOVER_DELAY_US (0 when unset), read on the thread
 * that takes the lock over, as the settings are, at each takeover. */
unsigned long kdt_cache_hooks_takeover_delay_us(void);

#endif /* KDT_CACHE_TESTHOOK_H */
