/*
 * test_cache_readonly.c: processes compiling into a cache directory on a
 * read-only mount that passes the trust rules.  None takes its lock (the
 * directory cannot be written: there is nothing to wait for); they share
 * one compile through the spill store instead, neither one after another
 * nor each its own, and each says why once.  Needs root and
 * CAP_SYS_ADMIN for the mount (a private mount namespace, so nothing
 * outside the test sees it) and NVRTC: skipped (77) without them.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_testutil.h"
#include "harness.h"
#include "kdtree.h"

/* In a mount namespace of this process's own, `dir` read-only.  0, or
 * -1 where that cannot be done. */
static int
mount_read_only(const char *dir)
{
    if (unshare(CLONE_NEWNS) != 0
        || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0
        || mount(dir, dir, NULL, MS_BIND, NULL) != 0
        || mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL)
               != 0)
        return -1;
    return 0;
}

START_TEST(test_read_only_mount_one_compile)
{
    char *log;

    ct_mkdirs(ct_user);
    ck_assert_int_eq(mount_read_only(ct_user), 0);
    log = ct_compile_once_in_processes(8);
    /* Each said why, once as a warning, and where the kernels go. */
    ck_assert_int_eq(ct_count_lines(log, "warn: cache: cannot write to"), 8);
    ck_assert_int_ge(ct_count_lines(log, "Read-only file system; compiled "
                                         "kernels go to the node's spill "
                                         "store"), 8);
    free(log);
    umount(ct_user);
}
END_TEST

/* A process whose kernel another has already put in the spill store
 * loads it from there and says why all the same: the warning does not
 * depend on which process compiled. */
START_TEST(test_read_only_mount_spill_hit_says_why)
{
    char *log;

    ct_mkdirs(ct_user);
    ck_assert_int_eq(mount_read_only(ct_user), 0);
    ct_log_at("info");
    log = ct_compile_in_processes(1);
    ck_assert_int_eq(ct_count_lines(log, "info: compiled "), 1);
    free(log);
    log = ct_compile_in_processes(1);
    ck_assert_int_eq(ct_count_lines(log, "info: compiled "), 0);
    ck_assert_int_eq(ct_count_lines(log, "warn: cache: cannot write to"), 1);
    ck_assert_int_eq(ct_count_lines(log, "Read-only file system; compiled "
                                         "kernels go to the node's spill "
                                         "store"), 1);
    free(log);
    umount(ct_user);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("readonly", 300);

    tcase_add_test(tc, test_read_only_mount_one_compile);
    tcase_add_test(tc, test_read_only_mount_spill_hit_says_why);
    return ct_suite("cache_readonly", tc);
}

int
main(void)
{
    char dir[] = "/tmp/kdt-ro-probe-XXXXXX";
    pid_t pid;
    int status = 1;

    /* The probe in a child: its namespace, and its mount, die with it. */
    if (!mkdtemp(dir))
        return 99;
    pid = fork();
    if (pid == 0)
        _exit(mount_read_only(dir) == 0 ? 0 : 1);
    if (pid > 0)
        waitpid(pid, &status, 0);
    rmdir(dir);
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("SKIP: cannot make a read-only mount here (needs root and "
               "CAP_SYS_ADMIN)\n");
        return 77;
    }
    return kdt_test_main(suite, KDT_TEST_NVRTC);
}
