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
kdt_target_check(const char *fn, int id, const char *target)
{
    const kdt_kernel_def *d = kdt_kernel_def_get(id);
    int kind, n = target ? kdt_target_parse(target, &kind, NULL) : -1;

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
    return KDTREE_OK;
}
