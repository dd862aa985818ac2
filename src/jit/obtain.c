/*
 * jit/obtain.c: the cache key of a specialisation (kernel, constants, target)
 * and the miss path that obtains its compiled blob: target check -> memory
 * -> read-only layers -> user cache -> (per-key lock) -> NVRTC ->
 * background publish.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cache/cache.h"
#include "cache/entry.h"
#include "cache/settings.h"
#include "cuda/nvrtc.h"
#include "jit/failures.h"
#include "jit/obtain.h"
#include "jit/registry.h"
#include "jit/sources.h"
#include "jit/target.h"

/* The name NVRTC compiles a kernel's source under: "/kdtree-jit/" and the
 * file's name in kernels_src/ (its headers get the same prefix through a
 * #line: header_text()).  Absolute, because -lineinfo records a relative
 * name joined to the process's working directory, which made the bytes of
 * one key differ from directory to directory (and showed each user's path
 * in a shared cache).  It names no real file: NVRTC takes the source and
 * its headers from memory.  The bytes depend on it, so it is in the key
 * (the source record's label). */
#define SOURCE_ROOT "/kdtree-jit/"

static void
source_name(const kdt_kernel_def *d, char *out, size_t size)
{
    snprintf(out, size, "%s%s", SOURCE_ROOT, d->source);
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
    const kdt_kernel_def *d = kdt_kernel_def_get(id);
    o->n = 0;
    o->argv[o->n++] = "-std=c++17";
    snprintf(o->arch, sizeof o->arch, "-arch=%s", target);
    o->argv[o->n++] = o->arch;
    /* Line info costs nothing at run time and lets compute-sanitizer and
     * profilers point at kernel source lines (named by source_name()). */
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
    const kdt_kernel_def *d = kdt_kernel_def_get(id);
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
    char name[64];
    source_name(d, name, sizeof name);
    kdt_preimage_add(pre, name, src, len);
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
    kdt_preimage_end(pre, nvrtc);
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

/* A header's text as NVRTC gets it: after a #line that names it under
 * SOURCE_ROOT.  NVRTC matches an #include by the bare name, and line info
 * would record a bare name joined to the working directory; the #line
 * makes it absolute (and keeps the header's own line numbers).  Malloc'ed,
 * or NULL. */
static char *
header_text(const char *name)
{
    size_t len;
    const char *text = kdt_source_text(name, &len);
    char head[96];
    int n = snprintf(head, sizeof head, "#line 1 \"%s%s\"\n", SOURCE_ROOT,
                     name);
    char *out = text && n > 0 && (size_t)n < sizeof head
                    ? malloc((size_t)n + len + 1) : NULL;

    if (out) {
        memcpy(out, head, (size_t)n);
        memcpy(out + n, text, len);
        out[(size_t)n + len] = '\0';
    }
    return out;
}

int
kdt_kernel_compile(const kdt_nvrtc *nv, int id, const int64_t *vals,
                   const char *target, int kind, kdt_blob *out)
{
    const kdt_kernel_def *d = kdt_kernel_def_get(id);
    const char *hsrc[KDT_MAX_HEADERS];
    const char *hname[KDT_MAX_HEADERS];
    char *owned[KDT_MAX_HEADERS];
    int nh = 0, st = KDTREE_OK;
    for (int i = 0; d->headers && d->headers[i]; i++) {
        if (nh == KDT_MAX_HEADERS) {
            st = kdt_fail(KDTREE_ERROR_INTERNAL,
                          "%s: more than %d headers (KDT_MAX_HEADERS)",
                          d->name, KDT_MAX_HEADERS);
            break;
        }
        owned[nh] = header_text(d->headers[i]);
        if (!owned[nh]) {
            st = kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                          "%s: header %s for NVRTC", d->name, d->headers[i]);
            break;
        }
        hsrc[nh] = owned[nh];
        hname[nh] = d->headers[i];
        nh++;
    }
    if (st == KDTREE_OK) {
        options o;
        build_options(id, vals, target, &o);
        const char *src = kdt_source_text(d->source, NULL);
        char name[64];
        source_name(d, name, sizeof name);
        st = kdt_nvrtc_compile(nv, src, name, nh, hsrc, hname, o.n, o.argv,
                               kind, out);
    }
    for (int i = 0; i < nh; i++)
        free(owned[i]);
    return st;
}

/* Without NVRTC the full key cannot be computed (it names the compiler's
 * build): read the alias written beside every entry to learn which NVRTC
 * built the newest one, then look that entry up. */
static int
obtain_without_compiler(int id, const int64_t *vals, const char *target,
                        int no_compiler, kdt_blob *out, int *from)
{
    const kdt_kernel_def *d = kdt_kernel_def_get(id);
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
    char shape[256], packages[1024];
    kdt_shape_format(id, vals, shape, sizeof shape);
    /* A process that counted on a package's prebuilt entries learns that
     * this shape is not among them, and which package was searched. */
    kdt_cache_package_layers_text(packages, sizeof packages);
    return kdt_fail(no_compiler,
                    "%s (%s) for %s is not in any cache%s%s and cannot be "
                    "compiled: %s",
                    d->name, shape, target,
                    *packages ? ", nor in the read-only layer of " : "",
                    packages, why);
}

/* A miss: one thread of the process and one process of the node
 * compiles, the others wait for its entry (kdt_cache_lock_acquire), then
 * look again; a compile that failed here before, or while this thread
 * waited, fails again at once (jit/failures.h). */
static int
compile_and_store(const kdt_nvrtc *nv, int id, const int64_t *vals,
                  const char *target, int kind, const kdt_key *key,
                  const kdt_preimage *pre, kdt_blob *out, int *from)
{
    int st = kdt_failure_recall(key);
    if (st)
        return st;
    char what[320], shape[256];
    kdt_shape_format(id, vals, shape, sizeof shape);
    snprintf(what, sizeof what, "%s (%s) for %s", kdt_kernel_def_get(id)->name,
             shape, target);
    kdt_cache_lock *lock = kdt_cache_lock_acquire(key, what);
    if (kdt_cache_lock_recheck(lock)) {
        st = kdt_failure_recall(key);
        if (st == KDTREE_OK)
            st = kdt_cache_lookup(key, pre->text, pre->len, out, from);
        if (st != 0) {
            kdt_cache_lock_release(lock);
            return st < 0 ? st : KDTREE_OK;
        }
    }
    st = kdt_kernel_compile(nv, id, vals, target, kind, out);
    if (st != KDTREE_OK) {
        kdt_failure_remember(key, st);
        kdt_cache_lock_release(lock);
        return st;
    }
    /* The entry and its alias go into this process's memory now; their
     * disk publish, and the lock, go to the publishing thread, which
     * releases the lock once the entry is durable (cache/worker.c): the
     * caller does not wait for the fsync, and a process waiting on the
     * lock still finds the whole entry. */
    kdt_cache_item items[2] = {{key, pre->text, pre->len, out}};
    int n = 1;
    kdt_preimage alias_pre;
    kdt_key alias;
    kdt_blob vb;
    int have_alias = build_preimage(id, vals, target, NULL, &alias_pre) == 0;
    if (have_alias) {
        const char *v = kdt_nvrtc_version(nv);
        alias = kdt_key_of(alias_pre.text, alias_pre.len);
        vb = (kdt_blob){(void *)v, strlen(v), KDT_PAYLOAD_ALIAS};
        items[n++] = (kdt_cache_item){&alias, alias_pre.text, alias_pre.len,
                                      &vb};
    }
    st = kdt_cache_store_async(items, n, lock); /* takes the lock over */
    if (have_alias)
        kdt_preimage_free(&alias_pre);
    if (st != KDTREE_OK)
        kdt_blob_free(out);
    return st;
}

int
kdt_kernel_obtain(int id, const int64_t *vals, const char *target, int kind,
                  kdt_blob *out, int *from)
{
    int st;
    *from = KDT_FROM_NONE;
    /* Before any cache or compiler: a target the kernel cannot support
     * fails the same way everywhere, and fast. */
    if ((st = kdt_target_check(NULL, id, vals, target)))
        return st;
    const kdt_nvrtc *nv = kdt_nvrtc_get(&st);
    if (!nv)
        st = obtain_without_compiler(id, vals, target, st, out, from);
    else {
        kdt_preimage pre;
        kdt_key key;
        st = kdt_kernel_key(id, vals, target, kdt_nvrtc_version(nv), &pre,
                            &key);
        if (st)
            return st;
        st = kdt_cache_lookup(&key, pre.text, pre.len, out, from);
        if (st == 0)
            st = compile_and_store(nv, id, vals, target, kind, &key, &pre,
                                   out, from);
        else if (st == 1)
            st = KDTREE_OK;
        kdt_preimage_free(&pre);
    }
    /* What failed on the way (no NVRTC, say, before a cached entry served)
     * is no failure of this call. */
    if (st == KDTREE_OK)
        kdt_clear_error();
    return st;
}
