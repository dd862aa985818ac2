/*
 * test_package_layer.c: kdtree_add_cache_layer(), the read-only layer a
 * package ships (the kdtree-jit-cubin wheel): its argument checks, where
 * it sits in the search order, a kernel served from it with no NVRTC and
 * no compile, and the error that names it when a shape is not there.
 *
 * No NVRTC is needed: the layer's entry and alias are written here, keyed
 * with an NVRTC version of the test's own, exactly as a compile on another
 * machine would have published them.  Each test runs in its own process
 * (the layers, once added, stay for the process).
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cache/key.h"
#include "cache/settings.h"
#include "cache_testutil.h"
#include "harness.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "kdtree.h"

#define LAYER_NAME "kdtree-jit-cubin 9.9.9"
/* The NVRTC the layer's entries were built by, on the machine that built
 * it. */
#define BUILD_NVRTC "13.0 build 0123456789abcdef"

START_TEST(test_arguments)
{
    char dir[64];

    ck_assert_int_eq(kdtree_add_cache_layer(NULL, LAYER_NAME),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "dir is NULL"));
    ck_assert_int_eq(kdtree_add_cache_layer("/layer", NULL),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "name is NULL"));
    ck_assert_int_eq(kdtree_add_cache_layer("layer", LAYER_NAME),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(),
                                 "\"layer\" is not an absolute path"));
    ck_assert_int_eq(kdtree_add_cache_layer("", LAYER_NAME),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < KDT_CACHE_MAX_PACKAGE_LAYERS; i++) {
        snprintf(dir, sizeof dir, "/layer%d", i);
        ck_assert_int_eq(kdtree_add_cache_layer(dir, LAYER_NAME),
                         KDTREE_OK);
    }
    /* Again: a second binding in one process adds the same directory. */
    ck_assert_int_eq(kdtree_add_cache_layer("/layer0", LAYER_NAME),
                     KDTREE_OK);
    ck_assert_int_eq(kdtree_add_cache_layer("/one-too-many", LAYER_NAME),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "/one-too-many"));
}
END_TEST

START_TEST(test_search_order)
{
    const char *want[] = {"/path-a", "/path-b", "/package", "/prebuilt"};
    size_t n;
    char **dirs;

    setenv("KDTREE_CACHE_PATH", "/path-a::/path-b", 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "/prebuilt", 1);
    ck_assert_int_eq(kdtree_add_cache_layer("/package", LAYER_NAME),
                     KDTREE_OK);
    dirs = kdt_cache_layer_dirs(&n);
    ck_assert_uint_eq(n, 4);
    for (size_t i = 0; i < n; i++)
        ck_assert_str_eq(dirs[i], want[i]);
    kdt_cache_free_dirs(dirs, n);
}
END_TEST

/* A layer at ct_base/package holding tree_accept's N_MAX=65,L=15 for
 * sm_120 (a cubin payload of its own: compile-only never loads it) and
 * the alias that leads a process without NVRTC to it.  Returns the
 * layer's path. */
static const char *
write_layer(void)
{
    static char layer[400];
    int id = kdt_kernel_find("tree_accept");
    int64_t vals[KDT_MAX_CONSTS] = {0};
    kdt_preimage pre, alias;
    kdt_key key, alias_key;
    size_t pos = 0, label_len, value_len;
    const char *label, *value;
    char *path;

    snprintf(layer, sizeof layer, "%s/package", ct_base);
    ck_assert_int_ge(id, 0);
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65,L=15", vals), 0);
    ck_assert_int_eq(kdt_kernel_key(id, vals, "sm_120", BUILD_NVRTC, &pre,
                                     &key), 0);
    kdt_blob cubin = ct_blob(4096, 7);
    path = ct_entry_path(layer, &key);
    ct_write_entry(path, &key, pre.text, pre.len, &cubin);
    free(path);
    /* The alias: every record but the compiler's, then "alias nvrtc". */
    kdt_preimage_init(&alias);
    while (kdt_preimage_next(pre.text, pre.len, &pos, &label, &label_len,
                             &value, &value_len) == 1) {
        char name[128];
        if (label_len == 5 && memcmp(label, "nvrtc", 5) == 0)
            continue;
        ck_assert_uint_lt(label_len, sizeof name);
        memcpy(name, label, label_len);
        name[label_len] = '\0';
        ck_assert_int_eq(kdt_preimage_add(&alias, name, value, value_len), 0);
    }
    ck_assert_int_eq(kdt_preimage_end(&alias, NULL), 0);
    alias_key = kdt_key_of(alias.text, alias.len);
    kdt_blob version = {(void *)BUILD_NVRTC, strlen(BUILD_NVRTC),
                        KDT_PAYLOAD_ALIAS};
    path = ct_entry_path(layer, &alias_key);
    ct_write_entry(path, &alias_key, alias.text, alias.len, &version);
    free(path);
    kdt_preimage_free(&pre);
    kdt_preimage_free(&alias);
    free(cubin.data);
    return layer;
}

START_TEST(test_serves_without_nvrtc)
{
    const char *layer = write_layer();
    int32_t cached = -1;

    setenv("KDTREE_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
    /* Not added yet: nothing holds it, nothing can compile it. */
    ck_assert_int_eq(kdtree_compile(&cached, "sm_120", "tree_accept",
                                    "N_MAX=65,L=15"),
                     KDTREE_ERROR_NO_COMPILER);
    ck_assert_ptr_null(strstr(kdtree_last_error(), LAYER_NAME));

    kdtree_cache_stats_reset();
    ck_assert_int_eq(kdtree_add_cache_layer(layer, LAYER_NAME), KDTREE_OK);
    ck_assert_int_eq(kdtree_compile(&cached, "sm_120", "tree_accept",
                                    "N_MAX=65,L=15"),
                     KDTREE_OK);
    ck_assert_int_eq(cached, 1);
    kdtree_cache_stats s = ct_stats();
    ck_assert_uint_eq(s.compiles, 0);
    ck_assert_uint_eq(s.disk_hits, 2); /* the alias, then the entry */
    ck_assert_uint_eq(s.disk_rejects, 0);
}
END_TEST

START_TEST(test_missing_shape_names_package)
{
    const char *layer = write_layer();
    const char *e;

    setenv("KDTREE_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
    ck_assert_int_eq(kdtree_add_cache_layer(layer, LAYER_NAME), KDTREE_OK);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_120", "tree_accept",
                                    "N_MAX=129,L=15"),
                     KDTREE_ERROR_NO_COMPILER);
    e = kdtree_last_error();
    ck_assert_msg(strstr(e, "tree_accept (N_MAX=129,L=15) for sm_120") &&
                      strstr(e, LAYER_NAME) && strstr(e, layer),
                  "the message names neither the shape nor the package: %s",
                  e);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("package_layer", 30);

    tcase_add_test(tc, test_arguments);
    tcase_add_test(tc, test_search_order);
    tcase_add_test(tc, test_serves_without_nvrtc);
    tcase_add_test(tc, test_missing_shape_names_package);
    return ct_suite("package_layer", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
