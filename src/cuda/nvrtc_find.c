/*
 * cuda/nvrtc_find.c: the places NVRTC may be, in the order to try them.
 *
 * NVIDIA ships NVRTC as pip wheels: nvidia-cuda-nvrtc-cu12 puts
 * nvidia/cuda_nvrtc/lib/libnvrtc.so.12 under site-packages, and
 * nvidia-cuda-nvrtc (CUDA 13 on) nvidia/cu13/lib/libnvrtc.so.13.  A C
 * library cannot ask Python where site-packages is, so the Python package
 * tells it (kdtree_set_site_packages()); without that, the directory above
 * libkdtree's own (the pip package's layout) and the usual Python
 * locations are looked in.  Then the system's: the loader (LD_LIBRARY_PATH,
 * ldconfig's cache) and the toolkits under /usr/local.
 */
#define _GNU_SOURCE
#include "config.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/nvrtc_find.h"

static const char src_wheel13[] = "pip wheel nvidia-cuda-nvrtc (CUDA 13)";
static const char src_wheel12[] = "pip wheel nvidia-cuda-nvrtc-cu12";
static const char src_loader[] = "the system's loader";
static const char src_toolkit[] = "CUDA toolkit directory";

/* The names the loader and a toolkit directory may hold, newest first. */
static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                      "libnvrtc.so"};

static int
name_major(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "libnvrtc.so.", 12) != 0)
        return 0;
    return atoi(base + 12);
}

/* Appends a candidate unless it is already listed (absolute paths are
 * compared after resolving links) or, for a path, does not exist. */
static int
add(kdt_nvrtc_search *s, const char *path, const char *source)
{
    char real[PATH_MAX];
    int absolute = path[0] == '/';
    if (absolute) {
        if (access(path, F_OK) != 0 || !realpath(path, real))
            return 0;
    }
    for (int i = 0; i < s->n; i++) {
        const char *p = s->items[i].path;
        char other[PATH_MAX];
        if (strcmp(p, path) == 0)
            return 0;
        if (absolute && p[0] == '/' && realpath(p, other) &&
            strcmp(other, real) == 0)
            return 0;
    }
    if (strlen(path) >= sizeof s->items[0].path)
        return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        kdt_nvrtc_candidate *n = realloc(s->items, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        s->items = n;
        s->cap = cap;
    }
    kdt_nvrtc_candidate *c = &s->items[s->n++];
    snprintf(c->path, sizeof c->path, "%s", path);
    c->source = source;
    c->major = name_major(path);
    return 0;
}

/* The two wheels' libraries in one Python package directory. */
static int
add_package_dir(kdt_nvrtc_search *s, const char *dir)
{
    char path[PATH_MAX];
    if (!dir || !*dir)
        return 0;
    s->n_package_dirs++;
    if (snprintf(path, sizeof path, "%s/nvidia/cu13/lib/libnvrtc.so.13",
                 dir) < (int)sizeof path &&
        add(s, path, src_wheel13))
        return -1;
    if (snprintf(path, sizeof path, "%s/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
                 dir) < (int)sizeof path &&
        add(s, path, src_wheel12))
        return -1;
    return 0;
}

/* Directories matching a glob pattern, in version order, newest first
 * ("cuda-12.10" after "cuda-12.9" before it), each passed to fn. */
static int
newest_first(const void *a, const void *b)
{
    return strverscmp(*(char *const *)b, *(char *const *)a);
}

static int
each_match(kdt_nvrtc_search *s, const char *root, const char *pattern,
           int (*fn)(kdt_nvrtc_search *, const char *))
{
    char full[PATH_MAX];
    glob_t g;
    int st = 0;
    snprintf(full, sizeof full, "%s%s", root, pattern);
    if (glob(full, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g) != 0)
        return 0;
    qsort(g.gl_pathv, g.gl_pathc, sizeof g.gl_pathv[0], newest_first);
    for (size_t i = 0; i < g.gl_pathc && st == 0; i++)
        st = fn(s, g.gl_pathv[i]);
    globfree(&g);
    return st;
}

static int
add_toolkit_dir(kdt_nvrtc_search *s, const char *dir)
{
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++) {
        if (snprintf(path, sizeof path, "%s/%s", dir, sonames[i]) >=
            (int)sizeof path)
            continue;
        if (add(s, path, src_toolkit))
            return -1;
    }
    return 0;
}

int
kdt_nvrtc_find(kdt_nvrtc_search *s, const kdt_nvrtc_places *pl)
{
    const char *root = pl->root ? pl->root : "";
    char dir[PATH_MAX];
    memset(s, 0, sizeof *s);

    /* 1. The wheels, in the directories Python named, in its order. */
    if (pl->site_dirs) {
        const char *p = pl->site_dirs;
        while (*p) {
            size_t n = strcspn(p, ":");
            if (n > 0 && n < sizeof dir) {
                memcpy(dir, p, n);
                dir[n] = '\0';
                if (add_package_dir(s, dir))
                    return -1;
            }
            p += n;
            if (*p == ':')
                p++;
        }
    }
    /* ... then where Python would have them without being asked. */
    if (pl->self_dir) {
        snprintf(dir, sizeof dir, "%s/..", pl->self_dir);
        if (add_package_dir(s, dir))
            return -1;
    }
    static const char *const prefixes[] = {"VIRTUAL_ENV", "CONDA_PREFIX"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        const char *v = getenv(prefixes[i]);
        if (v && *v) {
            snprintf(dir, sizeof dir, "%s/lib/python3*/site-packages", v);
            if (each_match(s, "", dir, add_package_dir))
                return -1;
        }
    }
    const char *home = getenv("HOME");
    if (home && *home) {
        snprintf(dir, sizeof dir, "%s%s/.local/lib/python3*/site-packages",
                 root, home);
        if (each_match(s, "", dir, add_package_dir))
            return -1;
    }
    static const char *const system_packages[] = {
        "/usr/local/lib/python3*/dist-packages",
        "/usr/local/lib/python3*/site-packages",
        "/usr/lib/python3/dist-packages",
        "/usr/lib/python3*/site-packages"};
    for (size_t i = 0;
         i < sizeof system_packages / sizeof system_packages[0]; i++)
        if (each_match(s, root, system_packages[i], add_package_dir))
            return -1;

    /* 2. The loader's own search: LD_LIBRARY_PATH, ldconfig's cache. */
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++)
        if (add(s, sonames[i], src_loader))
            return -1;

    /* 3. Toolkits that are not on the loader's path. */
    if (pl->toolkit_libdir && *pl->toolkit_libdir) {
        snprintf(dir, sizeof dir, "%s%s", root, pl->toolkit_libdir);
        if (add_toolkit_dir(s, dir))
            return -1;
    }
    if (each_match(s, root, "/usr/local/cuda/lib64", add_toolkit_dir) ||
        each_match(s, root, "/usr/local/cuda-*/lib64", add_toolkit_dir) ||
        each_match(s, root, "/usr/local/cuda/targets/*/lib",
                   add_toolkit_dir) ||
        each_match(s, root, "/usr/local/cuda-*/targets/*/lib",
                   add_toolkit_dir))
        return -1;
    return 0;
}

void
kdt_nvrtc_prefer_major(kdt_nvrtc_search *s, int max_major)
{
    if (max_major <= 0)
        return;
    /* A stable partition by insertion: n is a few dozen at most. */
    for (int i = 1; i < s->n; i++) {
        kdt_nvrtc_candidate c = s->items[i];
        if (c.major > max_major)
            continue;
        int j = i;
        while (j > 0 && s->items[j - 1].major > max_major) {
            s->items[j] = s->items[j - 1];
            j--;
        }
        s->items[j] = c;
    }
}

void
kdt_nvrtc_search_free(kdt_nvrtc_search *s)
{
    free(s->items);
    memset(s, 0, sizeof *s);
}
