/*
 * tools/cache_explain.h: kdtree-cache explain (tools/cache_explain.c).
 */
#ifndef KDT_TOOL_CACHE_EXPLAIN_H
#define KDT_TOOL_CACHE_EXPLAIN_H

/* explain KERNEL [SHAPE] --arch A [--nvrtc V]: would the lookup hit; if
 * not, which preimage fields differ from the nearest entry.  Returns the
 * exit code (tools/cache_tool.h). */
int kdt_tool_explain(const char *kernel, const char *shape, const char *arch,
                     const char *nvrtc);

#endif /* KDT_TOOL_CACHE_EXPLAIN_H */
