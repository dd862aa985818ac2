/*
 * test_cache_kill.c: crash safety of publishing.  A child publishes large
 * fake entries in a loop (under the per-key lock, as the miss path does),
 * slowed down mid-write by a test hook so that kills land inside a write
 * as well as between them; the parent kills it with SIGKILL at a random
 * moment, then checks that every visible entry decodes, carries a payload
 * that is whole (one generation, not a mix), that the killed child's lock
 * is free, and finally that the sweep removes every temp file left behind.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/entry.h"
#include "cache/file.h"
#include "cache/housekeep.h"
#include "cache/layout.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"

#define ROUNDS 100
#define N_KEYS 4
#define PAYLOAD (2u << 20)

static const char *kernels[N_KEYS] = { "k0", "k1", "k2", "k3" };

/* A payload that says which generation and key it is in every 4 KiB page,
 * so a file stitched from two writes cannot pass even with good checksums. */
static void
fill(unsigned char *d, size_t size, uint32_t gen, uint32_t k)
{
    size_t i;

    for (i = 0; i < size; i += 8) {
        uint32_t w[2] = { gen, k ^ (uint32_t)(i >> 12) };
        memcpy(d + i, w, 8);
    }
}

static int
payload_whole(const unsigned char *d, size_t size, uint32_t k)
{
    uint32_t gen;
    size_t i;

    if (size != PAYLOAD)
        return 0;
    memcpy(&gen, d, 4);
    for (i = 0; i < size; i += 8) {
        uint32_t w[2];
        memcpy(w, d + i, 8);
        if (w[0] != gen || w[1] != (k ^ (uint32_t)(i >> 12)))
            return 0;
    }
    return 1;
}

static void
publisher(uint32_t seed)
{
    kdt_preimage p[N_KEYS];
    kdt_key key[N_KEYS];
    kdt_blob b;
    uint32_t gen = seed << 16;
    int i;

    b.data = malloc(PAYLOAD);
    b.size = PAYLOAD;
    b.kind = KDT_PAYLOAD_CUBIN;
    for (i = 0; i < N_KEYS; i++)
        ct_preimage(&p[i], kernels[i], "sm_90", &key[i]);
    for (;;) {
        for (i = 0; i < N_KEYS; i++) {
            kdt_cache_lock *l = ct_node_lock(&key[i]);
            fill(b.data, b.size, ++gen, (uint32_t)i);
            kdt_cache_store(&key[i], p[i].text, p[i].len, &b);
            kdt_cache_lock_release(l);
            kdt_cache_memory_clear();
        }
    }
}

static int
count_temps(const char *dir)
{
    char cmd[600], buf[32];
    FILE *f;
    int n = 0;

    snprintf(cmd, sizeof cmd, "ls -A %s 2>/dev/null | grep -c '\\.tmp$'", dir);
    f = popen(cmd, "r");
    if (f && fgets(buf, sizeof buf, f))
        n = atoi(buf);
    if (f)
        pclose(f);
    return n;
}

START_TEST(test_kill_during_publish)
{
    char v1[400];
    unsigned rng = 12345;
    int round, mid_write = 0, entries_checked = 0, i;

    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    /* Half of each file is written, then 3 ms pass before the rest. */
    setenv("KDTREE_CACHE_TEST_PUBLISH_DELAY_US", "3000", 1);
    for (round = 0; round < ROUNDS; round++) {
        kdt_cache_file *f;
        size_t n, j;
        pid_t pid;
        int status, fd;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            publisher((uint32_t)round);
            _exit(0);
        }
        rng = rng * 1103515245u + 12345u;
        usleep(2000 + (rng >> 8) % 40000);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status));
        if (count_temps(v1) > 0)
            mid_write++;

        /* Every visible entry is whole. */
        fd = ct_open_user_dir();
        ck_assert_int_eq(kdt_cache_scan(fd, &f, &n), 0);
        for (j = 0; j < n; j++) {
            void *buf;
            size_t size;
            char why[200];
            kdt_entry_view v;
            int k = -1;

            ck_assert_int_eq(kdt_cache_read_entry(fd, f[j].name, 0, &buf,
                                                  &size, why, sizeof why), 0);
            ck_assert_msg(kdt_entry_decode(buf, size, NULL, &v, why,
                                           sizeof why) == 0,
                          "round %d: %s: %s", round, f[j].name, why);
            for (i = 0; i < N_KEYS; i++) {
                kdt_preimage p;
                kdt_key key;
                char name[KDT_NAME_SIZE];
                ct_preimage(&p, kernels[i], "sm_90", &key);
                kdt_layout_entry_name(&key, name);
                if (strcmp(name, f[j].name) == 0 && kdt_key_equal(&key, &v.key))
                    k = i;
                kdt_preimage_free(&p);
            }
            ck_assert_msg(k >= 0, "round %d: %s is under the wrong name",
                          round, f[j].name);
            ck_assert_msg(payload_whole(v.payload, v.payload_size,
                                        (uint32_t)k),
                          "round %d: %s has a mixed payload", round,
                          f[j].name);
            entries_checked++;
            free(buf);
        }
        free(f);
        close(fd);

        /* The child's locks died with it. */
        setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0", 1);
        for (i = 0; i < N_KEYS; i++) {
            kdt_preimage p;
            kdt_key key;
            kdt_cache_lock *l;
            ct_preimage(&p, kernels[i], "sm_90", &key);
            l = ct_node_lock(&key);
            ck_assert_msg(l != NULL, "round %d: lock of %s stuck", round,
                          kernels[i]);
            kdt_cache_lock_release(l);
            kdt_preimage_free(&p);
        }
    }
    /* The writers are all dead, so their temp files' locks are gone: the
     * sweep takes every one. */
    {
        kdt_cache_tally t = {0};
        int fd = ct_open_user_dir();
        kdt_cache_sweep_temps(fd, v1, 0, KDT_CACHE_TEMP_STALE_S, &t);
        close(fd);
    }
    ck_assert_int_eq(count_temps(v1), 0);
    printf("kill -9 during publish: %d rounds, %d killed mid-write, %d "
           "entries verified, 0 partial\n", ROUNDS, mid_write,
           entries_checked);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("kill", 300);

    tcase_add_test(tc, test_kill_during_publish);
    return ct_suite("cache_kill", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
