/*
 * bench_load.c: kdtree-bench's load path (see bench_suite.h).  One
 * measurement serves both paths, the runtime's (kdtree_prepare() in a
 * fresh runtime, with a GPU) and the compile-only one (kdtree_compile(),
 * without): what differs is only how one load is made (load_once) and
 * how often each phase repeats.
 *
 *   cold  an empty cache directory and no memory layer: NVRTC + publish
 *         (+ cuModuleLoadData), interleaved with the bare NVRTC compile of
 *         the same source so that drift hits both alike
 *   warm  the memory layer forgotten, the entry the last cold run
 *         published on disk: read, verify (+ load)
 *   hot   (runtime only) the shape already loaded in the bench's runtime
 *
 * Each kernel's default shape makes a row, and so does each shape
 * load_shapes[] lists for it (the variants whose source differs, compiled
 * and loaded like the rest).  Then the registers, stack and shared memory
 * of the cubin the row loaded (read_resources).  The process-wide counters (kdtree_cache_stats_get)
 * say whether each phase did what it is named for; a run that did not is
 * reported as the row's problem, never silently averaged in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ctx.h"
#include "cache/cache.h"
#include "cuda/nvrtc.h"
#include "jit/cubin_info.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "jit/sources.h"
#include "runtime/runtime.h"

/* The shapes the load path measures beside each kernel's default one:
 * verify_attn in pages of one token (SGLang's token pool), whose bf16
 * code differs from the default's.  The one list of them, for the GPU's
 * rows and the compile-only ones alike. */
static const struct {
    const char *kernel, *shape;
} load_shapes[] = {
    {"verify_attn", "H=8,PAGE=1,N_MAX=65"},
};

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void
rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh empty directory under $TMPDIR, made the cache directory. */
static char *
fresh_cache_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/kdtree-bench.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(path)) {
        fprintf(stderr, "kdtree-bench: mkdtemp %s: %s\n", path,
                strerror(errno));
        exit(2);
    }
    setenv("KDTREE_CACHE_DIR", path, 1);
    return strdup(path);
}

/* The cache environment of the user, put back after each load phase. */
typedef struct saved_env {
    char *dir, *mode, *path;
} saved_env;

static char *
dup_env(const char *name)
{
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}

static void
restore_one(const char *name, char *v)
{
    if (v)
        setenv(name, v, 1);
    else
        unsetenv(name);
    free(v);
}

/* Saves the user's cache settings and sets those of a load measurement:
 * read-write, and no read-only layers (a prebuilt layer would turn a cold
 * measurement into a disk hit). */
static void
env_isolate(saved_env *s)
{
    s->dir = dup_env("KDTREE_CACHE_DIR");
    s->mode = dup_env("KDTREE_CACHE");
    s->path = dup_env("KDTREE_CACHE_PATH");
    setenv("KDTREE_CACHE", "readwrite", 1);
    unsetenv("KDTREE_CACHE_PATH");
}

static void
env_restore(saved_env *s)
{
    restore_one("KDTREE_CACHE_DIR", s->dir);
    restore_one("KDTREE_CACHE", s->mode);
    restore_one("KDTREE_CACHE_PATH", s->path);
}

static load_row *
new_load_row(bench_ctx *b, const char *kernel, const char *arch,
             const char *shape, int gpu)
{
    load_row *r;
    if (b->n_load == MAX_LOAD_ROWS)
        return NULL;
    r = &b->load[b->n_load++];
    memset(r, 0, sizeof *r);
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    snprintf(r->arch, sizeof r->arch, "%s", arch);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->gpu = gpu;
    r->cold = r->bare = r->warm = bench_stat_of(NULL, 0);
    r->cold_nvrtc_ms = NAN;
    r->warm_load_ms = r->hot_find_us = r->hot_prepare_us = NAN;
    r->n_fn = -1;
    return r;
}

static void
problem(load_row *r, const char *fmt, ...)
{
    size_t len = strlen(r->problem);
    va_list ap;
    if (len && len + 2 < sizeof r->problem) {
        strcpy(r->problem + len, "; ");
        len += 2;
    }
    va_start(ap, fmt);
    vsnprintf(r->problem + len, sizeof r->problem - len, fmt, ap);
    va_end(ap);
    /* One line per row: an NVRTC log keeps its first line only. */
    r->problem[len + strcspn(r->problem + len, "\n")] = 0;
}

/* The bare compile: kdt_kernel_compile(), the miss path's own compile
 * (the kernel's source, headers and options exactly as the library passes
 * them), with nothing around it (no key, no cache, no load).  Returns
 * milliseconds, or NAN. */
static double
bare_compile_ms(load_row *r, int id, const int64_t *vals, const char *target,
                int kind)
{
    int st = 0;
    const kdt_nvrtc *n = kdt_nvrtc_get(&st);
    kdt_blob blob = {0};
    double t0, t1;
    if (!n) {
        problem(r, "bare NVRTC: %s", kdtree_last_error());
        return NAN;
    }
    t0 = bench_now_us();
    st = kdt_kernel_compile(n, id, vals, target, kind, &blob);
    t1 = bench_now_us();
    kdt_blob_free(&blob);
    if (st) {
        problem(r, "bare NVRTC: %s", kdtree_status_name(st));
        return NAN;
    }
    return (t1 - t0) / 1e3;
}

/* NVRTC's first compile in a process loads its builtins; keep that out of
 * every measurement by compiling once, untimed, before the first one. */
static void
warm_nvrtc(bench_ctx *b, load_row *r, int id, const int64_t *vals,
           const char *target, int kind)
{
    if (b->nvrtc_warmed)
        return;
    b->nvrtc_warmed = 1;
    (void)bare_compile_ms(r, id, vals, target, kind);
}

/* The registers, stack and shared memory of the cubin the cache holds for
 * the row's shape (what its load measured), read while its cache
 * directory is still the current one. */
static void
read_resources(load_row *r, int id, const int64_t *vals, const char *target,
               int kind)
{
    kdt_blob blob = {0};
    char why[200];
    int from = 0, n = 0;
    if (kind != KDT_PAYLOAD_CUBIN)
        return;
    if (kdt_kernel_obtain(id, vals, target, kind, &blob, &from)) {
        problem(r, "resources: %s", kdtree_last_error());
        return;
    }
    if (kdt_cubin_kernels(blob.data, blob.size, r->fn, KDT_MAX_FUNCS, &n,
                          why, sizeof why))
        problem(r, "resources: %s", why);
    else
        r->n_fn = n < KDT_MAX_FUNCS ? n : KDT_MAX_FUNCS;
    kdt_blob_free(&blob);
}

static int
kind_of_target(const char *target)
{
    return strncmp(target, "sm_", 3) == 0 ? KDT_PAYLOAD_CUBIN
                                          : KDT_PAYLOAD_PTX;
}

typedef struct hot_arg {
    kdtree_runtime *rt;
    int id;
    const int64_t *vals;
    const char *name, *shape;
    int failed;
} hot_arg;

static void
hot_find(void *p)
{
    hot_arg *a = p;
    if (!kdt_runtime_find(a->rt, a->id, a->vals))
        a->failed = 1;
}

static void
hot_prepare(void *p)
{
    hot_arg *a = p;
    if (kdtree_prepare(a->rt, a->name, a->shape))
        a->failed = 1;
}


/* One kernel's load measurement: what it loads, for which target, and the
 * row it fills. */
typedef struct load_job {
    bench_ctx *b;
    load_row *r;
    const char *name, *shape;
    int id;
    int64_t vals[KDT_MAX_CONSTS];
    char target[32];
    int kind;
    /* >= 0: through a fresh runtime on this device (kdtree_prepare);
     * -1: compile-only (kdtree_compile). */
    int ordinal;
    /* The cache directory of the last cold run (the one the warm runs
     * read), removed when the job ends. */
    char *dir;
} load_job;

/* One load in whatever cache state the caller set up; *ms is its wall
 * time (runtime creation and destruction excluded). */
static int
load_once(const load_job *j, double *ms)
{
    kdtree_runtime *rt = NULL;
    double t0, t1;
    int st;
    if (j->ordinal < 0) {
        t0 = bench_now_us();
        st = kdtree_compile(NULL, j->target, j->name, j->shape);
        t1 = bench_now_us();
    } else {
        if ((st = kdtree_runtime_create(&rt, j->ordinal))) {
            problem(j->r, "runtime: %s", kdtree_last_error());
            return st;
        }
        t0 = bench_now_us();
        st = kdtree_prepare(rt, j->name, j->shape);
        t1 = bench_now_us();
        kdtree_runtime_destroy(rt);
    }
    *ms = (t1 - t0) / 1e3;
    return st;
}

/* reps_cold cold and reps_warm warm loads into the job's row (each with
 * its median and spread); the first failure stops both. */
static int
measure_cold_warm(load_job *j, int reps_cold, int reps_warm)
{
    const char *verb = j->ordinal < 0 ? "compile" : "prepare";
    double cold[16], bare[16], cnv[16], warm[64], wload[64];
    int nc = 0, nb = 0, nw = 0, st = 0;
    load_row *r = j->r;
    kdtree_cache_stats s;
    for (int i = 0; i < reps_cold && !st; i++) {
        if (j->dir) {
            rm_tree(j->dir);
            free(j->dir);
        }
        j->dir = fresh_cache_dir();
        kdt_cache_memory_clear();
        kdtree_cache_stats_reset();
        if ((st = load_once(j, &cold[nc]))) {
            problem(r, "cold %s: %s: %s", verb, kdtree_status_name(st),
                    kdtree_last_error());
            break;
        }
        kdtree_cache_stats_get(&s);
        if (s.compiles != 1 && i == 0)
            problem(r, "cold run compiled %llu times (disk hits %llu)",
                    (unsigned long long)s.compiles,
                    (unsigned long long)s.disk_hits);
        cnv[nc++] = s.compile_ms;
        bare[nb] = bare_compile_ms(r, j->id, j->vals, j->target, j->kind);
        if (isfinite(bare[nb]))
            nb++;
    }
    for (int i = 0; i < reps_warm && !st; i++) {
        kdt_cache_memory_clear();
        kdtree_cache_stats_reset();
        if ((st = load_once(j, &warm[nw]))) {
            problem(r, "warm %s: %s: %s", verb, kdtree_status_name(st),
                    kdtree_last_error());
            break;
        }
        kdtree_cache_stats_get(&s);
        if ((s.disk_hits != 1 || s.compiles != 0) && i == 0)
            problem(r, "warm run: %llu disk hits, %llu compiles",
                    (unsigned long long)s.disk_hits,
                    (unsigned long long)s.compiles);
        wload[nw++] = s.load_ms;
    }
    r->cold = bench_stat_of(cold, nc);
    r->cold_nvrtc_ms = bench_median(cnv, nc);
    r->bare = bench_stat_of(bare, nb);
    r->warm = bench_stat_of(warm, nw);
    /* Compile-only loads no module: its warm row has no load time. */
    if (j->ordinal >= 0)
        r->warm_load_ms = bench_median(wload, nw);
    return st;
}

/* The hot phase: lookups of the shape loaded in the bench's runtime. */
static int
measure_hot(load_job *j)
{
    bench_ctx *b = j->b;
    int st = kdtree_prepare(b->rt, j->name, j->shape);
    if (st) {
        problem(j->r, "%s", kdtree_last_error());
        return st;
    }
    hot_arg a = {b->rt, j->id, j->vals, j->name, j->shape, 0};
    j->r->hot_find_us = bench_cpu_us(b, hot_find, &a);
    j->r->hot_prepare_us = bench_cpu_us(b, hot_prepare, &a);
    if (a.failed)
        problem(j->r, "hot lookup missed");
    return 0;
}

/* Sets up the job of kernel `index` at `shape` (NULL: its default one)
 * and its row; returns 0, a status (the row says why), or -1 when the
 * report has no room for another row. */
static int
start_job(bench_ctx *b, load_job *j, int index, const char *shape,
          const char *arch, int ordinal)
{
    memset(j, 0, sizeof *j);
    j->b = b;
    j->ordinal = ordinal;
    j->name = kdtree_kernel_name(index);
    j->shape = shape ? shape
               : j->name ? kdtree_kernel_default_shape(j->name) : NULL;
    j->id = j->name ? kdt_kernel_find(j->name) : -1;
    if (j->id < 0 || !j->shape)
        return KDTREE_ERROR_INVALID_ARGUMENT;
    j->r = new_load_row(b, j->name, arch, j->shape, ordinal >= 0);
    if (!j->r)
        return -1;
    int st = kdt_shape_parse(j->id, j->shape, j->vals);
    if (st) {
        problem(j->r, "shape: %s", kdtree_last_error());
        return st;
    }
    if (ordinal < 0) {
        snprintf(j->target, sizeof j->target, "%s", arch);
        j->kind = kind_of_target(arch);
        return 0;
    }
    /* What the bench's runtime builds for: its explicit target
     * (KDTREE_TARGET, or the one it was created for), else the device's
     * choice; so the load path and the resources a row reports are those
     * of the kernels the row's GPU timings ran. */
    st = kdt_runtime_resolve_target(b->rt);
    if (st) {
        problem(j->r, "target: %s", kdtree_last_error());
        return st;
    }
    snprintf(j->target, sizeof j->target, "%s", b->rt->target.name);
    j->kind = b->rt->target.kind;
    snprintf(j->r->arch, sizeof j->r->arch, "%s", j->target);
    return 0;
}

/* Runs a started job in the load path's own cache environment. */
static int
run_job(load_job *j)
{
    bench_ctx *b = j->b;
    load_row *r = j->r;
    int gpu = j->ordinal >= 0, st;
    saved_env env;
    env_isolate(&env);
    warm_nvrtc(b, r, j->id, j->vals, j->target, j->kind);
    st = measure_cold_warm(j, b->quick ? 1 : gpu ? 7 : 3, b->quick ? 5 : 21);
    if (!st && gpu)
        st = measure_hot(j);
    if (!st)
        read_resources(r, j->id, j->vals, j->target, j->kind);
    if (j->dir) {
        rm_tree(j->dir);
        free(j->dir);
    }
    kdt_cache_memory_clear();
    env_restore(&env);
    fprintf(stderr, "kdtree-bench: %s %-12s %-7s cold %.1f ms (bare NVRTC "
            "%.1f ms) warm %.3f ms", gpu ? "load" : "compile", j->name,
            r->arch, r->cold.median, r->bare.median, r->warm.median);
    if (gpu)
        fprintf(stderr, " hot %.3f us", r->hot_find_us);
    fprintf(stderr, "%s%s\n", r->problem[0] ? ": " : "", r->problem);
    return st;
}

/* The load rows of kernel `index`: its default shape, then the shapes
 * load_shapes[] lists for it, each through the runtime on `ordinal`
 * (-1: compile-only for `arch`).  The first failure is returned; every
 * row is measured. */
static int
load_rows(bench_ctx *b, int index, const char *arch, int ordinal)
{
    const char *name = kdtree_kernel_name(index);
    int fail = 0;
    for (int i = -1; i < (int)(sizeof load_shapes / sizeof load_shapes[0]);
         i++) {
        load_job j;
        if (i >= 0 && (!name || strcmp(load_shapes[i].kernel, name) != 0))
            continue;
        int st = start_job(b, &j, index, i < 0 ? NULL : load_shapes[i].shape,
                           arch, ordinal);
        if (st < 0)
            break; /* no room for more rows */
        if (!st)
            st = run_job(&j);
        if (st && !fail)
            fail = st;
    }
    return fail;
}

int
bench_load_gpu(bench_ctx *b, int index)
{
    if (!b->rt)
        return KDTREE_ERROR_INVALID_ARGUMENT;
    return load_rows(b, index, kdtree_runtime_arch(b->rt), b->rt->ordinal);
}

int
bench_load_compile(bench_ctx *b, int index, const char *arch)
{
    return load_rows(b, index, arch, -1);
}
