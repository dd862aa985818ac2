/*
 * jit/registry.h: the kernel registry: each kernel's name, sources, constants
 * with their ranges, and entry points; shapes (parse, check, format).
 *
 * Each kernel's definition and its public launch function live together in
 * src/kernels/<name>.c; this header is what they share with the rest.
 */
#ifndef KDT_JIT_REGISTRY_H
#define KDT_JIT_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#define KDT_MAX_CONSTS 6
#define KDT_MAX_FUNCS 4
/* Headers a kernel's source may include (its `headers` list). */
#define KDT_MAX_HEADERS 16

enum kdt_kernel_id {
    KDT_KERNEL_DRAFT_TOPK = 0,
    KDT_KERNEL_BUILD_DDTREE = 1,
    KDT_KERNEL_VERIFY_ATTN = 2,
    KDT_KERNEL_TREE_ACCEPT = 3,
    KDT_KERNEL_COUNT = 4
};

/* One specialisation constant: reaches NVRTC as -DKDT_<name>=<value>. */
typedef struct kdt_const_def {
    const char *name; /* "N_MAX" */
    int64_t min;
    int64_t max;
    /* Symbolic values accepted in shape strings, value i <-> names[i]
     * ("f32", "bf16" for DTYPE), NULL-terminated; or NULL. */
    const char *const *names;
    /* 1: a shape string may leave the constant out, and it is `def`
     * then (verify_attn's KV and MATH, whose default is the bf16 kernel
     * that every shape string before them named). */
    int optional;
    int64_t def;
} kdt_const_def;

typedef struct kdt_kernel_def {
    const char *name;          /* "tree_accept" */
    const char *source;        /* "tree_accept.cu" in kernels_src/ */
    const char *const *headers; /* every file it #includes, NULL-ended */
    const char *const *functions; /* extern "C" entry points, NULL-ended */
    int n_consts;
    kdt_const_def consts[KDT_MAX_CONSTS];
    /* Rules between constants (K <= V, say); NULL when none.  Returns 0,
     * or a status with the last error set. */
    int (*check)(const int64_t *vals);
    const char *default_shape; /* "N_MAX=65,L=15" */
    /* The oldest architecture the source compiles for (80: sm_80 and
     * compute_80 up), found by compiling for each; 0 when it has no
     * minimum of its own (NVRTC's oldest target is the limit).  Checked
     * before any compile (jit/target.h). */
    int min_arch;
    /* The oldest architecture for the constants `vals` when some of them
     * need a newer one than min_arch (verify_attn's e4m3 cache: sm_89);
     * NULL when min_arch is all there is. */
    int (*min_arch_of)(const int64_t *vals);
} kdt_kernel_def;

/* The definitions, in kdt_kernel_id order (each from its kernel_*.c). */
extern const kdt_kernel_def kdt_def_draft_topk;
extern const kdt_kernel_def kdt_def_build_ddtree;
extern const kdt_kernel_def kdt_def_verify_attn;
extern const kdt_kernel_def kdt_def_tree_accept;

const kdt_kernel_def *kdt_kernel_def_get(int id);
/* The id of the named kernel, or -1. */
int kdt_kernel_find(const char *name);

/* Validates `vals` against the kernel's ranges and rules: each constant
 * outside its range is refused with a message naming it and the range
 * (KDTREE_ERROR_SHAPE). */
int kdt_kernel_check(int id, const int64_t *vals);

/* Parses "N_MAX=65,L=15" (any order, each constant at most once and every
 * one that is not optional exactly once, symbolic names allowed) into vals
 * in declaration order, an optional constant left out at its default, and
 * checks them. */
int kdt_shape_parse(int id, const char *shape, int64_t *vals);
/* The canonical text of a shape: constants in declaration order. */
void kdt_shape_format(int id, const int64_t *vals, char *out, size_t size);

#endif /* KDT_JIT_REGISTRY_H */
