/*
 * tools/cache_explain.c: kdtree-cache explain: the key a lookup would use,
 * whether it hits, and which preimage fields differ from the nearest
 * entry when it does not.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/key.h"
#include "cache_entries.h"
#include "cache_explain.h"
#include "cache_tool.h"
#include "cuda/nvrtc.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "kdtree.h"

/* ---- explain ------------------------------------------------------------ */

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
    size_t i = 0, line = 1, ls, le_w, le_h;
    size_t m = want->value_len < have->value_len ? want->value_len
                                                 : have->value_len;
    while (i < m && want->value[i] == have->value[i]) {
        if (want->value[i] == '\n')
            line++;
        i++;
    }
    ls = i;
    while (ls > 0 && want->value[ls - 1] != '\n')
        ls--;
    for (le_w = i; le_w < want->value_len && want->value[le_w] != '\n';)
        le_w++;
    for (le_h = i; le_h < have->value_len && have->value[le_h] != '\n';)
        le_h++;
    printf("    wanted %zu bytes, entry %zu bytes; first difference at "
           "line %zu:\n", want->value_len, have->value_len, line);
    printf("    wanted: %.*s\n    entry:  %.*s\n",
           (int)(le_w - ls > 160 ? 160 : le_w - ls), want->value + ls,
           (int)(le_h - ls > 160 ? 160 : le_h - ls), have->value + ls);
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
    int d = 0;

    for (int i = 0; i < a->n_fields; i++) {
        const field *f = &a->fields[i];
        const field *o = kdt_tool_find_field(b, f->label, f->label_len);
        if (!field_equal(f, o)) {
            d++;
            if (print)
                print_field_diff(f->label, f->label_len, f, o);
        }
    }
    for (int i = 0; i < b->n_fields; i++) {
        const field *f = &b->fields[i];
        if (!kdt_tool_find_field(a, f->label, f->label_len)) {
            d++;
            if (print)
                print_field_diff(f->label, f->label_len, NULL, f);
        }
    }
    return d;
}

static int
kernel_is(const entry *e, const char *kernel)
{
    const field *f = kdt_tool_find_field(e, "kernel", 6);

    return f && f->value_len == strlen(kernel)
           && memcmp(f->value, kernel, f->value_len) == 0;
}

/* Without NVRTC: the NVRTC version of the newest entry of `kernel`, or
 * NULL. */
static const entry *
newest_of(const collection *c, const char *kernel)
{
    const entry *newest = NULL;

    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].ok && kernel_is(&c->v[i], kernel)
            && kdt_tool_find_field(&c->v[i], "nvrtc", 5)
            && (!newest
                || c->v[i].file.mtime.tv_sec >= newest->file.mtime.tv_sec))
            newest = &c->v[i];
    return newest;
}

/* The entry the wanted preimage is nearest to: same kernel first, then
 * fewest differing fields, then newest. */
static const entry *
nearest(const collection *c, const entry *want, const char *kernel,
        int *best_d)
{
    const entry *best = NULL;

    *best_d = 1 << 30;
    for (size_t i = 0; i < c->n; i++) {
        const entry *e = &c->v[i];
        if (!e->ok || e->view.kind == KDT_PAYLOAD_ALIAS)
            continue;
        int d = count_diffs(want, e, 0);
        int same = kernel_is(e, kernel);
        int best_same = best && kernel_is(best, kernel);
        if (!best || same > best_same || (same == best_same && d < *best_d)
            || (same == best_same && d == *best_d
                && e->file.mtime.tv_sec > best->file.mtime.tv_sec)) {
            best = e;
            *best_d = d;
        }
    }
    return best;
}

/* The key of the lookup explain asks about; NVRTC's version when it is
 * not given: the loaded NVRTC's, else the newest matching entry's. */
static int
explain_key(const collection *c, int id, const int64_t *vals,
            const char *kernel, const char *arch, const char *nvrtc,
            kdt_preimage *pre, kdt_key *key)
{
    char buf[128];
    int st = kdt_kernel_key(id, vals, arch, nvrtc, pre, key);

    if (st == KDTREE_ERROR_NO_COMPILER && !nvrtc) {
        const entry *newest = newest_of(c, kernel);
        if (!newest) {
            fprintf(stderr, "kdtree-cache: NVRTC is not available and no "
                    "entry of %s names a version; pass --nvrtc VERSION\n",
                    kernel);
            return EXIT_CACHE;
        }
        kdt_tool_field_text(newest, "nvrtc", buf, sizeof buf);
        printf("NVRTC is not available; assuming NVRTC \"%s\" (newest "
               "entry's)\n", buf);
        st = kdt_kernel_key(id, vals, arch, buf, pre, key);
    }
    if (st) {
        fprintf(stderr, "kdtree-cache: %s\n", kdtree_last_error());
        return st == KDTREE_ERROR_SHAPE || st == KDTREE_ERROR_ARCH
                   ? EXIT_USAGE : EXIT_CACHE;
    }
    return EXIT_OK;
}

int
kdt_tool_explain(const char *kernel, const char *shape, const char *arch,
            const char *nvrtc)
{
    int64_t vals[KDT_MAX_CONSTS] = { 0 };
    char hex[33];
    collection c;
    kdt_preimage pre;
    kdt_key key;
    entry want;
    int id, kind, st, best_d;

    id = kdt_kernel_find(kernel);
    if (id < 0)
        return kdt_tool_usage_error("no kernel named '%s'", kernel);
    if (kdt_target_parse(arch, &kind, NULL) < 0)
        return kdt_tool_usage_error("--arch %s: not of the form sm_XY or compute_XY "
                           "(e.g. sm_90a, sm_120)", arch);
    if (!shape)
        shape = kdtree_kernel_default_shape(kernel);
    if (kdt_shape_parse(id, shape, vals) != 0)
        return kdt_tool_usage_error("%s", kdtree_last_error());
    if (kdt_tool_collect(1, &c) != 0)
        return EXIT_CACHE;
    st = explain_key(&c, id, vals, kernel, arch, nvrtc, &pre, &key);
    if (st != EXIT_OK) {
        kdt_tool_entries_free(&c);
        return st;
    }
    kdt_key_hex(&key, hex);
    memset(&want, 0, sizeof want);
    kdt_tool_parse_fields(pre.text, pre.len, want.fields, &want.n_fields);
    printf("%s %s for %s: key %s\n", kernel, shape, arch, hex);
    st = EXIT_NO;
    /* Where the library would look, in its order. */
    for (size_t i = 0; st == EXIT_NO && i < c.n; i++) {
        if (strncmp(c.v[i].file.name, hex, 32) != 0)
            continue;
        if (c.v[i].ok) {
            printf("hit: %s (%s)\n", c.v[i].path, c.v[i].layer);
            st = EXIT_OK;
        } else {
            printf("entry %s exists but is rejected: %s\n", c.v[i].path,
                   c.v[i].why);
        }
    }
    if (st == EXIT_NO) {
        const entry *best = nearest(&c, &want, kernel, &best_d);
        if (!best) {
            printf("miss: the cache holds no entry to compare with\n");
        } else {
            printf("miss: nearest entry %s (%s), %d field%s differ%s:\n",
                   best->path, best->layer, best_d, best_d == 1 ? "" : "s",
                   best_d == 1 ? "s" : "");
            count_diffs(&want, best, 1);
        }
    }
    kdt_tool_entries_free(&c);
    kdt_preimage_free(&pre);
    return st;
}

