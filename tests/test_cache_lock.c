/*
 * test_cache_lock.c: the miss path's per-key lock: taken only by a process
 * that will publish (KDTREE_CACHE=readwrite with a directory), keyed by
 * the directory and the key, waited for with a timeout and then taken
 * over, dropped when its holder dies, refused in an untrusted lock
 * directory.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/settings.h"
#include "cache/lock.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"

/* Runs `fn` in a child and returns its exit code. */
static int
in_child(int (*fn)(const kdt_key *), const kdt_key *key)
{
    pid_t pid = fork();
    int status;

    if (pid == 0)
        _exit(fn(key));
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* 0 when the lock is had at once, 1 when not. */
static int
try_lock(const kdt_key *key)
{
    kdt_cache_lock *l;

    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0", 1);
    l = ct_node_lock(key);
    kdt_cache_lock_release(l);
    return l ? 0 : 1;
}

static int
try_lock_in(const char *dir, const kdt_key *key)
{
    setenv("KDTREE_CACHE_DIR", dir, 1);
    return in_child(try_lock, key);
}

START_TEST(test_lock_basic)
{
    kdt_key key = kdt_key_of("lock", 4), k2 = kdt_key_of("other", 5);
    kdt_cache_lock *a, *b;
    char *dir;
    struct stat st;
    pid_t pid;
    int status;

    dir = kdt_cache_lock_dir();
    ck_assert(strncmp(dir, ct_base, strlen(ct_base)) == 0);
    a = ct_node_lock(&key);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    /* Another key is independent. */
    b = ct_node_lock(&k2);
    ck_assert_ptr_nonnull(b);
    kdt_cache_lock_release(b);
    /* Another process waits for the timeout, then takes the compile
     * over (and releases, as a publish would). */
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0.3", 1);
    pid = fork();
    if (pid == 0) {
        double t0 = kdt_now_ms();
        kdt_cache_lock *c = ct_node_lock(&key);
        double dt = kdt_now_ms() - t0;
        int ok = c != NULL && dt >= 250;
        kdt_cache_lock_release(c);
        _exit(ok ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kdt_cache_lock_release(a);
    /* Released: the next one gets it at once, and no file piles up. */
    a = ct_node_lock(&key);
    ck_assert_ptr_nonnull(a);
    kdt_cache_lock_release(a);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    kdt_cache_lock_release(NULL);
    free(dir);
}
END_TEST

START_TEST(test_lock_dies_with_holder)
{
    kdt_key key = kdt_key_of("lock", 4);
    kdt_cache_lock *a;
    int pfd[2], status;
    pid_t pid;
    char c;

    ck_assert_int_eq(pipe(pfd), 0);
    pid = fork();
    if (pid == 0) {
        kdt_cache_lock *l = ct_node_lock(&key);
        (void)!write(pfd[1], l ? "y" : "n", 1);
        pause();
        _exit(0);
    }
    ck_assert_int_eq(read(pfd[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0", 1);
    ck_assert_ptr_null(ct_node_lock(&key));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    /* Its lock went with it, though its file is still there. */
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "5", 1);
    a = ct_node_lock(&key);
    ck_assert_ptr_nonnull(a);
    kdt_cache_lock_release(a);
}
END_TEST

START_TEST(test_lock_dir_untrusted)
{
    kdt_key key = kdt_key_of("lock", 4);
    char *dir = kdt_cache_lock_dir();

    ck_assert_int_eq(mkdir(dir, 0777), 0);
    ck_assert_int_eq(chmod(dir, 0777), 0);
    ck_assert_ptr_null(ct_node_lock(&key));
    ck_assert_int_eq(rmdir(dir), 0);
    ck_assert_int_eq(ct_write(dir, "", 0, 0600), 0);
    ck_assert_ptr_null(ct_node_lock(&key));
    free(dir);
}
END_TEST

START_TEST(test_lock_dir_fallbacks)
{
    char *d, want[64];

    unsetenv("XDG_RUNTIME_DIR");
    d = kdt_cache_lock_dir();
    snprintf(want, sizeof want, "kdtree-jit-%lu", (unsigned long)geteuid());
    ck_assert(strstr(d, "kdtree-jit") != NULL);
    if (access("/dev/shm", F_OK) == 0)
        ck_assert_str_eq(d + strlen("/dev/shm/"), want);
    free(d);
    setenv("XDG_RUNTIME_DIR", "relative", 1);
    d = kdt_cache_lock_dir();
    ck_assert(d[0] == '/');
    free(d);
}
END_TEST

/* With KDTREE_CACHE=off or readonly nothing is published, so nothing is
 * locked: no wait on a holder, no lock directory made. */
START_TEST(test_no_lock_unless_publishing)
{
    static const char *modes[] = {"off", "readonly"};
    kdt_key key = kdt_key_of("lock", 4);
    char *dir = kdt_cache_lock_dir();
    struct stat st;

    for (int i = 0; i < 2; i++) {
        setenv("KDTREE_CACHE", modes[i], 1);
        ck_assert_msg(ct_node_lock(&key) == NULL,
                      "KDTREE_CACHE=%s took the lock", modes[i]);
        ck_assert_int_ne(stat(dir, &st), 0);
    }
    /* Nor without a directory to publish to. */
    unsetenv("KDTREE_CACHE");
    unsetenv("KDTREE_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    ck_assert_ptr_null(ct_node_lock(&key));
    ck_assert_int_ne(stat(dir, &st), 0);
    free(dir);
}
END_TEST

/* Processes with different cache directories do not wait on each other;
 * with the same one they do. */
START_TEST(test_lock_per_directory)
{
    kdt_key key = kdt_key_of("lock", 4);
    char other[400];
    kdt_cache_lock *held;

    snprintf(other, sizeof other, "%s/other-cache", ct_base);
    held = ct_node_lock(&key);
    ck_assert_ptr_nonnull(held);
    ck_assert_int_eq(try_lock_in(ct_user, &key), 1);
    ck_assert_msg(try_lock_in(other, &key) == 0,
                  "another cache directory waited on this one's lock");
    kdt_cache_lock_release(held);
    ck_assert_int_eq(try_lock_in(ct_user, &key), 0);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("lock", 60);

    tcase_add_test(tc, test_lock_basic);
    tcase_add_test(tc, test_lock_dies_with_holder);
    tcase_add_test(tc, test_lock_dir_untrusted);
    tcase_add_test(tc, test_lock_dir_fallbacks);
    tcase_add_test(tc, test_no_lock_unless_publishing);
    tcase_add_test(tc, test_lock_per_directory);
    return ct_suite("cache_lock", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
