/*
 * test_cache.c: the cache in one process: round trip, payload kinds, the
 * memory layer (and fork), the modes, where the directory is, and the
 * read-only layers.  The other subjects have their own suites:
 * test_cache_entry (damaged entries), test_cache_trust (what is refused),
 * test_cache_housekeep (stamps, eviction, sweep), test_cache_lock,
 * test_cache_messages (unwritable and full directories, settings).  Each
 * test runs in its own forked process (Check's default) with its own temp
 * tree (cache_testutil.c).
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/settings.h"
#include "cache/entry.h"
#include "cache/layout.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"

/* ---- round trip --------------------------------------------------------- */

START_TEST(test_round_trip)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(5000, 1), got;
    kdtree_cache_stats s;
    struct stat st;
    char *path, v1[400];
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    kdtree_cache_stats_reset();
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_int_eq(from, KDT_FROM_NONE);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);

    /* In memory straight away. */
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_MEMORY);
    ck_assert(ct_same_blob(&got, &b));
    kdt_blob_free(&got);

    /* And on disk, as one 0600 file in 0700 directories. */
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_USER);
    ck_assert(ct_same_blob(&got, &b));
    kdt_blob_free(&got);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_uint_eq((uint64_t)st.st_size,
                      KDT_ENTRY_HEADER_SIZE + p.len + b.size);
    ck_assert_int_eq(stat(ct_user, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ck_assert_int_eq(stat(v1, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);

    s = ct_stats();
    ck_assert_uint_eq(s.memory_hits, 1);
    ck_assert_uint_eq(s.disk_hits, 1);
    ck_assert_uint_eq(s.disk_misses, 1);
    ck_assert_uint_eq(s.disk_rejects, 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_ptx_and_alias_kinds)
{
    static const int kinds[] = { KDT_PAYLOAD_PTX, KDT_PAYLOAD_ALIAS };
    kdt_preimage p;
    kdt_key key;
    kdt_blob b, got;
    int from, i;

    for (i = 0; i < 2; i++) {
        ct_preimage(&p, i ? "alias" : "ptx", "compute_90", &key);
        b = ct_blob(100, 2);
        b.kind = kinds[i];
        ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
        ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
        ck_assert_int_eq(got.kind, kinds[i]);
        ck_assert(ct_same_blob(&got, &b));
        kdt_blob_free(&got);
        kdt_blob_free(&b);
        kdt_preimage_free(&p);
    }
}
END_TEST

/* ---- memory ------------------------------------------------------------- */

START_TEST(test_memory_clear)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(10, 21), b2 = ct_blob(20, 22), got;
    int from;

    setenv("KDTREE_CACHE", "off", 1);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    /* A second store replaces the first. */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b2), 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    ck_assert(ct_same_blob(&got, &b2));
    kdt_blob_free(&got);
    kdt_cache_memory_clear();
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 0);
    kdt_blob_free(&b);
    kdt_blob_free(&b2);
    kdt_preimage_free(&p);
}
END_TEST

/* The memory layer survives fork() (its lock is held across it), and the
 * child sees what the parent had. */
START_TEST(test_fork_after_use)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 23), got;
    int from, status;
    pid_t pid;

    setenv("KDTREE_CACHE", "off", 1);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    pid = fork();
    if (pid == 0) {
        int r = kdt_cache_lookup(&key, p.text, p.len, &got, &from);
        _exit(r == 1 && from == KDT_FROM_MEMORY ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    kdt_blob_free(&got);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- modes and directories ---------------------------------------------- */

START_TEST(test_mode_off)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 11), got;
    char *path;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(access(path, F_OK), 0);

    setenv("KDTREE_CACHE", "off", 1);
    ck_assert_ptr_null(kdt_cache_user_dir());
    kdtree_cache_stats_reset();
    /* The entry on disk is not read... */
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_uint_eq(ct_stats().disk_misses, 0);
    /* ...and nothing is written. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_ne(access(path, F_OK), 0);
    /* The process still keeps what it compiled. */
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_MEMORY);
    kdt_blob_free(&got);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_mode_readonly)
{
    kdt_preimage p, q;
    kdt_key key, k2;
    kdt_blob b = ct_blob(100, 12), got;
    char *path, *p2;
    struct stat st;
    struct timespec old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ct_preimage(&q, "k2", "sm_90", &k2);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);
    setenv("KDTREE_CACHE", "readonly", 1);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_USER);
    kdt_blob_free(&got);
    /* readonly means no stamp either. */
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mtime, 1000000000);
    ck_assert_int_eq(kdt_cache_store(&k2, q.text, q.len, &b), 0);
    p2 = ct_entry_path(ct_user, &k2);
    ck_assert_int_ne(access(p2, F_OK), 0);
    /* An unknown mode reads as readwrite. */
    setenv("KDTREE_CACHE", "sideways", 1);
    ck_assert_int_eq(kdt_cache_mode(), KDT_CACHE_READWRITE);
    free(path);
    free(p2);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
    kdt_preimage_free(&q);
}
END_TEST

START_TEST(test_dir_resolution)
{
    char *d;

    setenv("KDTREE_CACHE_DIR", "/x/explicit", 1);
    setenv("XDG_CACHE_HOME", "/x/xdg", 1);
    setenv("HOME", "/x/home", 1);
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/explicit");
    free(d);
    setenv("KDTREE_CACHE_DIR", "", 1);
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/xdg/kdtree-jit");
    free(d);
    unsetenv("KDTREE_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "relative/ignored", 1);
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/home/.cache/kdtree-jit");
    free(d);
    unsetenv("XDG_CACHE_HOME");
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/home/.cache/kdtree-jit");
    free(d);
    unsetenv("HOME");
    ck_assert_ptr_null(kdt_cache_user_dir());
    d = kdt_layout_entry_dir("/a");
    ck_assert_str_eq(d, "/a/v1");
    free(d);
}
END_TEST

/* A relative KDTREE_CACHE_DIR is resolved against the working directory
 * once, said at info, and kept when the working directory changes. */
START_TEST(test_relative_dir_resolved_once)
{
    char want[400], other[400], *d, *log;
    size_t n;
    char **layers;

    snprintf(want, sizeof want, "%s/rel", ct_base);
    snprintf(other, sizeof other, "%s/elsewhere", ct_base);
    ct_mkdirs(other);
    ck_assert_int_eq(chdir(ct_base), 0);
    setenv("KDTREE_CACHE_DIR", "rel", 1);
    setenv("KDTREE_CACHE_PATH", "./layer", 1);
    ct_log_at("info");
    ct_capture_begin();
    d = kdt_cache_user_dir();
    layers = kdt_cache_layer_dirs(&n);
    log = ct_capture_end();
    ck_assert_str_eq(d, want);
    ck_assert_uint_eq(n, 1);
    snprintf(want, sizeof want, "%s/layer", ct_base);
    ck_assert_str_eq(layers[0], want);
    ck_assert_msg(ct_count_lines(log, "KDTREE_CACHE_DIR=rel is relative")
                  == 1 && ct_count_lines(log, "KDTREE_CACHE_PATH=./layer is "
                                              "relative") == 1,
                  "log:\n%s", log);
    free(log);
    free(d);
    kdt_cache_free_dirs(layers, n);
    /* Another working directory: the same cache, nothing said again. */
    ck_assert_int_eq(chdir(other), 0);
    ct_capture_begin();
    d = kdt_cache_user_dir();
    log = ct_capture_end();
    snprintf(want, sizeof want, "%s/rel", ct_base);
    ck_assert_str_eq(d, want);
    ck_assert_str_eq(log, "");
    free(log);
    free(d);
}
END_TEST

START_TEST(test_no_directory_at_all)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 13), got;
    int from;

    unsetenv("KDTREE_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    kdt_blob_free(&got);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 0);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- layers ------------------------------------------------------------- */

START_TEST(test_layers)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob lb = ct_blob(100, 14), ub = ct_blob(100, 15), pb = ct_blob(100, 16);
    kdt_blob got;
    char la[300], lb_dir[300], pre[300], path_env[1000], *path;
    struct stat st0, st1;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    snprintf(la, sizeof la, "%s/layer-a", ct_base);
    snprintf(lb_dir, sizeof lb_dir, "%s/layer-b", ct_base);
    snprintf(pre, sizeof pre, "%s/prebuilt", ct_base);
    /* Missing layers, empty components: all fine. */
    snprintf(path_env, sizeof path_env, "%s/missing::%s:%s", ct_base, la,
             lb_dir);
    setenv("KDTREE_CACHE_PATH", path_env, 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", pre, 1);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 0);

    /* User only. */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &ub), 0);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_USER);
    kdt_blob_free(&got);

    /* The prebuilt layer is searched before the user's directory... */
    path = ct_entry_path(pre, &key);
    ct_write_entry(path, &key, p.text, p.len, &pb);
    free(path);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_LAYER);
    ck_assert(ct_same_blob(&got, &pb));
    kdt_blob_free(&got);

    /* ...and KDTREE_CACHE_PATH before the prebuilt one, in order. */
    path = ct_entry_path(lb_dir, &key);
    ct_write_entry(path, &key, p.text, p.len, &lb);
    ck_assert_int_eq(stat(path, &st0), 0);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_LAYER);
    ck_assert(ct_same_blob(&got, &lb));
    kdt_blob_free(&got);
    /* A layer is read-only: no stamp. */
    ck_assert_int_eq(stat(path, &st1), 0);
    ck_assert_int_eq(st1.st_mtim.tv_sec, st0.st_mtim.tv_sec);
    ck_assert_int_eq(st1.st_mtim.tv_nsec, st0.st_mtim.tv_nsec);

    /* A corrupt layer entry is skipped: the next layer serves. */
    {
        void *buf;
        size_t n;
        ck_assert_int_eq(ct_read(path, &buf, &n), 0);
        ((unsigned char *)buf)[n - 1] ^= 1;
        ck_assert_int_eq(ct_write(path, buf, n, 0600), 0);
        free(buf);
    }
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    ck_assert(ct_same_blob(&got, &pb));
    kdt_blob_free(&got);
    free(path);

    /* Layers are never written. */
    {
        kdt_preimage q;
        kdt_key k2;
        char *p2;
        ct_preimage(&q, "k2", "sm_90", &k2);
        ck_assert_int_eq(kdt_cache_store(&k2, q.text, q.len, &ub), 0);
        p2 = ct_entry_path(lb_dir, &k2);
        ck_assert_int_ne(access(p2, F_OK), 0);
        free(p2);
        kdt_preimage_free(&q);
    }
    kdt_blob_free(&lb);
    kdt_blob_free(&ub);
    kdt_blob_free(&pb);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_layer_list)
{
    char **d;
    size_t n;

    setenv("KDTREE_CACHE_PATH", ":/a::/b:", 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "/pre", 1);
    d = kdt_cache_layer_dirs(&n);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(d[0], "/a");
    ck_assert_str_eq(d[1], "/b");
    ck_assert_str_eq(d[2], "/pre");
    kdt_cache_free_dirs(d, n);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "", 1);
    unsetenv("KDTREE_CACHE_PATH");
    d = kdt_cache_layer_dirs(&n);
    ck_assert_uint_eq(n, 0);
    kdt_cache_free_dirs(d, n);
    /* Unset: the installed layer. */
    unsetenv("KDTREE_CACHE_PREBUILT_DIR");
    d = kdt_cache_layer_dirs(&n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(d[0], KDT_PREBUILT_CACHE_DIR);
    kdt_cache_free_dirs(d, n);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("cache", 60);

    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_ptx_and_alias_kinds);
    tcase_add_test(tc, test_mode_off);
    tcase_add_test(tc, test_mode_readonly);
    tcase_add_test(tc, test_dir_resolution);
    tcase_add_test(tc, test_relative_dir_resolved_once);
    tcase_add_test(tc, test_no_directory_at_all);
    tcase_add_test(tc, test_layers);
    tcase_add_test(tc, test_layer_list);
    tcase_add_test(tc, test_memory_clear);
    tcase_add_test(tc, test_fork_after_use);
    return ct_suite("cache", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
