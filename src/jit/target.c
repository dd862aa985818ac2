/*
 * jit/target.c: each kernel's minimum architecture, checked before any
 * compile (see jit/target.h).
 */
#include "config.h"

#include "base/error.h"
#include "cuda/nvrtc.h"
#include "jit/registry.h"
#include "jit/target.h"

int
kdt_target_check(const char *fn, int id, const int64_t *vals,
                 const char *target)
{
    const kdt_kernel_def *d = kdt_kernel_def_get(id);
    int kind;
    int n = target ? kdt_target_parse(target, &kind, NULL) : -1;
    char shape[256];

    if (n < 0)
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s%sarch \"%s\" is not of the form sm_XY or "
                        "compute_XY (e.g. sm_90, sm_120)",
                        fn ? fn : "", fn ? ": " : "", target ? target : "");
    if (d && n < d->min_arch)
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s%s%s cannot be compiled for %s: it needs sm_%d or "
                        "newer",
                        fn ? fn : "", fn ? ": " : "", d->name, target,
                        d->min_arch);
    int need = d && vals && d->min_arch_of ? d->min_arch_of(vals) : 0;
    if (n < need) {
        kdt_shape_format(id, vals, shape, sizeof shape);
        return kdt_fail(KDTREE_ERROR_ARCH,
                        "%s%s%s with %s cannot be compiled for %s: it needs "
                        "sm_%d or newer",
                        fn ? fn : "", fn ? ": " : "", d->name, shape, target,
                        need);
    }
    return KDTREE_OK;
}
