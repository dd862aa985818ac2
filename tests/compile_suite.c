/*
 * compile_suite.c: see compile_suite.h.
 */
#include <stdio.h>
#include <stdlib.h>

#include "compile_suite.h"
#include "kdtree.h"

int
compile_suite_run(const char *name, const char *probe_kernel,
                  const char *probe_shape, void (*add)(TCase *tc))
{
    char dir[] = "/tmp/kdt-compile.XXXXXX";
    if (!mkdtemp(dir))
        return 99;
    setenv("KDTREE_CACHE_DIR", dir, 1);
    if (kdtree_compile(NULL, "sm_90", probe_kernel, probe_shape) ==
        KDTREE_ERROR_NO_COMPILER) {
        fprintf(stderr, "no NVRTC: %s\n", kdtree_last_error());
        return 77;
    }
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300);
    add(tc);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return failed ? 1 : 0;
}
