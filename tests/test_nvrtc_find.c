/*
 * test_nvrtc_find.c: where NVRTC and the driver are looked for, and what
 * is said when the library named is not one.
 *
 *  - the order of the places (cuda/nvrtc_find.c) over a fake tree of
 *    empty files: wheels in the directories given, then above libkdtree's
 *    own, $VIRTUAL_ENV, ~/.local and the system's Python; the loader; the
 *    toolkits under /usr/local, newest first; each file once;
 *  - an NVRTC newer than the driver's CUDA goes last;
 *  - a real load from a wheel's layout (a link to this machine's NVRTC),
 *    named by kdtree_nvrtc_info(), and KDTREE_NVRTC_LIBRARY before it;
 *  - KDTREE_NVRTC_LIBRARY=libc.so.6 "is not NVRTC", KDTREE_CUDA_LIBRARY=
 *    libc.so.6 "is not the CUDA driver".
 * Each test runs in its own process (Check forks), so each loads afresh.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/nvrtc_find.h"
#include "harness.h"
#include "kdtree.h"

static char tmp[64];

static void
make_tmp(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/kdt-nvrtc-find.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void
remove_tmp(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    ck_assert_int_eq(system(cmd), 0);
}

/* Creates tmp/rel (and its directories) as an empty file, or as a link to
 * `target` when given. */
static void
put(const char *rel, const char *target)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmp, rel);
    for (char *p = path + strlen(tmp) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    if (target) {
        ck_assert_int_eq(symlink(target, path), 0);
    } else {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
}

/* The candidate's path with tmp cut off ("" prefix kept for sonames). */
static const char *
rel(const kdt_nvrtc_candidate *c)
{
    size_t n = strlen(tmp);
    return strncmp(c->path, tmp, n) == 0 ? c->path + n : c->path;
}

START_TEST(test_order)
{
    make_tmp();
    put("site1/nvidia/cu13/lib/libnvrtc.so.13", NULL);
    put("site1/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", NULL);
    put("site2/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", NULL);
    put("pkg/nvidia/cu13/lib/libnvrtc.so.13", NULL);
    put("pkg/kdtree_jit/libkdtree.so", NULL);
    put("venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/"
        "libnvrtc.so.12", NULL);
    put("home/u/.local/lib/python3.11/site-packages/nvidia/cu13/lib/"
        "libnvrtc.so.13", NULL);
    put("usr/local/lib/python3.11/dist-packages/nvidia/cu13/lib/"
        "libnvrtc.so.13", NULL);
    put("usr/local/cuda-12.9/lib64/libnvrtc.so.12", NULL);
    put("usr/local/cuda-12.10/lib64/libnvrtc.so.12", NULL);
    put("usr/local/cuda-12.10/lib64/libnvrtc.so", NULL);
    put("usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13", NULL);
    put("opt/tk/lib64/libnvrtc.so.13", NULL);
    /* A directory given twice, once through a link: listed once. */
    char link[512], site1[512];
    snprintf(site1, sizeof site1, "%s/site1", tmp);
    snprintf(link, sizeof link, "%s/site1-link", tmp);
    ck_assert_int_eq(symlink(site1, link), 0);

    char dirs[2048], self[512], venv[512], home[512];
    snprintf(dirs, sizeof dirs, "%s/site1:%s/nowhere:%s/site2:%s/site1:%s",
             tmp, tmp, tmp, tmp, link);
    snprintf(self, sizeof self, "%s/pkg/kdtree_jit", tmp);
    snprintf(venv, sizeof venv, "%s/venv", tmp);
    snprintf(home, sizeof home, "/home/u");
    setenv("VIRTUAL_ENV", venv, 1);
    unsetenv("CONDA_PREFIX");
    setenv("HOME", home, 1);

    kdt_nvrtc_places pl = {dirs, self, tmp, "/opt/tk/lib64"};
    kdt_nvrtc_search s;
    ck_assert_int_eq(kdt_nvrtc_find(&s, &pl), 0);
    static const char *const want[] = {
        "/site1/nvidia/cu13/lib/libnvrtc.so.13",
        "/site1/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        "/site2/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        "/pkg/kdtree_jit/../nvidia/cu13/lib/libnvrtc.so.13",
        "/venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/"
        "libnvrtc.so.12",
        "/home/u/.local/lib/python3.11/site-packages/nvidia/cu13/lib/"
        "libnvrtc.so.13",
        "/usr/local/lib/python3.11/dist-packages/nvidia/cu13/lib/"
        "libnvrtc.so.13",
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so",
        "/opt/tk/lib64/libnvrtc.so.13",
        "/usr/local/cuda-12.10/lib64/libnvrtc.so.12",
        "/usr/local/cuda-12.10/lib64/libnvrtc.so",
        "/usr/local/cuda-12.9/lib64/libnvrtc.so.12",
        "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13",
    };
    int n = (int)(sizeof want / sizeof want[0]);
    for (int i = 0; i < s.n && i < n; i++)
        ck_assert_msg(strcmp(rel(&s.items[i]), want[i]) == 0,
                      "place %d: %s, wanted %s", i, rel(&s.items[i]),
                      want[i]);
    ck_assert_int_eq(s.n, n);
    ck_assert_int_eq(s.items[0].major, 13);
    ck_assert_int_eq(s.items[1].major, 12);
    ck_assert_int_eq(s.items[9].major, 0);
    ck_assert_ptr_nonnull(strstr(s.items[0].source, "nvidia-cuda-nvrtc"));
    ck_assert_ptr_nonnull(strstr(s.items[1].source, "cu12"));
    ck_assert_ptr_nonnull(strstr(s.items[7].source, "loader"));
    ck_assert_ptr_nonnull(strstr(s.items[12].source, "toolkit"));

    /* With a CUDA 12 driver, the CUDA 13 ones go last, in their order. */
    kdt_nvrtc_prefer_major(&s, 12);
    ck_assert_str_eq(rel(&s.items[0]),
                     "/site1/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    ck_assert_str_eq(rel(&s.items[1]),
                     "/site2/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    for (int i = 0; i < s.n; i++)
        ck_assert_msg((i < s.n - 7) == (s.items[i].major <= 12),
                      "place %d (%s) out of order", i, s.items[i].path);
    ck_assert_str_eq(rel(&s.items[s.n - 7]),
                     "/site1/nvidia/cu13/lib/libnvrtc.so.13");
    kdt_nvrtc_search_free(&s);
    remove_tmp();
}
END_TEST

/* This machine's NVRTC as the loader finds it, or NULL. */
static const char *
system_nvrtc(void)
{
    static char path[1024];
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12"};
    for (size_t i = 0; i < 2; i++) {
        void *h = dlopen(names[i], RTLD_LAZY | RTLD_LOCAL);
        struct link_map *lm = NULL;
        if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) {
            snprintf(path, sizeof path, "%s", lm->l_name);
            dlclose(h);
            return path;
        }
        if (h)
            dlclose(h);
    }
    return NULL;
}

START_TEST(test_wheel_layout_loads)
{
    const char *real = system_nvrtc();
    if (!real) {
        fprintf(stderr, "test_wheel_layout_loads: no NVRTC here; only the "
                        "order was checked\n");
        return;
    }
    make_tmp();
    unsetenv("KDTREE_NVRTC_LIBRARY");
    put("site/nvidia/cu13/lib/libnvrtc.so.13", real);
    char dirs[512], want[512];
    snprintf(dirs, sizeof dirs, "%s/nowhere:%s/site", tmp, tmp);
    snprintf(want, sizeof want, "%s/site/nvidia/cu13/lib/libnvrtc.so.13",
             tmp);
    ck_assert_int_eq(kdtree_set_site_packages(dirs), KDTREE_OK);
    kdtree_library_info info;
    ck_assert_int_eq(kdtree_library_info_size(), (int)sizeof info);
    ck_assert_int_eq(kdtree_nvrtc_info(&info), KDTREE_OK);
    ck_assert_int_eq(info.status, KDTREE_OK);
    ck_assert_str_eq(info.path, want);
    ck_assert_ptr_nonnull(strstr(info.source, "pip wheel"));
    ck_assert_int_ge(info.version, 11020);
    ck_assert_ptr_nonnull(strstr(info.detail, "build"));
    /* Too late now: the search ran. */
    ck_assert_int_eq(kdtree_set_site_packages(dirs),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), want));
    remove_tmp();
}
END_TEST

START_TEST(test_env_before_wheels)
{
    const char *real = system_nvrtc();
    if (!real) {
        fprintf(stderr, "test_env_before_wheels: no NVRTC here\n");
        return;
    }
    make_tmp();
    put("site/nvidia/cu13/lib/libnvrtc.so.13", real);
    char dirs[512];
    snprintf(dirs, sizeof dirs, "%s/site", tmp);
    setenv("KDTREE_NVRTC_LIBRARY", real, 1);
    ck_assert_int_eq(kdtree_set_site_packages(dirs), KDTREE_OK);
    kdtree_library_info info;
    ck_assert_int_eq(kdtree_nvrtc_info(&info), KDTREE_OK);
    ck_assert_str_eq(info.path, real);
    ck_assert_str_eq(info.source, "KDTREE_NVRTC_LIBRARY");
    unsetenv("KDTREE_NVRTC_LIBRARY");
    remove_tmp();
}
END_TEST

START_TEST(test_not_nvrtc)
{
    int32_t cached = -1;
    setenv("KDTREE_NVRTC_LIBRARY", "libc.so.6", 1);
    setenv("KDTREE_CACHE", "off", 1);
    ck_assert_int_eq(kdtree_compile(&cached, "sm_90", "tree_accept",
                                    "N_MAX=65,L=15"),
                     KDTREE_ERROR_NO_COMPILER);
    const char *e = kdtree_last_error();
    ck_assert_msg(strstr(e, "libc.so.6 is not NVRTC") != NULL, "%s", e);
    ck_assert_msg(strstr(e, "older than") == NULL, "%s", e);
    kdtree_library_info info;
    ck_assert_int_eq(kdtree_nvrtc_info(&info), KDTREE_ERROR_NO_COMPILER);
    ck_assert_str_eq(info.path, "");
    ck_assert_ptr_nonnull(strstr(info.detail, "is not NVRTC"));
    unsetenv("KDTREE_NVRTC_LIBRARY");
    unsetenv("KDTREE_CACHE");
}
END_TEST

START_TEST(test_not_the_driver)
{
    kdtree_runtime *rt = NULL;
    setenv("KDTREE_CUDA_LIBRARY", "libc.so.6", 1);
    ck_assert_int_eq(kdtree_runtime_create(&rt, 0), KDTREE_ERROR_NO_DRIVER);
    const char *e = kdtree_last_error();
    ck_assert_msg(strstr(e, "libc.so.6 is not the CUDA driver") != NULL, "%s",
                  e);
    ck_assert_msg(strstr(e, "too old") == NULL, "%s", e);
    kdtree_library_info info;
    ck_assert_int_eq(kdtree_driver_info(&info), KDTREE_ERROR_NO_DRIVER);
    ck_assert_int_eq(info.status, KDTREE_ERROR_NO_DRIVER);
    ck_assert_ptr_nonnull(strstr(info.detail, "is not the CUDA driver"));
    unsetenv("KDTREE_CUDA_LIBRARY");
}
END_TEST

START_TEST(test_info_null)
{
    ck_assert_int_eq(kdtree_nvrtc_info(NULL), KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(kdtree_driver_info(NULL), KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(kdtree_set_site_packages(NULL),
                     KDTREE_ERROR_INVALID_ARGUMENT);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("nvrtc_find");
    TCase *tc = tcase_create("nvrtc_find");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_order);
    tcase_add_test(tc, test_wheel_layout_loads);
    tcase_add_test(tc, test_env_before_wheels);
    tcase_add_test(tc, test_not_nvrtc);
    tcase_add_test(tc, test_not_the_driver);
    tcase_add_test(tc, test_info_null);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
