/*
 * test_api.c: the library-level API on any machine (no GPU needed):
 * versions, status names, the registry and shapes, compile-only of every
 * kernel for sm_90 and sm_120, a missing driver or compiler, and the
 * argument-validation table of every kernel entry point.
 *
 * The validation cases run against a runtime with no driver behind it: a
 * bad argument must be refused before anything touches the device, so a
 * case that slipped through would crash instead of passing.
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "jit/sources.h"
#include "runtime/runtime.h"

static char cache_dir[256];

static void
temp_cache(void)
{
    snprintf(cache_dir, sizeof cache_dir, "/tmp/kdt-test-api-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(cache_dir));
    setenv("KDTREE_CACHE_DIR", cache_dir, 1);
    setenv("KDTREE_CACHE", "readwrite", 1);
    setenv("KDTREE_CACHE_PATH", "", 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "", 1);
}

static void
remove_cache(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(versions)
{
    ck_assert_str_eq(kdtree_version_string(), PACKAGE_VERSION);
    ck_assert_int_eq(kdtree_abi_version(), KDTREE_ABI_VERSION);
    ck_assert_int_ge(kdtree_max_qlen(), 65);
    ck_assert_int_eq(kdtree_max_qlen(), 1025);
    ck_assert_int_eq(kdtree_cache_stats_size(), sizeof(kdtree_cache_stats_t));
}
END_TEST

START_TEST(status_names)
{
    ck_assert_str_eq(kdtree_status_name(KDTREE_OK), "KDTREE_OK");
    ck_assert_str_eq(kdtree_status_name(KDTREE_ERROR_SHAPE),
                     "KDTREE_ERROR_SHAPE");
    ck_assert_str_eq(kdtree_status_name(KDTREE_ERROR_INTERNAL),
                     "KDTREE_ERROR_INTERNAL");
    ck_assert_str_eq(kdtree_status_name(1), "KDTREE_ERROR_UNKNOWN");
    ck_assert_str_eq(kdtree_status_name(-15), "KDTREE_ERROR_UNKNOWN");
    ck_assert_str_eq(kdtree_status_name(INT32_MIN), "KDTREE_ERROR_UNKNOWN");
    /* Every status has its own name. */
    for (int a = 0; a >= KDTREE_ERROR_INTERNAL; a--)
        for (int b = a - 1; b >= KDTREE_ERROR_INTERNAL; b--)
            ck_assert_str_ne(kdtree_status_name(a), kdtree_status_name(b));
    ck_assert_ptr_nonnull(kdtree_last_error());
    ck_assert_str_eq(kdtree_last_error(), "");
}
END_TEST

START_TEST(registry)
{
    ck_assert_int_eq(kdtree_kernel_count(), 4);
    const char *want[] = {"draft_topk", "build_ddtree", "verify_attn",
                          "tree_accept"};
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(kdtree_kernel_name(i), want[i]);
        ck_assert_ptr_nonnull(kdtree_kernel_constants(want[i]));
        const char *shape = kdtree_kernel_default_shape(want[i]);
        ck_assert_ptr_nonnull(shape);
        int64_t vals[KDT_MAX_CONSTS];
        ck_assert_int_eq(kdt_shape_parse(i, shape, vals), KDTREE_OK);
        /* The canonical text parses back to the same values. */
        char text[256];
        int64_t again[KDT_MAX_CONSTS];
        kdt_shape_format(i, vals, text, sizeof text);
        ck_assert_int_eq(kdt_shape_parse(i, text, again), KDTREE_OK);
        ck_assert_mem_eq(vals, again,
                         sizeof(int64_t) * kdt_kernel_def_get(i)->n_consts);
        /* Every header a kernel includes is embedded and listed. */
        const kdt_kernel_def *d = kdt_kernel_def_get(i);
        const char *src = kdt_source_text(d->source, NULL);
        ck_assert_ptr_nonnull(src);
        for (const char *p = strstr(src, "#include \""); p;
             p = strstr(p + 1, "#include \"")) {
            const char *name = p + 10;
            size_t len = strcspn(name, "\"");
            int listed = 0;
            for (int h = 0; d->headers && d->headers[h]; h++)
                if (strlen(d->headers[h]) == len &&
                    strncmp(d->headers[h], name, len) == 0)
                    listed = 1;
            ck_assert_msg(listed, "%s includes %.*s, not in its header list",
                          d->source, (int)len, name);
        }
    }
    ck_assert_ptr_null(kdtree_kernel_name(4));
    ck_assert_ptr_null(kdtree_kernel_name(-1));
    ck_assert_ptr_null(kdtree_kernel_constants("nope"));
    ck_assert_ptr_null(kdtree_kernel_default_shape(NULL));
}
END_TEST

/* The embedded text is the file, byte for byte (backslashes, quotes and
 * ?? sequences included), so NVRTC compiles exactly what is in kernels_src
 * and its line numbers match. */
START_TEST(embedded_sources)
{
    const char *top = getenv("abs_top_srcdir");
    ck_assert_msg(top != NULL, "run through make check (abs_top_srcdir)");
    ck_assert_uint_gt(kdt_source_count(), 4);
    for (size_t i = 0; i < kdt_source_count(); i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/kernels_src/%s", top,
                 kdt_source_name(i));
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "%s", path);
        static char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        size_t len = 0;
        const char *text = kdt_source_text(kdt_source_name(i), &len);
        ck_assert_ptr_nonnull(text);
        ck_assert_msg(len == n && memcmp(text, buf, n) == 0,
                      "embedded %s differs from the file", path);
    }
    ck_assert_ptr_null(kdt_source_text("no-such.cu", NULL));
    ck_assert_ptr_null(kdt_source_name(kdt_source_count()));
}
END_TEST

START_TEST(shape_errors)
{
    int64_t v[KDT_MAX_CONSTS];
    int id = KDT_KERNEL_TREE_ACCEPT;
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65,L=15", v), KDTREE_OK);
    ck_assert_int_eq(v[0], 65);
    ck_assert_int_eq(v[1], 15);
    ck_assert_int_eq(kdt_shape_parse(id, " L = 15 , N_MAX = 65 ", v),
                     KDTREE_OK);
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65", v),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "lacks L"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65,L=15,Q=1", v),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "unknown constant"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65,L=15,L=3", v),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=6x5,L=15", v),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX,L=15", v),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    ck_assert_int_eq(kdt_shape_parse(id, NULL, v),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    /* Out of range: the message names the constant and its range. */
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=1026,L=15", v),
                     KDTREE_ERROR_SHAPE);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "N_MAX"));
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "1..1025"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=0,L=15", v),
                     KDTREE_ERROR_SHAPE);
    /* Symbolic values. */
    ck_assert_int_eq(
        kdt_shape_parse(KDT_KERNEL_DRAFT_TOPK, "V=1000,K=8,DTYPE=bf16", v),
        KDTREE_OK);
    ck_assert_int_eq(v[2], KDTREE_DTYPE_BF16);
    ck_assert_int_eq(
        kdt_shape_parse(KDT_KERNEL_DRAFT_TOPK, "V=1000,K=8,DTYPE=f16", v),
        KDTREE_ERROR_UNKNOWN_KERNEL);
    /* Rules between constants: K <= V. */
    ck_assert_int_eq(
        kdt_shape_parse(KDT_KERNEL_DRAFT_TOPK, "V=10,K=11,DTYPE=f32", v),
        KDTREE_ERROR_SHAPE);
}
END_TEST

START_TEST(compile_errors)
{
    temp_cache();
    int32_t cached = 7;
    ck_assert_int_eq(kdtree_compile(&cached, NULL, "tree_accept", "N_MAX=65,L=15"),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(cached, 0);
    ck_assert_int_eq(kdtree_compile(NULL, "gfx90a", "tree_accept", "N_MAX=65,L=15"),
                     KDTREE_ERROR_ARCH);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "gfx90a"));
    ck_assert_int_eq(kdtree_compile(NULL, "sm_9", "tree_accept", "N_MAX=65,L=15"),
                     KDTREE_ERROR_ARCH);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90x", "tree_accept", "N_MAX=65,L=15"),
                     KDTREE_ERROR_ARCH);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_10", "tree_accept", "N_MAX=65,L=15"),
                     KDTREE_ERROR_ARCH);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90", "nope", "N_MAX=65,L=15"),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "tree_accept"));
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90", NULL, "N_MAX=65,L=15"),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90", "tree_accept", NULL),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(kdtree_compile(NULL, "sm_90", "tree_accept", "L=15"),
                     KDTREE_ERROR_UNKNOWN_KERNEL);
    remove_cache();
}
END_TEST

/* Compile-only of every kernel's default shape for Hopper and Blackwell,
 * so CI catches a kernel that NVRTC rejects without any GPU. */
static void
compile_all(const char *arch)
{
    temp_cache();
    kdtree_cache_stats_reset();
    for (int i = 0; i < kdtree_kernel_count(); i++) {
        const char *k = kdtree_kernel_name(i);
        const char *shape = kdtree_kernel_default_shape(k);
        int32_t cached = -1;
        int st = kdtree_compile(&cached, arch, k, shape);
        ck_assert_msg(st == KDTREE_OK, "%s %s for %s: %s: %s", k, shape,
                      arch, kdtree_status_name(st), kdtree_last_error());
        ck_assert_int_eq(cached, 0);
        /* The second time it is a hit: memory first, then (after the
         * memory layer is forgotten) the disk. */
        ck_assert_int_eq(kdtree_compile(&cached, arch, k, shape), KDTREE_OK);
        ck_assert_int_eq(cached, 1);
        kdt_cache_memory_clear();
        ck_assert_int_eq(kdtree_compile(&cached, arch, k, shape), KDTREE_OK);
        ck_assert_int_eq(cached, 1);
    }
    kdtree_cache_stats_t s;
    ck_assert_int_eq(kdtree_cache_stats(&s), KDTREE_OK);
    ck_assert_int_eq(s.compiles, (uint64_t)kdtree_kernel_count());
    ck_assert_uint_ge(s.memory_hits, (uint64_t)kdtree_kernel_count());
    ck_assert_uint_ge(s.disk_hits, (uint64_t)kdtree_kernel_count());
    ck_assert(s.compile_ms > 0);
    ck_assert_int_eq(kdtree_cache_stats(NULL), KDTREE_ERROR_INVALID_ARGUMENT);
    remove_cache();
}

START_TEST(compile_sm90)
{
    compile_all("sm_90");
}
END_TEST

START_TEST(compile_sm120)
{
    compile_all("sm_120");
}
END_TEST

/* PTX for a virtual architecture: what a GPU newer than NVRTC gets. */
START_TEST(compile_ptx)
{
    temp_cache();
    int32_t cached = -1;
    ck_assert_int_eq(kdtree_compile(&cached, "compute_90", "tree_accept",
                                    "N_MAX=1025,L=1024"),
                     KDTREE_OK);
    ck_assert_int_eq(cached, 0);
    remove_cache();
}
END_TEST

/* With the compiler unavailable a warm cache still serves; a miss says
 * clearly that it cannot compile. */
START_TEST(no_compiler_warm_cache)
{
    temp_cache();
    int32_t cached = -1;
    /* Warm the cache in a child that has NVRTC (this process must load
     * NVRTC never). */
    pid_t pid = fork();
    if (pid == 0) {
        int st = kdtree_compile(&cached, "sm_90", "tree_accept",
                                "N_MAX=65,L=15");
        _exit(st == KDTREE_OK ? 0 : 1);
    }
    int status = -1;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_int_eq(status, 0);
    setenv("KDTREE_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
    ck_assert_int_eq(kdtree_compile(&cached, "sm_90", "tree_accept",
                                    "N_MAX=65,L=15"),
                     KDTREE_OK);
    ck_assert_int_eq(cached, 1);
    ck_assert_int_eq(kdtree_compile(&cached, "sm_90", "tree_accept",
                                    "N_MAX=64,L=15"),
                     KDTREE_ERROR_NO_COMPILER);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "nonexistent"));
    unsetenv("KDTREE_NVRTC_LIBRARY");
    remove_cache();
}
END_TEST

START_TEST(no_driver)
{
    setenv("KDTREE_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    kdtree_runtime *rt = (kdtree_runtime *)1;
    ck_assert_int_eq(kdtree_runtime_create(&rt, 0), KDTREE_ERROR_NO_DRIVER);
    ck_assert_ptr_null(rt);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "nonexistent"));
    ck_assert_int_eq(kdtree_runtime_create(NULL, 0),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    kdtree_runtime_destroy(NULL);
    ck_assert_int_eq(kdtree_prepare(NULL, "tree_accept", "N_MAX=65,L=15"),
                     KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_str_eq(kdtree_runtime_arch(NULL), "");
    ck_assert_int_eq(kdtree_runtime_device(NULL), -1);
}
END_TEST

/* ---- the validation table ------------------------------------------------- */

/* A runtime with no driver: any case that reached the device would crash. */
static kdtree_runtime fake;
#define RT (&fake)
#define A 0x10000ull /* an aligned, non-zero "device pointer" */

typedef struct vcase {
    const char *what;
    int expect;
    const char *mentions; /* the argument the message must name */
} vcase;

static void
expect(int got, int want, const char *mentions, const char *what)
{
    ck_assert_msg(got == want, "%s: got %s, want %s (%s)", what,
                  kdtree_status_name(got), kdtree_status_name(want),
                  kdtree_last_error());
    if (mentions)
        ck_assert_msg(strstr(kdtree_last_error(), mentions),
                      "%s: message \"%s\" does not name %s", what,
                      kdtree_last_error(), mentions);
}

START_TEST(validate_tree_accept)
{
#define CALL(rt, al, ai, at, bo, tk, fc, ns, nn, tg, ma, R, L, N)            \
    kdtree_tree_accept(rt, al, ai, at, bo, tk, fc, ns, nn, tg, ma, R, L, N,  \
                       NULL)
    expect(CALL(NULL, A, A, A, A, A, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL runtime");
    expect(CALL(RT, 0, A, A, A, A, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "accept_len", "accept_len 0");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "accept_idx", "accept_idx 0");
    expect(CALL(RT, A, A, 0, A, A, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "accept_token", "accept_token 0");
    expect(CALL(RT, A, A, A, 0, A, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "bonus", "bonus 0");
    expect(CALL(RT, A, A, A, A, 0, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "token", "token 0");
    expect(CALL(RT, A, A, A, A, A, 0, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "first_child", "first_child 0");
    expect(CALL(RT, A, A, A, A, A, A, 0, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "next_sibling", "next_sibling 0");
    expect(CALL(RT, A, A, A, A, A, A, A, 0, A, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "n_nodes", "n_nodes 0");
    expect(CALL(RT, A, A, A, A, A, A, A, A, 0, 0, 1, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "target", "target 0");
    expect(CALL(RT, A + 1, A, A, A, A, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_MISALIGNED, "accept_len", "accept_len misaligned");
    expect(CALL(RT, A, A, A, A, A + 2, A, A, A, A, 0, 1, 15, 65),
           KDTREE_ERROR_MISALIGNED, "token", "token misaligned");
    expect(CALL(RT, A, A, A, A, A, A, A, A, A, A + 1, 1, 15, 65),
           KDTREE_ERROR_MISALIGNED, "max_accept", "max_accept misaligned");
    expect(CALL(RT, A, A, A, A, A, A, A, A, A, 0, 0, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "n_requests", "R = 0");
    expect(CALL(RT, A, A, A, A, A, A, A, A, A, 0, -3, 15, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "n_requests", "R < 0");
    expect(CALL(RT, A, A, A, A, A, A, A, A, A, 0, 1, 0, 65),
           KDTREE_ERROR_SHAPE, "L", "L = 0");
    expect(CALL(RT, A, A, A, A, A, A, A, A, A, 0, 1, 15, 0), KDTREE_ERROR_SHAPE,
           "N_MAX", "n_max = 0");
    expect(CALL(RT, A, A, A, A, A, A, A, A, A, 0, 1, 15, 1026),
           KDTREE_ERROR_SHAPE, "N_MAX", "n_max too large");
#undef CALL
}
END_TEST

START_TEST(validate_draft_topk)
{
#define CALL(rt, lp, ids, lg, dt, rows, V, K)                                 \
    kdtree_draft_topk(rt, lp, ids, lg, dt, rows, V, K, NULL)
    expect(CALL(NULL, A, A, A, 1, 15, 1000, 8), KDTREE_ERROR_INVALID_ARGUMENT,
           "rt", "NULL runtime");
    expect(CALL(RT, 0, A, A, 1, 15, 1000, 8), KDTREE_ERROR_INVALID_ARGUMENT,
           "lp", "lp 0");
    expect(CALL(RT, A, 0, A, 1, 15, 1000, 8), KDTREE_ERROR_INVALID_ARGUMENT,
           "ids", "ids 0");
    expect(CALL(RT, A, A, 0, 1, 15, 1000, 8), KDTREE_ERROR_INVALID_ARGUMENT,
           "logits", "logits 0");
    expect(CALL(RT, A + 1, A, A, 1, 15, 1000, 8), KDTREE_ERROR_MISALIGNED,
           "lp", "lp misaligned");
    expect(CALL(RT, A, A, A + 1, 1, 15, 1000, 8), KDTREE_ERROR_MISALIGNED,
           "logits", "logits misaligned");
    expect(CALL(RT, A, A, A, 2, 15, 1000, 8), KDTREE_ERROR_INVALID_ARGUMENT,
           "dtype", "bad dtype");
    expect(CALL(RT, A, A, A, -1, 15, 1000, 8), KDTREE_ERROR_INVALID_ARGUMENT,
           "dtype", "negative dtype");
    expect(CALL(RT, A, A, A, 1, 0, 1000, 8), KDTREE_ERROR_INVALID_ARGUMENT,
           "n_rows", "no rows");
    expect(CALL(RT, A, A, A, 1, 15, 0, 8), KDTREE_ERROR_SHAPE, "V",
           "vocab 0");
    expect(CALL(RT, A, A, A, 1, 15, 1000, 0), KDTREE_ERROR_SHAPE, "K",
           "k 0");
    expect(CALL(RT, A, A, A, 1, 15, 1000, 1025), KDTREE_ERROR_SHAPE, "K",
           "k too large");
    expect(CALL(RT, A, A, A, 1, 15, 8, 9), KDTREE_ERROR_SHAPE, "K",
           "k > vocab");
#undef CALL
}
END_TEST

START_TEST(validate_build_ddtree)
{
#define CALL(rt, nn, tk, pa, de, po, fc, ns, sc, am, lp, ids, bu, dl, rt_, pl,  \
             R, L, K, N)                                                     \
    kdtree_build_ddtree(rt, nn, tk, pa, de, po, fc, ns, sc, am, lp, ids, bu,  \
                        dl, rt_, pl, R, L, K, N, NULL)
    expect(CALL(NULL, A, A, A, A, A, A, A, 0, A, A, A, A, 0, A, 0, 1, 15, 8, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL runtime");
    const char *names[] = {"n_nodes", "token", "parent", "depth",
                           "position", "first_child", "next_sibling",
                           NULL, "anc_mask", "lp", "ids", "budget", NULL,
                           "root_token", NULL};
    for (int i = 0; i < 15; i++) {
        uint64_t p[15];
        for (int j = 0; j < 15; j++)
            p[j] = (j == 7 || j == 12 || j == 14) ? 0 : A;
        if (names[i]) {
            p[i] = 0;
            expect(CALL(RT, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7],
                        p[8], p[9], p[10], p[11], p[12], p[13], p[14], 1, 15,
                        8, 65),
                   KDTREE_ERROR_INVALID_ARGUMENT, names[i], names[i]);
        }
        p[i] = A + 1;
        expect(CALL(RT, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                    p[9], p[10], p[11], p[12], p[13], p[14], 1, 15, 8, 65),
               KDTREE_ERROR_MISALIGNED, NULL, "misaligned");
    }
    expect(CALL(RT, A, A, A, A, A, A, A, 0, A, A, A, A, 0, A, 0, 0, 15, 8, 65),
           KDTREE_ERROR_INVALID_ARGUMENT, "n_requests", "R = 0");
    expect(CALL(RT, A, A, A, A, A, A, A, 0, A, A, A, A, 0, A, 0, 1, 0, 8, 65),
           KDTREE_ERROR_SHAPE, "L", "L = 0");
    expect(CALL(RT, A, A, A, A, A, A, A, 0, A, A, A, A, 0, A, 0, 1, 15, 0, 65),
           KDTREE_ERROR_SHAPE, "K", "K = 0");
    expect(CALL(RT, A, A, A, A, A, A, A, 0, A, A, A, A, 0, A, 0, 1, 15, 8, 1026),
           KDTREE_ERROR_SHAPE, "N_MAX", "n_max too large");
#undef CALL
}
END_TEST

START_TEST(validate_verify_attn)
{
#define CALL(rt, o, lse, q, kv, bt, pl, nn, am, ws, wsb, R, H, N, P, MP, sc) \
    kdtree_verify_attn(rt, o, lse, q, kv, bt, pl, nn, am, ws, wsb, R, H, N,  \
                       P, MP, sc, NULL)
    expect(CALL(NULL, A, 0, A, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL runtime");
    expect(CALL(RT, 0, 0, A, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "o", "o 0");
    expect(CALL(RT, A, 0, 0, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "q", "q 0");
    expect(CALL(RT, A, 0, A, 0, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "kv_cache", "kv 0");
    expect(CALL(RT, A, 0, A, A, 0, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "block_table", "bt 0");
    expect(CALL(RT, A, 0, A, A, A, 0, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "past_len", "past_len 0");
    expect(CALL(RT, A, 0, A, A, A, A, 0, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "n_nodes", "n_nodes 0");
    expect(CALL(RT, A, 0, A, A, A, A, A, 0, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "anc_mask", "mask 0");
    expect(CALL(RT, A + 8, 0, A, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_MISALIGNED, "o", "o misaligned");
    expect(CALL(RT, A, 0, A + 8, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_MISALIGNED, "q", "q misaligned");
    expect(CALL(RT, A, 0, A, A + 8, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_MISALIGNED, "kv_cache", "kv misaligned");
    expect(CALL(RT, A, A + 1, A, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_MISALIGNED, "lse", "lse misaligned");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 0, 8, 65, 64, 16, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "n_requests", "R = 0");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 1, 0, 65, 64, 16, 0.1f),
           KDTREE_ERROR_SHAPE, "H", "H = 0");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 1, 129, 65, 64, 16, 0.1f),
           KDTREE_ERROR_SHAPE, "H", "H = 129");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 1, 8, 1026, 64, 16, 0.1f),
           KDTREE_ERROR_SHAPE, "N_MAX", "n_max too large");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 1, 8, 65, 0, 16, 0.1f),
           KDTREE_ERROR_SHAPE, "PAGE", "page 0");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 1, 8, 65, 257, 16, 0.1f),
           KDTREE_ERROR_SHAPE, "PAGE", "page too large");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 0, 0.1f),
           KDTREE_ERROR_INVALID_ARGUMENT, "max_pages", "no pages");
    expect(CALL(RT, A, 0, A, A, A, A, A, A, 0, 0, 1, 8, 65, 64, 16, 0.0f / 0.0f),
           KDTREE_ERROR_INVALID_ARGUMENT, "scale", "NaN scale");
    uint64_t ws = 0;
    expect(kdtree_verify_attn_workspace_size(NULL, RT, 1, 8, 65, 64, 16),
           KDTREE_ERROR_INVALID_ARGUMENT, "out_bytes", "NULL out");
    expect(kdtree_verify_attn_workspace_size(&ws, NULL, 1, 8, 65, 64, 16),
           KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL rt");
#undef CALL
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("api");
    TCase *t = tcase_create("library");
    tcase_add_test(t, versions);
    tcase_add_test(t, status_names);
    tcase_add_test(t, registry);
    tcase_add_test(t, embedded_sources);
    tcase_add_test(t, shape_errors);
    tcase_add_test(t, no_driver);
    suite_add_tcase(s, t);
    t = tcase_create("compile");
    /* NVRTC on a 2-core CI machine: a few seconds a kernel. */
    tcase_set_timeout(t, 600);
    tcase_add_test(t, compile_errors);
    tcase_add_test(t, compile_sm90);
    tcase_add_test(t, compile_sm120);
    tcase_add_test(t, compile_ptx);
    tcase_add_test(t, no_compiler_warm_cache);
    suite_add_tcase(s, t);
    t = tcase_create("validate");
    tcase_add_test(t, validate_tree_accept);
    tcase_add_test(t, validate_draft_topk);
    tcase_add_test(t, validate_build_ddtree);
    tcase_add_test(t, validate_verify_attn);
    suite_add_tcase(s, t);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
