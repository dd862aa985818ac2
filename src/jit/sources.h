/*
 * jit/sources.h: the kernel sources embedded in the library (generated from
 * kernels_src/ at build time into src/jit/kdt_sources.c by
 * build-aux/embed-sources.sh).
 */
#ifndef KDT_JIT_SOURCES_H
#define KDT_JIT_SOURCES_H

#include <stddef.h>

/* The text of embedded file `name` ("tree_accept.cu") and its length;
 * NULL when there is no such file. */
const char *kdt_source_text(const char *name, size_t *len);
size_t kdt_source_count(void);
const char *kdt_source_name(size_t i);

#endif /* KDT_JIT_SOURCES_H */
