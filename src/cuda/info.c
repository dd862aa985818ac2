/*
 * cuda/info.c: the public entry points that say which NVRTC and which CUDA
 * driver the library loaded, and the one that tells it where Python keeps
 * its packages (for NVIDIA's NVRTC wheels).
 */
#include "config.h"

#include "base/error.h"
#include "cuda/driver.h"
#include "cuda/nvrtc.h"

KDT_EXPORT int32_t
kdtree_nvrtc_info(kdtree_library_info *out)
{
    kdt_clear_error();
    if (!out)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "kdtree_nvrtc_info: out is NULL");
    return kdt_nvrtc_describe(out);
}

KDT_EXPORT int32_t
kdtree_driver_info(kdtree_library_info *out)
{
    kdt_clear_error();
    if (!out)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "kdtree_driver_info: out is NULL");
    return kdt_driver_describe(out);
}

KDT_EXPORT int32_t
kdtree_library_info_size(void)
{
    return (int32_t)sizeof(kdtree_library_info);
}

KDT_EXPORT int32_t
kdtree_set_site_packages(const char *dirs)
{
    kdt_clear_error();
    if (!dirs)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "kdtree_set_site_packages: dirs is NULL");
    return kdt_nvrtc_set_site_packages(dirs);
}
