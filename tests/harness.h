/*
 * harness.h: the one way every C test program runs (its main() is
 * `return kdt_test_main(suite, flags);`): the skips Automake reads as
 * exit 77 when the program needs a GPU or NVRTC that is not there (a
 * failure instead, for a GPU, under KDTREE_TEST_REQUIRE_GPU=1), the
 * choice between forking each test and running it in this process, and
 * throw-away cache directories.
 *
 * The probes for a GPU and for NVRTC run in a child process, so the test
 * process itself starts with neither loaded: a suite that forks its tests
 * (or spawns processes) inherits no CUDA state, and a test that measures
 * the first load of NVRTC sees the first one.
 */
#ifndef KDT_TESTS_HARNESS_H
#define KDT_TESTS_HARNESS_H

#include <check.h>

enum kdt_test_flags {
    /* Each test in a forked child (Check's default): a crash or a leaked
     * setenv stays in its test. */
    KDT_TEST_FORK = 0,
    /* Every test in this process, one after another: for suites that
     * keep state across tests on purpose. */
    KDT_TEST_NO_FORK = 1 << 0,
    /* Exit 77 without a CUDA driver or device; with
     * KDTREE_TEST_REQUIRE_GPU=1 in the environment, exit 1 (fail), so
     * that a GPU host's run cannot pass by skipping (0 or unset: skip;
     * any other value: exit 99).  Implies KDT_TEST_NO_FORK: CUDA is not
     * fork-safe, so a GPU suite initialises it in the test process
     * only. */
    KDT_TEST_GPU = 1 << 1,
    /* Exit 77 when NVRTC cannot be loaded (a compile of a tiny kernel for
     * sm_90 reports KDTREE_ERROR_NO_COMPILER).  Any other failure of that
     * compile is left for the tests to report. */
    KDT_TEST_NVRTC = 1 << 2,
    /* The whole run in a fresh cache (kdt_test_fresh_cache), removed at
     * the end. */
    KDT_TEST_TEMP_CACHE = 1 << 3,
};

/* Probes what `flags` need (printing "SKIP: why" and returning 77 when
 * something is missing, or "FAIL: why" and 1 for a GPU that
 * KDTREE_TEST_REQUIRE_GPU=1 requires), builds the suite, runs it, cleans
 * up.  Returns main()'s exit status: 0 when every test passed, 1 when one
 * failed (or the required GPU is missing), 77 (skipped), or 99
 * (Automake's hard error) when the temporary cache directory could not
 * be made or KDTREE_TEST_REQUIRE_GPU is neither 1 nor 0. */
int kdt_test_main(Suite *(*suite)(void), int flags);

/* Points the library at an empty cache of its own: KDTREE_CACHE_DIR a new
 * directory under $TMPDIR (or /tmp), KDTREE_CACHE=readwrite, no other
 * layers (KDTREE_CACHE_PATH and KDTREE_CACHE_PREBUILT_DIR empty), and the
 * memory layer forgotten.  The directory made by the previous call in this
 * process is removed first, the last one at exit.  Returns its path (valid
 * until the next call).  Fails the running test if it cannot. */
const char *kdt_test_fresh_cache(void);

/* rm -rf of `path` (no shell); 0 or -1. */
int kdt_test_rm_rf(const char *path);

#endif /* KDT_TESTS_HARNESS_H */
