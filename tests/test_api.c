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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "harness.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "jit/sources.h"
#include "runtime/runtime.h"

START_TEST(versions)
{
    ck_assert_str_eq(kdtree_version_string(), PACKAGE_VERSION);
    ck_assert_int_eq(kdtree_abi_version(), KDTREE_ABI_VERSION);
    ck_assert_int_ge(kdtree_max_qlen(), 65);
    ck_assert_int_eq(kdtree_max_qlen(), 1025);
    ck_assert_int_eq(kdtree_cache_stats_size(), sizeof(kdtree_cache_stats));
}
END_TEST

START_TEST(status_names)
{
    ck_assert_str_eq(kdtree_status_name(KDTREE_OK), "KDTREE_OK");
    ck_assert_str_eq(kdtree_status_name(KDTREE_ERROR_SHAPE),
                     "KDTREE_ERROR_SHAPE");
    ck_assert_str_eq(kdtree_status_name(KDTREE_ERROR_INTERNAL),
                     "KDTREE_ERROR_INTERNAL");
    ck_assert_str_eq(kdtree_status_name(KDTREE_ERROR_SHAPE_STRING),
                     "KDTREE_ERROR_SHAPE_STRING");
    ck_assert_str_eq(kdtree_status_name(1), "KDTREE_ERROR_UNKNOWN");
    ck_assert_str_eq(kdtree_status_name(-16), "KDTREE_ERROR_UNKNOWN");
    ck_assert_str_eq(kdtree_status_name(INT32_MIN), "KDTREE_ERROR_UNKNOWN");
    /* Every status has its own name. */
    for (int a = 0; a >= KDTREE_ERROR_SHAPE_STRING; a--)
        for (int b = a - 1; b >= KDTREE_ERROR_SHAPE_STRING; b--)
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
        /* every header the key hashes is one NVRTC gets */
        int nh = 0;
        while (kdt_kernel_def_get(i)->headers[nh])
            nh++;
        ck_assert_int_le(nh, KDT_MAX_HEADERS);
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
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "lacks L"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65,L=15,Q=1", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "unknown constant"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65,L=15,L=3", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=6x5,L=15", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "no valid value"));
    /* Another separator than a comma is named as such, not as a bad
     * value. */
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65;L=15", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "';' after N_MAX"));
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(),
                                 "separated by commas"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65 | L=15", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "'|' after N_MAX"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX=65 L=15", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "' ' after N_MAX"));
    ck_assert_int_eq(kdt_shape_parse(id, "N_MAX,L=15", v),
                     KDTREE_ERROR_SHAPE_STRING);
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
        KDTREE_ERROR_SHAPE_STRING);
    /* Rules between constants: K <= V. */
    ck_assert_int_eq(
        kdt_shape_parse(KDT_KERNEL_DRAFT_TOPK, "V=10,K=11,DTYPE=f32", v),
        KDTREE_ERROR_SHAPE);
    /* Optional constants: verify_attn's KV and MATH are bf16 when left
     * out, and the canonical text names them. */
    id = KDT_KERNEL_VERIFY_ATTN;
    char text[128];
    ck_assert_int_eq(kdt_shape_parse(id, "H=8,PAGE=64,N_MAX=65", v),
                     KDTREE_OK);
    ck_assert_int_eq(v[3], KDTREE_KV_BF16);
    ck_assert_int_eq(v[4], KDTREE_ATTN_MATH_BF16);
    kdt_shape_format(id, v, text, sizeof text);
    ck_assert_str_eq(text, "H=8,PAGE=64,N_MAX=65,KV=bf16,MATH=bf16");
    ck_assert_int_eq(
        kdt_shape_parse(id, "MATH=e4m3,H=8,KV=e4m3,PAGE=1,N_MAX=257", v),
        KDTREE_OK);
    ck_assert_int_eq(v[3], KDTREE_KV_E4M3);
    ck_assert_int_eq(v[4], KDTREE_ATTN_MATH_E4M3);
    ck_assert_int_eq(kdt_shape_parse(id, "H=8,PAGE=64,N_MAX=65,KV=e4m3", v),
                     KDTREE_OK);
    ck_assert_int_eq(v[4], KDTREE_ATTN_MATH_BF16);
    ck_assert_int_eq(kdt_shape_parse(id, "H=8,PAGE=64,N_MAX=65,KV=fp8", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "KV=bf16|e4m3"));
    ck_assert_int_eq(
        kdt_shape_parse(id, "H=8,PAGE=64,N_MAX=65,KV=bf16,KV=e4m3", v),
        KDTREE_ERROR_SHAPE_STRING);
    /* e4m3 arithmetic reads an e4m3 cache only. */
    ck_assert_int_eq(kdt_shape_parse(id, "H=8,PAGE=64,N_MAX=65,MATH=e4m3",
                                     v),
                     KDTREE_ERROR_SHAPE);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "MATH=e4m3 needs KV=e4m3"));
    /* A required constant is still required. */
    ck_assert_int_eq(kdt_shape_parse(id, "H=8,N_MAX=65,KV=e4m3", v),
                     KDTREE_ERROR_SHAPE_STRING);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "lacks PAGE"));
}
END_TEST

START_TEST(compile_errors)
{
    kdt_test_fresh_cache();
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
                     KDTREE_ERROR_SHAPE_STRING);
    /* An e4m3 cache needs sm_89 (FP8 conversions), whatever the
     * arithmetic; the bf16 kernel of the same shape does not. */
    ck_assert_int_eq(kdtree_compile(NULL, "sm_86", "verify_attn",
                                    "H=8,PAGE=64,N_MAX=65,KV=e4m3"),
                     KDTREE_ERROR_ARCH);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "KV=e4m3"));
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "sm_89"));
    ck_assert_int_eq(kdtree_compile(NULL, "compute_80", "verify_attn",
                                    "H=8,PAGE=64,N_MAX=65,KV=e4m3,"
                                    "MATH=e4m3"),
                     KDTREE_ERROR_ARCH);
}
END_TEST

/* Compile-only of every kernel's default shape for Hopper and Blackwell,
 * so CI catches a kernel that NVRTC rejects without any GPU. */
static void
compile_all(const char *arch)
{
    kdt_test_fresh_cache();
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
    kdtree_cache_stats s;
    ck_assert_int_eq(kdtree_cache_stats_get(&s), KDTREE_OK);
    ck_assert_int_eq(s.compiles, (uint64_t)kdtree_kernel_count());
    ck_assert_uint_ge(s.memory_hits, (uint64_t)kdtree_kernel_count());
    ck_assert_uint_ge(s.disk_hits, (uint64_t)kdtree_kernel_count());
    ck_assert(s.compile_ms > 0);
    ck_assert_int_eq(kdtree_cache_stats_get(NULL), KDTREE_ERROR_INVALID_ARGUMENT);
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
    kdt_test_fresh_cache();
    int32_t cached = -1;
    ck_assert_int_eq(kdtree_compile(&cached, "compute_90", "tree_accept",
                                    "N_MAX=1025,L=1024"),
                     KDTREE_OK);
    ck_assert_int_eq(cached, 0);
}
END_TEST

/* With the compiler unavailable a warm cache still serves; a miss says
 * clearly that it cannot compile. */
START_TEST(no_compiler_warm_cache)
{
    kdt_test_fresh_cache();
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

/* Valid structs to break one field at a time: every pointer aligned and
 * not 0, sizes inside their ranges. */
static kdtree_draft
good_draft(void)
{
    return (kdtree_draft){.lp = A, .ids = A, .n_requests = 1, .depth = 15,
                          .k = 8};
}

static kdtree_requests
good_requests(void)
{
    return (kdtree_requests){.budget = A, .root_token = A, .past_len = A,
                             .n_requests = 1};
}

static kdtree_tree
good_tree(void)
{
    return (kdtree_tree){.n_nodes = A, .token = A, .parent = A, .depth = A,
                         .position = A, .first_child = A, .next_sibling = A,
                         .anc_mask = A, .n_requests = 1, .n_max = 65};
}

static kdtree_accept
good_accept(void)
{
    return (kdtree_accept){.accept_len = A, .accept_idx = A,
                           .accept_token = A, .bonus = A, .n_requests = 1,
                           .depth = 15};
}

static kdtree_attn
good_attn(void)
{
    return (kdtree_attn){.q = A, .o = A, .n_heads = 8, .scale = 0.1f};
}

static kdtree_kv_cache
good_kv(void)
{
    return (kdtree_kv_cache){.data = A, .block_table = A, .page_size = 64,
                             .max_pages = 16};
}

/* A uint64_t field of a struct, by offset. */
#define FIELD(s, off) (*(uint64_t *)((char *)&(s) + (off)))

/* The tree's pointers each kernel requires (a 0 or a misaligned one is
 * refused with its name) and the one it does not (score). */
static const struct {
    const char *name;
    size_t off;
} tree_ptrs[] = {
    {"tree->n_nodes", offsetof(kdtree_tree, n_nodes)},
    {"tree->token", offsetof(kdtree_tree, token)},
    {"tree->parent", offsetof(kdtree_tree, parent)},
    {"tree->depth", offsetof(kdtree_tree, depth)},
    {"tree->position", offsetof(kdtree_tree, position)},
    {"tree->first_child", offsetof(kdtree_tree, first_child)},
    {"tree->next_sibling", offsetof(kdtree_tree, next_sibling)},
    {"tree->anc_mask", offsetof(kdtree_tree, anc_mask)},
};

START_TEST(validate_tree_accept)
{
    kdtree_accept acc = good_accept();
    kdtree_tree tree = good_tree();
    kdtree_requests req = good_requests();
#define CALL(rt, t) kdtree_tree_accept(rt, &acc, &tree, t, &req, NULL)
    expect(CALL(NULL, A), KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL rt");
    expect(kdtree_tree_accept(RT, NULL, &tree, A, &req, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "acc", "NULL acc");
    expect(kdtree_tree_accept(RT, &acc, NULL, A, &req, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "tree", "NULL tree");
    expect(kdtree_tree_accept(RT, &acc, &tree, A, NULL, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "req", "NULL req");
    static const struct {
        const char *name;
        size_t off;
    } acc_ptrs[] = {
        {"acc->accept_len", offsetof(kdtree_accept, accept_len)},
        {"acc->accept_idx", offsetof(kdtree_accept, accept_idx)},
        {"acc->accept_token", offsetof(kdtree_accept, accept_token)},
        {"acc->bonus", offsetof(kdtree_accept, bonus)},
    };
    for (size_t i = 0; i < sizeof acc_ptrs / sizeof acc_ptrs[0]; i++) {
        FIELD(acc, acc_ptrs[i].off) = 0;
        expect(CALL(RT, A), KDTREE_ERROR_INVALID_ARGUMENT, acc_ptrs[i].name,
               acc_ptrs[i].name);
        FIELD(acc, acc_ptrs[i].off) = A + 2;
        expect(CALL(RT, A), KDTREE_ERROR_MISALIGNED, acc_ptrs[i].name,
               acc_ptrs[i].name);
        acc = good_accept();
    }
    /* tree_accept walks the links: n_nodes, token, first_child and
     * next_sibling; the other arrays may be 0. */
    tree.parent = tree.depth = tree.position = tree.anc_mask = 0;
    static const size_t walked[] = {
        offsetof(kdtree_tree, n_nodes), offsetof(kdtree_tree, token),
        offsetof(kdtree_tree, first_child),
        offsetof(kdtree_tree, next_sibling)};
    for (size_t i = 0; i < sizeof walked / sizeof walked[0]; i++) {
        uint64_t keep = FIELD(tree, walked[i]);
        FIELD(tree, walked[i]) = 0;
        expect(CALL(RT, A), KDTREE_ERROR_INVALID_ARGUMENT, "tree->",
               "a walked link 0");
        FIELD(tree, walked[i]) = A + 1;
        expect(CALL(RT, A), KDTREE_ERROR_MISALIGNED, "tree->",
               "a walked link misaligned");
        FIELD(tree, walked[i]) = keep;
    }
    expect(CALL(RT, 0), KDTREE_ERROR_INVALID_ARGUMENT, "target", "target 0");
    expect(CALL(RT, A + 2), KDTREE_ERROR_MISALIGNED, "target",
           "target misaligned");
    req.max_accept = A + 1;
    expect(CALL(RT, A), KDTREE_ERROR_MISALIGNED, "req->max_accept",
           "max_accept misaligned");
    req = good_requests();
    tree.n_requests = 0;
    expect(CALL(RT, A), KDTREE_ERROR_INVALID_ARGUMENT, "tree->n_requests",
           "R = 0");
    tree.n_requests = -3;
    expect(CALL(RT, A), KDTREE_ERROR_INVALID_ARGUMENT, "tree->n_requests",
           "R < 0");
    tree.n_requests = 1;
    req.n_requests = 2;
    expect(CALL(RT, A), KDTREE_ERROR_INVALID_ARGUMENT, "req->n_requests",
           "requests disagree");
    req.n_requests = 1;
    acc.n_requests = 2;
    expect(CALL(RT, A), KDTREE_ERROR_INVALID_ARGUMENT, "acc->n_requests",
           "accept disagrees");
    acc.n_requests = 1;
    acc.depth = 0;
    expect(CALL(RT, A), KDTREE_ERROR_SHAPE, "L", "L = 0");
    acc.depth = 15;
    tree.n_max = 0;
    expect(CALL(RT, A), KDTREE_ERROR_SHAPE, "N_MAX", "n_max = 0");
    tree.n_max = 1026;
    expect(CALL(RT, A), KDTREE_ERROR_SHAPE, "N_MAX", "n_max too large");
#undef CALL
}
END_TEST

START_TEST(validate_draft_topk)
{
    kdtree_draft d = good_draft();
#define CALL(rt, lg, dt, V) kdtree_draft_topk(rt, &d, lg, dt, V, NULL)
    expect(CALL(NULL, A, 1, 1000), KDTREE_ERROR_INVALID_ARGUMENT, "rt",
           "NULL runtime");
    expect(kdtree_draft_topk(RT, NULL, A, 1, 1000, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "draft", "NULL draft");
    d.lp = 0;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_INVALID_ARGUMENT, "draft->lp",
           "lp 0");
    d.lp = A + 1;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_MISALIGNED, "draft->lp",
           "lp misaligned");
    d = good_draft();
    d.ids = 0;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_INVALID_ARGUMENT, "draft->ids",
           "ids 0");
    d = good_draft();
    expect(CALL(RT, 0, 1, 1000), KDTREE_ERROR_INVALID_ARGUMENT, "logits",
           "logits 0");
    expect(CALL(RT, A + 1, 1, 1000), KDTREE_ERROR_MISALIGNED, "logits",
           "logits misaligned");
    expect(CALL(RT, A + 2, 0, 1000), KDTREE_ERROR_MISALIGNED, "logits",
           "f32 logits misaligned");
    expect(CALL(RT, A, 2, 1000), KDTREE_ERROR_INVALID_ARGUMENT, "dtype",
           "bad dtype");
    expect(CALL(RT, A, -1, 1000), KDTREE_ERROR_INVALID_ARGUMENT, "dtype",
           "negative dtype");
    d.n_requests = 0;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_INVALID_ARGUMENT,
           "draft->n_requests", "no requests");
    d = good_draft();
    d.depth = 0;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_INVALID_ARGUMENT,
           "draft->depth", "no depth");
    d.depth = 1 << 20;
    d.n_requests = 1 << 12;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_INVALID_ARGUMENT, "rows",
           "too many rows");
    d = good_draft();
    expect(CALL(RT, A, 1, 0), KDTREE_ERROR_SHAPE, "V", "vocab 0");
    d.k = 0;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_SHAPE, "K", "k 0");
    d.k = 1025;
    expect(CALL(RT, A, 1, 1000), KDTREE_ERROR_SHAPE, "K", "k too large");
    d.k = 9;
    expect(CALL(RT, A, 1, 8), KDTREE_ERROR_SHAPE, "K", "k > vocab");
#undef CALL
}
END_TEST

START_TEST(validate_build_ddtree)
{
    kdtree_tree tree = good_tree();
    kdtree_draft d = good_draft();
    kdtree_requests req = good_requests();
#define CALL(rt) kdtree_build_ddtree(rt, &tree, &d, &req, NULL)
    expect(CALL(NULL), KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL runtime");
    expect(kdtree_build_ddtree(RT, NULL, &d, &req, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "tree", "NULL tree");
    expect(kdtree_build_ddtree(RT, &tree, NULL, &req, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "draft", "NULL draft");
    expect(kdtree_build_ddtree(RT, &tree, &d, NULL, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "req", "NULL req");
    /* Every array of the tree is written: each is required but score. */
    for (size_t i = 0; i < sizeof tree_ptrs / sizeof tree_ptrs[0]; i++) {
        FIELD(tree, tree_ptrs[i].off) = 0;
        expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, tree_ptrs[i].name,
               tree_ptrs[i].name);
        FIELD(tree, tree_ptrs[i].off) = A + 1;
        expect(CALL(RT), KDTREE_ERROR_MISALIGNED, tree_ptrs[i].name,
               tree_ptrs[i].name);
        tree = good_tree();
    }
    tree.score = A + 2;
    expect(CALL(RT), KDTREE_ERROR_MISALIGNED, "tree->score",
           "score misaligned");
    tree = good_tree();
    d.lp = 0;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "draft->lp", "lp 0");
    d = good_draft();
    d.ids = A + 1;
    expect(CALL(RT), KDTREE_ERROR_MISALIGNED, "draft->ids",
           "ids misaligned");
    d = good_draft();
    /* budget and root_token are required, depth_limit and past_len not. */
    req.budget = 0;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "req->budget",
           "budget 0");
    req = good_requests();
    req.root_token = 0;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "req->root_token",
           "root_token 0");
    req = good_requests();
    req.depth_limit = A + 1;
    expect(CALL(RT), KDTREE_ERROR_MISALIGNED, "req->depth_limit",
           "depth_limit misaligned");
    req = good_requests();
    req.past_len = A + 3;
    expect(CALL(RT), KDTREE_ERROR_MISALIGNED, "req->past_len",
           "past_len misaligned");
    req = good_requests();
    tree.n_requests = 0;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "tree->n_requests",
           "R = 0");
    tree = good_tree();
    d.n_requests = 2;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "draft->n_requests",
           "draft disagrees");
    d = good_draft();
    req.n_requests = 3;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "req->n_requests",
           "requests disagree");
    req = good_requests();
    d.depth = 0;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "L", "L = 0");
    d = good_draft();
    d.k = 0;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "K", "K = 0");
    d = good_draft();
    tree.n_max = 1026;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "N_MAX", "n_max too large");
#undef CALL
}
END_TEST

START_TEST(validate_verify_attn)
{
    kdtree_attn at = good_attn();
    kdtree_tree tree = good_tree();
    kdtree_requests req = good_requests();
    kdtree_kv_cache kv = good_kv();
#define CALL(rt) kdtree_verify_attn(rt, &at, &tree, &req, &kv, NULL)
    expect(CALL(NULL), KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL runtime");
    expect(kdtree_verify_attn(RT, NULL, &tree, &req, &kv, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "attn", "NULL attn");
    expect(kdtree_verify_attn(RT, &at, NULL, &req, &kv, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "tree", "NULL tree");
    expect(kdtree_verify_attn(RT, &at, &tree, NULL, &kv, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "req", "NULL req");
    expect(kdtree_verify_attn(RT, &at, &tree, &req, NULL, NULL),
           KDTREE_ERROR_INVALID_ARGUMENT, "kv", "NULL kv");
    /* Required pointers and their alignment: q, o, kv->data 16 bytes. */
    static const struct {
        int which; /* 0 attn, 1 tree, 2 req, 3 kv */
        const char *name;
        size_t off;
        unsigned align;
    } ptrs[] = {
        {0, "attn->o", offsetof(kdtree_attn, o), 16},
        {0, "attn->q", offsetof(kdtree_attn, q), 16},
        {1, "tree->n_nodes", offsetof(kdtree_tree, n_nodes), 4},
        {1, "tree->anc_mask", offsetof(kdtree_tree, anc_mask), 4},
        {2, "req->past_len", offsetof(kdtree_requests, past_len), 4},
        {3, "kv->data", offsetof(kdtree_kv_cache, data), 16},
        {3, "kv->block_table", offsetof(kdtree_kv_cache, block_table), 4},
    };
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) {
        char *base = ptrs[i].which == 0   ? (char *)&at
                     : ptrs[i].which == 1 ? (char *)&tree
                     : ptrs[i].which == 2 ? (char *)&req
                                          : (char *)&kv;
        uint64_t *f = (uint64_t *)(base + ptrs[i].off);
        *f = 0;
        expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, ptrs[i].name,
               ptrs[i].name);
        *f = A + ptrs[i].align / 2;
        expect(CALL(RT), KDTREE_ERROR_MISALIGNED, ptrs[i].name,
               ptrs[i].name);
        *f = A;
    }
    /* The tree's other arrays are not read. */
    tree.token = tree.parent = tree.first_child = 0;
    at.lse = A + 1;
    expect(CALL(RT), KDTREE_ERROR_MISALIGNED, "attn->lse", "lse misaligned");
    at = good_attn();
    tree.n_requests = 0;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "tree->n_requests",
           "R = 0");
    tree.n_requests = 65536;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "tree->n_requests",
           "R past the grid");
    tree = good_tree();
    req.n_requests = 2;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "req->n_requests",
           "requests disagree");
    req = good_requests();
    at.n_heads = 0;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "H", "H = 0");
    at.n_heads = 129;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "H", "H = 129");
    at = good_attn();
    tree.n_max = 1026;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "N_MAX", "n_max too large");
    tree = good_tree();
    kv.page_size = 0;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "PAGE", "page 0");
    kv.page_size = 257;
    expect(CALL(RT), KDTREE_ERROR_SHAPE, "PAGE", "page too large");
    kv = good_kv();
    kv.max_pages = 0;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "kv->max_pages",
           "no pages");
    kv = good_kv();
    at.scale = 0.0f / 0.0f;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "attn->scale",
           "NaN scale");
    at = good_attn();
    /* The cache's type and scale, and the arithmetic. */
    kv.dtype = 2;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "kv->dtype = 2",
           "unknown KV type");
    kv.dtype = -1;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "KDTREE_KV_E4M3",
           "negative KV type");
    kv = good_kv();
    kv.scale = 0.5f;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "kv->scale = 0.5",
           "a scale on a bf16 cache");
    kv.dtype = KDTREE_KV_E4M3;
    static const float bad_scales[] = {0.f, -1.f, 1.f / 0.f, 0.f / 0.f};
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        kv.scale = bad_scales[i];
        expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "kv->scale",
               "e4m3 scale not finite and > 0");
    }
    kv = good_kv();
    at.math = 2;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "attn->math = 2",
           "unknown arithmetic");
    at.math = KDTREE_ATTN_MATH_E4M3;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "needs an e4m3 cache",
           "e4m3 arithmetic on a bf16 cache");
    at = good_attn();
    at.pad0 = 1;
    expect(CALL(RT), KDTREE_ERROR_INVALID_ARGUMENT, "attn->pad0",
           "reserved field");
    at = good_attn();
    uint64_t ws = 0;
    expect(kdtree_verify_attn_workspace_size(NULL, RT, &at, &tree, &kv),
           KDTREE_ERROR_INVALID_ARGUMENT, "out_bytes", "NULL out");
    expect(kdtree_verify_attn_workspace_size(&ws, NULL, &at, &tree, &kv),
           KDTREE_ERROR_INVALID_ARGUMENT, "rt", "NULL rt");
    expect(kdtree_verify_attn_workspace_size(&ws, RT, NULL, &tree, &kv),
           KDTREE_ERROR_INVALID_ARGUMENT, "attn", "NULL attn");
    kv.page_size = 0;
    expect(kdtree_verify_attn_workspace_size(&ws, RT, &at, &tree, &kv),
           KDTREE_ERROR_SHAPE, "PAGE", "size of a bad shape");
#undef CALL
}
END_TEST

/* Which explicit targets a device takes (kdtree_runtime_create_for),
 * on pretend devices: no GPU needed. */
START_TEST(explicit_target_rule)
{
    static const struct {
        int major, minor;
        const char *target;
        int ok;
    } cases[] = {
        {9, 0, "sm_90", 1},       {9, 0, "sm_90a", 1},
        {9, 0, "compute_90", 1},  {9, 0, "compute_80", 1},
        {9, 0, "compute_90a", 1}, {9, 0, "sm_80", 0},
        {9, 0, "sm_100", 0},      {9, 0, "compute_100", 0},
        {9, 0, "sm_9", 0},        {9, 0, "hopper", 0},
        {12, 0, "sm_120", 1},     {12, 0, "sm_90", 0},
        {12, 0, "sm_120a", 1},    {12, 0, "compute_90", 1},
        {8, 9, "sm_86", 1},       {8, 9, "sm_80", 1},
        {8, 9, "sm_89a", 1},      {8, 9, "sm_86a", 0},
        {8, 6, "sm_89", 0},       {10, 0, "compute_90a", 0},
        {12, 0, "compute_120a", 1}, {12, 0, "compute_100a", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kdtree_runtime rt;
        memset(&rt, 0, sizeof rt);
        rt.cc_major = cases[i].major;
        rt.cc_minor = cases[i].minor;
        strcpy(rt.arch, "sm_xx");
        int st = kdt_runtime_set_target(&rt, cases[i].target, "test");
        ck_assert_msg((st == KDTREE_OK) == cases[i].ok,
                      "%d.%d %s: got %s (%s)", cases[i].major,
                      cases[i].minor, cases[i].target,
                      kdtree_status_name(st), kdtree_last_error());
        if (st == KDTREE_OK) {
            ck_assert_str_eq(kdtree_runtime_target(&rt), cases[i].target);
        } else {
            ck_assert_int_eq(st, KDTREE_ERROR_ARCH);
            ck_assert_ptr_nonnull(strstr(kdtree_last_error(),
                                         cases[i].target));
            ck_assert_str_eq(kdtree_runtime_target(&rt), "sm_xx");
        }
    }
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
    tcase_add_test(t, explicit_target_rule);
    suite_add_tcase(s, t);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
