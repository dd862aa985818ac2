/*
 * kdtree-bench: the load path (cold, warm, hot) of every registered
 * kernel, each kernel's own GPU time, and the C API's host cost over a bare
 * cuLaunchKernel; without a GPU, compile-only for sm_90a (Hopper, as the
 * runtime builds it) and sm_120.
 *
 * This file is only the command line; the core (bench_ctx.h) does the
 * work.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_suite.h"

#ifndef KDT_BENCH_TOOLS_DIR
#define KDT_BENCH_TOOLS_DIR "tools"
#endif

static void
usage(FILE *o)
{
    fputs("usage: kdtree-bench [--json] [--json-out FILE] [--quick]\n"
          "                    [--arch sm_90a,sm_120] [--compile-only]\n"
          "                    [--device N] [--baseline] [--kernel NAME]\n"
          "                    [--only TEXT] [--peak TB/S,TFLOP/S[,FP8]]\n"
          "                    [--kv LIST] [--math LIST] [--page LIST]\n"
          "                    [--list-attn] [--no-load]\n"
          "\n"
          "  --json          print one JSON object instead of the table\n"
          "  --json-out F    also write the JSON object to F\n"
          "  --quick         fewer repetitions and sizes (tests)\n"
          "  --arch LIST     architectures of the compile-only rows (default\n"
          "                  without a GPU: sm_90a,sm_120; with one: none)\n"
          "  --compile-only  do not touch the GPU even when there is one\n"
          "  --device N      CUDA device ordinal (default 0)\n"
          "  --baseline      also run tools/baseline_topk.py and\n"
          "                  baseline_attn.py (python3 + torch; FlashInfer\n"
          "                  where it imports) and print their medians\n"
          "                  beside ours (each only when its kernel is\n"
          "                  measured)\n"
          "  --kernel NAME   only this kernel (repeatable; a name that is\n"
          "                  not a registered kernel is a usage error)\n"
          "  --only TEXT     only the cases whose configuration (the\n"
          "                  report's config column) contains TEXT, e.g.\n"
          "                  'H=128 R=8 past_len=4096 ' (the baselines\n"
          "                  run on those cases alone, and not at all for\n"
          "                  a kernel it leaves without a case); given up\n"
          "                  to 4 times, a case must contain each TEXT\n"
          "  --peak B,F[,F8] the memory bandwidth (TB/s) and dense bf16\n"
          "                  throughput (TFLOP/s) the %bw and %peak columns\n"
          "                  are of, and the dense FP8 throughput the %peak\n"
          "                  of math=e4m3 rows is of, e.g. 4.3,989,1979 (0\n"
          "                  or left out: not known); default: the device's\n"
          "                  datasheet figures where the bench knows the\n"
          "                  device, else no percentages\n"
          "  --kv LIST       verify_attn's KV cache types: bf16, e4m3 or\n"
          "                  both (default bf16)\n"
          "  --math LIST     verify_attn's arithmetic: bf16, e4m3 or both\n"
          "                  (default bf16; e4m3 only on an e4m3 cache)\n"
          "  --page LIST     verify_attn's page sizes, e.g. 64,1 (default\n"
          "                  64); rows other than bf16 pages of 64 name\n"
          "                  their page=, kv= (with kv_scale=) and math=\n"
          "                  in the config, for --only\n"
          "  --no-load       with a GPU, no load-path rows: only the\n"
          "                  kernels' GPU cases (and the API's cost)\n"
          "  --list-attn     print the verify_attn cases these options\n"
          "                  would measure (config, cache type,\n"
          "                  arithmetic, bytes, FLOPs; tab-separated), one\n"
          "                  a line, and exit: no GPU is used\n"
          "\n"
          "Environment: KDTREE_BENCH_TOOLS (where the baseline scripts are);\n"
          "the bench sets KDTREE_CACHE_DIR to temporary directories for its\n"
          "cold and warm rows and restores it for the GPU cases.\n",
          o);
}

/* The directory of the baseline scripts: $KDTREE_BENCH_TOOLS, else the
 * source tree's tools/ this binary was built from, else beside argv[0]. */
static void
tools_dir(char *out, size_t size, const char *argv0)
{
    const char *env = getenv("KDTREE_BENCH_TOOLS");
    char probe[PATH_MAX];
    if (env && *env) {
        snprintf(out, size, "%s", env);
        return;
    }
    snprintf(probe, sizeof probe, "%s/baseline_topk.py", KDT_BENCH_TOOLS_DIR);
    if (access(probe, R_OK) == 0) {
        snprintf(out, size, "%s", KDT_BENCH_TOOLS_DIR);
        return;
    }
    snprintf(out, size, "%s", argv0);
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(out, size, ".");
}

/* The kernels --kernel named, as a bit per registered kernel index; 0 is
 * every kernel. */
static unsigned only;

static int
wanted(const char *name)
{
    if (!only)
        return 1;
    for (int k = 0; k < kdtree_kernel_count() && k < 32; k++)
        if (strcmp(kdtree_kernel_name(k), name) == 0)
            return (only >> k) & 1;
    return 0;
}

/* Adds a --kernel name; 0, or 2 (usage) for a name that is not a
 * registered kernel: a misspelt one must not measure nothing and pass. */
static int
add_kernel(const char *name)
{
    int n = kdtree_kernel_count();
    for (int k = 0; k < n && k < 32; k++)
        if (strcmp(kdtree_kernel_name(k), name) == 0) {
            only |= 1u << k;
            return 0;
        }
    fprintf(stderr, "kdtree-bench: unknown kernel \"%s\" for --kernel "
            "(the kernels:", name);
    for (int k = 0; k < n; k++)
        fprintf(stderr, "%s %s", k ? "," : "", kdtree_kernel_name(k));
    fputs(")\n", stderr);
    return 2;
}

/* --kv or --math: a list of "bf16" and "e4m3" into a mask of
 * 1 << value (kdtree_kv_dtype and kdtree_attn_math number the two
 * alike); 0, or 2 (usage) for anything else. */
static int
parse_types(const char *opt, const char *s, unsigned *mask)
{
    char *list = strdup(s), *save = NULL;
    int st = 0;
    *mask = 0;
    for (char *t = strtok_r(list, ",", &save); t && !st;
         t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "bf16"))
            *mask |= 1u << KDTREE_KV_BF16;
        else if (!strcmp(t, "e4m3"))
            *mask |= 1u << KDTREE_KV_E4M3;
        else
            st = 2;
    }
    free(list);
    if (st || !*mask) {
        fprintf(stderr, "kdtree-bench: %s wants bf16, e4m3 or bf16,e4m3, "
                "not \"%s\"\n", opt, s);
        return 2;
    }
    return 0;
}

/* --page: page sizes 1..256, at most BENCH_MAX_PAGES of them, no one
 * twice; 0, or 2 (usage). */
static int
parse_pages(const char *s, int *pages, int *n)
{
    char *list = strdup(s), *save = NULL, *end;
    int st = 0;
    *n = 0;
    for (char *t = strtok_r(list, ",", &save); t && !st;
         t = strtok_r(NULL, ",", &save)) {
        long v = strtol(t, &end, 10);
        st = *end || v < 1 || v > 256 || *n == BENCH_MAX_PAGES;
        for (int i = 0; i < *n && !st; i++)
            st = pages[i] == v;
        if (!st)
            pages[(*n)++] = (int)v;
    }
    free(list);
    if (st || !*n) {
        fprintf(stderr, "kdtree-bench: --page wants up to %d different page "
                "sizes of 1..256, e.g. 64,1, not \"%s\"\n", BENCH_MAX_PAGES,
                s);
        return 2;
    }
    return 0;
}

/* The ordinal of --device: digits only (atoi would take "x" as 0). */
static int
parse_device(const char *s, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 0 || v > INT_MAX) {
        fprintf(stderr, "kdtree-bench: --device wants a device ordinal "
                "(0, 1, ...), not \"%s\"\n", s);
        return 2;
    }
    *out = (int)v;
    return 0;
}

int
main(int argc, char **argv)
{
    int json = 0, quick = 0, compile_only = 0, baseline = 0, device = 0;
    int list_attn = 0, no_load = 0;
    const char *archs = NULL, *json_out = NULL, *only = NULL;
    const char *onlies[BENCH_MAX_ONLY];
    int n_only = 0;
    bench_peak peak = {0};
    unsigned kv_mask = 1u << KDTREE_KV_BF16;
    unsigned math_mask = 1u << KDTREE_ATTN_MATH_BF16;
    int pages[BENCH_MAX_PAGES] = {64}, n_pages = 1;
    char why[160];
    int failures = 0;
    static const struct {
        const char *name;
        int (*fn)(bench_ctx *);
    } cases[] = {
        {"draft_topk", bench_draft_topk},
        {"build_ddtree", bench_build_ddtree},
        {"verify_attn", bench_verify_attn},
        {"tree_accept", bench_tree_accept},
    };

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int takes_value = !strcmp(a, "--arch") || !strcmp(a, "--json-out") ||
                          !strcmp(a, "--device") || !strcmp(a, "--kernel") ||
                          !strcmp(a, "--only") || !strcmp(a, "--peak") ||
                          !strcmp(a, "--kv") || !strcmp(a, "--math") ||
                          !strcmp(a, "--page");
        if (takes_value && i + 1 >= argc) {
            fprintf(stderr, "kdtree-bench: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--quick"))
            quick = 1;
        else if (!strcmp(a, "--compile-only"))
            compile_only = 1;
        else if (!strcmp(a, "--baseline"))
            baseline = 1;
        else if (!strcmp(a, "--list-attn"))
            list_attn = 1;
        else if (!strcmp(a, "--no-load"))
            no_load = 1;
        else if (!strcmp(a, "--arch"))
            archs = argv[++i];
        else if (!strcmp(a, "--json-out"))
            json_out = argv[++i];
        else if (!strcmp(a, "--device")) {
            if (parse_device(argv[++i], &device))
                return 2;
        } else if (!strcmp(a, "--kernel")) {
            if (add_kernel(argv[++i]))
                return 2;
        } else if (!strcmp(a, "--only")) {
            only = argv[++i];
            if (n_only == BENCH_MAX_ONLY) {
                fprintf(stderr, "kdtree-bench: --only at most %d times\n",
                        BENCH_MAX_ONLY);
                return 2;
            }
            onlies[n_only++] = only;
            if (!only[0]) {
                fprintf(stderr, "kdtree-bench: --only needs a non-empty "
                                "text\n");
                usage(stderr);
                return 2;
            }
        } else if (!strcmp(a, "--peak")) {
            if (bench_peak_parse(argv[++i], &peak, why, sizeof why)) {
                fprintf(stderr, "kdtree-bench: %s\n", why);
                return 2;
            }
        } else if (!strcmp(a, "--kv")) {
            if (parse_types(a, argv[++i], &kv_mask))
                return 2;
        } else if (!strcmp(a, "--math")) {
            if (parse_types(a, argv[++i], &math_mask))
                return 2;
        } else if (!strcmp(a, "--page")) {
            if (parse_pages(argv[++i], pages, &n_pages))
                return 2;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "kdtree-bench: unknown argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }

    /* e4m3 arithmetic reads an e4m3 cache: a choice with no such pair
     * would measure no verify_attn case */
    if (kv_mask == 1u << KDTREE_KV_BF16 &&
        math_mask == 1u << KDTREE_ATTN_MATH_E4M3) {
        fprintf(stderr, "kdtree-bench: --math e4m3 needs --kv e4m3 (e4m3 "
                "arithmetic reads an e4m3 cache)\n");
        return 2;
    }

    bench_ctx *b = bench_create(quick);
    for (int i = 0; i < n_only; i++)
        bench_set_only(b, onlies[i]);
    bench_set_attn(b, kv_mask, math_mask, pages, n_pages);
    if (list_attn) {
        int n = bench_verify_attn_list(b, stdout);
        bench_destroy(b);
        if (only && !n) {
            fprintf(stderr, "kdtree-bench: --only '%s' matched no "
                            "verify_attn case\n", only);
            return 1;
        }
        return 0;
    }
    if (peak.source)
        bench_set_peak(b, &peak);
    if (compile_only)
        bench_note(b, "--compile-only: the GPU was not used");
    else if (bench_open_gpu(b, device) != 0)
        bench_note(b, "no GPU, compile-only: %s", kdtree_last_error());

    int n_kernels = kdtree_kernel_count();
    if (bench_has_gpu(b) && !no_load)
        for (int k = 0; k < n_kernels; k++)
            if (wanted(kdtree_kernel_name(k)))
                failures += bench_load_gpu(b, k) != 0;

    /* Compile-only rows: always without a GPU, and with one when asked. */
    if (!archs && !bench_has_gpu(b))
        archs = "sm_90a,sm_120"; /* Hopper as the runtime builds it */
    if (archs) {
        char *list = strdup(archs), *save = NULL;
        for (char *a = strtok_r(list, ",", &save); a;
             a = strtok_r(NULL, ",", &save))
            for (int k = 0; k < n_kernels; k++)
                if (wanted(kdtree_kernel_name(k)))
                    failures += bench_load_compile(b, k, a) != 0;
        free(list);
    }

    if (bench_has_gpu(b)) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (wanted(cases[i].name))
                failures +=
                    bench_run_case(b, cases[i].name, cases[i].fn) != 0;
        if (wanted("tree_accept"))
            failures += bench_run_case(b, "api_overhead",
                                       bench_tree_accept_overhead) != 0;
        if (only && bench_cases_measured(b) == 0) {
            /* a typo must not read as a run that measured nothing */
            fprintf(stderr, "kdtree-bench: --only '%s' matched no case of "
                            "the kernels measured\n", only);
            failures++;
        }
    }

    if (baseline) {
        char dir[PATH_MAX];
        tools_dir(dir, sizeof dir, argv[0]);
        /* Only the baselines of the kernels measured (--kernel). */
        bench_run_baselines(b, dir, wanted("draft_topk"),
                            wanted("verify_attn"));
    }

    if (json_out) {
        FILE *f = fopen(json_out, "w");
        if (f) {
            bench_report(b, f, 1);
            fclose(f);
        } else {
            perror(json_out);
            failures++;
        }
    }
    bench_report(b, stdout, json);
    bench_destroy(b);
    /* Figures are reported, never judged: only a failure to measure
     * (a kernel that did not compile, a case that aborted) fails. */
    return failures ? 1 : 0;
}
