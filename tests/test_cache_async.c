/*
 * test_cache_async.c: the miss path's background publish (cache_async.c)
 * with real NVRTC compiles (compile-only for sm_90, no GPU).
 *
 * Most tests hold the publish with the test hook
 * KDTREE_CACHE_TEST_PUBLISH_GATE (the publishing thread stops between the
 * halves of each entry file until the gate file exists), so that a publish
 * is still in flight when the test looks, however loaded the machine: that
 * is what lets them fail when a flush does not wait, when a caller
 * publishes synchronously after all, or when the lock is let go early.
 * Where the thread under test must itself wait for the publish (a flush),
 * a helper thread opens the gate a little later: a slow machine can only
 * make such a test weaker, never fail it wrongly.
 * Children that could deadlock run under alarm(), so a hang fails the test
 * instead of stopping the suite.  Skipped (77) without NVRTC.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/file.h"
#include "cache/lock.h"
#include "cache/worker.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"
#include "jit/obtain.h"
#include "jit/registry.h"

#define KERNEL "tree_accept"
#define TARGET "sm_90"

/* A shape of KERNEL for TARGET and its full key. */
typedef struct kshape {
    int id;
    int64_t vals[KDT_MAX_CONSTS];
    kdt_key key;
} kshape;

static void
shape_of(kshape *k, const char *shape)
{
    kdt_preimage pre;

    k->id = kdt_kernel_find(KERNEL);
    ck_assert_int_ge(k->id, 0);
    ck_assert_int_eq(kdt_shape_parse(k->id, shape, k->vals), KDTREE_OK);
    ck_assert_int_eq(kdt_kernel_key(k->id, k->vals, TARGET, NULL, &pre,
                                    &k->key), KDTREE_OK);
    kdt_preimage_free(&pre);
}

/* The miss path as kdtree_prepare and kdtree_compile take it. */
static int
obtain(const kshape *k, kdt_blob *out, int *from)
{
    return kdt_kernel_obtain(k->id, k->vals, TARGET, KDT_PAYLOAD_CUBIN, out,
                             from);
}

/* 1 when nobody holds `key`'s lock (taken and released at once), 0 when
 * someone does.  No ck_assert: children call it too. */
static int
lock_free(const kdt_key *key)
{
    /* The node-wide lock itself, as the miss path would name it (by the
     * directory's identity), whatever the mode. */
    char *id = kdt_cache_dir_id(getenv("KDTREE_CACHE_DIR"));
    kdt_cache_lock *l = kdt_lock_new(NULL, 0);
    int held = kdt_lock_node(l, id, key, "a test's compile", 0);

    kdt_cache_lock_release(l);
    free(id);
    return held;
}

/* The gate of the publishes stored from now on (a new one each time). */
static char gate[400];

static void
hold_publish(void)
{
    static int n;

    snprintf(gate, sizeof gate, "%s/gate-%d-%d", ct_base, (int)getpid(),
             n++);
    setenv("KDTREE_CACHE_TEST_PUBLISH_GATE", gate, 1);
}

/* Waits (up to 10 s) until the held publish has written its temp file,
 * that is until the publishing thread is parked at the gate.  A fork()
 * must not land while that thread is in malloc: glibc's fork makes malloc
 * safe for the child, but a sanitizer's allocator may not (ASan's lock,
 * copied locked, hung the child's first malloc). */
static void
wait_parked(void)
{
    char dir[400];

    snprintf(dir, sizeof dir, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    for (int i = 0; i < 1000; i++) {
        DIR *d = opendir(dir);
        struct dirent *e;
        int found = 0;
        while (d && (e = readdir(d)))
            if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp"))
                found = 1;
        if (d)
            closedir(d);
        if (found)
            break;
        usleep(10000);
    }
    usleep(20000); /* from write() to the gate's poll */
}

/* Opens the gate: the held publishes go on.  No ck_assert: children and
 * helper threads call it. */
static void
release_publish(void)
{
    FILE *f = fopen(gate, "w");
    if (f)
        fclose(f);
}

static void *
release_after(void *ms)
{
    usleep((useconds_t)(uintptr_t)ms * 1000u);
    release_publish();
    return NULL;
}

/* Opens the gate `ms` milliseconds from now, from another thread. */
static void
release_later(unsigned ms)
{
    pthread_t t;

    ck_assert_int_eq(pthread_create(&t, NULL, release_after,
                                    (void *)(uintptr_t)ms), 0);
    pthread_detach(t);
}

/* How many publishing threads this process has (by name: sanitizers and
 * NVRTC may have threads of their own). */
static int
n_workers(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    char path[300], comm[64];
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d))) {
        FILE *f;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        f = fopen(path, "r");
        if (!f)
            continue; /* the thread just ended */
        if (fgets(comm, sizeof comm, f)
            && strncmp(comm, KDT_CACHE_THREAD_NAME,
                       strlen(KDT_CACHE_THREAD_NAME)) == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

static int
wait_exit_code(pid_t pid)
{
    int status;

    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "child killed by signal %d%s",
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                  WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM
                      ? " (SIGALRM: it hung)" : "");
    return WEXITSTATUS(status);
}

/* In a child: dies by SIGALRM after `s` seconds, so a hang fails the test.
 * Check's own SIGALRM handler (inherited over fork) would kill the whole
 * process group instead, the test included: put the default back first. */
static void
hang_guard(unsigned s)
{
    signal(SIGALRM, SIG_DFL);
    alarm(s);
}

/* ---- tests ------------------------------------------------------------ */

/* The caller gets its blob (and this process a memory hit) before the
 * publish is done; the lock stays with the publish until the entry is
 * durable; the flush waits for both. */
START_TEST(test_obtain_returns_before_publish)
{
    kshape k;
    kdt_blob got, mem;
    int from;

    shape_of(&k, "N_MAX=65,L=15");
    hold_publish();
    kdtree_cache_stats_reset();
    ck_assert_int_eq(obtain(&k, &got, &from), KDTREE_OK);
    ck_assert_int_eq(from, KDT_FROM_NONE);
    ck_assert_uint_eq(ct_stats().compiles, 1);
    /* Held mid-write: not on disk, lock held. */
    ck_assert_int_eq(ct_entry_state(&k.key, NULL), 0);
    ck_assert_int_eq(lock_free(&k.key), 0);
    /* This process hits memory at once. */
    ck_assert_int_eq(kdt_cache_lookup(&k.key, NULL, 0, &mem, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_MEMORY);
    ck_assert(mem.size == got.size
              && memcmp(mem.data, got.data, got.size) == 0);
    kdt_blob_free(&mem);

    release_publish();
    kdt_cache_flush();
    ck_assert_int_eq(ct_entry_state(&k.key, &got), 1);
    ck_assert_uint_eq(ct_count_entries(), 2); /* the entry and its alias */
    ck_assert_int_eq(lock_free(&k.key), 1);
    ck_assert_uint_eq(ct_stats().compiles, 1);
    kdt_blob_free(&got);
}
END_TEST

/* kdt_cache_memory_clear() flushes first: a second "process view" (an
 * empty memory layer) then finds the entry on disk, without compiling. */
START_TEST(test_memory_clear_then_disk)
{
    kshape k;
    kdt_blob got, again;
    int from;

    shape_of(&k, "N_MAX=65,L=15");
    hold_publish();
    kdtree_cache_stats_reset();
    ck_assert_int_eq(obtain(&k, &got, &from), KDTREE_OK);
    release_later(200);
    kdt_cache_memory_clear();
    ck_assert_int_eq(ct_entry_state(&k.key, &got), 1);
    ck_assert_int_eq(obtain(&k, &again, &from), KDTREE_OK);
    ck_assert_int_eq(from, KDT_FROM_USER);
    ck_assert(again.size == got.size
              && memcmp(again.data, got.data, got.size) == 0);
    ck_assert_uint_eq(ct_stats().compiles, 1);
    kdt_blob_free(&got);
    kdt_blob_free(&again);
}
END_TEST

/* kdtree_compile() returns with the entry on disk. */
START_TEST(test_compile_is_durable)
{
    kshape k;
    int32_t cached = -1;

    shape_of(&k, "N_MAX=65,L=15");
    hold_publish();
    release_later(1000); /* most likely after the compile, mid-publish */
    ck_assert_int_eq(kdtree_compile(&cached, TARGET, KERNEL,
                                    "N_MAX=65,L=15"), KDTREE_OK);
    ck_assert_int_eq(cached, 0);
    ck_assert_int_eq(ct_entry_state(&k.key, NULL), 1);
    ck_assert_uint_eq(ct_count_entries(), 2);
    /* A hit in memory still leaves nothing pending. */
    ck_assert_int_eq(kdtree_compile(&cached, TARGET, KERNEL,
                                    "N_MAX=65,L=15"), KDTREE_OK);
    ck_assert_int_eq(cached, 1);
}
END_TEST

/* Another process waiting on the key's lock gets it only once the entry
 * (and its alias) are complete on disk. */
START_TEST(test_waiter_finds_complete_entry)
{
    kshape k;
    kdt_blob got;
    int from;
    pid_t pid;

    shape_of(&k, "N_MAX=65,L=15");
    hold_publish();
    ck_assert_int_eq(obtain(&k, &got, &from), KDTREE_OK);
    wait_parked();
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kdt_cache_lock *l;
        int st;
        hang_guard(60);
        setenv("KDTREE_CACHE_LOCK_TIMEOUT", "50", 1);
        l = ct_node_lock(&k.key);
        if (!l)
            _exit(2);
        st = ct_entry_state(&k.key, &got);
        kdt_cache_lock_release(l);
        _exit(st == 1 ? 0 : 3);
    }
    release_later(300); /* the child is waiting on the lock by then */
    ck_assert_int_eq(wait_exit_code(pid), 0);
    kdt_cache_flush();
    kdt_blob_free(&got);
}
END_TEST

/* fork() while a publish is in flight: the child neither hangs (queue
 * mutex, a worker it would wrongly believe in) nor releases the parent's
 * lock, and publishes its own compiles; the parent's entry still lands. */
START_TEST(test_fork_during_publish)
{
    kshape k, k2, k3;
    kdt_blob got;
    int from;
    pid_t pid;

    shape_of(&k, "N_MAX=65,L=15");
    shape_of(&k2, "N_MAX=64,L=15");
    shape_of(&k3, "N_MAX=63,L=15");
    hold_publish();
    ck_assert_int_eq(obtain(&k, &got, &from), KDTREE_OK);
    ck_assert_int_eq(ct_entry_state(&k.key, NULL), 0);
    wait_parked();
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kdt_blob b2;
        int32_t cached;
        hang_guard(60);
        /* The parent's lock is the parent's: still held. */
        if (lock_free(&k.key))
            _exit(2);
        unsetenv("KDTREE_CACHE_TEST_PUBLISH_GATE");
        if (obtain(&k2, &b2, &from) != KDTREE_OK || from != KDT_FROM_NONE)
            _exit(3);
        kdt_cache_flush();
        if (ct_entry_state(&k2.key, &b2) != 1)
            _exit(4);
        kdt_blob_free(&b2);
        if (kdtree_compile(&cached, TARGET, KERNEL, "N_MAX=63,L=15")
                != KDTREE_OK
            || cached != 0 || ct_entry_state(&k3.key, NULL) != 1)
            _exit(5);
        kdt_cache_memory_clear(); /* flushes the child's own publishes */
        /* _exit: the child holds copies of the parent's in-flight publish
         * (buffers of a thread it does not have), which a leak checker at
         * exit() would report; test_exit_publishes covers exit(). */
        _exit(0);
    }
    ck_assert_int_eq(wait_exit_code(pid), 0);
    ck_assert_int_eq(ct_entry_state(&k.key, NULL), 0); /* still held */
    release_publish();
    kdt_cache_flush();
    ck_assert_int_eq(ct_entry_state(&k.key, &got), 1);
    ck_assert_int_eq(lock_free(&k.key), 1);
    ck_assert_int_eq(ct_entry_state(&k2.key, NULL), 1);
    ck_assert_uint_eq(ct_count_entries(), 6); /* three entries, three aliases */
    kdt_blob_free(&got);
}
END_TEST

/* A normal exit without any flush still publishes (the destructor). */
START_TEST(test_exit_publishes)
{
    kshape k;
    pid_t pid;

    shape_of(&k, "N_MAX=65,L=15");
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kdt_blob b;
        int from;
        hang_guard(60);
        hold_publish();
        if (obtain(&k, &b, &from) != KDTREE_OK || from != KDT_FROM_NONE)
            _exit(2);
        if (ct_entry_state(&k.key, NULL) != 0)
            _exit(3); /* published before returning: the test proves nothing */
        release_later(300); /* while exit() runs the destructor */
        exit(0);
    }
    ck_assert_int_eq(wait_exit_code(pid), 0);
    ck_assert_int_eq(ct_entry_state(&k.key, NULL), 1);
    ck_assert_uint_eq(ct_count_entries(), 2);
}
END_TEST

static void
obtain_two_and_flush(void)
{
    static const char *shapes[] = {"N_MAX=65,L=15", "N_MAX=64,L=15"};
    for (int i = 0; i < 2; i++) {
        kshape k;
        kdt_blob b;
        int from;
        shape_of(&k, shapes[i]);
        kdt_clear_error();
        ck_assert_int_eq(obtain(&k, &b, &from), KDTREE_OK);
        kdt_blob_free(&b);
        kdt_cache_flush();
        /* The worker's failure is nobody's last error. */
        ck_assert_str_eq(kdtree_last_error(), "");
        ck_assert_int_eq(kdt_cache_lookup(&k.key, NULL, 0, &b, &from), 1);
        ck_assert_int_eq(from, KDT_FROM_MEMORY);
        kdt_blob_free(&b);
        ck_assert_int_eq(lock_free(&k.key), 1);
    }
}

/* An unwritable directory: one warning from the worker, then memory only;
 * the callers succeed. */
START_TEST(test_unwritable_dir_warns_once)
{
    ct_unwritable_dir();
    setenv("KDTREE_LOG", "warn", 1);
    kdt_log_reload();
    ck_assert_int_eq(ct_count_log_lines(obtain_two_and_flush,
                                        "kdtree: warn:"), 1);
}
END_TEST

/* off and readonly: nothing queued, no thread started, lock released at
 * once; readwrite then starts exactly one publishing thread, which stays
 * the only one. */
START_TEST(test_modes_start_no_worker)
{
    static const char *modes[] = {"off", "readonly"};
    static const char *shapes[] = {"N_MAX=65,L=15", "N_MAX=64,L=15"};
    kshape k;
    kdt_blob b;
    int from;

    for (int i = 0; i < 2; i++) {
        setenv("KDTREE_CACHE", modes[i], 1);
        shape_of(&k, shapes[i]);
        ck_assert_int_eq(obtain(&k, &b, &from), KDTREE_OK);
        kdt_blob_free(&b);
        ck_assert_int_eq(lock_free(&k.key), 1);
        ck_assert_int_eq(n_workers(), 0);
        kdt_cache_flush();
    }
    unsetenv("KDTREE_CACHE");
    ck_assert_int_eq(ct_entry_state(&k.key, NULL), 0);
    ck_assert_uint_eq(ct_count_entries(), 0);
    for (int i = 0; i < 2; i++) {
        shape_of(&k, i ? "N_MAX=62,L=15" : "N_MAX=63,L=15");
        ck_assert_int_eq(obtain(&k, &b, &from), KDTREE_OK);
        kdt_blob_free(&b);
        ck_assert_int_eq(n_workers(), 1);
        kdt_cache_flush();
        ck_assert_int_eq(ct_entry_state(&k.key, NULL), 1);
    }
}
END_TEST

/* More than KDT_CACHE_QUEUE_MAX publishes waiting: the caller publishes
 * itself instead of growing the queue. */
START_TEST(test_queue_is_bounded)
{
    enum { N = KDT_CACHE_QUEUE_MAX + 6 };
    kdt_preimage p[N];
    kdt_key key[N];
    kdt_blob b = ct_blob(4096, 7);
    char name[32];

    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "k%d", i);
        ct_preimage(&p[i], name, TARGET, &key[i]);
    }
    /* The first publish holds the worker up, parked at the gate before
     * the rest are stored (a worker that took it off the queue only
     * later would free a slot midway, and a later store would be queued
     * instead of published by its caller)... */
    hold_publish();
    kdt_cache_item it = {&key[0], p[0].text, p[0].len, &b};
    ck_assert_int_eq(kdt_cache_store_async(&it, 1, NULL), 0);
    wait_parked();
    unsetenv("KDTREE_CACHE_TEST_PUBLISH_GATE");
    /* ...while the rest are stored: the queue fills, then the callers
     * publish themselves. */
    for (int i = 1; i < N; i++) {
        kdt_cache_item e = {&key[i], p[i].text, p[i].len, &b};
        ck_assert_int_eq(kdt_cache_store_async(&e, 1, NULL), 0);
    }
    ck_assert_int_eq(ct_entry_state(&key[1], NULL), 0);  /* queued */
    ck_assert_int_eq(ct_entry_state(&key[N - 1], &b), 1); /* published here */
    release_publish();
    kdt_cache_flush();
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(ct_entry_state(&key[i], &b), 1);
        kdt_preimage_free(&p[i]);
    }
    kdt_blob_free(&b);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc;

    tc = ct_tcase("async", 180);
    tcase_add_test(tc, test_obtain_returns_before_publish);
    tcase_add_test(tc, test_memory_clear_then_disk);
    tcase_add_test(tc, test_compile_is_durable);
    tcase_add_test(tc, test_waiter_finds_complete_entry);
    tcase_add_test(tc, test_fork_during_publish);
    tcase_add_test(tc, test_exit_publishes);
    tcase_add_test(tc, test_unwritable_dir_warns_once);
    tcase_add_test(tc, test_modes_start_no_worker);
    tcase_add_test(tc, test_queue_is_bounded);
    return ct_suite("cache_async", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_NVRTC);
}
