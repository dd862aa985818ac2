/*
 * bench_peaks.c: the limits kdtree-bench compares against, by device (see
 * bench_peaks.h).
 *
 * The FLOP figures are dense tensor throughputs with f32 accumulation:
 * bf16, what verify_attn's MMAs run, and FP8 (e4m3), what they run on
 * an e4m3 cache in e4m3 arithmetic (MATH=e4m3).  NVIDIA's datasheets
 * print each with 2:4 sparsity, twice the dense one.  The byte figure is
 * the datasheet's memory bandwidth, except for the H200, whose figure is
 * the device-to-device copy rate the project's targets are stated against
 * (docs/performance.md, "Targets"), so that its percentages stay
 * comparable with the record.  A name the table does not know gets no
 * limits: an sm_120 row must not read as a percentage of an H200.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_peaks.h"

/* First match wins: the longer names first. */
static const bench_peak table[] = {
    /* NVIDIA H200 datasheet, H200 NVL: 4.8 TB/s; BF16 Tensor Core 1,671
     * TFLOPS and FP8 Tensor Core 3,341 TFLOPS, both with sparsity. */
    {"H200 NVL", 4.8e12, 835.5e12, "NVIDIA H200 datasheet (H200 NVL)",
     1670.5e12},
    /* H200 SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity (datasheet;
     * 989 dense, as the record writes it), FP8 Tensor Core 3,958 (1,979
     * dense); 4.3 TB/s, the copy rate the targets are stated against
     * (the datasheet's memory bandwidth is 4.8 TB/s). */
    {"H200", 4.3e12, 989e12,
     "NVIDIA H200 datasheet (H200 SXM; bytes: the copy rate the targets "
     "use)",
     1979e12},
    /* NVIDIA H100 datasheet, H100 NVL: 3.9 TB/s; 1,671 TFLOPS bf16 and
     * 3,341 FP8, sparse. */
    {"H100 NVL", 3.9e12, 835.5e12, "NVIDIA H100 datasheet (H100 NVL)",
     1670.5e12},
    /* H100 PCIe: 2 TB/s; 1,513 TFLOPS bf16 and 3,026 FP8, sparse. */
    {"H100 PCIe", 2.0e12, 756.5e12, "NVIDIA H100 datasheet (H100 PCIe)",
     1513e12},
    /* H100 SXM (the driver names it "H100 80GB HBM3"): 3.35 TB/s; 1,979
     * TFLOPS bf16 and 3,958 FP8, sparse. */
    {"H100 80GB HBM3", 3.35e12, 989.5e12, "NVIDIA H100 datasheet (H100 SXM)",
     1979e12},
    {"H100 SXM", 3.35e12, 989.5e12, "NVIDIA H100 datasheet (H100 SXM)",
     1979e12},
    /* The Max-Q edition runs the same 1,792 GB/s memory at a lower power
     * limit; no bf16 figure of its own is published: bytes only. */
    {"RTX PRO 6000 Blackwell Max-Q", 1.792e12, 0,
     "NVIDIA RTX PRO 6000 Blackwell Max-Q datasheet (memory only)", 0},
    /* NVIDIA RTX Blackwell GPU architecture whitepaper, RTX PRO 6000
     * Blackwell (sm_120): 1,792 GB/s; peak BF16 tensor with FP32
     * accumulate 503.8 TFLOPS dense (1,007.6 with sparsity).  Its FP8
     * figure with f32 accumulation is not in this table (no %peak for
     * its e4m3 rows; --peak gives one). */
    {"RTX PRO 6000 Blackwell", 1.792e12, 503.8e12,
     "NVIDIA RTX Blackwell whitepaper (RTX PRO 6000 Blackwell)", 0},
};

const bench_peak *
bench_peak_of(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(name, table[i].device))
            return &table[i];
    return NULL;
}

/* One figure of --peak: a finite number >= 0 and where it ends. */
static int
peak_number(const char *s, char **end, double *v)
{
    errno = 0;
    *v = strtod(s, end);
    return *end != s && !errno && isfinite(*v) && *v >= 0 ? 0 : -1;
}

int
bench_peak_parse(const char *text, bench_peak *out, char *why, size_t size)
{
    double tb, tf, f8 = 0;
    char *end;
    if (peak_number(text, &end, &tb) || *end != ',' ||
        peak_number(end + 1, &end, &tf) ||
        (*end == ',' && peak_number(end + 1, &end, &f8)) || *end ||
        (tb == 0 && tf == 0 && f8 == 0)) {
        snprintf(why, size, "--peak wants TB/S,TFLOP/S[,FP8 TFLOP/S] (e.g. "
                 "3.35,989 or 4.3,989,1979; 0 for one not known), not "
                 "\"%s\"", text);
        return -1;
    }
    *out = (bench_peak){"--peak", tb * 1e12, tf * 1e12, "--peak",
                        f8 * 1e12};
    return 0;
}
