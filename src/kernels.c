/*
 * kernels.c: the kernel registry, shapes (parse, check, format), the cache
 * key of a specialisation, and the miss path that obtains its compiled
 * blob: memory -> read-only layers -> user cache -> NVRTC -> publish.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "error.h"
#include "kernels.h"
#include "compiler.h"

static const kdt_kernel_def *const defs[KDT_KERNEL_COUNT] = {
    [KDT_KERNEL_DRAFT_TOPK] = &kdt_def_draft_topk,
    [KDT_KERNEL_BUILD_DDTREE] = &kdt_def_build_ddtree,
    [KDT_KERNEL_VERIFY_ATTN] = &kdt_def_verify_attn,
    [KDT_KERNEL_TREE_ACCEPT] = &kdt_def_tree_accept,
};

const kdt_kernel_def *
kdt_kernel_def_get(int id)
{
    return id >= 0 && id < KDT_KERNEL_COUNT ? defs[id] : NULL;
}

int
kdt_kernel_find(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < KDT_KERNEL_COUNT; i++)
        if (strcmp(defs[i]->name, name) == 0)
            return i;
    return -1;
}

/* "V=1..16777216, K=1..1024, DTYPE=f32|bf16" */
static void
format_ranges(const kdt_kernel_def *d, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < d->n_consts && used < size; i++) {
        const kdt_const_def *c = &d->consts[i];
        int m;
        if (c->names) {
            m = snprintf(out + used, size - used, "%s%s=", i ? ", " : "",
                         c->name);
            for (int j = 0; c->names[j] && m >= 0 && used + (size_t)m < size;
                 j++)
                m += snprintf(out + used + m, size - used - m, "%s%s",
                              j ? "|" : "", c->names[j]);
        } else {
            m = snprintf(out + used, size - used,
                         "%s%s=%" PRId64 "..%" PRId64, i ? ", " : "", c->name,
                         c->min, c->max);
        }
        if (m < 0)
            break;
        used += (size_t)m;
    }
}

int
kdt_kernel_check(int id, const int64_t *vals)
{
    const kdt_kernel_def *d = defs[id];
    for (int i = 0; i < d->n_consts; i++) {
        const kdt_const_def *c = &d->consts[i];
        if (vals[i] < c->min || vals[i] > c->max)
            return kdt_fail(KDTREE_ERROR_SHAPE,
                            "%s: constant %s = %" PRId64
                            " is outside its range %" PRId64 "..%" PRId64,
                            d->name, c->name, vals[i], c->min, c->max);
    }
    return d->check ? d->check(vals) : KDTREE_OK;
}

int
kdt_shape_parse(int id, const char *shape, int64_t *vals)
{
    const kdt_kernel_def *d = defs[id];
    int seen[KDT_MAX_CONSTS] = {0};
    char ranges[256];
    format_ranges(d, ranges, sizeof ranges);
    if (!shape)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: shape is NULL (expected e.g. \"%s\")", d->name,
                        d->default_shape);
    const char *p = shape;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *eq = strchr(p, '=');
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (!eq || eq > end)
            return kdt_fail(KDTREE_ERROR_UNKNOWN_KERNEL,
                            "%s: shape \"%s\": expected NAME=VALUE pairs "
                            "separated by commas (%s)",
                            d->name, shape, ranges);
        size_t nlen = (size_t)(eq - p);
        while (nlen && p[nlen - 1] == ' ')
            nlen--;
        int which = -1;
        for (int i = 0; i < d->n_consts; i++)
            if (strlen(d->consts[i].name) == nlen &&
                strncmp(d->consts[i].name, p, nlen) == 0)
                which = i;
        if (which < 0)
            return kdt_fail(KDTREE_ERROR_UNKNOWN_KERNEL,
                            "%s: shape \"%s\": unknown constant \"%.*s\"; "
                            "the kernel takes %s",
                            d->name, shape, (int)nlen, p, ranges);
        if (seen[which]++)
            return kdt_fail(KDTREE_ERROR_UNKNOWN_KERNEL,
                            "%s: shape \"%s\": %s given twice", d->name,
                            shape, d->consts[which].name);
        const char *v = eq + 1;
        while (*v == ' ')
            v++;
        size_t vlen = (size_t)(end - v);
        while (vlen && v[vlen - 1] == ' ')
            vlen--;
        const kdt_const_def *c = &d->consts[which];
        int found = 0;
        for (int j = 0; c->names && c->names[j]; j++)
            if (strlen(c->names[j]) == vlen &&
                strncmp(c->names[j], v, vlen) == 0) {
                vals[which] = j;
                found = 1;
            }
        if (!found) {
            char buf[32];
            char *tail;
            if (vlen == 0 || vlen >= sizeof buf)
                goto bad_value;
            memcpy(buf, v, vlen);
            buf[vlen] = '\0';
            errno = 0;
            long long x = strtoll(buf, &tail, 10);
            if (errno || *tail)
                goto bad_value;
            vals[which] = x;
        }
        p = end;
        continue;
    bad_value:
        return kdt_fail(KDTREE_ERROR_UNKNOWN_KERNEL,
                        "%s: shape \"%s\": %s has no valid value (%s)",
                        d->name, shape, c->name, ranges);
    }
    for (int i = 0; i < d->n_consts; i++)
        if (!seen[i])
            return kdt_fail(KDTREE_ERROR_UNKNOWN_KERNEL,
                            "%s: shape \"%s\" lacks %s (%s)", d->name, shape,
                            d->consts[i].name, ranges);
    return kdt_kernel_check(id, vals);
}

void
kdt_shape_format(int id, const int64_t *vals, char *out, size_t size)
{
    const kdt_kernel_def *d = defs[id];
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < d->n_consts && used < size; i++) {
        const kdt_const_def *c = &d->consts[i];
        int m;
        if (c->names && vals[i] >= 0 && vals[i] <= c->max)
            m = snprintf(out + used, size - used, "%s%s=%s", i ? "," : "",
                         c->name, c->names[vals[i]]);
        else
            m = snprintf(out + used, size - used, "%s%s=%" PRId64,
                         i ? "," : "", c->name, vals[i]);
        if (m < 0)
            break;
        used += (size_t)m;
    }
}

/* ---- the key ------------------------------------------------------------ */

/* NVRTC options, in the order they are given; part of the key. */
typedef struct options {
    int n;
    const char *argv[4 + KDT_MAX_CONSTS];
    char arch[32];
    char defs[KDT_MAX_CONSTS][48];
} options;

static void
build_options(int id, const int64_t *vals, const char *target, options *o)
{
    const kdt_kernel_def *d = defs[id];
    o->n = 0;
    o->argv[o->n++] = "-std=c++17";
    snprintf(o->arch, sizeof o->arch, "-arch=%s", target);
    o->argv[o->n++] = o->arch;
    /* Line info costs nothing at run time and lets compute-sanitizer and
     * profilers point at kernel source lines. */
    o->argv[o->n++] = "-lineinfo";
    for (int i = 0; i < d->n_consts; i++) {
        snprintf(o->defs[i], sizeof o->defs[i], "-DKDT_%s=%" PRId64,
                 d->consts[i].name, vals[i]);
        o->argv[o->n++] = o->defs[i];
    }
}

/* The preimage in its fixed field order.  nvrtc == NULL leaves the NVRTC
 * field out and marks the preimage as an alias's. */
static int
build_preimage(int id, const int64_t *vals, const char *target,
               const char *nvrtc, kdt_preimage *pre)
{
    const kdt_kernel_def *d = defs[id];
    char text[64];
    options o;
    kdt_preimage_init(pre);
    snprintf(text, sizeof text, "%d", KDT_CACHE_FORMAT);
    kdt_preimage_add_str(pre, "format", text);
    kdt_preimage_add_str(pre, "library", PACKAGE_VERSION);
    kdt_preimage_add_str(pre, "kernel", d->name);
    size_t len;
    const char *src = kdt_source_text(d->source, &len);
    if (!src) {
        kdt_preimage_free(pre);
        return kdt_fail(KDTREE_ERROR_INTERNAL,
                        "%s: source %s is not embedded", d->name, d->source);
    }
    kdt_preimage_add(pre, d->source, src, len);
    for (int i = 0; d->headers && d->headers[i]; i++) {
        const char *h = kdt_source_text(d->headers[i], &len);
        if (!h) {
            kdt_preimage_free(pre);
            return kdt_fail(KDTREE_ERROR_INTERNAL,
                            "%s: header %s is not embedded", d->name,
                            d->headers[i]);
        }
        kdt_preimage_add(pre, d->headers[i], h, len);
    }
    char shape[256];
    kdt_shape_format(id, vals, shape, sizeof shape);
    kdt_preimage_add_str(pre, "constants", shape);
    build_options(id, vals, target, &o);
    char opts[512] = "";
    size_t used = 0;
    for (int i = 0; i < o.n && used < sizeof opts; i++) {
        int m = snprintf(opts + used, sizeof opts - used, "%s%s",
                         i ? " " : "", o.argv[i]);
        if (m < 0)
            break;
        used += (size_t)m;
    }
    kdt_preimage_add_str(pre, "options", opts);
    kdt_preimage_add_str(pre, "target", target);
    if (nvrtc)
        kdt_preimage_add_str(pre, "nvrtc", nvrtc);
    else
        kdt_preimage_add_str(pre, "alias", "nvrtc");
    if (pre->failed) {
        kdt_preimage_free(pre);
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "building a cache key");
    }
    return KDTREE_OK;
}

int
kdt_kernel_key(int id, const int64_t *vals, const char *target,
               const char *nvrtc_version, kdt_preimage *pre, kdt_key *key)
{
    if (!nvrtc_version) {
        int st;
        const kdt_nvrtc *nv = kdt_nvrtc_get(&st);
        if (!nv)
            return st;
        nvrtc_version = kdt_nvrtc_version(nv);
    }
    int st = build_preimage(id, vals, target, nvrtc_version, pre);
    if (st)
        return st;
    *key = kdt_key_of(pre->text, pre->len);
    return KDTREE_OK;
}

/* ---- the miss path ------------------------------------------------------ */

static int
compile(const kdt_nvrtc *nv, int id, const int64_t *vals, const char *target,
        int kind, kdt_blob *out)
{
    const kdt_kernel_def *d = defs[id];
    const char *hsrc[16];
    const char *hname[16];
    int nh = 0;
    for (int i = 0; d->headers && d->headers[i] && nh < 16; i++) {
        hsrc[nh] = kdt_source_text(d->headers[i], NULL);
        hname[nh] = d->headers[i];
        nh++;
    }
    options o;
    build_options(id, vals, target, &o);
    const char *src = kdt_source_text(d->source, NULL);
    return kdt_nvrtc_compile(nv, src, d->source, nh, hsrc, hname, o.n, o.argv,
                             kind, out);
}

/* Without NVRTC the full key cannot be computed (it names the compiler's
 * build): read the alias written beside every entry to learn which NVRTC
 * built the newest one, then look that entry up. */
static int
obtain_without_compiler(int id, const int64_t *vals, const char *target,
                        int no_compiler, kdt_blob *out, int *from)
{
    const kdt_kernel_def *d = defs[id];
    char why[1024];
    snprintf(why, sizeof why, "%s", kdtree_last_error());
    kdt_preimage alias_pre, pre;
    int st = build_preimage(id, vals, target, NULL, &alias_pre);
    if (st)
        return st;
    kdt_key alias = kdt_key_of(alias_pre.text, alias_pre.len);
    kdt_blob version = {0};
    int a_from;
    st = kdt_cache_lookup(&alias, alias_pre.text, alias_pre.len, &version,
                          &a_from);
    kdt_preimage_free(&alias_pre);
    if (st < 0)
        return st;
    if (st == 1 && version.kind == KDT_PAYLOAD_ALIAS && version.size < 128) {
        char text[128];
        memcpy(text, version.data, version.size);
        text[version.size] = '\0';
        kdt_blob_free(&version);
        kdt_key key;
        st = kdt_kernel_key(id, vals, target, text, &pre, &key);
        if (st)
            return st;
        st = kdt_cache_lookup(&key, pre.text, pre.len, out, from);
        kdt_preimage_free(&pre);
        if (st < 0)
            return st;
        if (st == 1)
            return KDTREE_OK;
    } else {
        kdt_blob_free(&version);
    }
    char shape[256];
    kdt_shape_format(id, vals, shape, sizeof shape);
    return kdt_fail(no_compiler,
                    "%s (%s) for %s is not in any cache and cannot be "
                    "compiled: %s",
                    d->name, shape, target, why);
}

int
kdt_kernel_obtain(int id, const int64_t *vals, const char *target, int kind,
                  kdt_blob *out, int *from)
{
    int st;
    *from = KDT_FROM_NONE;
    const kdt_nvrtc *nv = kdt_nvrtc_get(&st);
    if (!nv)
        return obtain_without_compiler(id, vals, target, st, out, from);

    kdt_preimage pre;
    kdt_key key;
    st = kdt_kernel_key(id, vals, target, kdt_nvrtc_version(nv), &pre, &key);
    if (st)
        return st;
    st = kdt_cache_lookup(&key, pre.text, pre.len, out, from);
    if (st != 0) {
        kdt_preimage_free(&pre);
        return st < 0 ? st : KDTREE_OK;
    }
    /* A miss: one process of the node compiles, the others wait for its
     * entry (kdt_cache_lock_acquire), then look again. */
    kdt_cache_lock *lock = kdt_cache_lock_acquire(&key);
    if (lock) {
        st = kdt_cache_lookup(&key, pre.text, pre.len, out, from);
        if (st != 0) {
            kdt_cache_lock_release(lock);
            kdt_preimage_free(&pre);
            return st < 0 ? st : KDTREE_OK;
        }
    }
    st = compile(nv, id, vals, target, kind, out);
    if (st == KDTREE_OK) {
        /* The entry and its alias go into this process's memory now; their
         * disk publish, and the lock, go to the publishing thread, which
         * releases the lock once the entry is durable (cache_async.c): the
         * caller does not wait for the fsync, and a process waiting on the
         * lock still finds the whole entry. */
        kdt_cache_item items[2] = {{&key, pre.text, pre.len, out}};
        int n = 1;
        kdt_preimage alias_pre;
        kdt_key alias;
        kdt_blob vb;
        int have_alias = build_preimage(id, vals, target, NULL,
                                        &alias_pre) == 0;
        if (have_alias) {
            const char *v = kdt_nvrtc_version(nv);
            alias = kdt_key_of(alias_pre.text, alias_pre.len);
            vb = (kdt_blob){(void *)v, strlen(v), KDT_PAYLOAD_ALIAS};
            items[n++] = (kdt_cache_item){&alias, alias_pre.text,
                                          alias_pre.len, &vb};
        }
        st = kdt_cache_store_async(items, n, lock);
        lock = NULL; /* taken over */
        if (have_alias)
            kdt_preimage_free(&alias_pre);
        if (st != KDTREE_OK)
            kdt_blob_free(out);
    }
    if (lock)
        kdt_cache_lock_release(lock);
    kdt_preimage_free(&pre);
    return st;
}

/* ---- public registry queries -------------------------------------------- */

KDT_EXPORT int32_t
kdtree_kernel_count(void)
{
    return KDT_KERNEL_COUNT;
}

KDT_EXPORT const char *
kdtree_kernel_name(int32_t index)
{
    const kdt_kernel_def *d = kdt_kernel_def_get(index);
    return d ? d->name : NULL;
}

static char constants_text[KDT_KERNEL_COUNT][256];
static pthread_once_t constants_once = PTHREAD_ONCE_INIT;

static void
format_all_constants(void)
{
    for (int i = 0; i < KDT_KERNEL_COUNT; i++)
        format_ranges(defs[i], constants_text[i], sizeof constants_text[i]);
}

KDT_EXPORT const char *
kdtree_kernel_constants(const char *kernel)
{
    int id = kdt_kernel_find(kernel);
    if (id < 0)
        return NULL;
    pthread_once(&constants_once, format_all_constants);
    return constants_text[id];
}

KDT_EXPORT const char *
kdtree_kernel_default_shape(const char *kernel)
{
    int id = kdt_kernel_find(kernel);
    return id < 0 ? NULL : defs[id]->default_shape;
}
