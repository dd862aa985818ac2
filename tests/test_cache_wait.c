/*
 * test_cache_wait.c: a wait for another process's compile of a key.  It
 * says whom it waits for (at info after a second, at warn after
 * KDT_LOCK_WARN_S); a holder that is stopped or gone is not waited for;
 * at the timeout exactly one waiter takes the compile over; the lock is
 * one whatever the directory's spelling (cache/file.h: kdt_cache_dir_id);
 * the lock directory is used through the descriptor it was opened as, so
 * a swap for a link during the wait changes nothing.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/cache.h"
#include "cache/lock.h"
#include "cache/settings.h"
#include "cache_testutil.h"
#include "harness.h"

/* After a second the wait says whom it waits for, and what: the holder's
 * pid and compile.  Nothing was said before, at any level, until the
 * timeout. */
START_TEST(test_wait_says_whom)
{
    kdt_key key = kdt_key_of("whom", 4);
    char want[64], *log;
    int go[2];
    pid_t pid;
    kdt_cache_lock *l;

    ck_assert_int_eq(pipe(go), 0);
    pid = ct_holder(&key, go[0]);
    snprintf(want, sizeof want, "info: cache: waiting for pid %ld", (long)pid);
    ct_log_at("info");
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "60", 1);
    if (fork() == 0) {
        /* The holder lets go after the wait has been long enough to be
         * said at both levels. */
        usleep((useconds_t)(KDT_LOCK_WARN_S * 1e6 + 500000));
        (void)!write(go[1], "g", 1);
        _exit(0);
    }
    ct_capture_begin();
    l = ct_node_lock(&key);
    log = ct_capture_end();
    ck_assert_msg(l != NULL, "the lock was not had after its holder let go");
    kdt_cache_lock_release(l);
    ck_assert_msg(ct_count_lines(log, want) == 1, "no '%s' in:\n%s", want,
                  log);
    ck_assert_msg(ct_count_lines(log, "a test's compile") == 2,
                  "the holder's compile not named in:\n%s", log);
    ck_assert_msg(ct_count_lines(log, "warn: cache: waited 5 s for pid") == 1,
                  "no warning after 5 s in:\n%s", log);
    free(log);
    waitpid(pid, NULL, 0);
    while (wait(NULL) > 0)
        ;
}
END_TEST

/* Empties the one lock file of the lock directory: a holder stopped
 * before it wrote its line, or of a release that wrote none. */
static void
erase_holder_line(void)
{
    char *dir = kdt_cache_lock_dir(), cmd[600];

    snprintf(cmd, sizeof cmd, "for f in %s/*.lock; do : >\"$f\"; done", dir);
    ck_assert_int_eq(system(cmd), 0);
    free(dir);
}

/* A holder stopped (SIGSTOP: a debugger, a job scheduler) is taken over
 * after half a second, not waited for through the timeout, whether it
 * wrote its line (0) or not (1: found in /proc/locks); when it resumes
 * and releases, it leaves the new holder's lock alone. */
START_TEST(test_stopped_holder_taken_over)
{
    kdt_key key = kdt_key_of("stopped", 7);
    kdt_cache_lock *l, *again;
    char *log;
    int go[2];
    pid_t pid;

    ck_assert_int_eq(pipe(go), 0);
    pid = ct_holder(&key, go[0]);
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    if (_i == 1)
        erase_holder_line();
    ct_log_at("info");
    /* Longer than the test case's timeout: only the takeover ends it. */
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "600", 1);
    ct_capture_begin();
    l = ct_node_lock(&key);
    log = ct_capture_end();
    ck_assert_msg(l != NULL, "a stopped holder's lock was not taken over");
    ck_assert_msg(ct_count_lines(log, "is stopped; took its compile over")
                  == 1, "log:\n%s", log);
    free(log);
    /* The old holder resumes and releases: ours stays ours. */
    kill(pid, SIGCONT);
    (void)!write(go[1], "g", 1);
    waitpid(pid, NULL, 0);
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0", 1);
    if (fork() == 0)
        _exit(ct_node_lock(&key) == NULL ? 0 : 1);
    {
        int status;
        wait(&status);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "the resumed holder's release freed the new lock");
    }
    kdt_cache_lock_release(l);
    again = ct_node_lock(&key);
    ck_assert_ptr_nonnull(again);
    kdt_cache_lock_release(again);
}
END_TEST

/* A lock held by a descriptor its holder's child inherited, the holder
 * itself gone: nobody is compiling, and a waiter takes it over. */
START_TEST(test_gone_holder_taken_over)
{
    kdt_key key = kdt_key_of("gone", 4);
    int ready[2], status;
    kdt_cache_lock *l;
    pid_t mid, keeper = 0;

    ck_assert_int_eq(pipe(ready), 0);
    mid = fork();
    if (mid == 0) {
        kdt_cache_lock *h = ct_node_lock(&key);
        pid_t k = h ? fork() : -1;
        if (k == 0) {
            /* The copy of the descriptor keeps the lock. */
            for (;;)
                pause();
        }
        (void)!write(ready[1], &k, sizeof k);
        _exit(0); /* without a release */
    }
    ck_assert_int_eq(read(ready[0], &keeper, sizeof keeper),
                     (ssize_t)sizeof keeper);
    ck_assert_int_gt(keeper, 0);
    waitpid(mid, &status, 0);
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "600", 1);
    l = ct_node_lock(&key);
    ck_assert_msg(l != NULL, "a gone holder's lock was not taken over");
    kdt_cache_lock_release(l);
    ct_reap(keeper);
}
END_TEST

/* A waiter's process: its stderr to `log`, the lock of `key`, then alone
 * in `inside` (created exclusively, as only one compile may be) for
 * hold_us.  Exits 1 without the lock, 2 when another was inside. */
static void
waiter(const char *log, const kdt_key *key, const char *inside,
       useconds_t hold_us)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600), x;
    kdt_cache_lock *l;

    dup2(fd, 2);
    l = ct_node_lock(key);
    if (!l)
        _exit(1);
    x = open(inside, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (x < 0)
        _exit(2);
    usleep(hold_us);
    close(x);
    unlink(inside);
    kdt_cache_lock_release(l);
    _exit(0);
}

/* Waits for waiter i (`pid`), which must have had the lock alone, and
 * returns what it logged (NUL-terminated; the caller frees it). */
static char *
waiter_said(pid_t pid, int i, const char *log)
{
    int status;
    void *buf;
    size_t n;

    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "waiter %d: %s", i,
                  WEXITSTATUS(status) == 1 ? "never had the lock"
                                           : "had it with another");
    ck_assert_int_eq(ct_read(log, &buf, &n), 0);
    buf = realloc(buf, n + 1);
    ((char *)buf)[n] = '\0';
    return buf;
}

/* Four waiters, a holder that never lets go, a timeout of 2 s: one waiter
 * takes the compile over, the three others wait for it and then for each
 * other; never two at once, and every one gets the lock. */
START_TEST(test_one_takeover_at_timeout)
{
    kdt_key key = kdt_key_of("timeout", 7);
    char inside[400], logs[4][400];
    pid_t hold, w[4];
    int i, takeovers = 0;

    hold = ct_holder(&key, -1);
    snprintf(inside, sizeof inside, "%s/inside", ct_base);
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "2", 1);
    ct_log_at("info");
    for (i = 0; i < 4; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/waiter-%d.log", ct_base, i);
        w[i] = fork();
        if (w[i] == 0)
            waiter(logs[i], &key, inside, 100000);
    }
    for (i = 0; i < 4; i++) {
        char *said = waiter_said(w[i], i, logs[i]);
        takeovers += ct_count_lines(said, "took its compile over");
        free(said);
    }
    ck_assert_int_eq(takeovers, 1);
    ct_reap(hold);
}
END_TEST

/* The waiter that removes a stuck holder's file can see a newcomer lock
 * the new one first (KDTREE_CACHE_TEST_TAKEOVER_DELAY_US holds that window
 * open, as a loaded machine may): the newcomer compiles alone, and the
 * takeover is still said, once, by the waiter that made it. */
START_TEST(test_takeover_newcomer_first)
{
    kdt_key key = kdt_key_of("newcomer", 8);
    char inside[400], logs[2][400];
    pid_t hold, w[2];
    int i;

    hold = ct_holder(&key, -1);
    snprintf(inside, sizeof inside, "%s/inside", ct_base);
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "1", 1);
    ct_log_at("info");
    for (i = 0; i < 2; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/newcomer-%d.log", ct_base, i);
        /* the newcomer starts later, so its wait ends later: waiter 0
         * takes over (at 1 s, then 1.5 s before it locks the new file),
         * and the newcomer finds the new file unlocked and holds it 2 s */
        if (i == 1)
            usleep(600000);
        w[i] = fork();
        if (w[i] == 0) {
            if (i == 0)
                setenv("KDTREE_CACHE_TEST_TAKEOVER_DELAY_US", "1500000", 1);
            waiter(logs[i], &key, inside, i == 1 ? 2000000 : 100000);
        }
    }
    for (i = 0; i < 2; i++) {
        char *said = waiter_said(w[i], i, logs[i]);
        ck_assert_msg(ct_count_lines(said, "took its compile over") == 1 - i,
                      "waiter %d said:\n%s", i, said);
        ck_assert_msg(i == 1 || ct_count_lines(said, "another process locked "
                                               "the new lock first") == 1,
                      "waiter 0 said:\n%s", said);
        free(said);
    }
    ct_reap(hold);
}
END_TEST

/* KDTREE_CACHE_LOCK_TIMEOUT=0: no wait at all, said as such (it said
 * "waited 0 s for lock ...; compiling anyway", a warning every key). */
START_TEST(test_timeout_zero)
{
    kdt_key key = kdt_key_of("zero", 4);
    pid_t pid = ct_holder(&key, -1);
    char *log;

    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0", 1);
    ct_log_at("info");
    ct_capture_begin();
    ck_assert_ptr_null(ct_node_lock(&key));
    ck_assert_ptr_null(ct_node_lock(&key));
    log = ct_capture_end();
    ck_assert_msg(ct_count_lines(log, "KDTREE_CACHE_LOCK_TIMEOUT=0") == 2
                  && ct_count_lines(log, "warn:") == 0
                  && ct_count_lines(log, "waited") == 0, "log:\n%s", log);
    free(log);
    ct_reap(pid);
}
END_TEST

/* A timeout taken over warns once per process (info afterwards), with
 * the fraction of a second it was given. */
START_TEST(test_timeout_warns_once)
{
    kdt_key a = kdt_key_of("a", 1), b = kdt_key_of("b", 1);
    pid_t pa = ct_holder(&a, -1), pb = ct_holder(&b, -1);
    kdt_cache_lock *la, *lb;
    char *log;

    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0.3", 1);
    ct_log_at("info");
    ct_capture_begin();
    la = ct_node_lock(&a);
    lb = ct_node_lock(&b);
    log = ct_capture_end();
    ck_assert_ptr_nonnull(la);
    ck_assert_ptr_nonnull(lb);
    /* (How long it waited is the machine's business: a loaded one says
     * 0.4 s.) */
    ck_assert_msg(ct_count_lines(log, "warn: cache: waited ") == 1
                  && ct_count_lines(log, "info: cache: waited ") == 1
                  && ct_count_lines(log, "(KDTREE_CACHE_LOCK_TIMEOUT=0.3)")
                         == 2,
                  "log:\n%s", log);
    free(log);
    kdt_cache_lock_release(la);
    kdt_cache_lock_release(lb);
    ct_reap(pa);
    ct_reap(pb);
}
END_TEST

/* One directory, five spellings (and one not made yet, two): one lock. */
START_TEST(test_one_lock_whatever_the_spelling)
{
    kdt_key key = kdt_key_of("spelling", 8);
    char sp[6][500], link[400];
    pid_t pid;

    pid = ct_holder(&key, -1); /* KDTREE_CACHE_DIR=ct_user */
    snprintf(link, sizeof link, "%s/link", ct_base);
    ct_mkdirs(ct_user);
    ck_assert_int_eq(symlink(ct_user, link), 0);
    snprintf(sp[0], sizeof sp[0], "%s/", ct_user);
    snprintf(sp[1], sizeof sp[1], "%s//user", ct_base);
    snprintf(sp[2], sizeof sp[2], "%s/./user", ct_base);
    snprintf(sp[3], sizeof sp[3], "%s", link);
    snprintf(sp[4], sizeof sp[4], "%s/../%s/user", ct_base,
             strrchr(ct_base, '/') + 1);
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0", 1);
    for (int i = 0; i < 5; i++) {
        setenv("KDTREE_CACHE_DIR", sp[i], 1);
        ck_assert_msg(ct_node_lock(&key) == NULL,
                      "%s is another lock than %s", sp[i], ct_user);
    }
    ct_reap(pid);
    /* Not made yet: spelled two ways, still one. */
    setenv("KDTREE_CACHE_DIR", link, 1);
    snprintf(sp[5], sizeof sp[5], "%s/new//", link);
    setenv("KDTREE_CACHE_DIR", sp[5], 1);
    pid = ct_holder(&key, -1);
    snprintf(sp[5], sizeof sp[5], "%s/./new", ct_user);
    setenv("KDTREE_CACHE_DIR", sp[5], 1);
    ck_assert_ptr_null(ct_node_lock(&key));
    ct_reap(pid);
}
END_TEST

/* Someone swaps the lock directory for a link to a directory of theirs
 * (a runtime directory without the sticky bit lets them) while a waiter
 * waits, and holds a lock of the same name there.  The waiter still waits
 * for the real holder and gets the lock when it lets go; the release
 * leaves the other directory's file alone. */
START_TEST(test_lock_dir_swapped_during_wait)
{
    kdt_key key = kdt_key_of("swap", 4);
    char *dir = kdt_cache_lock_dir(), moved[400], other[400], name[64] = "";
    char path[600], cmd[700];
    int go[2], swapped[2];
    pid_t hold, swapper;
    kdt_cache_lock *l;
    FILE *f;
    char c;

    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(swapped), 0);
    hold = ct_holder(&key, go[0]);
    snprintf(cmd, sizeof cmd, "ls %s | grep '\\.lock$'", dir);
    f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(name, sizeof name, f));
    pclose(f);
    name[strcspn(name, "\n")] = '\0';
    snprintf(moved, sizeof moved, "%s.moved", dir);
    snprintf(other, sizeof other, "%s/other", ct_base);
    swapper = fork();
    if (swapper == 0) {
        /* While the parent waits: swap, hold the other lock, then let
         * the real holder go. */
        int fd;
        usleep(300000);
        if (rename(dir, moved) != 0 || mkdir(other, 0700) != 0
            || symlink(other, dir) != 0)
            _exit(1);
        snprintf(path, sizeof path, "%s/%s", other, name);
        fd = open(path, O_RDWR | O_CREAT, 0600);
        if (fd < 0 || flock(fd, LOCK_EX) != 0)
            _exit(2);
        (void)!write(swapped[1], "s", 1);
        usleep(300000);
        (void)!write(go[1], "g", 1);
        for (;;)
            pause();
    }
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "20", 1);
    l = ct_node_lock(&key);
    ck_assert_int_eq(read(swapped[0], &c, 1), 1);
    ck_assert_msg(l != NULL, "the waiter followed the link to another lock");
    kdt_cache_lock_release(l);
    snprintf(path, sizeof path, "%s/%s", other, name);
    ck_assert_msg(access(path, F_OK) == 0,
                  "the release unlinked the other directory's lock file");
    ct_reap(swapper);
    waitpid(hold, NULL, 0);
    unlink(dir);
    free(dir);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("wait", 30);

    tcase_add_test(tc, test_wait_says_whom);
    tcase_add_loop_test(tc, test_stopped_holder_taken_over, 0, 2);
    tcase_add_test(tc, test_gone_holder_taken_over);
    tcase_add_test(tc, test_one_takeover_at_timeout);
    tcase_add_test(tc, test_takeover_newcomer_first);
    tcase_add_test(tc, test_timeout_zero);
    tcase_add_test(tc, test_timeout_warns_once);
    tcase_add_test(tc, test_one_lock_whatever_the_spelling);
    tcase_add_test(tc, test_lock_dir_swapped_during_wait);
    return ct_suite("cache_wait", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
