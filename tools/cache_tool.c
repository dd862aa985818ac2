/*
 * tools/cache_tool.c: kdtree-cache's usage and its usage errors, shared
 * by the commands (tools/kdtree-cache.c) and explain
 * (tools/cache_explain.c).
 */
#include <stdio.h>

#include "cache_tool.h"

static const char usage_text[] =
    "usage: kdtree-cache [--dir DIR] COMMAND [ARGS]\n"
    "  list [--all]              entries: kernel, shape, target, kind, NVRTC,\n"
    "                            size, last used\n"
    "  resources [--all]         per kernel function of each cubin: registers,\n"
    "                            stack (spills), static shared memory, bounds\n"
    "  verify [--all] [--delete] check every entry (exit 1 if any is bad)\n"
    "  explain KERNEL [SHAPE] [--arch A] [--nvrtc V]\n"
    "                            would this lookup hit? if not, which preimage\n"
    "                            field differs from the nearest entry\n"
    "  populate [--arch LIST] [KERNEL[:SHAPE]]...\n"
    "                            compile-only into the cache (default: every\n"
    "                            kernel's default shape for sm_90a sm_100 sm_120)\n"
    "  gc [--max-bytes N]        sweep temp files, drop bad entries, evict LRU\n"
    "  clear                     remove every entry of the user's cache\n"
    "--all: also the read-only layers (KDTREE_CACHE_PATH, the prebuilt one).\n"
    "exit: 0 ok, 1 bad entry / would miss / compile failed, 2 usage, 3 cache "
    "unusable\n";

void
kdt_tool_usage(FILE *o)
{
    fputs(usage_text, o);
}

int
kdt_tool_usage_error(const char *fmt, const char *what)
{
    fprintf(stderr, "kdtree-cache: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    kdt_tool_usage(stderr);
    return EXIT_USAGE;
}

