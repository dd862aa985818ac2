/*
 * test_cache_unwritable.c: a cache directory that passes the trust rules
 * but cannot be written (a read-only mount, a full disk, EIO, EXDEV: here
 * through KDTREE_CACHE_TEST_PUBLISH_FAIL, cache/testhook.h).  Processes
 * must not compile one after another: once a process failed to publish
 * there it takes no lock for it, a waiter whose holder failed stops
 * waiting, and an alias is never published without its entry.
 * test_cache_readonly does the same on a real read-only mount.
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
 * `lock`, into a directory where it fails: neither lands. */
static void
store_pair(const char *kernel, kdt_cache_lock *lock)
{
    kdt_key key, akey;

    ct_store_pair(kernel, lock, &key, &akey);
    ck_assert_int_eq(ct_entry_state(&key, NULL), 0);
    ck_assert_msg(ct_entry_state(&akey, NULL) == 0,
                  "an alias was published without its entry");
}

/* A publish fails with each error where a disk gives it: nothing lands
 * (no entry, no alias), the caller is served from memory, and from then
 * on this process takes no lock for the directory: here a holder of the
 * next key's lock is not waited for (the lock timeout is longer than the
 * test's, so a wait fails the test). */
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
    store_pair("one", l);
    log = ct_capture_end();
    ck_assert_msg(ct_count_lines(log, "cannot write to") == 1, "log:\n%s",
                  log);
    free(log);
    l = kdt_cache_lock_acquire(&k2, "two");
    ck_assert_msg(!kdt_cache_lock_held(l), "locked for an unwritable "
                  "directory");
    kdt_cache_lock_release(l);
    ct_reap(hold);
}
END_TEST

/* Waiters whose holder fails to publish stop waiting when it does (the
 * lock file says so), and take no lock for that directory again: no
 * staircase of compiles, one after another. */
START_TEST(test_waiter_stops_when_holder_fails)
{
    kdt_key key = kdt_key_of("k", 1), k3 = kdt_key_of("three", 5);
    int ready[2], go[2];
    kdt_cache_lock *l;
    char *log, c;
    pid_t hold, sig;

    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    hold = fork();
    if (hold == 0) {
        setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "EIO", 1);
        l = kdt_cache_lock_acquire(&key, "k");
        (void)!write(ready[1], kdt_cache_lock_held(l) ? "y" : "n", 1);
        (void)!read(go[0], &c, 1);
        store_pair("k", l);
        _exit(0);
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
    ck_assert_msg(!kdt_cache_lock_held(l), "the lock was taken after its "
                  "holder could not publish: the next compile in line");
    ck_assert_msg(ct_count_lines(log, "could not publish") == 1, "log:\n%s",
                  log);
    free(log);
    kdt_cache_lock_release(l);
    waitpid(hold, NULL, 0);
    waitpid(sig, NULL, 0);
    /* A process arriving later reads the word in the lock file the same
     * way, instead of taking the lock. */
    if (fork() == 0) {
        kdt_cache_lock *m = kdt_cache_lock_acquire(&key, "k");
        _exit(kdt_cache_lock_held(m) ? 1 : 0);
    }
    {
        int status;
        wait(&status);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "a later process locked after the holder's failure");
    }
    /* Nor does this process lock for that directory any more. */
    l = kdt_cache_lock_acquire(&k3, "three");
    ck_assert(!kdt_cache_lock_held(l));
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
    store_pair("one", kdt_cache_lock_acquire(&k2, "two"));
    l = kdt_cache_lock_acquire(&k3, "three");
    ck_assert(!kdt_cache_lock_held(l));
    unsetenv("KDTREE_CACHE_TEST_PUBLISH_FAIL");
    ct_preimage(&p, "three", "sm_90", &key);
    kdt_cache_item it = {&key, p.text, p.len, &b};
    ck_assert_int_eq(kdt_cache_store_async(&it, 1, l), 0);
    kdt_cache_flush();
    ck_assert_int_eq(ct_entry_state(&key, &b), 1);
    l = kdt_cache_lock_acquire(&k2, "two");
    ck_assert(kdt_cache_lock_held(l));
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
