/*
 * cache/settings.c: the cache's settings from the environment (see
 * cache/settings.h).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/settings.h"

#ifndef KDT_PREBUILT_CACHE_DIR
#define KDT_PREBUILT_CACHE_DIR ""
#endif

/* The first bad value of a variable warns; later ones are debug lines
 * (every lookup would say the same). */
static int
warn_level(atomic_int *warned)
{
    return atomic_exchange(warned, 1) ? KDT_LOG_DEBUG : KDT_LOG_WARN;
}

int
kdt_cache_mode(void)
{
    static atomic_int warned;
    const char *v = getenv("KDTREE_CACHE");

    if (!v || !*v || strcmp(v, "readwrite") == 0)
        return KDT_CACHE_READWRITE;
    if (strcmp(v, "off") == 0)
        return KDT_CACHE_OFF;
    if (strcmp(v, "readonly") == 0)
        return KDT_CACHE_READONLY;
    kdt_log(warn_level(&warned),
            "KDTREE_CACHE=%s is not off, readonly or readwrite; using "
            "readwrite", v);
    return KDT_CACHE_READWRITE;
}

const char *
kdt_cache_mode_name(int mode)
{
    switch (mode) {
    case KDT_CACHE_OFF: return "off";
    case KDT_CACHE_READONLY: return "readonly";
    default: return "readwrite";
    }
}

static char *
join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);

    if (!s)
        return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

/* ---- relative directories ---------------------------------------------- */

/* A relative directory in the environment is resolved against the working
 * directory once, the first time the process reads that value, and the
 * same absolute path is used from then on: a process that changes its
 * working directory (or threads that do) keeps one cache, and the lock
 * names one directory.  The values seen are few; the list keeps them all,
 * under a mutex held across fork(). */
typedef struct resolved {
    struct resolved *next;
    char *var, *value, *abs;
} resolved;

static pthread_mutex_t res_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t res_once = PTHREAD_ONCE_INIT;
static resolved *res_list;

static void
res_prefork(void)
{
    pthread_mutex_lock(&res_lock);
}

static void
res_postfork(void)
{
    pthread_mutex_unlock(&res_lock);
}

static void
res_init(void)
{
    pthread_atfork(res_prefork, res_postfork, res_postfork);
}

/* Under res_lock: the absolute form of `value`, remembered (malloc'ed
 * copy returned), or NULL without memory. */
static char *
remember(const char *var, const char *value)
{
    char cwd[4096];
    resolved *r;

    for (r = res_list; r; r = r->next)
        if (strcmp(r->var, var) == 0 && strcmp(r->value, value) == 0)
            return strdup(r->abs);
    if (!getcwd(cwd, sizeof cwd))
        return strdup(value); /* no working directory to resolve against */
    r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->var = strdup(var);
    r->value = strdup(value);
    /* "./c" reads better as "<cwd>/c". */
    while (value[0] == '.' && value[1] == '/')
        value += 2;
    r->abs = malloc(strlen(cwd) + strlen(value) + 2);
    if (!r->var || !r->value || !r->abs) {
        free(r->var);
        free(r->value);
        free(r->abs);
        free(r);
        return NULL;
    }
    sprintf(r->abs, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", value);
    r->next = res_list;
    res_list = r;
    kdt_log(KDT_LOG_INFO, "cache: %s=%s is relative: using %s (resolved "
            "once, against the working directory of its first use)", var,
            r->value, r->abs);
    return strdup(r->abs);
}

/* `len` bytes of `value` (a directory named by `var`) as the cache uses
 * them: absolute, malloc'ed; NULL without memory. */
static char *
directory(const char *var, const char *value, size_t len)
{
    char *v = strndup(value, len), *abs;

    if (!v || v[0] == '/')
        return v;
    pthread_once(&res_once, res_init);
    pthread_mutex_lock(&res_lock);
    abs = remember(var, v);
    pthread_mutex_unlock(&res_lock);
    free(v);
    return abs;
}

/* ---- where the cache is ------------------------------------------------- */

char *
kdt_cache_user_dir(void)
{
    const char *v;

    if (kdt_cache_mode() == KDT_CACHE_OFF)
        return NULL;
    v = getenv("KDTREE_CACHE_DIR");
    if (v && *v)
        return directory("KDTREE_CACHE_DIR", v, strlen(v));
    /* The XDG spec says a relative XDG_CACHE_HOME is invalid: ignore it. */
    v = getenv("XDG_CACHE_HOME");
    if (v && v[0] == '/')
        return join(v, "kdtree-jit");
    v = getenv("HOME");
    if (v && *v)
        return join(v, ".cache/kdtree-jit");
    return NULL;
}

void
kdt_cache_free_dirs(char **dirs, size_t n)
{
    if (!dirs)
        return;
    for (size_t i = 0; i < n; i++)
        free(dirs[i]);
    free(dirs);
}

static int
push_dir(char ***dirs, size_t *n, const char *var, const char *s, size_t len)
{
    char **d = realloc(*dirs, (*n + 1) * sizeof **dirs);

    if (!d)
        return -1;
    *dirs = d;
    d[*n] = directory(var, s, len);
    if (!d[*n])
        return -1;
    (*n)++;
    return 0;
}

/* The package layers: set through the API, not the environment (a Python
 * package finds its companion's directory; nothing to export to child
 * processes), so they live here for the process.  Added, never removed:
 * a lookup copies them under the lock. */
static pthread_mutex_t pkg_lock = PTHREAD_MUTEX_INITIALIZER;
static char *pkg_dir[KDT_CACHE_MAX_PACKAGE_LAYERS];
static char *pkg_name[KDT_CACHE_MAX_PACKAGE_LAYERS];
static size_t pkg_n;

int
kdt_cache_add_package_layer(const char *dir, const char *name)
{
    int r = 0;

    pthread_mutex_lock(&pkg_lock);
    for (size_t i = 0; i < pkg_n; i++)
        if (strcmp(pkg_dir[i], dir) == 0)
            r = 1;
    if (r == 0 && pkg_n == KDT_CACHE_MAX_PACKAGE_LAYERS)
        r = -1;
    if (r == 0) {
        char *d = strdup(dir), *m = strdup(name);
        if (d && m) {
            pkg_dir[pkg_n] = d;
            pkg_name[pkg_n++] = m;
        } else {
            free(d);
            free(m);
            r = -1;
        }
    }
    pthread_mutex_unlock(&pkg_lock);
    return r;
}

void
kdt_cache_package_layers_text(char *buf, size_t size)
{
    size_t used = 0;

    if (size)
        buf[0] = '\0';
    pthread_mutex_lock(&pkg_lock);
    for (size_t i = 0; i < pkg_n && used < size; i++) {
        int m = snprintf(buf + used, size - used, "%s%s (%s)",
                         i ? "; " : "", pkg_name[i], pkg_dir[i]);
        if (m < 0)
            break;
        used += (size_t)m;
    }
    pthread_mutex_unlock(&pkg_lock);
}

char **
kdt_cache_layer_dirs(size_t *n)
{
    char **dirs = NULL;
    const char *path = getenv("KDTREE_CACHE_PATH");
    const char *pre = getenv("KDTREE_CACHE_PREBUILT_DIR");
    int failed = 0;

    *n = 0;
    while (path && *path) {
        const char *c = strchr(path, ':');
        size_t len = c ? (size_t)(c - path) : strlen(path);
        if (len && push_dir(&dirs, n, "KDTREE_CACHE_PATH", path, len) != 0)
            goto oom;
        path = c ? c + 1 : NULL;
    }
    pthread_mutex_lock(&pkg_lock);
    for (size_t i = 0; !failed && i < pkg_n; i++)
        failed = push_dir(&dirs, n, "kdtree_add_cache_layer", pkg_dir[i],
                          strlen(pkg_dir[i])) != 0;
    pthread_mutex_unlock(&pkg_lock);
    if (failed)
        goto oom;
    if (!pre)
        pre = KDT_PREBUILT_CACHE_DIR;
    if (*pre && push_dir(&dirs, n, "KDTREE_CACHE_PREBUILT_DIR", pre,
                         strlen(pre)) != 0)
        goto oom;
    return dirs;
oom:
    kdt_cache_free_dirs(dirs, *n);
    *n = 0;
    return NULL;
}

int
kdt_cache_parse_size(const char *s, uint64_t *out)
{
    unsigned long long n;
    char *end;
    int shift = 0;

    /* strtoull alone would take " -5" (a blank, then a negation) as
     * 2^64 - 5. */
    if (!s || s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    n = strtoull(s, &end, 10);
    if (errno)
        return -1;
    switch (*end) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    case 'T': case 't': shift = 40; break;
    default: break;
    }
    if (shift)
        end++;
    if (*end != '\0' || (uint64_t)n > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)n << shift;
    return 0;
}

/* A byte count from `var` (kdt_cache_parse_size), `def` when it is unset
 * or empty, or, with a warning once per variable, when it does not
 * parse. */
static uint64_t
size_setting(const char *var, uint64_t def, atomic_int *warned)
{
    const char *v = getenv(var);
    uint64_t n;

    if (!v || !*v)
        return def;
    if (kdt_cache_parse_size(v, &n) == 0)
        return n;
    kdt_log(warn_level(warned),
            "%s=%s is not a size (digits, then optionally K, M, G or T); "
            "using %llu", var, v, (unsigned long long)def);
    return def;
}

uint64_t
kdt_cache_max_bytes(void)
{
    static atomic_int warned;

    return size_setting("KDTREE_CACHE_MAX_BYTES", KDT_CACHE_DEFAULT_MAX_BYTES,
                        &warned);
}

uint64_t
kdt_cache_spill_max_bytes(void)
{
    static atomic_int warned;

    return size_setting("KDTREE_CACHE_SPILL_MAX_BYTES",
                        KDT_CACHE_SPILL_DEFAULT_MAX_BYTES, &warned);
}

/* "12", "0.5", ".5", "12.": decimal seconds, nothing else (no sign, no
 * blank, no exponent, no hex, no "inf").  0 with *out, or -1. */
static int
parse_seconds(const char *v, double *out)
{
    int digits = 0, dots = 0;

    for (const char *p = v; *p; p++) {
        if (*p >= '0' && *p <= '9')
            digits++;
        else if (*p == '.' && dots == 0)
            dots++;
        else
            return -1;
    }
    if (!digits)
        return -1;
    /* What is left is plain decimal, which strtod reads as written. */
    *out = strtod(v, NULL);
    return 0;
}

double
kdt_cache_lock_timeout(void)
{
    static atomic_int warned;
    const char *v = getenv("KDTREE_CACHE_LOCK_TIMEOUT");
    double t;

    if (!v || !*v)
        return KDT_CACHE_LOCK_TIMEOUT_DEFAULT;
    if (parse_seconds(v, &t) == 0 && t <= KDT_CACHE_LOCK_TIMEOUT_MAX)
        return t;
    kdt_log(warn_level(&warned),
            "KDTREE_CACHE_LOCK_TIMEOUT=%s is not a number of seconds from 0 "
            "to %g written in decimal (12, 0.5); using %g", v,
            KDT_CACHE_LOCK_TIMEOUT_MAX, KDT_CACHE_LOCK_TIMEOUT_DEFAULT);
    return KDT_CACHE_LOCK_TIMEOUT_DEFAULT;
}

/* A node-local directory of this user (malloc'ed): `xdg` in
 * $XDG_RUNTIME_DIR when that is an absolute path to a directory, else
 * /dev/shm/<shm><euid>, else /tmp/<tmp><euid>.  The locks and the spill
 * store sit side by side; the lock directory's names are those earlier
 * releases used, so that processes of both share their locks. */
static char *
node_local_dir(const char *xdg, const char *shm, const char *tmp)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    char buf[96];

    if (x && x[0] == '/' && stat(x, &st) == 0 && S_ISDIR(st.st_mode))
        return join(x, xdg);
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(buf, sizeof buf, "/dev/shm/%s%lu", shm,
                 (unsigned long)geteuid());
    else
        snprintf(buf, sizeof buf, "/tmp/%s%lu", tmp,
                 (unsigned long)geteuid());
    return strdup(buf);
}

char *
kdt_cache_lock_dir(void)
{
    return node_local_dir("kdtree-jit-locks", "kdtree-jit-",
                          "kdtree-jit-locks-");
}

char *
kdt_cache_spill_dir(void)
{
    return node_local_dir("kdtree-jit-spill", "kdtree-jit-spill-",
                          "kdtree-jit-spill-");
}
