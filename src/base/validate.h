/*
 * base/validate.h: argument checks shared by every public entry point.  Each
 * returns 0 or records which argument was wrong and why, and returns the
 * status, so an entry point reads as a list of checks.
 */
#ifndef KDT_VALIDATE_H
#define KDT_VALIDATE_H

#include <stdint.h>

#include "kdtree.h"

/* rt is not NULL. */
int kdt_check_runtime(const kdtree_runtime *rt, const char *fn);
/* A required device pointer: not 0, and a multiple of `align` bytes. */
int kdt_check_ptr(const char *fn, const char *name, uint64_t ptr,
                  unsigned align);
/* An optional device pointer: 0, or a multiple of `align` bytes. */
int kdt_check_opt_ptr(const char *fn, const char *name, uint64_t ptr,
                      unsigned align);
/* lo <= v <= hi, else KDTREE_ERROR_INVALID_ARGUMENT naming the argument. */
int kdt_check_arg(const char *fn, const char *name, int64_t v, int64_t lo,
                  int64_t hi);
/* A non-NULL host pointer (an out-parameter, a string). */
int kdt_check_host(const char *fn, const char *name, const void *p);

#endif /* KDT_VALIDATE_H */
