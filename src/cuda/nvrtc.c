/*
 * cuda/nvrtc.c: the NVRTC compiler, dlopen'ed on the first cache miss.
 *
 * $KDTREE_NVRTC_LIBRARY alone when set (a path or a soname; a name that
 * does not load makes the compiler unavailable, which is how tests prove
 * that a warm cache serves without it); else the first of the places
 * cuda/nvrtc_find.c lists (NVIDIA's pip wheels, then the system's) that
 * loads and is NVRTC.
 */
#define _GNU_SOURCE
#include "config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda/build_id.h"
#include "cuda/cuda_api.h"
#include "cuda/dl.h"
#include "cuda/driver.h"
#include "cuda/nvrtc.h"
#include "cuda/nvrtc_find.h"
#include "cuda/nvrtc_signals.h"
#include "base/stats.h"

struct kdt_nvrtc {
    nvrtcResult (*version)(int *, int *);
    nvrtcResult (*get_num_supported_archs)(int *);
    nvrtcResult (*get_supported_archs)(int *);
    nvrtcResult (*create_program)(nvrtcProgram *, const char *, const char *,
                                  int, const char *const *,
                                  const char *const *);
    nvrtcResult (*compile_program)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*get_program_log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_program_log)(nvrtcProgram, char *);
    nvrtcResult (*get_cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_cubin)(nvrtcProgram, char *);
    nvrtcResult (*get_ptx_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_ptx)(nvrtcProgram, char *);
    nvrtcResult (*destroy_program)(nvrtcProgram *);
    const char *(*get_error_string)(nvrtcResult);
    int archs[64];
    int n_archs;
    int cuda_version; /* 1000 * major + 10 * minor */
    char version_text[96];
};

static struct kdt_nvrtc nv;
static int load_status = KDTREE_ERROR_INTERNAL;
static char load_error[1024];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *library_override;
/* What was loaded, for kdt_nvrtc_describe() and the log. */
static char loaded_path[1024];
static const char *loaded_source = "";
/* kdtree_set_site_packages()'s directories; fixed once the load starts. */
static pthread_mutex_t site_lock = PTHREAD_MUTEX_INITIALIZER;
static char site_dirs[8192];
static int load_started;

void
kdt_nvrtc_set_library(const char *name)
{
    library_override = name;
}

#define SYM(field, name) {(void **)&nv.field, name}
static const struct {
    void **slot;
    const char *name;
} symbols[] = {
    SYM(version, "nvrtcVersion"),
    SYM(get_num_supported_archs, "nvrtcGetNumSupportedArchs"),
    SYM(get_supported_archs, "nvrtcGetSupportedArchs"),
    SYM(create_program, "nvrtcCreateProgram"),
    SYM(compile_program, "nvrtcCompileProgram"),
    SYM(get_program_log_size, "nvrtcGetProgramLogSize"),
    SYM(get_program_log, "nvrtcGetProgramLog"),
    SYM(get_cubin_size, "nvrtcGetCUBINSize"),
    SYM(get_cubin, "nvrtcGetCUBIN"),
    SYM(get_ptx_size, "nvrtcGetPTXSize"),
    SYM(get_ptx, "nvrtcGetPTX"),
    SYM(destroy_program, "nvrtcDestroyProgram"),
    SYM(get_error_string, "nvrtcGetErrorString"),
};
#undef SYM

/* Binds the symbols of a loaded library; KDTREE_OK or
 * KDTREE_ERROR_NO_COMPILER with load_error saying why. */
static int
bind_symbols(void *h, const char *name)
{
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(h, symbols[i].name);
        if (!*symbols[i].slot) {
            /* nvrtcVersion is as old as NVRTC: without it this is some
             * other library, not an old NVRTC. */
            if (i == 0)
                snprintf(load_error, sizeof load_error,
                         "%s is not NVRTC (it has no nvrtcVersion)", name);
            else
                snprintf(load_error, sizeof load_error,
                         "NVRTC %s lacks %s (older than CUDA 11.2?)", name,
                         symbols[i].name);
            return KDTREE_ERROR_NO_COMPILER;
        }
    }
    return KDTREE_OK;
}

/* Opens and binds one candidate; on success records where it came from. */
static void *
try_open(const char *path, const char *source)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "%s", e ? e : path);
        return NULL;
    }
    if (bind_symbols(h, path) != KDTREE_OK) {
        dlclose(h);
        return NULL;
    }
    kdt_dl_path(h, path, loaded_path, sizeof loaded_path);
    loaded_source = source;
    return h;
}

/* The directory libkdtree was loaded from ("" if unknown). */
static void
own_dir(char *out, size_t size)
{
    Dl_info info;
    out[0] = '\0';
    if (dladdr((const void *)kdt_nvrtc_get, &info) && info.dli_fname &&
        strchr(info.dli_fname, '/')) {
        snprintf(out, size, "%s", info.dli_fname);
        *strrchr(out, '/') = '\0';
    }
}

static void *
open_library(void)
{
    pthread_mutex_lock(&site_lock);
    load_started = 1;
    pthread_mutex_unlock(&site_lock);
    const char *only = library_override;
    if (!only)
        only = getenv("KDTREE_NVRTC_LIBRARY");
    if (only) {
        if (!*only) {
            snprintf(load_error, sizeof load_error,
                     "NVRTC is disabled (KDTREE_NVRTC_LIBRARY is empty)");
            return NULL;
        }
        void *h = try_open(only, library_override ? "test override"
                                                  : "KDTREE_NVRTC_LIBRARY");
        if (!h) {
            char why[sizeof load_error];
            snprintf(why, sizeof why, "%s", load_error);
            snprintf(load_error, sizeof load_error,
                     "NVRTC could not be loaded (KDTREE_NVRTC_LIBRARY=%.400s): "
                     "%.500s",
                     only, why);
        }
        return h;
    }

    char self[PATH_MAX];
    own_dir(self, sizeof self);
    pthread_mutex_lock(&site_lock);
    kdt_nvrtc_places places = {site_dirs[0] ? site_dirs : NULL,
                               self[0] ? self : NULL, "",
#ifdef KDT_CUDA_LIBDIR
                               KDT_CUDA_LIBDIR
#else
                               NULL
#endif
    };
    kdt_nvrtc_search s;
    int listed = kdt_nvrtc_find(&s, &places);
    pthread_mutex_unlock(&site_lock);
    if (listed != 0)
        kdt_log(KDT_LOG_WARN,
                "out of memory listing NVRTC's locations; trying the first "
                "%d",
                s.n);

    /* Where the driver is loaded already (a runtime exists), an NVRTC of a
     * newer CUDA major writes cubins it cannot load: try those last. */
    int driver_major = kdt_driver_loaded_version() / 1000;
    kdt_nvrtc_prefer_major(&s, driver_major);
    void *h = NULL;
    load_error[0] = '\0';
    for (int i = 0; i < s.n && !h; i++) {
        const kdt_nvrtc_candidate *c = &s.items[i];
        h = try_open(c->path, c->source);
        if (h && driver_major && c->major > driver_major)
            kdt_log(KDT_LOG_WARN,
                    "NVRTC %s is for CUDA %d, newer than the driver's %d, "
                    "and nothing older was found: its cubins may not load",
                    c->path, c->major, driver_major);
    }
    if (!h) {
        /* Only the last failure of a file that exists is worth showing:
         * the loader's "no such file" for each soname is noise. */
        char last[512] = "";
        if (load_error[0] && !strstr(load_error, "No such file"))
            snprintf(last, sizeof last, "; last failure: %s", load_error);
        snprintf(load_error, sizeof load_error,
                 "NVRTC could not be loaded: no NVIDIA wheel "
                 "(nvidia/cu13/lib/libnvrtc.so.13, "
                 "nvidia/cuda_nvrtc/lib/libnvrtc.so.12) in %d Python "
                 "package directories, no libnvrtc.so.13, .12 or libnvrtc.so "
                 "on the loader's path or in a CUDA toolkit under "
                 "/usr/local%s.  Install one (pip install nvidia-cuda-nvrtc, "
                 "or kdtree-jit[nvrtc]) or set KDTREE_NVRTC_LIBRARY to its "
                 "path",
                 s.n_package_dirs, last);
    }
    kdt_nvrtc_search_free(&s);
    return h;
}

static void
load(void)
{
    /* NVRTC's constructors run in the dlopen: the program's signal
     * handling is put back as it was should they touch it
     * (cuda/nvrtc_signals.h). */
    kdt_nvrtc_signals_hold();
    void *h = open_library();
    if (h)
        kdt_log(KDT_LOG_DEBUG, "NVRTC's calls to signal(): %d import slots "
                "answered by libkdtree", kdt_nvrtc_signals_shield(h));
    kdt_nvrtc_signals_release();
    if (!h) {
        load_status = KDTREE_ERROR_NO_COMPILER;
        return;
    }
    int major = 0, minor = 0, n = 0;
    nv.version(&major, &minor);
    if (nv.get_num_supported_archs(&n) != NVRTC_SUCCESS || n <= 0 ||
        n > (int)(sizeof nv.archs / sizeof nv.archs[0])) {
        snprintf(load_error, sizeof load_error,
                 "NVRTC %d.%d reports %d supported architectures", major,
                 minor, n);
        load_status = KDTREE_ERROR_NO_COMPILER;
        return;
    }
    nv.get_supported_archs(nv.archs);
    nv.n_archs = n;
    char id[KDT_BUILD_ID_HEX];
    kdt_build_id((const void *)nv.version, loaded_path, id);
    snprintf(nv.version_text, sizeof nv.version_text, "%d.%d build %s",
             major, minor, id[0] ? id : "unknown");
    nv.cuda_version = 1000 * major + 10 * minor;
    kdt_log(KDT_LOG_INFO,
            "NVRTC %s loaded from %s (%s; %d architectures, sm_%d..sm_%d)",
            nv.version_text, loaded_path, loaded_source, n, nv.archs[0],
            nv.archs[n - 1]);
    load_status = KDTREE_OK;
}

int
kdt_nvrtc_set_site_packages(const char *dirs)
{
    int st = KDTREE_OK;
    pthread_mutex_lock(&site_lock);
    if (load_started)
        st = kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                      "kdtree_set_site_packages: NVRTC was already looked "
                      "for (found: %s); call it before the first compile",
                      loaded_path[0] ? loaded_path : "none");
    else if (strlen(dirs) >= sizeof site_dirs)
        st = kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                      "kdtree_set_site_packages: %zu bytes of directories, "
                      "at most %zu",
                      strlen(dirs), sizeof site_dirs - 1);
    else
        snprintf(site_dirs, sizeof site_dirs, "%s", dirs);
    pthread_mutex_unlock(&site_lock);
    return st;
}

int
kdt_nvrtc_describe(kdtree_library_info *out)
{
    int st;
    const kdt_nvrtc *n = kdt_nvrtc_get(&st);
    memset(out, 0, sizeof *out);
    out->status = st;
    out->version = n ? n->cuda_version : 0;
    out->path = n ? loaded_path : "";
    out->source = n ? loaded_source : "";
    out->detail = n ? n->version_text : load_error;
    return st;
}

const kdt_nvrtc *
kdt_nvrtc_get(int *status)
{
    pthread_once(&load_once, load);
    *status = load_status;
    if (load_status != KDTREE_OK) {
        kdt_fail(load_status, "%s", load_error);
        return NULL;
    }
    return &nv;
}

const char *
kdt_nvrtc_version(const kdt_nvrtc *n)
{
    return n->version_text;
}

int
kdt_nvrtc_supports(const kdt_nvrtc *n, int arch)
{
    for (int i = 0; i < n->n_archs; i++)
        if (n->archs[i] == arch)
            return 1;
    return 0;
}

int
kdt_nvrtc_pick_target(const kdt_nvrtc *n, int major, int minor, char *target,
                      size_t target_size, int *kind)
{
    int arch = major * 10 + minor;
    if (kdt_nvrtc_supports(n, arch)) {
        snprintf(target, target_size, "sm_%d%s", arch,
                 kdt_arch_suffix(arch));
        *kind = KDT_PAYLOAD_CUBIN;
        return KDTREE_OK;
    }
    /* A device newer than this NVRTC: PTX for the newest virtual
     * architecture not above it; the driver finishes the compile. */
    int best = -1;
    for (int i = 0; i < n->n_archs; i++)
        if (n->archs[i] <= arch && n->archs[i] > best)
            best = n->archs[i];
    if (best < 0)
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "NVRTC %s supports no architecture at or below "
                        "sm_%d (oldest: sm_%d)",
                        n->version_text, arch, n->archs[0]);
    snprintf(target, target_size, "compute_%d", best);
    *kind = KDT_PAYLOAD_PTX;
    kdt_log(KDT_LOG_INFO,
            "NVRTC %s cannot emit sm_%d; using PTX for compute_%d",
            n->version_text, arch, best);
    return KDTREE_OK;
}

int
kdt_nvrtc_compile(const kdt_nvrtc *n, const char *src, const char *name,
                  int n_headers, const char *const *header_src,
                  const char *const *header_names, int n_opts,
                  const char *const *opts, int kind, kdt_blob *out)
{
    nvrtcProgram prog;
    nvrtcResult r = n->create_program(&prog, src, name, n_headers,
                                      header_src, header_names);
    if (r != NVRTC_SUCCESS)
        return kdt_fail(r == NVRTC_ERROR_OUT_OF_MEMORY
                            ? KDTREE_ERROR_OUT_OF_MEMORY
                            : KDTREE_ERROR_INTERNAL,
                        "nvrtcCreateProgram(%s): %s", name,
                        n->get_error_string(r));
    double t0 = kdt_now_ms();
    /* NVRTC 12.x and 13.0 swap signal handlers during a compile, and put
     * them back without their flags (cuda/nvrtc_signals.h). */
    kdt_nvrtc_signals_hold();
    r = n->compile_program(prog, n_opts, opts);
    kdt_nvrtc_signals_release();
    double ms = kdt_now_ms() - t0;
    kdt_time_add(KDT_TIME_COMPILE, ms);
    kdt_stat_add(KDT_STAT_COMPILES, 1);

    size_t log_size = 0;
    char *log = NULL;
    if (n->get_program_log_size(prog, &log_size) == NVRTC_SUCCESS &&
        log_size > 1) {
        log = malloc(log_size);
        if (log && n->get_program_log(prog, log) != NVRTC_SUCCESS)
            log[0] = '\0';
    }
    int status = KDTREE_OK;
    if (r != NVRTC_SUCCESS) {
        char opt_text[1024] = "";
        size_t used = 0;
        for (int i = 0; i < n_opts && used < sizeof opt_text - 1; i++) {
            int m = snprintf(opt_text + used, sizeof opt_text - used, "%s%s",
                             i ? " " : "", opts[i]);
            if (m < 0)
                break;
            used += (size_t)m;
        }
        status = kdt_fail_long(KDTREE_ERROR_COMPILE, log ? log : "",
                               "NVRTC %s rejected %s (%s) with options: %s",
                               n->version_text, name, n->get_error_string(r),
                               opt_text);
        free(log);
        n->destroy_program(&prog);
        return status;
    }
    if (log && log[0])
        kdt_log(KDT_LOG_DEBUG, "NVRTC log for %s:\n%s", name, log);
    free(log);

    size_t size = 0;
    r = kind == KDT_PAYLOAD_CUBIN ? n->get_cubin_size(prog, &size)
                                  : n->get_ptx_size(prog, &size);
    if (r != NVRTC_SUCCESS || size == 0) {
        n->destroy_program(&prog);
        return kdt_fail(KDTREE_ERROR_INTERNAL,
                        "NVRTC produced no %s for %s: %s",
                        kind == KDT_PAYLOAD_CUBIN ? "cubin" : "PTX", name,
                        n->get_error_string(r));
    }
    void *data = malloc(size);
    if (!data) {
        n->destroy_program(&prog);
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "%zu bytes for a compiled kernel", size);
    }
    r = kind == KDT_PAYLOAD_CUBIN ? n->get_cubin(prog, data)
                                  : n->get_ptx(prog, data);
    n->destroy_program(&prog);
    if (r != NVRTC_SUCCESS) {
        free(data);
        return kdt_fail(KDTREE_ERROR_INTERNAL, "NVRTC get output: %s",
                        n->get_error_string(r));
    }
    out->data = data;
    out->size = size;
    out->kind = kind;
    kdt_log(KDT_LOG_INFO, "compiled %s in %.1f ms (%zu bytes)", name, ms,
            size);
    return status;
}

int
kdt_target_parse(const char *target, int *kind, char *suffix)
{
    const char *digits;
    if (strncmp(target, "sm_", 3) == 0) {
        *kind = KDT_PAYLOAD_CUBIN;
        digits = target + 3;
    } else if (strncmp(target, "compute_", 8) == 0) {
        *kind = KDT_PAYLOAD_PTX;
        digits = target + 8;
    } else {
        return -1;
    }
    int n = 0, len = 0;
    while (isdigit((unsigned char)digits[len]) && len < 4)
        n = n * 10 + (digits[len++] - '0');
    if (len < 2)
        return -1;
    char sfx = '\0';
    /* Family and architecture-specific suffixes (sm_90a, sm_100f). */
    if (digits[len] == 'a' || digits[len] == 'f')
        sfx = digits[len++];
    if (digits[len] != '\0')
        return -1;
    if (suffix)
        *suffix = sfx;
    return n;
}

int
kdt_target_read(kdt_target *out, const char *name)
{
    int kind;
    char sfx;
    int n = kdt_target_parse(name, &kind, &sfx);
    if (n < 0 || strlen(name) >= sizeof out->name)
        return -1;
    memcpy(out->name, name, strlen(name) + 1);
    out->major = n / 10;
    out->minor = n % 10;
    out->suffix = sfx;
    out->kind = kind;
    return 0;
}
