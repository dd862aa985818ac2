/*
 * bench_report.c: kdtree-bench's report (see bench_suite.h): the rows the
 * other parts collected, as a table for a person or as one JSON object
 * (its shape is what tests/test_bench.sh checks and the plotting and
 * baseline tools read), with the load path's and the API's targets
 * (docs/performance.md, "Targets") judged from them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_ctx.h"
#include "cuda/nvrtc.h"
#include "runtime/runtime.h"

static void
json_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(o, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", o);
        else if (c == '\t')
            fputs("\\t", o);
        else if (c < 0x20)
            fprintf(o, "\\u%04x", c);
        else
            fputc(c, o);
    }
    fputc('"', o);
}

static void
json_num(FILE *o, double v)
{
    if (isfinite(v))
        fprintf(o, "%.6g", v);
    else
        fputs("null", o);
}

/* A number in a table cell, "-" when not measured. */
static const char *
cell(char *buf, size_t size, const char *fmt, double v)
{
    if (isfinite(v))
        snprintf(buf, size, fmt, v);
    else
        snprintf(buf, size, "-");
    return buf;
}

typedef struct target {
    const char *what;
    char subject[64];
    double value, limit;
    const char *unit;
    int met;
} target;

/* The fraction of a limit, NAN where the limit is not known (no device,
 * a device the table of bench_peaks.c lacks, and no --peak). */
static double
of_peak(double per_s, double peak)
{
    return per_s > 0 && peak > 0 ? per_s / peak : NAN;
}

/* The peak a row's FLOPs are a fraction of: the FP8 one where its
 * operands are e4m3 (bench_row_types), else bf16's. */
static double
row_peak(const bench_ctx *b, const kernel_row *r)
{
    return strcmp(r->math, "e4m3") == 0 ? b->peak.fp8_flops_per_s
                                        : b->peak.flops_per_s;
}

/* The load path's and the API's targets, from the GPU measurements
 * only. */
static int
collect_targets(bench_ctx *b, target *t, int max)
{
    int n = 0;
    for (int i = 0; i < b->n_load && n + 3 <= max; i++) {
        load_row *r = &b->load[i];
        if (!r->gpu)
            continue;
        t[n] = (target){"warm load from disk", "", r->warm.median, 1.0, "ms",
                        0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", r->kernel);
        t[n].met = isfinite(r->warm.median) && r->warm.median < 1.0;
        n++;
        t[n] = (target){"hot lookup", "", r->hot_find_us, 1.0, "us", 0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", r->kernel);
        t[n].met = isfinite(r->hot_find_us) && r->hot_find_us < 1.0;
        n++;
        t[n] = (target){"cold / bare NVRTC", "",
                        r->cold.median / r->bare.median, 1.10, "x", 0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", r->kernel);
        t[n].met = isfinite(t[n].value) && t[n].value <= 1.10;
        n++;
    }
    for (int i = 0; i < b->n_over && n < max; i++) {
        overhead_row *o = &b->over[i];
        t[n] = (target){"API cost over cuLaunchKernel", "",
                        o->api_us - o->bare_us, 0.5, "us", 0};
        snprintf(t[n].subject, sizeof t[n].subject, "%s", o->kernel);
        t[n].met = isfinite(t[n].value) && t[n].value < 0.5;
        n++;
    }
    return n;
}

/* A load row's kernel functions: a list, or null when not read. */
static void
json_functions(FILE *o, const load_row *r)
{
    if (r->n_fn < 0) {
        fputs("null", o);
        return;
    }
    fputc('[', o);
    for (int i = 0; i < r->n_fn; i++) {
        const kdt_cubin_kernel *k = &r->fn[i];
        fputs(i ? ", {\"name\": " : "{\"name\": ", o);
        json_str(o, k->name);
        fprintf(o, ", \"registers\": %u, \"stack_bytes\": %u, "
                "\"shared_bytes\": %u, \"param_bytes\": %u, "
                "\"max_threads\": %u}", k->registers, k->stack_bytes,
                k->shared_bytes, k->param_bytes, k->max_threads);
    }
    fputc(']', o);
}

/* The resources table under the load table. */
static void
table_functions(bench_ctx *b, FILE *o)
{
    int any = 0;
    for (int i = 0; i < b->n_load; i++)
        any |= b->load[i].n_fn > 0;
    if (!any)
        return;
    fprintf(o, "\nResources per kernel function (the cached cubin of each "
            "row; stack > 0 is local memory: spills, local arrays, calls)\n");
    fprintf(o, "%-13s %-8s %-24s %5s %6s %8s %7s %8s\n", "kernel", "target",
            "function", "regs", "stack", "shared", "params", "threads");
    for (int i = 0; i < b->n_load; i++) {
        const load_row *r = &b->load[i];
        for (int f = 0; f < r->n_fn; f++)
            fprintf(o, "%-13s %-8s %-24s %5u %6u %8u %7u %8u\n", r->kernel,
                    r->arch, r->fn[f].name, r->fn[f].registers,
                    r->fn[f].stack_bytes, r->fn[f].shared_bytes,
                    r->fn[f].param_bytes, r->fn[f].max_threads);
    }
    fprintf(o, "  shared = fixed at compile time, with the 1 KB the system "
            "reserves (the rest is set at launch);\n  threads = the most a "
            "block of the kernel may have\n");
}

static const char *
nvrtc_version_text(void)
{
    int st = 0;
    const kdt_nvrtc *n = kdt_nvrtc_get(&st);
    return n ? kdt_nvrtc_version(n) : "unavailable";
}

/* One field: `pre` (the separator before it), "key": and the value; a NULL
 * string or a number that was not measured is null. */
static void
field_str(FILE *o, const char *pre, const char *key, const char *s)
{
    fprintf(o, "%s\"%s\": ", pre, key);
    if (s)
        json_str(o, s);
    else
        fputs("null", o);
}

static void
field_num(FILE *o, const char *pre, const char *key, double v)
{
    fprintf(o, "%s\"%s\": ", pre, key);
    json_num(o, v);
}

/* A stat's median, smallest and largest as "<key>", "<key>_min" and
 * "<key>_max" fields ("cold_ms": "cold_min_ms", ... where the key ends in
 * "_ms"). */
static void
field_stat(FILE *o, const char *key, const bench_stat *s)
{
    char k[48];
    size_t len = strlen(key);
    int ms = len > 3 && strcmp(key + len - 3, "_ms") == 0;
    field_num(o, ", ", key, s->median);
    snprintf(k, sizeof k, "%.*s_min%s", (int)(ms ? len - 3 : len), key,
             ms ? "_ms" : "");
    field_num(o, ", ", k, s->min);
    snprintf(k, sizeof k, "%.*s_max%s", (int)(ms ? len - 3 : len), key,
             ms ? "_ms" : "");
    field_num(o, ", ", k, s->max);
}

/* The load table's rows. */
static void
json_load(bench_ctx *b, FILE *o)
{
    fputs("  \"load\": [", o);
    for (int i = 0; i < b->n_load; i++) {
        load_row *r = &b->load[i];
        field_str(o, i ? ",\n    {" : "\n    {", "kernel", r->kernel);
        field_str(o, ", ", "target", r->arch);
        field_str(o, ", ", "shape", r->shape);
        field_str(o, ", ", "path", r->gpu ? "runtime" : "compile-only");
        fprintf(o, ", \"reps_cold\": %d, \"reps_bare\": %d, "
                "\"reps_warm\": %d", r->cold.n, r->bare.n, r->warm.n);
        field_stat(o, "cold_ms", &r->cold);
        field_num(o, ", ", "cold_nvrtc_ms", r->cold_nvrtc_ms);
        field_stat(o, "bare_nvrtc_ms", &r->bare);
        field_num(o, ", ", "cold_over_bare", r->cold.median / r->bare.median);
        field_stat(o, "warm_ms", &r->warm);
        field_num(o, ", ", "warm_module_load_ms", r->warm_load_ms);
        field_num(o, ", ", "hot_find_us", r->hot_find_us);
        field_num(o, ", ", "hot_prepare_us", r->hot_prepare_us);
        fputs(", \"functions\": ", o);
        json_functions(o, r);
        field_str(o, ", ", "problem", r->problem[0] ? r->problem : NULL);
        fputc('}', o);
    }
    fputs(b->n_load ? "\n  ],\n" : "],\n", o);
}

/* The kernels' GPU rows, each with its baselines. */
static void
json_kernels(bench_ctx *b, FILE *o)
{
    fputs("  \"kernels\": [", o);
    for (int i = 0; i < b->n_rows; i++) {
        kernel_row *r = &b->rows[i];
        double s = r->us * 1e-6;
        field_str(o, i ? ",\n    {" : "\n    {", "kernel", r->kernel);
        field_str(o, ", ", "config", r->config);
        /* what the row's KV cache and tensor-core operands are (null for
         * kernels without them): the tables and plots tell rows apart by
         * these, and flop_fraction is of the FP8 peak where math is e4m3 */
        field_str(o, ", ", "kv_dtype", r->kv[0] ? r->kv : NULL);
        field_str(o, ", ", "math", r->math[0] ? r->math : NULL);
        field_num(o, ", ", "us", r->us);
        field_num(o, ", ", "bytes", r->bytes);
        field_num(o, ", ", "flops", r->flops);
        field_num(o, ", ", "tb_per_s",
                  r->bytes > 0 ? r->bytes / s / 1e12 : NAN);
        field_num(o, ", ", "bw_fraction",
                  of_peak(r->bytes / s, b->peak.bytes_per_s));
        field_num(o, ", ", "tflop_per_s",
                  r->flops > 0 ? r->flops / s / 1e12 : NAN);
        field_num(o, ", ", "flop_fraction",
                  of_peak(r->flops / s, row_peak(b, r)));
        field_num(o, ", ", "sm_mhz", r->mhz);
        /* "baseline" is the first (the way a user does it without this
         * library); "baselines" all. */
        field_str(o, ", ", "baseline", r->n_base ? r->base[0].name : NULL);
        field_num(o, ", ", "baseline_us", r->n_base ? r->base[0].us : NAN);
        fputs(", \"baselines\": [", o);
        for (int j = 0; j < r->n_base; j++) {
            field_str(o, j ? ", {" : "{", "name", r->base[j].name);
            field_num(o, ", ", "us", r->base[j].us);
            field_num(o, ", ", "sm_mhz", r->base[j].mhz);
            field_num(o, ", ", "ours_faster_by", r->base[j].us / r->us);
            fputc('}', o);
        }
        fputs("]}", o);
    }
    fputs(b->n_rows ? "\n  ],\n" : "],\n", o);
}

/* The one-line lists: cases, overhead, baselines and their runs, targets,
 * notes. */
static void
json_lists(bench_ctx *b, FILE *o, const target *t, int nt)
{
    fputs("  \"cases\": [", o);
    for (int i = 0; i < b->n_cases; i++) {
        field_str(o, i ? ", {" : "{", "name", b->cases[i].name);
        field_str(o, ", ", "outcome", b->cases[i].outcome);
        fputc('}', o);
    }
    fputs("],\n  \"overhead\": [", o);
    for (int i = 0; i < b->n_over; i++) {
        overhead_row *r = &b->over[i];
        field_str(o, i ? ", {" : "{", "kernel", r->kernel);
        field_str(o, ", ", "config", r->config);
        field_num(o, ", ", "api_us", r->api_us);
        field_num(o, ", ", "bare_launch_us", r->bare_us);
        field_num(o, ", ", "added_us", r->api_us - r->bare_us);
        fprintf(o, ", \"calls_per_batch\": %d}", r->calls);
    }
    fputs("],\n  \"baselines\": [", o);
    for (int i = 0; i < b->n_base; i++) {
        base_row *r = &b->base[i];
        field_str(o, i ? ", {" : "{", "script", r->script);
        field_str(o, ", ", "label", r->label);
        field_str(o, ", ", "kernel", r->kernel);
        field_str(o, ", ", "config", r->config);
        field_num(o, ", ", "us", r->us);
        fputc('}', o);
    }
    fputs("],\n  \"baseline_runs\": [", o);
    for (int i = 0; i < b->n_runs; i++) {
        field_str(o, i ? ", {" : "{", "script", b->runs[i].script);
        field_str(o, ", ", "outcome", b->runs[i].outcome);
        fprintf(o, ", \"rows\": %d}", b->runs[i].rows);
    }
    fputs("],\n  \"targets\": [", o);
    for (int i = 0; i < nt; i++) {
        field_str(o, i ? ", {" : "{", "what", t[i].what);
        field_str(o, ", ", "subject", t[i].subject);
        field_num(o, ", ", "value", t[i].value);
        fprintf(o, ", \"limit\": %g, \"unit\": \"%s\", \"met\": %s}",
                t[i].limit, t[i].unit, t[i].met ? "true" : "false");
    }
    fputs("],\n  \"notes\": [", o);
    for (int i = 0; i < b->n_notes; i++) {
        if (i)
            fputs(", ", o);
        json_str(o, b->notes[i]);
    }
    fputs("]\n}\n", o);
}

static void
report_json(bench_ctx *b, FILE *o)
{
    target t[MAX_LOAD_ROWS * 3 + MAX_OVERHEAD];
    int nt = collect_targets(b, t, (int)(sizeof t / sizeof t[0]));
    fputs("{\n  \"tool\": \"kdtree-bench\"", o);
    field_str(o, ",\n  ", "version", kdtree_version_string());
    field_str(o, ",\n  ", "mode", b->rt ? "gpu" : "compile-only");
    fprintf(o, ",\n  \"quick\": %s", b->quick ? "true" : "false");
    field_str(o, ",\n  ", "device", b->rt ? b->device_name : NULL);
    field_str(o, ",\n  ", "arch", b->rt ? kdtree_runtime_arch(b->rt) : NULL);
    /* what the kernels were built for: the device's arch unless told
     * otherwise (KDTREE_TARGET=sm_90 on Hopper: the portable bodies) */
    field_str(o, ",\n  ", "target",
              b->rt ? kdtree_runtime_target(b->rt) : NULL);
    field_str(o, ",\n  ", "no_gpu_reason", b->rt ? NULL : b->no_gpu_reason);
    field_str(o, ",\n  ", "nvrtc", nvrtc_version_text());
    /* What the fractions are of, and where those figures come from; null
     * where none is known (no device, or one the table lacks). */
    if (b->peak.source) {
        fputs(",\n  \"limits\": {\"bytes_per_s\": ", o);
        json_num(o, b->peak.bytes_per_s > 0 ? b->peak.bytes_per_s : NAN);
        fputs(", \"flops_per_s\": ", o);
        json_num(o, b->peak.flops_per_s > 0 ? b->peak.flops_per_s : NAN);
        fputs(", \"fp8_flops_per_s\": ", o);
        json_num(o, b->peak.fp8_flops_per_s > 0 ? b->peak.fp8_flops_per_s
                                                : NAN);
        field_str(o, ", ", "source", b->peak.source);
        fputs("},\n", o);
    } else {
        fputs(",\n  \"limits\": null,\n", o);
    }
    json_load(b, o);
    json_kernels(b, o);
    json_lists(b, o, t, nt);
}

/* Half the spread of a stat's runs as a percentage of its median, "+-3%";
 * "-" for fewer than two runs. */
static const char *
spread(char *buf, size_t size, const bench_stat *s)
{
    if (s->n < 2 || !(s->median > 0))
        return cell(buf, size, "", NAN);
    snprintf(buf, size, "+-%.0f%%", 50 * (s->max - s->min) / s->median);
    return buf;
}

/* The load table, its legend, and the resources of each row's cubin. */
static void
table_load(bench_ctx *b, FILE *o)
{
    char c[11][32];
    fprintf(o, "\nLoad path, each kernel's default shape (medians over the "
            "runs; +- = half the spread\nof the runs, largest less smallest, "
            "as a share of the median)\n");
    fprintf(o, "%-13s %-8s %6s %9s %5s %9s %9s %5s %7s %8s %5s %7s %7s  %s\n",
            "kernel", "target", "runs", "cold ms", "+-", "compile", "bare ms",
            "+-", "c/bare", "warm ms", "+-", "hot us", "prep us", "shape");
    for (int i = 0; i < b->n_load; i++) {
        load_row *r = &b->load[i];
        snprintf(c[0], sizeof c[0], "%d/%d", r->cold.n, r->warm.n);
        fprintf(o, "%-13s %-8s %6s %9s %5s %9s %9s %5s %7s %8s %5s %7s %7s"
                "  %s\n", r->kernel, r->arch, c[0],
                cell(c[1], sizeof c[1], "%.1f", r->cold.median),
                spread(c[2], sizeof c[2], &r->cold),
                cell(c[3], sizeof c[3], "%.1f", r->cold_nvrtc_ms),
                cell(c[4], sizeof c[4], "%.1f", r->bare.median),
                spread(c[5], sizeof c[5], &r->bare),
                cell(c[6], sizeof c[6], "%.3f",
                     r->cold.median / r->bare.median),
                cell(c[7], sizeof c[7], "%.3f", r->warm.median),
                spread(c[8], sizeof c[8], &r->warm),
                cell(c[9], sizeof c[9], "%.3f", r->hot_find_us),
                cell(c[10], sizeof c[10], "%.3f", r->hot_prepare_us),
                r->shape);
        if (r->problem[0])
            fprintf(o, "    ! %s\n", r->problem);
    }
    fprintf(o, "  cold = a kernel's first use with an empty cache: compile, "
            "store%s; compile = the part\n  of it spent in NVRTC; bare = "
            "the same compile alone, nothing stored (the bare compile\n  "
            "runs beside each cold run); c/bare = cold over bare, medians "
            "(inside both spreads: noise);\n  warm = the first use by a "
            "fresh %s, the entry on disk; runs = cold/warm repetitions",
            b->rt ? ", load" : "", b->rt ? "runtime" : "process");
    if (b->rt)
        fprintf(o, ";\n  hot = the lookup a launch makes once the kernel is "
                "loaded; prep = kdtree_prepare()\n  of a shape already "
                "loaded\n");
    else
        fputs("\n", o);
    table_functions(b, o);
}

/* The kernels' GPU rows, each with its baselines. */
static void
table_kernels(bench_ctx *b, FILE *o)
{
    char c1[32], c2[32], c3[32], c4[32], c5[32];
    fprintf(o, "\nKernels on the GPU (median us per launch, CUDA events "
            "around back-to-back batches;\n  MHz = the SM clock the batches "
            "started at; a baseline's @MHz, the clock its batches ended "
            "at)\n");
    if (b->peak.source)
        fprintf(o, "  %%bw and %%peak are of %s TB/s and %s TFLOP/s dense "
                "bf16, %s dense FP8 for math=e4m3 rows\n  (%s)\n",
                cell(c1, sizeof c1, "%.2f",
                     b->peak.bytes_per_s > 0 ? b->peak.bytes_per_s / 1e12
                                             : NAN),
                cell(c2, sizeof c2, "%.0f",
                     b->peak.flops_per_s > 0 ? b->peak.flops_per_s / 1e12
                                             : NAN),
                cell(c3, sizeof c3, "%.0f",
                     b->peak.fp8_flops_per_s > 0
                         ? b->peak.fp8_flops_per_s / 1e12
                         : NAN),
                b->peak.source);
    else
        fprintf(o, "  no %%bw or %%peak: no limits known for this device; "
                "--peak TB/S,TFLOP/S gives them\n");
    /* the config column as wide as its longest (verify_attn's variants
     * name their page, cache and arithmetic) */
    int cw = 38;
    for (int i = 0; i < b->n_rows; i++)
        if ((int)strlen(b->rows[i].config) > cw)
            cw = (int)strlen(b->rows[i].config);
    fprintf(o, "%-13s %-*s %10s %7s %6s %8s %6s %5s  %s\n", "kernel", cw,
            "config", "us", "TB/s", "%bw", "TFLOP/s", "%peak", "MHz",
            "baselines, same run (their us / ours)");
    for (int i = 0; i < b->n_rows; i++) {
        kernel_row *r = &b->rows[i];
        double s = r->us * 1e-6;
        char base[MAX_ROW_BASELINES * 80] = "";
        for (int j = 0, len = 0; j < r->n_base; j++) {
            const row_baseline *x = &r->base[j];
            char at[24] = "";
            if (isfinite(x->mhz))
                snprintf(at, sizeof at, " @%.0f", x->mhz);
            if (isfinite(x->us) && len < (int)sizeof base)
                len += snprintf(base + len, sizeof base - len,
                                "%s%s %.2f us%s (%.2fx)", len ? "  " : "",
                                x->name, x->us, at, x->us / r->us);
        }
        fprintf(o, "%-13s %-*s %10.2f %7s %6s %8s %6s %5s  %s\n", r->kernel,
                cw, r->config, r->us,
                cell(c1, sizeof c1, "%.2f",
                     r->bytes > 0 ? r->bytes / s / 1e12 : NAN),
                cell(c2, sizeof c2, "%.1f%%",
                     100 * of_peak(r->bytes / s, b->peak.bytes_per_s)),
                cell(c3, sizeof c3, "%.1f",
                     r->flops > 0 ? r->flops / s / 1e12 : NAN),
                cell(c4, sizeof c4, "%.1f%%",
                     100 * of_peak(r->flops / s, row_peak(b, r))),
                cell(c5, sizeof c5, "%.0f", r->mhz), base);
    }
}

static void
report_table(bench_ctx *b, FILE *o)
{
    char c7[32];
    target t[MAX_LOAD_ROWS * 3 + MAX_OVERHEAD];
    int nt = collect_targets(b, t, (int)(sizeof t / sizeof t[0]));

    fprintf(o, "kdtree-bench %s   NVRTC %s\n", kdtree_version_string(),
            nvrtc_version_text());
    if (b->rt)
        fprintf(o, "device: %s (%s)%s\n", b->device_name,
                kdtree_runtime_arch(b->rt), b->quick ? "   [--quick]" : "");
    else
        fprintf(o, "device: none (%s): compile-only%s\n", b->no_gpu_reason,
                b->quick ? "   [--quick]" : "");

    if (b->n_load)
        table_load(b, o);

    if (b->n_rows)
        table_kernels(b, o);
    if (b->n_cases) {
        fprintf(o, "\nGPU cases:");
        for (int i = 0; i < b->n_cases; i++)
            fprintf(o, "%s %s: %s", i ? ";" : "", b->cases[i].name,
                    b->cases[i].outcome);
        fputc('\n', o);
    }
    if (b->n_over) {
        fprintf(o, "\nHost cost per launch (median wall time per call, "
                "batches of back-to-back calls)\n");
        fprintf(o, "%-13s %-24s %10s %12s %10s\n", "kernel", "config",
                "API us", "cuLaunch us", "added us");
        for (int i = 0; i < b->n_over; i++) {
            overhead_row *r = &b->over[i];
            fprintf(o, "%-13s %-24s %10.3f %12.3f %10.3f\n", r->kernel,
                    r->config, r->api_us, r->bare_us, r->api_us - r->bare_us);
        }
    }
    if (b->n_runs) {
        /* Each script's outcome: a report without baseline figures says
         * why they are missing. */
        fprintf(o, "\nBaseline scripts (same run)\n");
        for (int i = 0; i < b->n_runs; i++)
            fprintf(o, "  %-20s %s\n", b->runs[i].script,
                    b->runs[i].outcome);
    }
    if (b->n_base) {
        int header = 0;
        for (int i = 0; i < b->n_base; i++) {
            const base_row *x = &b->base[i];
            if (x->matched)
                continue;
            if (!header++) {
                fprintf(o, "\nBaselines with no kernel row of ours (same "
                        "run)\n");
                fprintf(o, "%-18s %-20s %-12s %-40s %10s\n", "script",
                        "baseline", "kernel", "config", "us");
            }
            fprintf(o, "%-18s %-20s %-12s %-40s %10.2f\n", x->script,
                    x->label, x->kernel, x->config, x->us);
        }
    }
    if (nt) {
        fprintf(o, "\nTargets (docs/performance.md)\n");
        for (int i = 0; i < nt; i++)
            fprintf(o, "  %-30s %-13s %10s %-2s (limit %g) %s\n", t[i].what,
                    t[i].subject, cell(c7, sizeof c7, "%.3f", t[i].value),
                    t[i].unit, t[i].limit, t[i].met ? "met" : "NOT MET");
    }
    if (b->n_notes) {
        fprintf(o, "\nNotes\n");
        for (int i = 0; i < b->n_notes; i++)
            fprintf(o, "  - %s\n", b->notes[i]);
    }
}

/* Puts each baseline script's medians beside the kernel row of the same
 * kernel and config (the case files and the scripts share config
 * strings), one per label, in the scripts' order. */
static void
match_baselines(bench_ctx *b)
{
    for (int i = 0; i < b->n_rows; i++) {
        kernel_row *r = &b->rows[i];
        for (int j = 0; j < b->n_base; j++) {
            base_row *x = &b->base[j];
            int have = 0;
            if (strcmp(x->kernel, r->kernel) != 0 ||
                strcmp(x->config, r->config) != 0)
                continue;
            for (int k = 0; k < r->n_base; k++)
                have |= strcmp(r->base[k].name, x->label) == 0;
            if (!have && r->n_base < MAX_ROW_BASELINES) {
                row_baseline *rb = &r->base[r->n_base++];
                snprintf(rb->name, sizeof rb->name, "%s", x->label);
                rb->us = x->us;
                rb->mhz = x->mhz;
            }
            x->matched = 1;
        }
    }
}

void
bench_report(bench_ctx *b, FILE *out, int json)
{
    match_baselines(b);
    if (json)
        report_json(b, out);
    else
        report_table(b, out);
    fflush(out);
}
