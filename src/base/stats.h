/*
 * base/stats.h: the process-wide load-path counters behind
 * kdtree_cache_stats_get().
 * Updated on the miss path only; relaxed atomics, so they never order
 * anything.
 */
#ifndef KDT_STATS_H
#define KDT_STATS_H

enum kdt_stat {
    KDT_STAT_MEMORY_HITS,
    KDT_STAT_DISK_HITS,
    KDT_STAT_COMPILES,
    KDT_STAT_LOADS,
    KDT_STAT_DISK_MISSES,
    KDT_STAT_DISK_REJECTS,
    KDT_STAT_COUNT
};

enum kdt_timer {
    KDT_TIME_COMPILE,
    KDT_TIME_LOAD,
    KDT_TIME_DISK,
    KDT_TIME_COUNT
};

void kdt_stat_add(enum kdt_stat s, unsigned long n);
void kdt_time_add(enum kdt_timer t, double ms);

#endif /* KDT_STATS_H */
