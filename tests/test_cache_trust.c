/*
 * test_cache_trust.c: what the cache refuses to read from or write into.
 * Entry paths that hold something other than a regular file (a FIFO, which
 * must never block a lookup, a directory, a symlink); entries and the
 * directory chain (the cache directory, v1/) owned by someone else or
 * writable by group or others; a planted v1/ symlink; untrusted layers.
 * Each refusal is a logged miss; a refused user directory warns once and
 * the process carries on in memory.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/file.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"

static uint64_t
rejects(void)
{
    return ct_stats().disk_rejects;
}

/* Looks `key` up with an empty memory layer: 1 hit, 0 miss. */
static int
disk_lookup(const kdt_key *key, const kdt_preimage *p)
{
    return ct_disk_lookup(key, p, NULL, NULL);
}

static void
v1_of(const char *base, char *out, size_t size)
{
    snprintf(out, size, "%s/v%d", base, KDT_CACHE_FORMAT);
}

/* ---- what sits at an entry path ---------------------------------------- */

/* A FIFO where an entry should be: the lookup is a logged miss at once
 * (the tcase's timeout fails a lookup that blocks), and a store replaces
 * it with the entry. */
START_TEST(test_fifo_entry_user)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(300, 1);
    char *path, *log;

    ct_preimage(&p, "k", "sm_90", &key);
    path = ct_entry_path(ct_user, &key);
    {
        char *dir = strdup(path);
        *strrchr(dir, '/') = '\0';
        ct_mkdirs(dir);
        free(dir);
    }
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    setenv("KDTREE_LOG", "info", 1);
    kdt_log_reload();
    kdtree_cache_stats_reset();
    ct_capture_begin();
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    log = ct_capture_end();
    ck_assert_uint_eq(rejects(), 1);
    ck_assert_msg(ct_count_lines(log, "not a regular file") == 1,
                  "log: %s", log);
    free(log);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 1);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* The attack of the issue: a FIFO planted in a layer that others can
 * write.  The layer is refused before anything in it is opened. */
START_TEST(test_fifo_entry_open_layer)
{
    kdt_preimage p;
    kdt_key key;
    char layer[400], v1[500], *path;

    ct_preimage(&p, "k", "sm_90", &key);
    snprintf(layer, sizeof layer, "%s/open-layer", ct_base);
    v1_of(layer, v1, sizeof v1);
    ct_mkdirs(v1);
    ck_assert_int_eq(chmod(layer, 0777), 0);
    ck_assert_int_eq(chmod(v1, 0777), 0);
    path = ct_entry_path(layer, &key);
    ck_assert_int_eq(mkfifo(path, 0666), 0);
    setenv("KDTREE_CACHE_PATH", layer, 1);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    /* A trusted layer with a FIFO in it: refused the same way. */
    ck_assert_int_eq(chmod(v1, 0755), 0);
    ck_assert_int_eq(chmod(layer, 0755), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    free(path);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_directory_and_symlink_entry)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 8);
    char *path, moved[600];

    ct_preimage(&p, "k", "sm_90", &key);
    path = ct_entry_path(ct_user, &key);
    ct_mkdirs(path); /* a directory where the entry should be */
    kdtree_cache_stats_reset();
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    ck_assert_uint_eq(rejects(), 1);
    /* The store cannot rename over a directory: memory only, no failure. */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(rmdir(path), 0);
    /* A symlink to a valid entry is refused too (O_NOFOLLOW). */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    snprintf(moved, sizeof moved, "%s.real", path);
    ck_assert_int_eq(rename(path, moved), 0);
    ck_assert_int_eq(symlink(moved, path), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- owner and mode of entries ---------------------------------------- */

START_TEST(test_group_writable_entry_refused)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 9);
    char *path, v1[400];

    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    kdtree_cache_stats_reset();
    ck_assert_int_eq(chmod(path, 0660), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    ck_assert_int_eq(chmod(path, 0602), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 1);

    v1_of(ct_user, v1, sizeof v1);
    ck_assert_int_eq(chmod(v1, 0770), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    ck_assert_uint_eq(rejects(), 3);
    /* Nor does it publish into such a directory. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_ne(access(path, F_OK), 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_foreign_owner_entry_refused)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 10);
    char *path, layer[400];

    if (geteuid() != 0) {
        /* Only root can give a file away: the rule itself, then. */
        struct stat st;
        char why[160];
        memset(&st, 0, sizeof st);
        st.st_uid = geteuid() + 1;
        st.st_mode = S_IFREG | 0600;
        ck_assert_int_eq(kdt_cache_trusted(&st, 0, why, sizeof why), -1);
        ck_assert(strstr(why, "owned by") != NULL);
        kdt_blob_free(&b);
        return;
    }
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(chown(path, 4242, 4242), 0);
    kdtree_cache_stats_reset();
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    ck_assert_uint_eq(rejects(), 1);
    /* Replaced by a store (we own the directory). */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 1);

    /* A layer entry owned by someone else (neither us nor root). */
    snprintf(layer, sizeof layer, "%s/layer", ct_base);
    free(path);
    path = ct_entry_path(layer, &key);
    ct_write_entry(path, &key, p.text, p.len, &b);
    ck_assert_int_eq(chown(path, 4242, 4242), 0);
    setenv("KDTREE_CACHE_PATH", layer, 1);
    setenv("KDTREE_CACHE", "readonly", 1);
    free(path);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- the directory chain ------------------------------------------------ */

/* Stores `key`, then spoils the user directory with `spoil`; afterwards
 * neither the old entry is read nor a new one written, and the whole
 * sequence warns exactly once. */
static void
check_dir_refused(void (*spoil)(void), const char *reason)
{
    kdt_preimage p, q;
    kdt_key key, k2;
    kdt_blob b = ct_blob(200, 11), got;
    char *p2, *log;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ct_preimage(&q, "k2", "sm_90", &k2);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 1);
    spoil();
    setenv("KDTREE_LOG", "warn", 1);
    kdt_log_reload();
    ct_capture_begin();
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    ck_assert_int_eq(kdt_cache_store(&k2, q.text, q.len, &b), 0);
    /* ...and it carries on in memory. */
    ck_assert_int_eq(kdt_cache_lookup(&k2, q.text, q.len, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_MEMORY);
    kdt_blob_free(&got);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    ck_assert_int_eq(kdt_cache_store(&k2, q.text, q.len, &b), 0);
    kdt_cache_flush();
    log = ct_capture_end();
    ck_assert_msg(ct_count_lines(log, "kdtree: warn:") == 1,
                  "wanted one warning, got: %s", log);
    ck_assert_msg(strstr(log, reason) != NULL, "no '%s' in: %s", reason,
                  log);
    free(log);
    p2 = ct_entry_path(ct_user, &k2);
    ck_assert_int_ne(access(p2, F_OK), 0);
    free(p2);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
    kdt_preimage_free(&q);
}

static void
dir_world_writable(void)
{
    ck_assert_int_eq(chmod(ct_user, 0777), 0);
}

static void
dir_group_writable(void)
{
    ck_assert_int_eq(chmod(ct_user, 0770), 0);
}

static void
dir_foreign(void)
{
    ck_assert_int_eq(chown(ct_user, 4242, 4242), 0);
}

START_TEST(test_dir_world_writable)
{
    check_dir_refused(dir_world_writable, "writable by group or others");
}
END_TEST

START_TEST(test_dir_group_writable)
{
    check_dir_refused(dir_group_writable, "writable by group or others");
}
END_TEST

START_TEST(test_dir_foreign_owner)
{
    if (geteuid() != 0)
        return; /* only root can give a directory away */
    check_dir_refused(dir_foreign, "owned by uid 4242");
}
END_TEST

/* Someone replaced v1/ with a symlink to a directory of theirs (here one
 * of ours, which would pass every other check): never followed, for
 * reading or writing. */
static void
v1_symlink(void)
{
    char v1[400], planted[400], cmd[1000];

    v1_of(ct_user, v1, sizeof v1);
    snprintf(planted, sizeof planted, "%s/planted", ct_base);
    /* The planted directory holds what v1/ held, valid entries. */
    snprintf(cmd, sizeof cmd, "mv '%s' '%s'", v1, planted);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(symlink(planted, v1), 0);
}

START_TEST(test_v1_symlink_not_followed)
{
    char planted[400];
    kdt_key k2;
    kdt_preimage q;

    check_dir_refused(v1_symlink, "v1");
    /* Nothing was written where the link points. */
    snprintf(planted, sizeof planted, "%s/planted", ct_base);
    ct_preimage(&q, "k2", "sm_90", &k2);
    {
        char hex[33], path[600];
        kdt_key_hex(&k2, hex);
        snprintf(path, sizeof path, "%s/%s.kdt", planted, hex);
        ck_assert_int_ne(access(path, F_OK), 0);
    }
    kdt_preimage_free(&q);
}
END_TEST

/* The cache directory itself a symlink: followed only when the link is
 * ours (a user may keep ~/.cache elsewhere); the directory it names must
 * pass the same rules. */
START_TEST(test_dir_symlink_of_ours)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(200, 12);
    char real[400], link[400];

    snprintf(real, sizeof real, "%s/real-cache", ct_base);
    snprintf(link, sizeof link, "%s/link-cache", ct_base);
    ck_assert_int_eq(mkdir(real, 0700), 0);
    ck_assert_int_eq(symlink(real, link), 0);
    setenv("KDTREE_CACHE_DIR", link, 1);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 1);
    ck_assert_int_eq(chmod(real, 0777), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* A layer whose directory others can write is refused whole. */
START_TEST(test_layer_dir_untrusted)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(200, 13);
    char layer[400], *path;

    ct_preimage(&p, "k", "sm_90", &key);
    snprintf(layer, sizeof layer, "%s/layer", ct_base);
    path = ct_entry_path(layer, &key);
    ct_write_entry(path, &key, p.text, p.len, &b);
    setenv("KDTREE_CACHE_PATH", layer, 1);
    setenv("KDTREE_CACHE", "readonly", 1);
    ck_assert_int_eq(disk_lookup(&key, &p), 1);
    ck_assert_int_eq(chmod(layer, 0757), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 0);
    /* Owned by root is fine for a layer (an installed prebuilt one). */
    ck_assert_int_eq(chmod(layer, 0755), 0);
    ck_assert_int_eq(disk_lookup(&key, &p), 1);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("trust", 20);

    tcase_add_test(tc, test_fifo_entry_user);
    tcase_add_test(tc, test_fifo_entry_open_layer);
    tcase_add_test(tc, test_directory_and_symlink_entry);
    tcase_add_test(tc, test_group_writable_entry_refused);
    tcase_add_test(tc, test_foreign_owner_entry_refused);
    tcase_add_test(tc, test_dir_world_writable);
    tcase_add_test(tc, test_dir_group_writable);
    tcase_add_test(tc, test_dir_foreign_owner);
    tcase_add_test(tc, test_v1_symlink_not_followed);
    tcase_add_test(tc, test_dir_symlink_of_ours);
    tcase_add_test(tc, test_layer_dir_untrusted);
    return ct_suite("cache_trust", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
