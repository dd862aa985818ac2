/*
 * cuda/dl.h: what the loader says about a library libkdtree dlopened.
 */
#ifndef KDT_DL_H
#define KDT_DL_H

#include <stddef.h>

/* The file handle `h` (opened as `name`) came from: the loader's resolved
 * path when `name` is a bare soname, else `name` itself. */
void kdt_dl_path(void *h, const char *name, char *out, size_t size);

#endif /* KDT_DL_H */
