/*
 * test_cache_housekeep.c: the user directory's housekeeping: eviction
 * under KDTREE_CACHE_MAX_BYTES (an entry and its alias live and die
 * together; a fresh publish is never its own eviction's victim) and the
 * sweep of temp files (a live writer's file stays, whatever its pid says,
 * and so does a young one nobody locks: an earlier release's writer).
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/entry.h"
#include "cache/housekeep.h"
#include "cache/layout.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"

static int
exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static uint64_t
file_size(const char *path)
{
    struct stat st;

    ck_assert_int_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static void
set_cap(uint64_t bytes)
{
    char cap[64];

    snprintf(cap, sizeof cap, "%llu", (unsigned long long)bytes);
    setenv("KDTREE_CACHE_MAX_BYTES", cap, 1);
}

/* An entry of `kernel` and its alias, as the miss path stores them. */
typedef struct pair {
    kdt_preimage pe, pa;
    kdt_key ke, ka;
    kdt_blob be, ba;
    char *path_e, *path_a;
} pair;

static void
pair_make(pair *x, const char *kernel, unsigned seed)
{
    ct_preimage(&x->pe, kernel, "sm_90", &x->ke);
    ct_alias_preimage(&x->pa, kernel, "sm_90", &x->ka);
    x->be = ct_blob(10000, seed);
    x->ba = ct_alias_blob();
    x->path_e = ct_entry_path(ct_user, &x->ke);
    x->path_a = ct_entry_path(ct_user, &x->ka);
}

static void
pair_store(pair *x)
{
    kdt_cache_item it[2] = {
        {&x->ke, x->pe.text, x->pe.len, &x->be},
        {&x->ka, x->pa.text, x->pa.len, &x->ba},
    };

    ck_assert_int_eq(kdt_cache_store_async(it, 2, NULL), 0);
    kdt_cache_flush();
}

static void
pair_free(pair *x)
{
    kdt_preimage_free(&x->pe);
    kdt_preimage_free(&x->pa);
    kdt_blob_free(&x->be);
    kdt_blob_free(&x->ba);
    free(x->path_e);
    free(x->path_a);
}

/* ---- stamps and eviction ------------------------------------------------ */

START_TEST(test_hit_refreshes_stamp)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 19), got;
    struct timespec old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
    struct stat st;
    char *path;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);
    ck_assert_int_eq(ct_disk_lookup(&key, &p, &got, &from), 1);
    kdt_blob_free(&got);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_gt(st.st_mtime, time(NULL) - 3600);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_eviction_order)
{
    static const char *names[] = { "e0", "e1", "e2", "e3", "e4", "e5" };
    kdt_preimage p[6];
    kdt_key key[6];
    kdt_blob b = ct_blob(10000, 20), got;
    char *path[6];
    uint64_t entry_size;
    int i, from;

    for (i = 0; i < 5; i++) {
        struct timespec t[2];
        ct_preimage(&p[i], names[i], "sm_90", &key[i]);
        ck_assert_int_eq(kdt_cache_store(&key[i], p[i].text, p[i].len, &b), 0);
        path[i] = ct_entry_path(ct_user, &key[i]);
        /* Stamps 100 s apart, e0 oldest. */
        t[0].tv_sec = t[1].tv_sec = 1000000000 + 100 * i;
        t[0].tv_nsec = t[1].tv_nsec = 0;
        ck_assert_int_eq(utimensat(AT_FDCWD, path[i], t, 0), 0);
    }
    ct_preimage(&p[5], names[5], "sm_90", &key[5]);
    path[5] = ct_entry_path(ct_user, &key[5]);
    entry_size = KDT_ENTRY_HEADER_SIZE + p[0].len + b.size;
    /* Using e0 makes it the newest: e1 and e2 are now the oldest. */
    ck_assert_int_eq(ct_disk_lookup(&key[0], &p[0], &got, &from), 1);
    kdt_blob_free(&got);
    /* Room for four: storing e5 must evict exactly e1 and e2. */
    {
        char cap[64];
        snprintf(cap, sizeof cap, "%llu",
                 (unsigned long long)(4 * entry_size + entry_size / 2));
        setenv("KDTREE_CACHE_MAX_BYTES", cap, 1);
    }
    ck_assert_int_eq(kdt_cache_store(&key[5], p[5].text, p[5].len, &b), 0);
    ck_assert_int_eq(access(path[0], F_OK), 0);
    ck_assert_int_ne(access(path[1], F_OK), 0);
    ck_assert_int_ne(access(path[2], F_OK), 0);
    ck_assert_int_eq(access(path[3], F_OK), 0);
    ck_assert_int_eq(access(path[4], F_OK), 0);
    ck_assert_int_eq(access(path[5], F_OK), 0);
    /* A cap below one entry keeps the one just stored. */
    setenv("KDTREE_CACHE_MAX_BYTES", "1", 1);
    ck_assert_int_eq(kdt_cache_store(&key[1], p[1].text, p[1].len, &b), 0);
    ck_assert_int_eq(access(path[1], F_OK), 0);
    for (i = 0; i < 6; i++)
        if (i != 1)
            ck_assert_int_ne(access(path[i], F_OK), 0);
    for (i = 0; i < 6; i++) {
        free(path[i]);
        kdt_preimage_free(&p[i]);
    }
    kdt_blob_free(&b);
}
END_TEST

/* The KDTREE_CACHE_MAX_BYTES=25000 case: the cap lies between the
 * entry and entry + alias.  Both stay (over the cap: they are the fresh
 * publish), in this process and in the next one. */
START_TEST(test_fresh_pair_survives_its_eviction)
{
    pair x;
    uint64_t se, sa;

    pair_make(&x, "k", 1);
    pair_store(&x);
    se = file_size(x.path_e);
    sa = file_size(x.path_a);
    ck_assert(exists(x.path_e) && exists(x.path_a));
    ck_assert_int_eq(unlink(x.path_e), 0);
    ck_assert_int_eq(unlink(x.path_a), 0);
    set_cap(se + sa / 2);
    pair_store(&x);
    ck_assert_msg(exists(x.path_e), "the fresh entry was evicted");
    ck_assert_msg(exists(x.path_a), "the fresh alias was evicted");
    pair_free(&x);
}
END_TEST

/* Under the cap an entry goes with the aliases that name it, and their
 * unit is as old as its newest member: an alias used recently (a process
 * without NVRTC found the entry through it) keeps its entry too. */
START_TEST(test_pair_lives_and_dies_together)
{
    pair old, fresh;
    kdt_preimage px;
    kdt_key kx;
    kdt_blob bx = ct_blob(10000, 3);
    char *path_x;
    uint64_t unit;

    pair_make(&old, "old", 4);
    pair_make(&fresh, "fresh", 5);
    pair_store(&old);
    ct_preimage(&px, "x", "sm_90", &kx);
    ck_assert_int_eq(kdt_cache_store(&kx, px.text, px.len, &bx), 0);
    path_x = ct_entry_path(ct_user, &kx);
    /* The entry is the oldest file, its alias the newest, x between. */
    ct_stamp(old.path_e, 100);
    ct_stamp(path_x, 200);
    ct_stamp(old.path_a, 300);
    unit = file_size(old.path_e) + file_size(old.path_a);
    /* Room for two pairs: x goes first, the old pair stays whole. */
    set_cap(2 * unit + unit / 4);
    pair_store(&fresh);
    ck_assert(!exists(path_x));
    ck_assert(exists(old.path_e));
    ck_assert(exists(old.path_a));
    ck_assert(exists(fresh.path_e) && exists(fresh.path_a));
    /* Room for one: the old pair goes, both of it. */
    set_cap(unit + unit / 4);
    ck_assert_int_eq(unlink(fresh.path_e), 0);
    pair_store(&fresh);
    ck_assert(!exists(old.path_e));
    ck_assert(!exists(old.path_a));
    ck_assert(exists(fresh.path_e) && exists(fresh.path_a));
    free(path_x);
    kdt_blob_free(&bx);
    kdt_preimage_free(&px);
    pair_free(&old);
    pair_free(&fresh);
}
END_TEST

/* ---- the temp sweep ------------------------------------------------------ */

static void
make_temp(const char *dir, const char *name, time_t mtime)
{
    char path[600];
    struct timespec t[2] = { { mtime, 0 }, { mtime, 0 } };

    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(ct_write(path, "partial", 7, 0600), 0);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, t, 0), 0);
}

static int
exists_in(const char *dir, const char *name)
{
    char path[600];

    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}


/* Makes the mtime of `path` `seconds` ago. */
static void
age(const char *path, double seconds)
{
    time_t t = time(NULL) - (time_t)seconds;
    struct timespec ts[2] = { { t, 0 }, { t, 0 } };

    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* A pid that is surely dead here: a child we reaped. */
static pid_t
dead_pid(void)
{
    pid_t child = fork();

    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    return child;
}

/* A store in a fresh process (a child), whose first publish into the
 * directory sweeps it. */
static void
store_in_child(const char *kernel)
{
    pid_t pid = fork();
    int status;

    if (pid == 0) {
        kdt_preimage p;
        kdt_key key;
        kdt_blob b = ct_blob(500, 6);
        ct_preimage(&p, kernel, "sm_90", &key);
        int r = kdt_cache_store(&key, p.text, p.len, &b);
        kdt_cache_flush();
        _exit(r == 0 ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A writer in another PID namespace (a container sharing the cache volume
 * with the same hostname) has a pid that means nothing, or someone else,
 * here: its temp file must stay while it writes.  Here the "writer" is a
 * child that holds the temp file open and locked, as a live publish does,
 * under a name with a pid that is dead in this namespace. */
START_TEST(test_sweep_keeps_live_writer_of_any_pid)
{
    const char *hex = "0123456789abcdef0123456789abcdef";
    char v1[400], host[64], path[700];
    int pfd[2], status;
    pid_t writer;
    char c;

    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ct_mkdirs(v1);
    kdt_layout_host_tag(host, sizeof host);
    snprintf(path, sizeof path, "%s/.%s.%ld.0.%s.tmp", v1, hex,
             (long)dead_pid(), host);
    ck_assert_int_eq(pipe(pfd), 0);
    writer = fork();
    if (writer == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || flock(fd, LOCK_EX) != 0 || write(fd, "half", 4) != 4)
            _exit(1);
        (void)!write(pfd[1], "y", 1);
        pause();
        _exit(0);
    }
    ck_assert_int_eq(read(pfd[0], &c, 1), 1);
    /* Older than the grace an unlocked file gets: only its lock keeps
     * it. */
    age(path, 2 * KDT_CACHE_TEMP_GRACE_S);
    store_in_child("a");
    ck_assert_msg(exists(path), "a live writer's temp file was swept");
    /* Once the writer is gone (killed mid-write), its file is stale. */
    kill(writer, SIGKILL);
    waitpid(writer, &status, 0);
    store_in_child("b");
    ck_assert_msg(!exists(path), "a dead writer's temp file was kept");
}
END_TEST

/* A writer of an earlier release locks nothing: its temp file, young and
 * unlocked, must outlive its publish (it was swept, and the writer's
 * rename failed).  Past the grace an unlocked file is stale. */
START_TEST(test_sweep_spares_young_unlocked_temp)
{
    const char *hex = "0123456789abcdef0123456789abcdef";
    char v1[400], host[48], path[700];

    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ct_mkdirs(v1);
    kdt_layout_host_tag(host, sizeof host);
    snprintf(path, sizeof path, "%s/.%s.%ld.0.%s.tmp", v1, hex,
             (long)dead_pid(), host);
    ck_assert_int_eq(ct_write(path, "half", 4, 0600), 0);
    store_in_child("a");
    ck_assert_msg(exists(path), "a young unlocked temp file was swept");
    age(path, KDT_CACHE_TEMP_GRACE_S + 60);
    store_in_child("b");
    ck_assert_msg(!exists(path), "an old unlocked temp file was kept");
}
END_TEST

/* The sweep's rules, name by name: this host's temp files go when no
 * writer holds their lock, whatever pid they name (ours, our parent's, a
 * dead one's); other hosts' only when old; other names never. */
START_TEST(test_sweep_rules)
{
    char v1[400], host[48], dead[200], locked[200], mine[200], far_new[200],
        far_old[200], other[200], path[700];
    const char *hex = "0123456789abcdef0123456789abcdef";
    time_t now = time(NULL);
    kdt_cache_tally t = {0};
    int fd, held;

    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ct_mkdirs(v1);
    kdt_layout_host_tag(host, sizeof host);
    snprintf(dead, sizeof dead, ".%s.%ld.0.%s.tmp", hex, (long)dead_pid(),
             host);
    snprintf(locked, sizeof locked, ".%s.%ld.0.%s.tmp", hex,
             (long)getppid(), host);
    snprintf(mine, sizeof mine, ".%s.%ld.3.%s.tmp", hex, (long)getpid(),
             host);
    snprintf(far_new, sizeof far_new, ".%s.%ld.0.elsewhere.tmp", hex,
             (long)getpid());
    snprintf(far_old, sizeof far_old, ".%s.1.0.elsewhere.tmp", hex);
    snprintf(other, sizeof other, "notes.tmp");
    make_temp(v1, dead, now);
    make_temp(v1, locked, now);
    make_temp(v1, mine, now);
    make_temp(v1, far_new, now);
    make_temp(v1, far_old, now - 7200);
    make_temp(v1, other, now - 7200);
    /* A writer (here: this process, through its own descriptor) holds
     * `locked`. */
    snprintf(path, sizeof path, "%s/%s", v1, locked);
    held = open(path, O_RDONLY);
    ck_assert_int_ge(held, 0);
    ck_assert_int_eq(flock(held, LOCK_EX), 0);
    fd = ct_open_user_dir();
    kdt_cache_sweep_temps(fd, v1, 0, KDT_CACHE_TEMP_STALE_S, &t);
    ck_assert_int_eq(t.removed, 3);
    ck_assert_int_eq(t.failed, 0);
    ck_assert(!exists_in(v1, dead));
    ck_assert(!exists_in(v1, mine)); /* unlocked: no publish of ours */
    ck_assert(!exists_in(v1, far_old));
    ck_assert(exists_in(v1, locked));
    ck_assert(exists_in(v1, far_new));
    ck_assert(exists_in(v1, other)); /* not ours: never touched */
    close(held);
    close(fd);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("housekeep", 60);

    tcase_add_test(tc, test_hit_refreshes_stamp);
    tcase_add_test(tc, test_eviction_order);
    tcase_add_test(tc, test_fresh_pair_survives_its_eviction);
    tcase_add_test(tc, test_pair_lives_and_dies_together);
    tcase_add_test(tc, test_sweep_keeps_live_writer_of_any_pid);
    tcase_add_test(tc, test_sweep_rules);
    tcase_add_test(tc, test_sweep_spares_young_unlocked_temp);
    return ct_suite("cache_housekeep", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
