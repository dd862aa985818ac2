/*
 * base/validate.c: the argument checks every public entry point shares.
 */
#include "config.h"

#include <inttypes.h>

#include "base/error.h"
#include "base/validate.h"

int
kdt_check_runtime(const kdtree_runtime *rt, const char *fn)
{
    if (!rt)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: rt is NULL (create one with "
                        "kdtree_runtime_create)",
                        fn);
    return KDTREE_OK;
}

int
kdt_check_ptr(const char *fn, const char *name, uint64_t ptr, unsigned align)
{
    if (ptr == 0)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: %s is 0 (a device pointer is required)", fn,
                        name);
    return kdt_check_opt_ptr(fn, name, ptr, align);
}

int
kdt_check_opt_ptr(const char *fn, const char *name, uint64_t ptr,
                  unsigned align)
{
    if (align > 1 && ptr % align != 0)
        return kdt_fail(KDTREE_ERROR_MISALIGNED,
                        "%s: %s = 0x%" PRIx64
                        " is not aligned to %u bytes",
                        fn, name, ptr, align);
    return KDTREE_OK;
}

int
kdt_check_arg(const char *fn, const char *name, int64_t v, int64_t lo,
              int64_t hi)
{
    if (v < lo || v > hi)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: %s = %" PRId64 " is outside %" PRId64
                        "..%" PRId64,
                        fn, name, v, lo, hi);
    return KDTREE_OK;
}

int
kdt_check_host(const char *fn, const char *name, const void *p)
{
    if (!p)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                        name);
    return KDTREE_OK;
}
