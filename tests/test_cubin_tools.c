/*
 * test_cubin_tools.c: the cubin reader against NVIDIA's own reading.
 * Every registered kernel's default shape, built by the library's miss
 * path (NVRTC) for sm_90a and sm_120, and a probe that spills on
 * purpose: registers, stack, static shared memory and the parameter bank
 * as `cuobjdump -res-usage` prints them, the launch bounds as `cuobjdump
 * -elf` decodes EIATTR_MAX_THREADS.  Host only; exits 77 without NVRTC or
 * without cuobjdump ($KDT_CUOBJDUMP, PATH, $CUDA_HOME/bin,
 * /usr/local/cuda/bin).
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "cuda/nvrtc.h"
#include "jit/cubin_info.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "kdtree.h"

static char cuobjdump[4096];

static int
executable(const char *path)
{
    return path && *path && access(path, X_OK) == 0;
}

static int
find_cuobjdump(void)
{
    const char *env = getenv("KDT_CUOBJDUMP"), *home = getenv("CUDA_HOME");
    const char *path = getenv("PATH");
    char buf[4096];
    if (executable(env)) {
        snprintf(cuobjdump, sizeof cuobjdump, "%s", env);
        return 1;
    }
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/cuobjdump", (int)n, path);
        if (n && executable(buf)) {
            snprintf(cuobjdump, sizeof cuobjdump, "%s", buf);
            return 1;
        }
        path += n + (path[n] == ':');
    }
    snprintf(buf, sizeof buf, "%s/bin/cuobjdump", home ? home : "");
    if (home && executable(buf)) {
        snprintf(cuobjdump, sizeof cuobjdump, "%s", buf);
        return 1;
    }
    if (executable("/usr/local/cuda/bin/cuobjdump")) {
        snprintf(cuobjdump, sizeof cuobjdump, "/usr/local/cuda/bin/cuobjdump");
        return 1;
    }
    return 0;
}

/* What cuobjdump says about one function. */
typedef struct theirs {
    char name[128];
    unsigned reg, stack, shared, local, cbank0, threads;
    int have_res, have_threads;
} theirs;

static theirs *
their_fn(theirs *t, int *n, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    ck_assert_int_lt(*n, 16);
    memset(&t[*n], 0, sizeof t[*n]);
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    return &t[(*n)++];
}

/* Runs cuobjdump with `args` on `file` and records what it says. */
static void
read_cuobjdump(const char *args, const char *file, theirs *t, int *n)
{
    char cmd[8600], line[4096];
    theirs *cur = NULL;
    int want_value = 0;
    FILE *p;

    snprintf(cmd, sizeof cmd, "'%s' %s '%s' 2>&1", cuobjdump, args, file);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    while (fgets(line, sizeof line, p)) {
        char name[128];
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, " Function %127[^:]:", name) == 1) {
            cur = their_fn(t, n, name);
        } else if (cur && strstr(line, "REG:")) {
            ck_assert_int_eq(sscanf(strstr(line, "REG:"),
                                    "REG:%u STACK:%u SHARED:%u LOCAL:%u "
                                    "CONSTANT[0]:%u", &cur->reg, &cur->stack,
                                    &cur->shared, &cur->local, &cur->cbank0),
                             5);
            cur->have_res = 1;
        } else if (strncmp(line, ".nv.info.", 9) == 0 && line[9]) {
            cur = their_fn(t, n, line + 9);
        } else if (strncmp(line, ".", 1) == 0) {
            cur = NULL; /* another section's dump */
        } else if (cur && strstr(line, "EIATTR_MAX_THREADS")) {
            want_value = 1;
        } else if (cur && want_value && strstr(line, "Value:")) {
            unsigned x, y, z;
            ck_assert_int_eq(sscanf(strstr(line, "Value:") + 6,
                                    " %x %x %x", &x, &y, &z), 3);
            cur->threads = x * y * z;
            cur->have_threads = 1;
            want_value = 0;
        }
    }
    ck_assert_int_eq(pclose(p), 0);
}

/* Our reading of blob against cuobjdump's; returns the kernels found. */
static int
compare(const kdt_blob *blob, const char *what, kdt_cubin_kernel *ours,
        int max)
{
    char file[] = "/tmp/kdt-cubin.XXXXXX", why[200];
    theirs t[16];
    int n_ours = 0, n_theirs = 0, fd = mkstemp(file);
    FILE *f;

    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(blob->data, 1, blob->size, f), blob->size);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_msg(kdt_cubin_kernels(blob->data, blob->size, ours, max,
                                    &n_ours, why, sizeof why) == 0,
                  "%s: %s", what, why);
    read_cuobjdump("-res-usage", file, t, &n_theirs);
    read_cuobjdump("-elf", file, t, &n_theirs);
    unlink(file);
    ck_assert_msg(n_ours >= 1 && n_ours <= max, "%s: %d kernels", what,
                  n_ours);
    ck_assert_msg(n_ours == n_theirs, "%s: %d kernels, cuobjdump %d", what,
                  n_ours, n_theirs);
    for (int i = 0; i < n_ours; i++) {
        const kdt_cubin_kernel *k = &ours[i];
        theirs *c = their_fn(t, &n_theirs, k->name);
        ck_assert_msg(c->have_res, "%s: cuobjdump has no %s", what, k->name);
        ck_assert_msg(k->registers == c->reg && k->stack_bytes == c->stack
                          && k->shared_bytes == c->shared
                          && k->param_bytes == c->cbank0,
                      "%s %s: REG %u STACK %u SHARED %u CONSTANT[0] %u, "
                      "cuobjdump %u %u %u %u", what, k->name, k->registers,
                      k->stack_bytes, k->shared_bytes, k->param_bytes,
                      c->reg, c->stack, c->shared, c->cbank0);
        /* Not read: nothing since the ABI became the only choice writes
         * it; if this fires, .nv.local.<name> needs reading too. */
        ck_assert_msg(c->local == 0, "%s %s: LOCAL %u", what, k->name,
                      c->local);
        ck_assert_uint_eq(k->max_threads, c->have_threads ? c->threads : 0);
    }
    return n_ours;
}

START_TEST(test_registered_kernels)
{
    static const char *const targets[] = {"sm_90a", "sm_120"};
    for (int id = 0; id < KDT_KERNEL_COUNT; id++) {
        const kdt_kernel_def *def = kdt_kernel_def_get(id);
        int64_t vals[KDT_MAX_CONSTS];
        ck_assert_int_eq(kdt_shape_parse(id, def->default_shape, vals), 0);
        for (int t = 0; t < 2; t++) {
            kdt_cubin_kernel k[KDT_MAX_FUNCS + 1];
            kdt_blob blob = {0};
            char what[96];
            int from = 0, n, st;
            st = kdt_kernel_obtain(id, vals, targets[t], KDT_PAYLOAD_CUBIN,
                                   &blob, &from);
            ck_assert_msg(st == 0, "%s %s: %s", def->name, targets[t],
                          kdtree_last_error());
            snprintf(what, sizeof what, "%s %s", def->name, targets[t]);
            n = compare(&blob, what, k, KDT_MAX_FUNCS + 1);
            /* Every entry point the registry names is in the image. */
            for (int f = 0; def->functions[f]; f++) {
                int found = 0;
                for (int i = 0; i < n; i++)
                    found |= strcmp(k[i].name, def->functions[f]) == 0;
                ck_assert_msg(found, "%s: no %s", what, def->functions[f]);
            }
            kdt_blob_free(&blob);
        }
    }
}
END_TEST

/* A kernel with 128 floats live at -maxrregcount=32 spills; its bounded
 * twin keeps them in registers.  The stack must show the difference. */
static const char probe_source[] =
    "extern \"C\" __global__ void spills(const float4 *in, float *out, int n)\n"
    "{\n"
    "    float4 v[32];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 32; i++) v[i] = in[threadIdx.x + i * 256];\n"
    "    float s = 0;\n"
    "    for (int k = 0; k < n; k++) {\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < 32; i++) {\n"
    "            s += v[i].x * v[(i + 1) & 31].y;\n"
    "            v[i].x += s;\n"
    "            v[i].w *= v[i].z;\n"
    "        }\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 32; i++) s += v[i].x + v[i].y + v[i].z + v[i].w;\n"
    "    out[threadIdx.x] = s;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(96) bounded(float *out)\n"
    "{\n"
    "    __shared__ float t[300];\n"
    "    t[threadIdx.x] = out[threadIdx.x];\n"
    "    __syncthreads();\n"
    "    out[threadIdx.x] = t[(threadIdx.x + 1) % 96];\n"
    "}\n";

START_TEST(test_spilling_probe)
{
    static const char *const targets[] = {"-arch=sm_90a", "-arch=sm_120"};
    int st = 0;
    const kdt_nvrtc *nv = kdt_nvrtc_get(&st);
    ck_assert_ptr_nonnull(nv);
    for (int t = 0; t < 2; t++) {
        const char *opts[] = {targets[t], "-maxrregcount=32"};
        kdt_cubin_kernel k[4];
        kdt_blob blob = {0};
        int n, seen = 0;
        st = kdt_nvrtc_compile(nv, probe_source, "probe.cu", 0, NULL, NULL,
                               2, opts, KDT_PAYLOAD_CUBIN, &blob);
        ck_assert_msg(st == 0, "%s", kdtree_last_error());
        n = compare(&blob, targets[t], k, 4);
        ck_assert_int_eq(n, 2);
        for (int i = 0; i < n; i++) {
            if (strcmp(k[i].name, "spills") == 0) {
                ck_assert_uint_gt(k[i].stack_bytes, 0);
                ck_assert_uint_le(k[i].registers, 32);
                ck_assert_uint_eq(k[i].max_threads, 0);
                seen |= 1;
            } else if (strcmp(k[i].name, "bounded") == 0) {
                ck_assert_uint_eq(k[i].stack_bytes, 0);
                ck_assert_uint_ge(k[i].shared_bytes, 1200);
                ck_assert_uint_eq(k[i].max_threads, 96);
                seen |= 2;
            }
        }
        ck_assert_int_eq(seen, 3);
        kdt_blob_free(&blob);
    }
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("cubin_tools");
    TCase *tc = tcase_create("cubin_tools");
    /* NVRTC on a 2-core CI machine: seconds a kernel. */
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_registered_kernels);
    tcase_add_test(tc, test_spilling_probe);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    if (!find_cuobjdump()) {
        printf("SKIP: no cuobjdump (KDT_CUOBJDUMP, PATH, CUDA_HOME/bin, "
               "/usr/local/cuda/bin): nothing to compare with\n");
        return 77;
    }
    return kdt_test_main(suite, KDT_TEST_NO_FORK | KDT_TEST_NVRTC |
                                    KDT_TEST_TEMP_CACHE);
}
