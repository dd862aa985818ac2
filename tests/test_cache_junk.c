/*
 * test_cache_junk.c: what is not an entry costs nothing.  A file far
 * larger than its header declares (an entry extended to 528 MiB) is
 * refused on its header, never read whole, by a lookup and by what the
 * tool reads.
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

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("junk", 60);

    tcase_add_test(tc, test_extended_entry_not_read);
    return ct_suite("cache_junk", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
