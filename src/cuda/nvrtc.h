/*
 * cuda/nvrtc.h: the NVRTC compiler, dlopen'ed on the first cache miss.
 *
 * With no NVRTC a warm cache still serves every launch; only a miss fails,
 * with KDTREE_ERROR_NO_COMPILER.
 */
#ifndef KDT_COMPILER_H
#define KDT_COMPILER_H

#include <stddef.h>

#include "base/blob.h"
#include "kdtree.h"

typedef struct kdt_nvrtc kdt_nvrtc;

/* The compiler, loaded once per process; NULL with *status set
 * (KDTREE_ERROR_NO_COMPILER) and the last error recorded. */
const kdt_nvrtc *kdt_nvrtc_get(int *status);

/* "13.0 build 36424714" or similar: the version and whatever identifies the
 * build of the loaded library, for the cache key.  Holds no path. */
const char *kdt_nvrtc_version(const kdt_nvrtc *n);

/* The suffix of the cubin target for sm_<arch> (arch = 10*major+minor):
 * "a" for 9.0, Hopper alone (H100, H200, GH200), whose arch-specific
 * instructions (wgmma, for verify_attn) an sm_90a cubin may use and which
 * runs on exactly that capability; "" elsewhere.  The runtime's name for
 * its device and NVRTC's target both take it from here. */
static inline const char *
kdt_arch_suffix(int arch)
{
    return arch == 90 ? "a" : "";
}

/* Chooses the target for a device of compute capability major.minor: a
 * cubin for sm_XY when NVRTC supports XY, else PTX for the highest
 * compute_XY it supports that is not above the device's (sm_90a, not
 * sm_90, on Hopper).  Writes "sm_90a", "sm_120" or "compute_89" into
 * `target` and the payload kind into *kind.  Fails with
 * KDTREE_ERROR_ARCH when nothing fits. */
int kdt_nvrtc_pick_target(const kdt_nvrtc *n, int major, int minor,
                          char *target, size_t target_size, int *kind);

/* Parses a target name: "sm_90", "sm_120", "sm_90a", "sm_100f",
 * "compute_89".  Returns its number (90, 120, 89) with *kind the payload
 * it makes (KDT_PAYLOAD_CUBIN for sm_, KDT_PAYLOAD_PTX for compute_) and
 * *suffix (may be NULL) 'a', 'f' or '\0'; -1 when it is not of that
 * form. */
int kdt_target_parse(const char *target, int *kind, char *suffix);

/* A target read once from its name, for those who decide by it more than
 * once: a runtime keeps the one it builds for, and a kernel's launch reads
 * the fields (verify_attn's body follows sm_90a) instead of the text. */
typedef struct kdt_target {
    char name[16];    /* "sm_90a", "sm_120", "compute_89": NVRTC's -arch */
    int major, minor; /* the compute capability it names: 9.0, 12.0, 8.9 */
    char suffix;      /* 'a' architecture-specific (runs on exactly
                       * major.minor), 'f' family, '\0' neither */
    int kind;         /* KDT_PAYLOAD_CUBIN (sm_) or KDT_PAYLOAD_PTX
                       * (compute_) */
} kdt_target;

/* Reads `name` (as kdt_target_parse) into *out: 0, or -1 when it is not
 * a target name or longer than out->name holds. */
int kdt_target_read(kdt_target *out, const char *name);

/* 1 when NVRTC can emit a cubin for sm_<arch> (arch = 10*major+minor). */
int kdt_nvrtc_supports(const kdt_nvrtc *n, int arch);

/* Compiles `src` (named `name` in diagnostics) with in-memory headers and
 * options.  kind KDT_PAYLOAD_CUBIN asks for a cubin (options must carry
 * -arch=sm_XY), KDT_PAYLOAD_PTX for PTX.  On success *out owns a malloc'ed
 * payload; on a rejected source the status is KDTREE_ERROR_COMPILE and the
 * last error carries the whole log. */
int kdt_nvrtc_compile(const kdt_nvrtc *n, const char *src, const char *name,
                      int n_headers, const char *const *header_src,
                      const char *const *header_names, int n_opts,
                      const char *const *opts, int kind, kdt_blob *out);

/* kdtree_set_site_packages(): Python package directories to search first
 * for NVIDIA's wheels.  KDTREE_ERROR_INVALID_ARGUMENT once the search has
 * run. */
int kdt_nvrtc_set_site_packages(const char *dirs);

/* Loads NVRTC (as kdt_nvrtc_get) and describes it: which file, found how,
 * which version, or why none could be loaded.  Returns the load status.
 * The strings live as long as the process. */
int kdt_nvrtc_describe(kdtree_library_info *out);

/* Test hook: the library name to dlopen instead of the default search
 * (NULL restores it; "" makes the compiler unavailable).  Only before the
 * first kdt_nvrtc_get(). */
void kdt_nvrtc_set_library(const char *name);

#endif /* KDT_COMPILER_H */
