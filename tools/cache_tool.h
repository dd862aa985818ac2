/*
 * tools/cache_tool.h: what every part of kdtree-cache says the same way:
 * its exit codes and its usage (tools/cache_tool.c).
 */
#ifndef KDT_TOOL_CACHE_TOOL_H
#define KDT_TOOL_CACHE_TOOL_H

#include <stdio.h>

/* The exit codes, for scripts (the usage text lists them). */
enum { EXIT_OK = 0, EXIT_NO = 1, EXIT_USAGE = 2, EXIT_CACHE = 3 };

/* The usage text on `o`. */
void kdt_tool_usage(FILE *o);
/* Prints "kdtree-cache: " and fmt (with one %s: `what`), then the usage,
 * on stderr; returns EXIT_USAGE. */
int kdt_tool_usage_error(const char *fmt, const char *what);

#endif /* KDT_TOOL_CACHE_TOOL_H */
