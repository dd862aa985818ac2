/*
 * test_cache_unwritable.c: a cache directory that passes the trust rules
 * but cannot be written (a read-only mount, a full disk, EIO, EXDEV: here
 * through KDTREE_CACHE_TEST_PUBLISH_FAIL, cache/testhook.h).  Processes
 * must not compile one after another: once a process failed to publish
 * there it takes no lock for it, a waiter whose holder failed stops
 * waiting for it, and an alias is never published without its entry.
 * The entry goes to the spill store instead, whose lock the processes
 * then share (test_cache_spill has the rest of it).  test_cache_readonly
 * does the same on a real read-only mount.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/cache.h"
#include "cache/lock.h"
#include "cache_testutil.h"
#include "harness.h"

static const char *const errors[] = {"EROFS", "ENOSPC", "EIO", "EXDEV"};

/* The miss path's store of `kernel`'s entry and alias, handing over
 * `lock`, into a directory where it fails: neither lands there, both land
 * in the spill store.  No ck_assert: children call it too; 0 when all is
 * as said. */
static int
store_pair(const char *kernel, kdt_cache_lock *lock)
{
    kdt_key key, akey;

    ct_store_pair(kernel, lock, &key, &akey);
    return ct_entry_state(&key, NULL) == 0 && ct_entry_state(&akey, NULL) == 0
                   && ct_entry_state_in(ct_spill, &key, NULL) == 1
                   && ct_entry_state_in(ct_spill, &akey, NULL) == 1
               ? 0 : -1;
}

/* A publish fails with each error where a disk gives it: nothing lands
 * there (no entry, no alias: an alias never goes without its entry), and
 * from then on this process takes no lock for the directory: here a
 * holder of the next key's lock is not waited for (the lock timeout is
 * longer than the test's, so a wait fails the test); the process locks
 * for the spill store instead. */
START_TEST(test_failed_publish_stops_locking)
{
    kdt_key k1 = kdt_key_of("one", 3), k2 = kdt_key_of("two", 3);
    kdt_cache_lock *l;
    char *log;
    pid_t hold;

    /* A holder that never failed (forked before this process did). */
    hold = ct_holder(&k2, -1);
    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", errors[_i], 1);
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "600", 1);
    ct_log_at("warn");
    l = kdt_cache_lock_acquire(&k1, "one");
    ck_assert(kdt_cache_lock_held(l));
    ct_capture_begin();
    ck_assert_msg(store_pair("one", l) == 0, "the entry and its alias are "
                  "not where they belong");
    log = ct_capture_end();
    ck_assert_msg(ct_count_lines(log, "cannot write to") == 1, "log:\n%s",
                  log);
    free(log);
    l = kdt_cache_lock_acquire(&k2, "two");
    ck_assert_msg(!ct_locked_for(l, ct_user), "locked for an unwritable "
                  "directory");
    ck_assert_msg(ct_locked_for(l, ct_spill), "not locked for the spill "
                  "store");
    kdt_cache_lock_release(l);
    ct_reap(hold);
}
END_TEST

/* Waiters whose holder fails to publish stop waiting when it does (the
 * lock file says so), and take no lock for that directory again: no
 * staircase of compiles, one after another.  They lock for the spill
 * store instead, and find the holder's entry there. */
START_TEST(test_waiter_stops_when_holder_fails)
{
    kdt_key key = kdt_key_of("k", 1), k3 = kdt_key_of("three", 5);
    int ready[2], go[2], status;
    kdt_cache_lock *l;
    char *log, c;
    pid_t hold, sig;

    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    hold = fork();
    if (hold == 0) {
        setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "EIO", 1);
        l = kdt_cache_lock_acquire(&key, "k");
        (void)!write(ready[1], ct_locked_for(l, ct_user) ? "y" : "n", 1);
        (void)!read(go[0], &c, 1);
        _exit(store_pair("k", l) == 0 ? 0 : 1);
    }
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');
    sig = fork();
    if (sig == 0) {
        usleep(500000); /* the parent waits by then */
        (void)!write(go[1], "g", 1);
        _exit(0);
    }
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "600", 1);
    ct_log_at("info");
    ct_capture_begin();
    l = kdt_cache_lock_acquire(&key, "k");
    log = ct_capture_end();
    ck_assert_msg(!ct_locked_for(l, ct_user), "the lock was taken after "
                  "its holder could not publish: the next compile in line");
    ck_assert_msg(ct_count_lines(log, "could not publish") == 1, "log:\n%s",
                  log);
    free(log);
    /* The holder's entry, from the spill store: no compile here. */
    ck_assert_msg(ct_locked_for(l, ct_spill), "not locked for the spill "
                  "store");
    ck_assert(kdt_cache_lock_recheck(l));
    {
        kdt_preimage p;
        kdt_key k;
        kdt_blob b;
        int from;

        ct_preimage(&p, "k", "sm_90", &k);
        ck_assert_int_eq(kdt_cache_lookup(&k, p.text, p.len, &b, &from), 1);
        ck_assert_int_eq(from, KDT_FROM_SPILL);
        kdt_blob_free(&b);
        kdt_preimage_free(&p);
    }
    kdt_cache_lock_release(l);
    ck_assert_int_eq(waitpid(hold, &status, 0), hold);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the holder's entry is not in the spill store alone");
    waitpid(sig, NULL, 0);
    /* A process arriving later reads the word in the lock file the same
     * way, instead of taking the lock. */
    if (fork() == 0) {
        kdt_cache_lock *m = kdt_cache_lock_acquire(&key, "k");
        _exit(ct_locked_for(m, ct_user) ? 1 : 0);
    }
    wait(&status);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "a later process locked after the holder's failure");
    /* Nor does this process lock for that directory any more. */
    l = kdt_cache_lock_acquire(&k3, "three");
    ck_assert(!ct_locked_for(l, ct_user));
    kdt_cache_lock_release(l);
}
END_TEST

/* A publish that succeeds again (the disk was freed) makes the directory
 * one to lock for again. */
START_TEST(test_mended_directory_locked_again)
{
    kdt_key k2 = kdt_key_of("two", 3), k3 = kdt_key_of("three", 5), key;
    kdt_blob b = ct_blob(100, 1);
    kdt_preimage p;
    kdt_cache_lock *l;

    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "ENOSPC", 1);
    ck_assert_int_eq(store_pair("one", kdt_cache_lock_acquire(&k2, "two")),
                     0);
    l = kdt_cache_lock_acquire(&k3, "three");
    ck_assert(!ct_locked_for(l, ct_user));
    unsetenv("KDTREE_CACHE_TEST_PUBLISH_FAIL");
    ct_preimage(&p, "three", "sm_90", &key);
    kdt_cache_item it = {&key, p.text, p.len, &b};
    ck_assert_int_eq(kdt_cache_store_async(&it, 1, l), 0);
    kdt_cache_flush();
    ck_assert_int_eq(ct_entry_state(&key, &b), 1);
    l = kdt_cache_lock_acquire(&k2, "two");
    ck_assert(ct_locked_for(l, ct_user));
    kdt_cache_lock_release(l);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("unwritable", 30);

    tcase_add_loop_test(tc, test_failed_publish_stops_locking, 0, 4);
    tcase_add_test(tc, test_waiter_stops_when_holder_fails);
    tcase_add_test(tc, test_mended_directory_locked_again);
    return ct_suite("cache_unwritable", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
