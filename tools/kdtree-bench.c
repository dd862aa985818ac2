/*
 * kdtree-bench: the load path (cold, warm, hot) of every registered
 * kernel, each kernel's own GPU time, and the C API's host cost over a bare
 * cuLaunchKernel; without a GPU, compile-only for sm_90a (Hopper, as the
 * runtime builds it) and sm_120.
 *
 * This file is only the command line; the core (bench_ctx.h) does the
 * work.
 */
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
          "  --kernel NAME   only this kernel (repeatable)\n"
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

static int
wanted(const char *name, char **only, int n_only)
{
    if (!n_only)
        return 1;
    for (int i = 0; i < n_only; i++)
        if (strcmp(only[i], name) == 0)
            return 1;
    return 0;
}

int
main(int argc, char **argv)
{
    int json = 0, quick = 0, compile_only = 0, baseline = 0, device = 0;
    const char *archs = NULL, *json_out = NULL;
    char *only[16];
    int n_only = 0, failures = 0;
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
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--quick"))
            quick = 1;
        else if (!strcmp(a, "--compile-only"))
            compile_only = 1;
        else if (!strcmp(a, "--baseline"))
            baseline = 1;
        else if (!strcmp(a, "--arch") && i + 1 < argc)
            archs = argv[++i];
        else if (!strcmp(a, "--json-out") && i + 1 < argc)
            json_out = argv[++i];
        else if (!strcmp(a, "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (!strcmp(a, "--kernel") && i + 1 < argc && n_only < 16)
            only[n_only++] = argv[++i];
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "kdtree-bench: unknown argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }

    bench_ctx *b = bench_create(quick);
    if (compile_only)
        bench_note(b, "--compile-only: the GPU was not used");
    else if (bench_open_gpu(b, device) != 0)
        bench_note(b, "no GPU, compile-only: %s", kdtree_last_error());

    int n_kernels = kdtree_kernel_count();
    if (bench_has_gpu(b))
        for (int k = 0; k < n_kernels; k++)
            if (wanted(kdtree_kernel_name(k), only, n_only))
                failures += bench_load_gpu(b, k) != 0;

    /* Compile-only rows: always without a GPU, and with one when asked. */
    if (!archs && !bench_has_gpu(b))
        archs = "sm_90a,sm_120"; /* Hopper as the runtime builds it */
    if (archs) {
        char *list = strdup(archs), *save = NULL;
        for (char *a = strtok_r(list, ",", &save); a;
             a = strtok_r(NULL, ",", &save))
            for (int k = 0; k < n_kernels; k++)
                if (wanted(kdtree_kernel_name(k), only, n_only))
                    failures += bench_load_compile(b, k, a) != 0;
        free(list);
    }

    if (bench_has_gpu(b)) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (wanted(cases[i].name, only, n_only))
                failures +=
                    bench_run_case(b, cases[i].name, cases[i].fn) != 0;
        if (wanted("tree_accept", only, n_only))
            failures += bench_run_case(b, "api_overhead",
                                       bench_tree_accept_overhead) != 0;
    }

    if (baseline) {
        char dir[PATH_MAX];
        tools_dir(dir, sizeof dir, argv[0]);
        /* Only the baselines of the kernels measured (--kernel). */
        bench_run_baselines(b, dir, wanted("draft_topk", only, n_only),
                            wanted("verify_attn", only, n_only));
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
