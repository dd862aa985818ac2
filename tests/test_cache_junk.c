/*
 * test_cache_junk.c: what is not an entry costs nothing.  A file far
 * larger than its header declares (an entry extended to 528 MiB) is
 * refused on its header, never read whole, by a lookup and by what the
 * tool reads; eviction removes what is no entry first and never counts it
 * against the good entries (a 10 GB junk file emptied the cache); an
 * alias whose entry is not there is bad.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/cache.h"
#include "cache/file.h"
#include "cache/housekeep.h"
#include "cache/layout.h"
#include "cache_testutil.h"
#include "harness.h"

static long
max_rss_kb(void)
{
    struct rusage u;

    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* An entry extended to 528 MiB (sparse: no disk used): the lookup misses
 * on "size mismatch" and the process's peak memory grows by far less
 * than the file (it grew by all of it, and a miss read it twice). */
START_TEST(test_extended_entry_not_read)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(20000, 5);
    char *path, why[KDT_WHY_SIZE], name[KDT_NAME_SIZE];
    int status;
    pid_t pid;

    ct_preimage(&p, "big", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(truncate(path, (off_t)528 << 20), 0);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        long before = max_rss_kb();
        void *buf;
        size_t size;
        int fd = ct_open_user_dir(), ok;
        kdt_layout_entry_name(&key, name);
        /* The lookup, and the read every kdtree-cache command makes. */
        ok = ct_disk_lookup(&key, &p, NULL, NULL) == 0
             && kdt_cache_read_entry(fd, name, 0, &buf, &size, why,
                                     sizeof why) == -1
             && strstr(why, "size mismatch") != NULL;
        _exit(!ok ? 1 : max_rss_kb() - before > 64 * 1024 ? 2 : 0);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  WEXITSTATUS(status) == 2 ? "the 528 MiB file was read"
                                           : "not refused as a size mismatch");
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* Three good entries (oldest first) and, newest, a 10 GB junk file and an
 * entry cut short; a cap of 1 MiB that the good ones fit under.  Eviction
 * removes the two bad files and nothing else. */
START_TEST(test_junk_evicted_first)
{
    static const char *names[] = {"a", "b", "c"};
    char *path[3], junk[600], cut[600];
    kdt_cache_tally t = {0};
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(30000, 9);
    int fd;

    for (int i = 0; i < 3; i++) {
        ct_preimage(&p, names[i], "sm_90", &key);
        path[i] = ct_entry_path(ct_user, &key);
        ct_write_entry(path[i], &key, p.text, p.len, &b);
        ct_stamp(path[i], i);
        kdt_preimage_free(&p);
    }
    snprintf(junk, sizeof junk, "%s/v%d/ffffffffffffffffffffffffffffffff.kdt",
             ct_user, KDT_CACHE_FORMAT);
    ck_assert_int_eq(ct_write(junk, "", 0, 0600), 0);
    ck_assert_int_eq(truncate(junk, (off_t)10 << 30), 0);
    ct_preimage(&p, "cut", "sm_90", &key);
    {
        char *c = ct_entry_path(ct_user, &key);
        snprintf(cut, sizeof cut, "%s", c);
        free(c);
    }
    ct_write_entry(cut, &key, p.text, p.len, &b);
    ck_assert_int_eq(truncate(cut, 1000), 0);
    fd = ct_open_user_dir();
    kdt_cache_evict(fd, "v1", 1 << 20, NULL, 0, &t);
    close(fd);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(access(path[i], F_OK) == 0,
                      "good entry %s evicted for junk", names[i]);
        free(path[i]);
    }
    ck_assert_msg(access(junk, F_OK) != 0, "the junk file was kept");
    ck_assert_msg(access(cut, F_OK) != 0, "the cut entry was kept");
    ck_assert_int_eq(t.failed, 0);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* The entry's publish fails at its fsync (EIO): the alias, which is not
 * fsync'ed and would have landed, is not published either. */
START_TEST(test_alias_only_after_its_entry)
{
    kdt_key key, akey;

    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "EIO", 1);
    ct_store_pair("k", NULL, &key, &akey);
    ck_assert_int_eq(ct_entry_state(&key, NULL), 0);
    ck_assert_msg(ct_entry_state(&akey, NULL) == 0,
                  "an alias was published without its entry");
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("junk", 60);

    tcase_add_test(tc, test_extended_entry_not_read);
    tcase_add_test(tc, test_junk_evicted_first);
    tcase_add_test(tc, test_alias_only_after_its_entry);
    return ct_suite("cache_junk", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
