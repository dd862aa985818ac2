/*
 * test_cache_spill.c: the spill store, the node-local cache directory
 * that stands in for a user's directory that cannot take an entry
 * (cache/cache.c, cache/settings.h): where an entry goes when the user's
 * directory fails, when it is searched, that readonly mode and
 * KDTREE_CACHE_SPILL_MAX_BYTES=0 write nothing there, its trust rules (no
 * link, no other writers) and its cap.  Fake entries, no NVRTC;
 * test_cache_cold has processes compiling into it, test_cache_unwritable
 * the lock files' part.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/file.h"
#include "cache/housekeep.h"
#include "cache_testutil.h"
#include "harness.h"

/* An entry for `kernel` (a `size`-byte payload) stored by the miss path
 * with no lock; *key set. */
static void
store_one(const char *kernel, size_t size, kdt_key *key)
{
    kdt_blob b = ct_blob(size, 7);
    kdt_preimage p;

    ct_preimage(&p, kernel, "sm_90", key);
    kdt_cache_item it = {key, p.text, p.len, &b};
    ck_assert_int_eq(kdt_cache_store_async(&it, 1, NULL), 0);
    kdt_cache_flush();
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}

/* The bytes of the regular entries of the base directory `base`. */
static uint64_t
bytes_in(const char *base)
{
    char why[KDT_WHY_SIZE];
    kdt_cache_file *f;
    uint64_t total = 0;
    size_t n;
    int fd;

    if (kdt_cache_dir_open(base, 0, &fd, why, sizeof why) != 0)
        return 0;
    ck_assert_int_eq(kdt_cache_scan(fd, &f, &n), 0);
    for (size_t i = 0; i < n; i++)
        total += f[i].size;
    free(f);
    close(fd);
    return total;
}

/* A publish that fails puts the entry and its alias into the spill store,
 * and a lookup finds them there (from then on, this process knowing the
 * user's directory cannot be written), as it would in that directory. */
START_TEST(test_failed_publish_spills)
{
    kdt_blob want = ct_blob(5000, 3), got;
    kdt_key key, akey;
    kdt_preimage p;
    int from;

    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "EXDEV", 1);
    ct_store_pair("k", NULL, &key, &akey);
    ck_assert_int_eq(ct_entry_state(&key, NULL), 0);
    ck_assert_int_eq(ct_entry_state_in(ct_spill, &key, &want), 1);
    ck_assert_int_eq(ct_entry_state_in(ct_spill, &akey, NULL), 1);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_SPILL);
    ck_assert(ct_same_blob(&got, &want));
    kdt_blob_free(&got);
    kdt_blob_free(&want);
    kdt_preimage_free(&p);
}
END_TEST

/* A user's directory that can be written is the only one written, and
 * the spill store is not searched for it: an entry there is not this
 * directory's. */
START_TEST(test_writable_directory_ignores_spill)
{
    kdt_blob b = ct_blob(300, 1);
    kdt_preimage p;
    kdt_key key;
    char *path;

    ct_preimage(&p, "k", "sm_90", &key);
    path = ct_entry_path(ct_spill, &key);
    ct_write_entry(path, &key, p.text, p.len, &b);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, NULL, NULL), 0);
    store_one("k2", 300, &key);
    ck_assert_int_eq(ct_entry_state(&key, NULL), 1);
    ck_assert_int_eq(ct_entry_state_in(ct_spill, &key, NULL), 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* A directory that cannot be made (here: below a regular file) is found
 * so by the claim on a key, which then locks for the spill store; the
 * lookup that follows the claim searches the spill store, and finds what
 * another process put there. */
START_TEST(test_claim_finds_spilled_entry)
{
    kdt_blob b = ct_blob(300, 1), got;
    kdt_cache_lock *l;
    kdt_preimage p;
    kdt_key key;
    char *path;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    path = ct_entry_path(ct_spill, &key);
    ct_write_entry(path, &key, p.text, p.len, &b);
    ct_unwritable_dir();
    l = kdt_cache_lock_acquire(&key, "k");
    ck_assert_msg(ct_locked_for(l, ct_spill), "not locked for the spill "
                  "store");
    ck_assert(kdt_cache_lock_recheck(l));
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_SPILL);
    ck_assert(ct_same_blob(&got, &b));
    kdt_cache_lock_release(l);
    kdt_blob_free(&got);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* KDTREE_CACHE=readonly asks for no cache writes, and
 * KDTREE_CACHE_SPILL_MAX_BYTES=0 for no spill store: neither writes one,
 * nor locks for one. */
START_TEST(test_no_spill_when_not_wanted)
{
    kdt_cache_lock *l;
    kdt_key key, akey;
    struct stat st;

    if (_i == 0)
        setenv("KDTREE_CACHE", "readonly", 1);
    else
        setenv("KDTREE_CACHE_SPILL_MAX_BYTES", "0", 1);
    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "EROFS", 1);
    ct_store_pair("k", NULL, &key, &akey);
    ct_unwritable_dir();
    l = kdt_cache_lock_acquire(&key, "k");
    ck_assert(!kdt_cache_lock_held(l));
    kdt_cache_lock_release(l);
    ck_assert_msg(lstat(ct_spill, &st) != 0, "a spill store was made");
}
END_TEST

/* The spill store sits in a directory every user may share (/dev/shm):
 * a symbolic link there, even one of ours, or a directory others may
 * write, is refused, said, and not written through. */
START_TEST(test_spill_trust)
{
    char target[400], inside[500], *log;
    kdt_key key;
    struct stat st;

    snprintf(target, sizeof target, "%s/elsewhere", ct_base);
    ct_mkdirs(target);
    if (_i == 0) {
        ck_assert_int_eq(symlink(target, ct_spill), 0);
    } else {
        ct_mkdirs(ct_spill);
        ck_assert_int_eq(chmod(ct_spill, 0777), 0);
    }
    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "EROFS", 1);
    ct_log_at("info");
    ct_capture_begin();
    store_one("k", 300, &key);
    log = ct_capture_end();
    snprintf(inside, sizeof inside, "%s/v1", target);
    ck_assert_msg(lstat(inside, &st) != 0, "written through a link");
    snprintf(inside, sizeof inside, "%s/v1", ct_spill);
    ck_assert_msg(lstat(inside, &st) != 0, "written into a directory "
                  "others may write");
    ck_assert_msg(strstr(log, _i == 0 ? "refused: a symbolic link"
                                      : "refused: writable by group or "
                                        "others"),
                  "log:\n%s", log);
    free(log);
}
END_TEST

/* A process that never needs the spill store is never told about it,
 * even when it could not be used. */
START_TEST(test_unneeded_spill_unsaid)
{
    char target[400], *log;
    kdt_key key;

    snprintf(target, sizeof target, "%s/elsewhere", ct_base);
    ct_mkdirs(target);
    ck_assert_int_eq(symlink(target, ct_spill), 0);
    ct_log_at("info");
    ct_capture_begin();
    store_one("k", 300, &key);
    log = ct_capture_end();
    ck_assert_int_eq(ct_entry_state(&key, NULL), 1);
    ck_assert_msg(!strstr(log, "spill store"), "log:\n%s", log);
    free(log);
}
END_TEST

/* The spill store is capped (KDTREE_CACHE_SPILL_MAX_BYTES) and evicted
 * like the user's directory: oldest first, never what was just
 * published. */
START_TEST(test_spill_capped)
{
    char kernel[16];
    kdt_key key;

    setenv("KDTREE_CACHE_TEST_PUBLISH_FAIL", "ENOSPC", 1);
    setenv("KDTREE_CACHE_SPILL_MAX_BYTES", "12K", 1);
    for (int i = 0; i < 8; i++) {
        snprintf(kernel, sizeof kernel, "k%d", i);
        store_one(kernel, 4000, &key);
        ck_assert_int_eq(ct_entry_state_in(ct_spill, &key, NULL), 1);
    }
    ck_assert_uint_le(bytes_in(ct_spill), 12 << 10);
    ck_assert_uint_ge(bytes_in(ct_spill), 8000);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("spill", 30);

    tcase_add_test(tc, test_failed_publish_spills);
    tcase_add_test(tc, test_writable_directory_ignores_spill);
    tcase_add_test(tc, test_claim_finds_spilled_entry);
    tcase_add_loop_test(tc, test_no_spill_when_not_wanted, 0, 2);
    tcase_add_loop_test(tc, test_spill_trust, 0, 2);
    tcase_add_test(tc, test_unneeded_spill_unsaid);
    tcase_add_test(tc, test_spill_capped);
    return ct_suite("cache_spill", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
