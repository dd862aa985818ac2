/*
 * cuda/nvrtc.c: the NVRTC compiler, dlopen'ed on the first cache miss.
 *
 * Search order: $KDTREE_NVRTC_LIBRARY alone when set (a path or a soname;
 * a name that does not load makes the compiler unavailable, which is how
 * tests prove that a warm cache serves without it); else libnvrtc.so.13,
 * .12 and libnvrtc.so on the loader's path; else the same names in the
 * toolkit's lib64 directory found at configure time.
 */
#define _GNU_SOURCE
#include "config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cuda/cuda_api.h"
#include "cuda/nvrtc.h"
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
    char version_text[96];
};

static struct kdt_nvrtc nv;
static int load_status = KDTREE_ERROR_INTERNAL;
static char load_error[1024];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *library_override;

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

/* The GNU build id of the loaded object that holds `addr`: identifies the
 * exact build of NVRTC (two builds of one version can differ) without a
 * path, so keys stay equal across machines with the same toolkit. */
struct build_id_search {
    const void *addr;
    char hex[41];
};

static int
find_build_id(struct dl_phdr_info *info, size_t size, void *data)
{
    struct build_id_search *s = data;
    int holds = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (uintptr_t)s->addr >= lo &&
            (uintptr_t)s->addr < lo + ph->p_memsz)
            holds = 1;
    }
    if (!holds)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const unsigned char *p =
            (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        const unsigned char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const unsigned char *name = p + sizeof *nh;
            const unsigned char *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (desc + nh->n_descsz > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
                memcmp(name, "GNU", 4) == 0) {
                size_t n = nh->n_descsz > 20 ? 20 : nh->n_descsz;
                for (size_t j = 0; j < n; j++)
                    sprintf(s->hex + 2 * j, "%02x", desc[j]);
                return 1;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 1;
}

static void *
open_library(void)
{
    const char *only = library_override;
    if (!only)
        only = getenv("KDTREE_NVRTC_LIBRARY");
    if (only) {
        void *h = *only ? dlopen(only, RTLD_NOW | RTLD_LOCAL) : NULL;
        if (!h) {
            const char *e = *only ? dlerror() : "disabled";
            snprintf(load_error, sizeof load_error,
                     "NVRTC could not be loaded from %s: %s",
                     *only ? only : "(empty name)", e ? e : "unknown error");
        }
        return h;
    }
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                        "libnvrtc.so"};
    for (int dir = 0; dir < 2; dir++) {
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char path[512];
            if (dir == 0)
                snprintf(path, sizeof path, "%s", names[i]);
            else
                snprintf(path, sizeof path, "%s/%s", KDT_CUDA_LIBDIR,
                         names[i]);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h)
                return h;
        }
    }
    snprintf(load_error, sizeof load_error,
             "NVRTC could not be loaded (tried libnvrtc.so.13, .12 and "
             "libnvrtc.so on the loader path and in %s; set "
             "KDTREE_NVRTC_LIBRARY to its path)",
             KDT_CUDA_LIBDIR);
    return NULL;
}

static void
load(void)
{
    void *h = open_library();
    if (!h) {
        load_status = KDTREE_ERROR_NO_COMPILER;
        return;
    }
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(h, symbols[i].name);
        if (!*symbols[i].slot) {
            snprintf(load_error, sizeof load_error,
                     "NVRTC lacks %s (older than CUDA 11.2?)",
                     symbols[i].name);
            load_status = KDTREE_ERROR_NO_COMPILER;
            dlclose(h);
            return;
        }
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
    struct build_id_search s = {(const void *)nv.version, ""};
    dl_iterate_phdr(find_build_id, &s);
    snprintf(nv.version_text, sizeof nv.version_text, "%d.%d build %s",
             major, minor, s.hex[0] ? s.hex : "unknown");
    kdt_log(KDT_LOG_INFO, "NVRTC %s loaded (%d architectures, sm_%d..sm_%d)",
            nv.version_text, n, nv.archs[0], nv.archs[n - 1]);
    load_status = KDTREE_OK;
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
    r = n->compile_program(prog, n_opts, opts);
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
