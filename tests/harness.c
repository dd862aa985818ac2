/*
 * harness.c: see harness.h.
 */
#define _GNU_SOURCE
#include "config.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cuda/driver.h"
#include "harness.h"
#include "kdtree.h"

/* Automake's exit statuses */
#define FAIL 1
#define SKIP 77
#define HARD_ERROR 99

/* The directory kdt_test_fresh_cache made last in this process. */
static char cache_dir[4096];

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

int
kdt_test_rm_rf(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void
remove_cache_dir(void)
{
    if (cache_dir[0] && kdt_test_rm_rf(cache_dir) != 0)
        fprintf(stderr, "harness: could not remove %s\n", cache_dir);
    cache_dir[0] = '\0';
}

/* The work of kdt_test_fresh_cache; -1 when no directory could be made
 * (so that kdt_test_main, outside any test, can report it). */
static int
make_fresh_cache(void)
{
    static int registered;
    const char *tmp = getenv("TMPDIR");
    remove_cache_dir();
    snprintf(cache_dir, sizeof cache_dir, "%s/kdt-test-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cache_dir)) {
        perror(cache_dir);
        cache_dir[0] = '\0';
        return -1;
    }
    if (!registered) {
        /* A forked test inherits the handler and removes its own. */
        atexit(remove_cache_dir);
        registered = 1;
    }
    setenv("KDTREE_CACHE_DIR", cache_dir, 1);
    setenv("KDTREE_CACHE", "readwrite", 1);
    setenv("KDTREE_CACHE_PATH", "", 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "", 1);
    kdt_cache_memory_clear();
    return 0;
}

const char *
kdt_test_fresh_cache(void)
{
    ck_assert_msg(make_fresh_cache() == 0, "no temporary cache directory");
    return cache_dir;
}

/* What a GPU suite does without a driver or a device (`why`, `detail`):
 * SKIP, or with KDTREE_TEST_REQUIRE_GPU=1 (a GPU host's run, where a
 * driver that failed to load must not pass as a row of skips) FAIL; a
 * value other than 1 or 0 is a HARD_ERROR. */
static int
no_gpu(const char *why, const char *detail)
{
    const char *v = getenv("KDTREE_TEST_REQUIRE_GPU");
    if (!v || !*v || strcmp(v, "0") == 0) {
        printf("SKIP: %s%s\n", why, detail);
        return SKIP;
    }
    if (strcmp(v, "1") == 0) {
        printf("FAIL: KDTREE_TEST_REQUIRE_GPU=1 and this GPU suite cannot "
               "run (unset it to skip): %s%s\n",
               why, detail);
        return FAIL;
    }
    printf("ERROR: KDTREE_TEST_REQUIRE_GPU=\"%s\" is neither 1 (fail "
           "without a GPU) nor 0 (skip), and there is %s%s\n",
           v, why, detail);
    return HARD_ERROR;
}

/* In the child: 0 when there is a CUDA device, else no_gpu()'s answer. */
static int
probe_gpu(void)
{
    int st, count = 0;
    const kdt_driver *drv = kdt_driver_get(&st);
    if (!drv)
        return no_gpu("no CUDA driver or device: ", kdtree_last_error());
    if (drv->device_get_count(&count) != CUDA_SUCCESS || count == 0)
        return no_gpu("no CUDA device", "");
    return 0;
}

/* In the child: 0 when NVRTC loads, SKIP when it does not. */
static int
probe_nvrtc(void)
{
    setenv("KDTREE_CACHE", "off", 1);
    if (kdtree_compile(NULL, "sm_90", "tree_accept", "N_MAX=2,L=1") ==
        KDTREE_ERROR_NO_COMPILER) {
        printf("SKIP: no NVRTC: %s\n", kdtree_last_error());
        return SKIP;
    }
    return 0;
}

/* Runs probe() in a child process; its exit status (1 when the child
 * could not be run or died). */
static int
in_child(int (*probe)(void))
{
    int status;
    pid_t pid;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        int r = probe();
        fflush(stdout);
        _exit(r);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        perror("harness: fork");
        return 1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int
kdt_test_main(Suite *(*suite)(void), int flags)
{
    int r, failed;
    SRunner *sr;
    if ((flags & KDT_TEST_GPU) && (r = in_child(probe_gpu)) != 0)
        return r;
    if ((flags & KDT_TEST_NVRTC) && (r = in_child(probe_nvrtc)) != 0)
        return r;
    if ((flags & KDT_TEST_TEMP_CACHE) && make_fresh_cache() != 0)
        return 99;
    sr = srunner_create(suite());
    if (flags & (KDT_TEST_NO_FORK | KDT_TEST_GPU))
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    remove_cache_dir();
    return failed ? 1 : 0;
}
