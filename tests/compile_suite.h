/*
 * compile_suite.h: the runner the compile-only test programs share
 * (test_compile_ddtree, test_compile_attn): a private cache directory,
 * the skip without NVRTC, one Check suite, clean-up.
 */
#ifndef KDT_COMPILE_SUITE_H
#define KDT_COMPILE_SUITE_H

#include <check.h>

/* Points KDTREE_CACHE_DIR at a fresh temp directory; exits 77 (skipped)
 * when compiling probe_kernel at probe_shape for sm_90 finds no NVRTC;
 * runs the tests `add` puts into one test case (no fork, 300 s) of a
 * suite named `name`; removes the directory.  Returns main's status. */
int compile_suite_run(const char *name, const char *probe_kernel,
                      const char *probe_shape, void (*add)(TCase *tc));

#endif /* KDT_COMPILE_SUITE_H */
