/*
 * kdtree-cache: look after libkdtree's compiled-kernel cache.
 *
 *   kdtree-cache [--dir DIR] list [--all]
 *   kdtree-cache [--dir DIR] resources [--all]
 *   kdtree-cache [--dir DIR] verify [--all] [--delete]
 *   kdtree-cache [--dir DIR] explain KERNEL [SHAPE] [--arch A] [--nvrtc V]
 *   kdtree-cache [--dir DIR] populate [--arch "sm_90a sm_120"] [KERNEL[:SHAPE]]...
 *   kdtree-cache [--dir DIR] gc [--max-bytes N]
 *   kdtree-cache [--dir DIR] clear
 *
 * It works on the user's cache directory as the library would find it
 * (--dir overrides it, as KDTREE_CACHE_DIR does); --all adds the read-only
 * layers.  Exit codes, for scripts:
 *   0  done, nothing wrong (explain: the lookup would hit)
 *   1  the answer is "no": verify found bad entries, explain would miss,
 *      populate could not compile something
 *   2  usage error (unknown command, kernel or shape)
 *   3  the cache cannot be used (no directory, I/O error)
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/admin.h"
#include "base/error.h"
#include "kdtree.h"
#include "jit/cubin_info.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "cache/key.h"

enum { EXIT_OK = 0, EXIT_NO = 1, EXIT_USAGE = 2, EXIT_CACHE = 3 };

static const char usage_text[] =
    "usage: kdtree-cache [--dir DIR] COMMAND [ARGS]\n"
    "  list [--all]              entries: kernel, shape, target, size, last used\n"
    "  resources [--all]         per kernel function of each cubin: registers,\n"
    "                            stack (spills), static shared memory, bounds\n"
    "  verify [--all] [--delete] check every entry (exit 1 if any is bad)\n"
    "  explain KERNEL [SHAPE] [--arch A] [--nvrtc V]\n"
    "                            would this lookup hit? if not, which preimage\n"
    "                            field differs from the nearest entry\n"
    "  populate [--arch LIST] [KERNEL[:SHAPE]]...\n"
    "                            compile-only into the cache (default: every\n"
    "                            kernel's default shape for sm_90a sm_100 sm_120)\n"
    "  gc [--max-bytes N]        sweep temp files, drop bad entries, evict LRU\n"
    "  clear                     remove every entry of the user's cache\n"
    "--all: also the read-only layers (KDTREE_CACHE_PATH, the prebuilt one).\n"
    "exit: 0 ok, 1 bad entry / would miss / compile failed, 2 usage, 3 cache "
    "unusable\n";

static int
usage(void)
{
    fputs(usage_text, stderr);
    return EXIT_USAGE;
}

/* ---- entries ------------------------------------------------------------ */

typedef struct field {
    const char *label;
    size_t label_len;
    const char *value;
    size_t value_len;
} field;

/* One entry file, read and decoded (or not). */
typedef struct entry {
    char *path;
    const char *layer; /* "user" or the layer's directory */
    kdt_cache_file file;
    void *buf;
    size_t size;
    int ok;
    char why[200];
    kdt_entry_view view;
    field fields[64];
    int n_fields;
} entry;

static int
hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The key an entry's file name promises (names come from kdt_cache_scan,
 * so they are 32 lowercase hex digits). */
static kdt_key
key_of_name(const char *name)
{
    kdt_key k;
    int i;

    for (i = 0; i < 16; i++)
        k.bytes[i] = (uint8_t)(hex_val(name[2 * i]) << 4
                               | hex_val(name[2 * i + 1]));
    return k;
}

static void
load_entry(entry *e, int allow_root)
{
    kdt_key want = key_of_name(e->file.name);
    size_t pos = 0;
    int r;

    e->ok = 0;
    e->n_fields = 0;
    r = kdt_cache_read_file(e->path, allow_root, &e->buf, &e->size, e->why,
                            sizeof e->why);
    if (r == 1) {
        snprintf(e->why, sizeof e->why, "vanished");
        return;
    }
    if (r != 0) {
        if (r != -1)
            snprintf(e->why, sizeof e->why, "%s", kdtree_last_error());
        return;
    }
    if (kdt_entry_decode(e->buf, e->size, &want, &e->view, e->why,
                         sizeof e->why) != 0)
        return;
    e->ok = 1;
    while (e->n_fields < 64) {
        field *f = &e->fields[e->n_fields];
        if (kdt_preimage_next(e->view.preimage, e->view.preimage_len, &pos,
                              &f->label, &f->label_len, &f->value,
                              &f->value_len) != 1)
            break;
        e->n_fields++;
    }
}

static void
free_entries(entry *v, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        free(v[i].buf);
        free(v[i].path);
    }
    free(v);
}

/* Appends the entries of one base directory (user or layer). */
static int
collect(const char *base, const char *layer, int allow_root, entry **v,
        size_t *n)
{
    char *dir = kdt_cache_entry_dir(base);
    kdt_cache_file *f;
    size_t nf, i;

    if (!dir || kdt_cache_scan(dir, &f, &nf) != 0) {
        free(dir);
        return -1;
    }
    free(dir);
    if (nf) {
        entry *t = realloc(*v, (*n + nf) * sizeof **v);
        if (!t) {
            kdt_cache_scan_free(f, nf);
            return -1;
        }
        *v = t;
    }
    for (i = 0; i < nf; i++) {
        entry *e = &(*v)[*n + i];
        memset(e, 0, sizeof *e);
        e->file = f[i];
        e->path = f[i].path; /* ownership moves to the entry */
        e->layer = layer;
        load_entry(e, allow_root);
    }
    *n += nf;
    free(f); /* paths now belong to the entries */
    return 0;
}

/* Every entry: the user's directory, and with all, the layers first. */
static int
collect_all(int all, char ***layers, size_t *n_layers, entry **v, size_t *n)
{
    char *user = kdt_cache_user_dir();
    size_t i;

    *v = NULL;
    *n = 0;
    *layers = NULL;
    *n_layers = 0;
    if (all) {
        *layers = kdt_cache_layer_dirs(n_layers);
        for (i = 0; i < *n_layers; i++)
            if (collect((*layers)[i], (*layers)[i], 1, v, n) != 0)
                goto fail;
    }
    if (user && collect(user, "user", 0, v, n) != 0)
        goto fail;
    free(user);
    return 0;
fail:
    free(user);
    return -1;
}

static const field *
find_field(const entry *e, const char *label)
{
    int i;

    for (i = 0; i < e->n_fields; i++)
        if (e->fields[i].label_len == strlen(label)
            && memcmp(e->fields[i].label, label, e->fields[i].label_len) == 0)
            return &e->fields[i];
    return NULL;
}

static void
field_text(const entry *e, const char *label, char *out, size_t size)
{
    const field *f = find_field(e, label);
    size_t n;

    if (!f) {
        snprintf(out, size, "-");
        return;
    }
    n = f->value_len < size - 1 ? f->value_len : size - 1;
    memcpy(out, f->value, n);
    out[n] = '\0';
}

static const char *
kind_name(int kind)
{
    switch (kind) {
    case KDT_PAYLOAD_CUBIN: return "cubin";
    case KDT_PAYLOAD_PTX: return "ptx";
    case KDT_PAYLOAD_ALIAS: return "alias";
    default: return "?";
    }
}

static void
format_time(const struct timespec *t, char *out, size_t size)
{
    struct tm tm;
    time_t s = t->tv_sec;

    localtime_r(&s, &tm);
    strftime(out, size, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ---- commands ----------------------------------------------------------- */

static int
need_user_dir(void)
{
    char *u = kdt_cache_user_dir();

    if (!u) {
        fprintf(stderr, "kdtree-cache: no cache directory (KDTREE_CACHE=off, "
                "or no KDTREE_CACHE_DIR, XDG_CACHE_HOME or HOME)\n");
        return EXIT_CACHE;
    }
    free(u);
    return 0;
}

static int
cmd_list(int all)
{
    char **layers;
    size_t n_layers, n, i;
    entry *v;
    uint64_t total = 0;
    int st;

    if (!all && (st = need_user_dir()))
        return st;
    if (collect_all(all, &layers, &n_layers, &v, &n) != 0) {
        fprintf(stderr, "kdtree-cache: out of memory\n");
        return EXIT_CACHE;
    }
    printf("%-12s %-14s %-28s %-11s %-5s %9s  %-19s %s\n", "KEY", "KERNEL",
           "SHAPE", "TARGET", "KIND", "BYTES", "LAST USED", "WHERE");
    for (i = 0; i < n; i++) {
        char kernel[256], shape[128], target[32], when[32];
        entry *e = &v[i];

        format_time(&e->file.mtime, when, sizeof when);
        if (e->ok) {
            field_text(e, "kernel", kernel, sizeof kernel);
            field_text(e, "constants", shape, sizeof shape);
            field_text(e, "target", target, sizeof target);
        } else {
            snprintf(kernel, sizeof kernel, "(bad: %s)", e->why);
            shape[0] = target[0] = '\0';
        }
        printf("%-12.12s %-14s %-28s %-11s %-5s %9llu  %-19s %s\n",
               e->file.name, kernel, shape, target,
               e->ok ? kind_name(e->view.kind) : "-",
               (unsigned long long)e->file.size, when, e->layer);
        total += e->file.size;
    }
    printf("%zu entries, %llu bytes\n", n, (unsigned long long)total);
    free_entries(v, n);
    kdt_cache_free_dirs(layers, n_layers);
    return EXIT_OK;
}

/* What each cubin entry's kernels hold: the numbers a shape is tuned by
 * (a stack above 0 is local memory: spills, local arrays or calls). */
static int
cmd_resources(int all)
{
    char **layers;
    size_t n_layers, n, i;
    entry *v;
    int st, unreadable = 0;

    if (!all && (st = need_user_dir()))
        return st;
    if (collect_all(all, &layers, &n_layers, &v, &n) != 0) {
        fprintf(stderr, "kdtree-cache: out of memory\n");
        return EXIT_CACHE;
    }
    printf("%-12s %-14s %-28s %-8s %-24s %5s %6s %7s %7s %8s\n", "KEY",
           "KERNEL", "SHAPE", "TARGET", "FUNCTION", "REGS", "STACK",
           "SHARED", "PARAMS", "THREADS");
    for (i = 0; i < n; i++) {
        char kernel[256], shape[128], target[32], why[200];
        kdt_cubin_kernel k[8];
        entry *e = &v[i];
        int nk = 0;

        if (!e->ok || e->view.kind != KDT_PAYLOAD_CUBIN)
            continue;
        field_text(e, "kernel", kernel, sizeof kernel);
        field_text(e, "constants", shape, sizeof shape);
        field_text(e, "target", target, sizeof target);
        if (kdt_cubin_kernels(e->view.payload, e->view.payload_size, k, 8,
                              &nk, why, sizeof why) != 0) {
            printf("%-12.12s %-14s %-28s %-8s (unreadable: %s)\n",
                   e->file.name, kernel, shape, target, why);
            unreadable++;
            continue;
        }
        for (int f = 0; f < nk && f < 8; f++)
            printf("%-12.12s %-14s %-28s %-8s %-24s %5u %6u %7u %7u %8u\n",
                   e->file.name, kernel, shape, target, k[f].name,
                   k[f].registers, k[f].stack_bytes, k[f].shared_bytes,
                   k[f].param_bytes, k[f].max_threads);
    }
    printf("STACK: bytes of local memory a thread uses (0: no spills); "
           "SHARED: static, with\nthe 1 KB the system reserves (dynamic "
           "shared memory is set at launch); THREADS:\n__launch_bounds__ "
           "(0: none)\n");
    free_entries(v, n);
    kdt_cache_free_dirs(layers, n_layers);
    return unreadable ? EXIT_NO : EXIT_OK;
}

static int
cmd_verify(int all, int del)
{
    char **layers;
    size_t n_layers, n, i, bad = 0;
    entry *v;
    int st;

    if (!all && (st = need_user_dir()))
        return st;
    if (collect_all(all, &layers, &n_layers, &v, &n) != 0) {
        fprintf(stderr, "kdtree-cache: out of memory\n");
        return EXIT_CACHE;
    }
    for (i = 0; i < n; i++) {
        if (v[i].ok)
            continue;
        bad++;
        printf("bad: %s: %s", v[i].path, v[i].why);
        if (del && strcmp(v[i].layer, "user") == 0) {
            if (unlink(v[i].path) == 0)
                printf(" (deleted)");
            else
                printf(" (cannot delete: %s)", strerror(errno));
        }
        printf("\n");
    }
    printf("%zu entries checked, %zu bad\n", n, bad);
    free_entries(v, n);
    kdt_cache_free_dirs(layers, n_layers);
    return bad ? EXIT_NO : EXIT_OK;
}

/* Prints how one field differs: short values in full, long ones (sources)
 * by size and first differing line. */
static void
print_field_diff(const char *label, size_t label_len, const field *want,
                 const field *have)
{
    printf("  %.*s:\n", (int)label_len, label);
    if (!want || !have) {
        const field *f = want ? want : have;
        printf("    %s only (%zu bytes)\n", want ? "wanted" : "entry",
               f->value_len);
        return;
    }
    if (want->value_len <= 100 && have->value_len <= 100
        && !memchr(want->value, '\n', want->value_len)
        && !memchr(have->value, '\n', have->value_len)) {
        printf("    wanted: %.*s\n    entry:  %.*s\n", (int)want->value_len,
               want->value, (int)have->value_len, have->value);
        return;
    }
    {
        size_t i = 0, line = 1, ls_w, ls_h, le_w, le_h;
        size_t m = want->value_len < have->value_len ? want->value_len
                                                     : have->value_len;
        while (i < m && want->value[i] == have->value[i]) {
            if (want->value[i] == '\n')
                line++;
            i++;
        }
        ls_w = i;
        while (ls_w > 0 && want->value[ls_w - 1] != '\n')
            ls_w--;
        ls_h = ls_w;
        for (le_w = i; le_w < want->value_len && want->value[le_w] != '\n';)
            le_w++;
        for (le_h = i; le_h < have->value_len && have->value[le_h] != '\n';)
            le_h++;
        printf("    wanted %zu bytes, entry %zu bytes; first difference at "
               "line %zu:\n", want->value_len, have->value_len, line);
        printf("    wanted: %.*s\n    entry:  %.*s\n",
               (int)(le_w - ls_w > 160 ? 160 : le_w - ls_w), want->value + ls_w,
               (int)(le_h - ls_h > 160 ? 160 : le_h - ls_h), have->value + ls_h);
    }
}

static int
field_equal(const field *a, const field *b)
{
    return a && b && a->value_len == b->value_len
           && memcmp(a->value, b->value, a->value_len) == 0;
}

/* Fields of `b` that differ from (or are missing in) `a`, both ways. */
static int
count_diffs(const entry *a, const entry *b, int print)
{
    int i, d = 0;

    for (i = 0; i < a->n_fields; i++) {
        char label[80];
        const field *o;
        snprintf(label, sizeof label, "%.*s", (int)a->fields[i].label_len,
                 a->fields[i].label);
        o = find_field(b, label);
        if (!field_equal(&a->fields[i], o)) {
            d++;
            if (print)
                print_field_diff(a->fields[i].label, a->fields[i].label_len,
                                 &a->fields[i], o);
        }
    }
    for (i = 0; i < b->n_fields; i++) {
        char label[80];
        snprintf(label, sizeof label, "%.*s", (int)b->fields[i].label_len,
                 b->fields[i].label);
        if (!find_field(a, label)) {
            d++;
            if (print)
                print_field_diff(b->fields[i].label, b->fields[i].label_len,
                                 NULL, &b->fields[i]);
        }
    }
    return d;
}

static int
cmd_explain(const char *kernel, const char *shape, const char *arch,
            const char *nvrtc)
{
    int64_t vals[KDT_MAX_CONSTS] = { 0 };
    char **layers, hex[33], nvrtc_buf[128];
    size_t n_layers, n, i;
    kdt_preimage pre;
    kdt_key key;
    entry want, *v, *best = NULL;
    int id, st, best_d = 1 << 30;

    id = kdt_kernel_find(kernel);
    if (id < 0) {
        fprintf(stderr, "kdtree-cache: no kernel named '%s'\n", kernel);
        return EXIT_USAGE;
    }
    if (!shape)
        shape = kdtree_kernel_default_shape(kernel);
    if (kdt_shape_parse(id, shape, vals) != 0) {
        fprintf(stderr, "kdtree-cache: %s\n", kdtree_last_error());
        return EXIT_USAGE;
    }
    if (collect_all(1, &layers, &n_layers, &v, &n) != 0) {
        fprintf(stderr, "kdtree-cache: out of memory\n");
        return EXIT_CACHE;
    }
    st = kdt_kernel_key(id, vals, arch, nvrtc, &pre, &key);
    if (st == KDTREE_ERROR_NO_COMPILER && !nvrtc) {
        /* No NVRTC here: assume the version of the newest entry of this
         * kernel, and say so. */
        const entry *newest = NULL;
        for (i = 0; i < n; i++) {
            char k[64];
            if (!v[i].ok)
                continue;
            field_text(&v[i], "kernel", k, sizeof k);
            if (strcmp(k, kernel) == 0 && find_field(&v[i], "nvrtc")
                && (!newest || v[i].file.mtime.tv_sec
                                   >= newest->file.mtime.tv_sec))
                newest = &v[i];
        }
        if (!newest) {
            fprintf(stderr, "kdtree-cache: NVRTC is not available and no "
                    "entry of %s names a version; pass --nvrtc VERSION\n",
                    kernel);
            free_entries(v, n);
            kdt_cache_free_dirs(layers, n_layers);
            return EXIT_CACHE;
        }
        field_text(newest, "nvrtc", nvrtc_buf, sizeof nvrtc_buf);
        nvrtc = nvrtc_buf;
        printf("NVRTC is not available; assuming NVRTC \"%s\" (newest "
               "entry's)\n", nvrtc);
        st = kdt_kernel_key(id, vals, arch, nvrtc, &pre, &key);
    }
    if (st) {
        fprintf(stderr, "kdtree-cache: %s\n", kdtree_last_error());
        free_entries(v, n);
        kdt_cache_free_dirs(layers, n_layers);
        return st == KDTREE_ERROR_SHAPE || st == KDTREE_ERROR_ARCH ? EXIT_USAGE
                                                                   : EXIT_CACHE;
    }
    kdt_key_hex(&key, hex);
    memset(&want, 0, sizeof want);
    {
        size_t pos = 0;
        while (want.n_fields < 64
               && kdt_preimage_next(pre.text, pre.len, &pos,
                                    &want.fields[want.n_fields].label,
                                    &want.fields[want.n_fields].label_len,
                                    &want.fields[want.n_fields].value,
                                    &want.fields[want.n_fields].value_len)
                      == 1)
            want.n_fields++;
    }
    printf("%s %s for %s: key %s\n", kernel, shape, arch, hex);
    /* Where the library would look, in its order. */
    for (i = 0; i < n; i++) {
        if (strncmp(v[i].file.name, hex, 32) != 0)
            continue;
        if (v[i].ok) {
            printf("hit: %s (%s)\n", v[i].path, v[i].layer);
            free_entries(v, n);
            kdt_cache_free_dirs(layers, n_layers);
            kdt_preimage_free(&pre);
            return EXIT_OK;
        }
        printf("entry %s exists but is rejected: %s\n", v[i].path, v[i].why);
    }
    for (i = 0; i < n; i++) {
        int d;
        if (!v[i].ok || v[i].view.kind == KDT_PAYLOAD_ALIAS)
            continue;
        d = count_diffs(&want, &v[i], 0);
        /* Same kernel first, then fewest differing fields, then newest. */
        {
            char k[64], bk[64];
            field_text(&v[i], "kernel", k, sizeof k);
            if (best)
                field_text(best, "kernel", bk, sizeof bk);
            int same = strcmp(k, kernel) == 0;
            int best_same = best && strcmp(bk, kernel) == 0;
            if (!best || same > best_same
                || (same == best_same && d < best_d)
                || (same == best_same && d == best_d
                    && v[i].file.mtime.tv_sec > best->file.mtime.tv_sec)) {
                best = &v[i];
                best_d = d;
            }
        }
    }
    if (!best) {
        printf("miss: the cache holds no entry to compare with\n");
    } else {
        printf("miss: nearest entry %s (%s), %d field%s differ%s:\n",
               best->path, best->layer, best_d, best_d == 1 ? "" : "s",
               best_d == 1 ? "s" : "");
        count_diffs(&want, best, 1);
    }
    free_entries(v, n);
    kdt_cache_free_dirs(layers, n_layers);
    kdt_preimage_free(&pre);
    return EXIT_NO;
}

static int
populate_one(const char *arch, const char *kernel, const char *shape)
{
    int32_t cached = 0;
    double t0 = kdt_now_ms();
    int st = kdtree_compile(&cached, arch, kernel, shape);

    if (st) {
        printf("populate: %-7s %-14s %-28s FAILED: %s: %s\n", arch, kernel,
               shape, kdtree_status_name(st), kdtree_last_error());
        fflush(stdout);
        return st == KDTREE_ERROR_UNKNOWN_KERNEL || st == KDTREE_ERROR_SHAPE
                       || st == KDTREE_ERROR_SHAPE_STRING
                       || st == KDTREE_ERROR_ARCH
                   ? EXIT_USAGE : EXIT_NO;
    }
    printf("populate: %-7s %-14s %-28s %s in %.0f ms\n", arch, kernel, shape,
           cached ? "already cached" : "compiled", kdt_now_ms() - t0);
    fflush(stdout);
    return EXIT_OK;
}

static int
cmd_populate(const char *archs, char **items, int n_items)
{
    char *list = strdup(archs), *save = NULL, *a;
    int worst = EXIT_OK, i, r;

    if (!list)
        return EXIT_CACHE;
    if (kdt_cache_mode() != KDT_CACHE_READWRITE)
        fprintf(stderr, "kdtree-cache: KDTREE_CACHE is not readwrite: "
                "nothing will be written\n");
    for (a = strtok_r(list, ", ", &save); a; a = strtok_r(NULL, ", ", &save)) {
        if (n_items == 0) {
            int32_t k;
            for (k = 0; k < kdtree_kernel_count(); k++) {
                const char *name = kdtree_kernel_name(k);
                r = populate_one(a, name, kdtree_kernel_default_shape(name));
                if (r > worst)
                    worst = r;
            }
        }
        for (i = 0; i < n_items; i++) {
            char kernel[128];
            const char *colon = strchr(items[i], ':'), *shape;
            size_t kl = colon ? (size_t)(colon - items[i]) : strlen(items[i]);
            snprintf(kernel, sizeof kernel, "%.*s", (int)kl, items[i]);
            shape = colon ? colon + 1 : kdtree_kernel_default_shape(kernel);
            if (!shape) {
                fprintf(stderr, "kdtree-cache: no kernel named '%s'\n",
                        kernel);
                worst = EXIT_USAGE;
                continue;
            }
            r = populate_one(a, kernel, shape);
            if (r > worst)
                worst = r;
        }
    }
    free(list);
    return worst;
}

static int
cmd_gc(const char *max_bytes)
{
    char *user, *dir;
    kdt_cache_file *f;
    size_t n, i;
    uint64_t cap, left;
    int swept, bad = 0, evicted;

    if (max_bytes)
        setenv("KDTREE_CACHE_MAX_BYTES", max_bytes, 1);
    if ((i = (size_t)need_user_dir()))
        return (int)i;
    user = kdt_cache_user_dir();
    dir = kdt_cache_entry_dir(user);
    free(user);
    if (!dir)
        return EXIT_CACHE;
    swept = kdt_cache_sweep_temps(dir, KDT_CACHE_TEMP_STALE_S);
    if (kdt_cache_scan(dir, &f, &n) != 0) {
        free(dir);
        return EXIT_CACHE;
    }
    for (i = 0; i < n; i++) {
        entry e;
        memset(&e, 0, sizeof e);
        e.path = f[i].path;
        e.file = f[i];
        load_entry(&e, 0);
        if (!e.ok && unlink(f[i].path) == 0) {
            printf("gc: removed bad entry %s: %s\n", f[i].name, e.why);
            bad++;
        }
        free(e.buf);
    }
    kdt_cache_scan_free(f, n);
    cap = kdt_cache_max_bytes();
    evicted = kdt_cache_evict(dir, cap, NULL, &left);
    printf("gc: %d stale temp files, %d bad entries, %d evicted (cap %llu "
           "bytes); %llu bytes left in %s\n", swept, bad, evicted,
           (unsigned long long)cap, (unsigned long long)left, dir);
    free(dir);
    return EXIT_OK;
}

static int
cmd_clear(void)
{
    char *user, *dir;
    kdt_cache_file *f;
    size_t n, i;
    int removed = 0, failed = 0;

    if ((i = (size_t)need_user_dir()))
        return (int)i;
    user = kdt_cache_user_dir();
    dir = kdt_cache_entry_dir(user);
    free(user);
    if (!dir || kdt_cache_scan(dir, &f, &n) != 0) {
        free(dir);
        return EXIT_CACHE;
    }
    for (i = 0; i < n; i++) {
        if (unlink(f[i].path) == 0)
            removed++;
        else if (errno != ENOENT)
            failed++;
    }
    kdt_cache_scan_free(f, n);
    /* Temp files of live writers are theirs; only stale ones go. */
    kdt_cache_sweep_temps(dir, KDT_CACHE_TEMP_STALE_S);
    printf("clear: removed %d entries from %s\n", removed, dir);
    free(dir);
    return failed ? EXIT_CACHE : EXIT_OK;
}

int
main(int argc, char **argv)
{
    const char *cmd, *arch = NULL, *nvrtc = NULL, *max_bytes = NULL;
    char *pos[64];
    int all = 0, del = 0, n_pos = 0, i;

    i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--dir") == 0) {
        setenv("KDTREE_CACHE_DIR", argv[i + 1], 1);
        i += 2;
    }
    if (i >= argc)
        return usage();
    cmd = argv[i++];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--all") == 0)
            all = 1;
        else if (strcmp(argv[i], "--delete") == 0)
            del = 1;
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc)
            arch = argv[++i];
        else if (strcmp(argv[i], "--nvrtc") == 0 && i + 1 < argc)
            nvrtc = argv[++i];
        else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
            max_bytes = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1] == '-')
            return usage();
        else if (n_pos < 64)
            pos[n_pos++] = argv[i];
        else
            return usage();
    }
    if (strcmp(cmd, "list") == 0 && n_pos == 0)
        return cmd_list(all);
    if (strcmp(cmd, "resources") == 0 && n_pos == 0)
        return cmd_resources(all);
    if (strcmp(cmd, "verify") == 0 && n_pos == 0)
        return cmd_verify(all, del);
    if (strcmp(cmd, "explain") == 0 && (n_pos == 1 || n_pos == 2))
        return cmd_explain(pos[0], n_pos == 2 ? pos[1] : NULL,
                           arch ? arch : "sm_90a", nvrtc);
    if (strcmp(cmd, "populate") == 0)
        return cmd_populate(arch ? arch : "sm_90a sm_100 sm_120", pos, n_pos);
    if (strcmp(cmd, "gc") == 0 && n_pos == 0)
        return cmd_gc(max_bytes);
    if (strcmp(cmd, "clear") == 0 && n_pos == 0)
        return cmd_clear();
    return usage();
}
