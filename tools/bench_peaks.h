/*
 * bench_peaks.h: the limits kdtree-bench's report compares a kernel's
 * bytes and FLOPs against, by device (tools/bench_peaks.c holds the table
 * and the source of each figure), or as given with --peak.  A device the
 * table does not know gets no percentages, never another device's.
 */
#ifndef KDT_BENCH_PEAKS_H
#define KDT_BENCH_PEAKS_H

#include <stddef.h>

typedef struct bench_peak {
    const char *device;  /* what the device's name contains */
    double bytes_per_s;  /* memory bandwidth; 0: not known */
    double flops_per_s;  /* dense bf16 tensor throughput; 0: not known */
    const char *source;  /* where the figures come from, for the report */
    double fp8_flops_per_s; /* dense FP8 tensor throughput, f32
                             * accumulation (the rows whose operands are
                             * e4m3); 0: not known */
} bench_peak;

/* The table's entry for a device named `name` (as the driver names it),
 * or NULL when the table has none. */
const bench_peak *bench_peak_of(const char *name);

/* --peak TB/S,TFLOP/S[,FP8 TFLOP/S] (e.g. "3.35,989" or
 * "4.3,989,1979"; each may be 0, not known; without the third, no FP8
 * limit) into *out.  Returns 0, or -1 with why[] saying what was
 * wrong. */
int bench_peak_parse(const char *text, bench_peak *out, char *why,
                     size_t size);

#endif /* KDT_BENCH_PEAKS_H */
