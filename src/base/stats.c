/*
 * base/stats.c: the process-wide load-path counters and
 * kdtree_cache_stats_get().
 */
#include "config.h"

#include <string.h>

#include "base/error.h"
#include "base/stats.h"

static unsigned long counts[KDT_STAT_COUNT];
/* Times are kept in nanoseconds so that a relaxed integer add suffices. */
static unsigned long long times_ns[KDT_TIME_COUNT];

void
kdt_stat_add(enum kdt_stat s, unsigned long n)
{
    __atomic_fetch_add(&counts[s], n, __ATOMIC_RELAXED);
}

void
kdt_time_add(enum kdt_timer t, double ms)
{
    if (ms < 0)
        ms = 0;
    __atomic_fetch_add(&times_ns[t], (unsigned long long)(ms * 1e6),
                       __ATOMIC_RELAXED);
}

static double
get_ms(enum kdt_timer t)
{
    return (double)__atomic_load_n(&times_ns[t], __ATOMIC_RELAXED) * 1e-6;
}

static uint64_t
get(enum kdt_stat s)
{
    return __atomic_load_n(&counts[s], __ATOMIC_RELAXED);
}

KDT_EXPORT int32_t
kdtree_cache_stats_get(kdtree_cache_stats *out)
{
    kdt_clear_error();
    if (!out)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "kdtree_cache_stats_get: out is NULL");
    memset(out, 0, sizeof *out);
    out->memory_hits = get(KDT_STAT_MEMORY_HITS);
    out->disk_hits = get(KDT_STAT_DISK_HITS);
    out->compiles = get(KDT_STAT_COMPILES);
    out->loads = get(KDT_STAT_LOADS);
    out->disk_misses = get(KDT_STAT_DISK_MISSES);
    out->disk_rejects = get(KDT_STAT_DISK_REJECTS);
    out->compile_ms = get_ms(KDT_TIME_COMPILE);
    out->load_ms = get_ms(KDT_TIME_LOAD);
    out->disk_ms = get_ms(KDT_TIME_DISK);
    return KDTREE_OK;
}

KDT_EXPORT int32_t
kdtree_cache_stats_size(void)
{
    return (int32_t)sizeof(kdtree_cache_stats);
}

KDT_EXPORT void
kdtree_cache_stats_reset(void)
{
    for (int i = 0; i < KDT_STAT_COUNT; i++)
        __atomic_store_n(&counts[i], 0, __ATOMIC_RELAXED);
    for (int i = 0; i < KDT_TIME_COUNT; i++)
        __atomic_store_n(&times_ns[i], 0, __ATOMIC_RELAXED);
}
