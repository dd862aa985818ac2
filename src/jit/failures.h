/*
 * jit/failures.h: compiles that failed in this process, by key, so that
 * a storm of retries (every request of a server asking again) costs one
 * compile, not one each.  A failure of memory is not remembered (it may
 * pass).  Bounded: the oldest of KDT_FAILURES_MAX is forgotten first.
 */
#ifndef KDT_JIT_FAILURES_H
#define KDT_JIT_FAILURES_H

#include "cache/key.h"

#define KDT_FAILURES_MAX 32

/* Remembers that compiling `key` failed with `status` and this thread's
 * last error as its detail. */
void kdt_failure_remember(const kdt_key *key, int status);

/* The status a compile of `key` failed with earlier in this process, with
 * its detail made this thread's last error again; 0 when none did. */
int kdt_failure_recall(const kdt_key *key);

#endif /* KDT_JIT_FAILURES_H */
