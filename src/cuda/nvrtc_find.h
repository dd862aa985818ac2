/*
 * cuda/nvrtc_find.h: where NVRTC may be, in the order to try: NVIDIA's pip
 * wheels first, then the system's.  Only lists places (it loads nothing);
 * cuda/nvrtc.c tries them.
 */
#ifndef KDT_NVRTC_FIND_H
#define KDT_NVRTC_FIND_H

#include <stddef.h>

typedef struct kdt_nvrtc_candidate {
    /* An absolute path that exists, or a bare soname for the loader. */
    char path[1024];
    /* How it was found, for the log and kdtree_nvrtc_info() (static). */
    const char *source;
    /* The CUDA major its file name says (13 for libnvrtc.so.13), 0 when
     * the name does not say. */
    int major;
} kdt_nvrtc_candidate;

typedef struct kdt_nvrtc_places {
    /* ':'-separated Python package directories to search first (from
     * kdtree_set_site_packages()), or NULL. */
    const char *site_dirs;
    /* The directory libkdtree itself was loaded from, or NULL: in a pip
     * install that is site-packages/kdtree_jit, one below the wheels. */
    const char *self_dir;
    /* Prefixed to every fixed system path (/usr/local/cuda*, the usual
     * Python directories) and $HOME's: "" in the library, a fake root in
     * tests. */
    const char *root;
    /* The toolkit's lib64 named at configure time (--with-cuda), or
     * NULL. */
    const char *toolkit_libdir;
} kdt_nvrtc_places;

typedef struct kdt_nvrtc_search {
    kdt_nvrtc_candidate *items;
    int n, cap;
    /* How many Python package directories were looked in. */
    int n_package_dirs;
} kdt_nvrtc_search;

/* Lists, in order: the wheels (nvidia/cu13/lib/libnvrtc.so.13, then
 * nvidia/cuda_nvrtc/lib/libnvrtc.so.12) in each Python package directory:
 * site_dirs, the one above self_dir, $VIRTUAL_ENV's, $CONDA_PREFIX's, the
 * user's (~/.local) and the system's (/usr/local/lib/python3*,
 * /usr/lib/python3); then the loader's names (libnvrtc.so.13, .12,
 * libnvrtc.so: LD_LIBRARY_PATH and ldconfig's cache); then the same names
 * in toolkit_libdir, /usr/local/cuda/lib64, /usr/local/cuda-X.Y/lib64
 * (newest first) and /usr/local/cuda(-X.Y)/targets/<arch>/lib.  Files that do
 * not exist are left out, and each file appears once.  Returns 0, or -1
 * when out of memory (the list so far stays usable). */
int kdt_nvrtc_find(kdt_nvrtc_search *s, const kdt_nvrtc_places *places);

/* Moves the candidates whose file name says a CUDA major above
 * `max_major` to the end, keeping the order otherwise (0: no change).  A
 * driver of CUDA 12 cannot load what a CUDA 13 NVRTC writes, so where the
 * driver is known an older NVRTC is tried first. */
void kdt_nvrtc_prefer_major(kdt_nvrtc_search *s, int max_major);

void kdt_nvrtc_search_free(kdt_nvrtc_search *s);

#endif /* KDT_NVRTC_FIND_H */
