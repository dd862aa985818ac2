/*
 * test_cache_messages.c: what the cache and the log tell the user: a
 * reason is never cut off by a long path, and every setting it reads
 * (KDTREE_LOG, KDTREE_CACHE, KDTREE_CACHE_MAX_BYTES,
 * KDTREE_CACHE_LOCK_TIMEOUT) either parses or says, once, what it used
 * instead.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/resource.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/settings.h"
#include "cache/entry.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"

/* ---- unwritable and full --------------------------------------------- */

/* Three stores, each served from memory whatever the disk does. */
static void
store_three(void)
{
    static const char *names[] = { "a", "b", "c" };
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(4000, 17), got;
    int i, from;

    for (i = 0; i < 3; i++) {
        ct_preimage(&p, names[i], "sm_90", &key);
        /* Never the caller's failure. */
        ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
        /* Served from memory all the same. */
        ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from),
                         1);
        ck_assert_int_eq(from, KDT_FROM_MEMORY);
        kdt_blob_free(&got);
        kdt_preimage_free(&p);
    }
    kdt_blob_free(&b);
}

START_TEST(test_unwritable_dir_warns_once)
{
    ct_unwritable_dir();
    setenv("KDTREE_LOG", "warn", 1);
    kdt_log_reload();
    ck_assert_int_eq(ct_count_log_lines(store_three, "kdtree: warn:"), 1);
    /* Still nothing on the next batch: once per process. */
    ck_assert_int_eq(ct_count_log_lines(store_three, "kdtree: warn:"), 0);
    /* At info level the later failures are still explained. */
    setenv("KDTREE_LOG", "info", 1);
    kdt_log_reload();
    ck_assert_int_ge(ct_count_log_lines(store_three, "kdtree: info: cache: cannot write"), 3);
}
END_TEST

START_TEST(test_full_disk)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(1 << 20, 18), got;
    struct rlimit rl;
    char v1[400];
    int from;

    /* RLIMIT_FSIZE makes write() fail part-way (EFBIG) as a full disk
     * would (ENOSPC): the same path through publish. */
    signal(SIGXFSZ, SIG_IGN);
    rl.rlim_cur = rl.rlim_max = 64 * 1024;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    kdt_blob_free(&got);
    /* No entry and no temp file left behind. */
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 0);
    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ck_assert_uint_eq(ct_count_entries(), 0);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", v1);
        ck_assert_int_eq(system(cmd), 0);
    }
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- reasons and settings ---------------------------------------------- */

/* A cache directory far below a regular file: publishing fails with
 * ENOTDIR, and the log line that says so must end with that reason,
 * however long the path (PATH_MAX is 4096; the line names it twice). */
START_TEST(test_long_path_keeps_reason)
{
    static const size_t lengths[] = {300, 1000, 3500};
    char file[400];

    snprintf(file, sizeof file, "%s/plain-file", ct_base);
    ck_assert_int_eq(ct_write(file, "x", 1, 0600), 0);
    setenv("KDTREE_LOG", "info", 1);
    kdt_log_reload();
    for (size_t i = 0; i < 3; i++) {
        char dir[4096], name[16], *log;
        size_t used = (size_t)snprintf(dir, sizeof dir, "%s", file);
        kdt_preimage p;
        kdt_key key;
        kdt_blob b = ct_blob(100, (unsigned)i);

        while (used < lengths[i])
            used += (size_t)snprintf(dir + used, sizeof dir - used, "/%.*s",
                                     200, "ddddddddddddddddddddddddddddddddd"
                                     "ddddddddddddddddddddddddddddddddddddd"
                                     "ddddddddddddddddddddddddddddddddddddd"
                                     "ddddddddddddddddddddddddddddddddddddd"
                                     "ddddddddddddddddddddddddddddddddddddd"
                                     "ddddddddddddddddddddddddddddddddddddd");
        setenv("KDTREE_CACHE_DIR", dir, 1);
        snprintf(name, sizeof name, "k%zu", i);
        ct_preimage(&p, name, "sm_90", &key);
        ct_capture_begin();
        ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
        kdt_cache_flush();
        log = ct_capture_end();
        ck_assert_msg(ct_count_lines(log, strerror(ENOTDIR)) == 1,
                      "path of %zu characters: the reason is lost: %s",
                      used, log);
        free(log);
        kdt_blob_free(&b);
        kdt_preimage_free(&p);
    }
}
END_TEST

static char *
log_of_reload(const char *level)
{
    setenv("KDTREE_LOG", level, 1);
    ct_capture_begin();
    kdt_log_reload();
    kdt_log(KDT_LOG_WARN, "a warning");
    return ct_capture_end();
}

START_TEST(test_bad_log_level_warns)
{
    char *log = log_of_reload("loud");

    ck_assert_msg(strstr(log, "KDTREE_LOG=loud") != NULL, "log: %s", log);
    /* ...and the default, warn, is what it uses. */
    ck_assert_int_eq(ct_count_lines(log, "kdtree: warn: a warning"), 1);
    ck_assert(!kdt_log_enabled(KDT_LOG_INFO));
    free(log);
    /* The good spellings say nothing. */
    log = log_of_reload("info");
    ck_assert_str_eq(log, "kdtree: warn: a warning\n");
    ck_assert(kdt_log_enabled(KDT_LOG_INFO));
    free(log);
    log = log_of_reload("WARNING");
    ck_assert_str_eq(log, "kdtree: warn: a warning\n");
    free(log);
}
END_TEST

START_TEST(test_max_bytes_parse)
{
    unsetenv("KDTREE_CACHE_MAX_BYTES");
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "12345", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), 12345);
    setenv("KDTREE_CACHE_MAX_BYTES", "3M", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), 3u << 20);
    setenv("KDTREE_CACHE_MAX_BYTES", "2G", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)2 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "0", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), 0);
    setenv("KDTREE_CACHE_MAX_BYTES", "lots", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "-5", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "99999999999T", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
}
END_TEST

/* ' -5' became 2^64 - 5 (strtoull skips the blank and negates). */
START_TEST(test_max_bytes_blank_minus_warns)
{
    static const char *bad[] = {" -5", "+5", "5 ", " 5", "0x10", "5KB"};

    setenv("KDTREE_LOG", "warn", 1);
    kdt_log_reload();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *log;
        uint64_t v;
        setenv("KDTREE_CACHE_MAX_BYTES", bad[i], 1);
        ct_capture_begin();
        v = kdt_cache_max_bytes();
        log = ct_capture_end();
        ck_assert_msg(v == (uint64_t)1 << 30, "'%s' read as %llu", bad[i],
                      (unsigned long long)v);
        /* Warned the first time in this process (at debug after). */
        if (i == 0)
            ck_assert_msg(strstr(log, "KDTREE_CACHE_MAX_BYTES") != NULL,
                          "'%s' accepted without a word", bad[i]);
        free(log);
    }
}
END_TEST

/* KDTREE_CACHE_LOCK_TIMEOUT: decimal seconds from 0 to 3600.  Anything
 * else ("0x10" was 16 s, "1e7" 115 days) warns once and means 120. */
START_TEST(test_lock_timeout_parse)
{
    static const struct {
        const char *v;
        double want;
    } good[] = {{"0", 0}, {"0.5", 0.5}, {".5", 0.5}, {"12", 12},
                {"12.", 12}, {"3600", 3600}};
    static const char *bad[] = {"0x10", "1e7", "3601", "-1", " 5", "5 ",
                                "+5", "inf", "nan", "5s", ".", "1.2.3"};
    char *log;

    ct_log_at("warn");
    unsetenv("KDTREE_CACHE_LOCK_TIMEOUT");
    ck_assert(kdt_cache_lock_timeout() == 120);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("KDTREE_CACHE_LOCK_TIMEOUT", good[i].v, 1);
        ck_assert_msg(kdt_cache_lock_timeout() == good[i].want,
                      "'%s' read as %g", good[i].v, kdt_cache_lock_timeout());
    }
    ct_capture_begin();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double t;
        setenv("KDTREE_CACHE_LOCK_TIMEOUT", bad[i], 1);
        t = kdt_cache_lock_timeout();
        ck_assert_msg(t == 120, "'%s' read as %g", bad[i], t);
    }
    log = ct_capture_end();
    ck_assert_msg(ct_count_lines(log, "warn: KDTREE_CACHE_LOCK_TIMEOUT=0x10 "
                                      "is not a number of seconds from 0 to "
                                      "3600") == 1
                  && ct_count_lines(log, "warn:") == 1, "log:\n%s", log);
    free(log);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("messages", 60);

    tcase_add_test(tc, test_unwritable_dir_warns_once);
    tcase_add_test(tc, test_full_disk);
    tcase_add_test(tc, test_long_path_keeps_reason);
    tcase_add_test(tc, test_max_bytes_parse);
    tcase_add_test(tc, test_bad_log_level_warns);
    tcase_add_test(tc, test_max_bytes_blank_minus_warns);
    tcase_add_test(tc, test_lock_timeout_parse);
    return ct_suite("cache_messages", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
