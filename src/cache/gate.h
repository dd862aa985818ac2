/*
 * cache/gate.h: one compile per key inside a process, whatever the cache
 * may do.
 *
 * The node-wide lock (cache/lock.h) is taken only where a publish will
 * follow; a process with KDTREE_CACHE=off or readonly, without a usable
 * directory, without a usable lock directory, or on a file system without
 * flock() takes none, and its threads compiled one key once each (32
 * threads, 32 compiles).  The gate is the in-process half of the miss
 * path's claim on a key: the first thread enters, the others wait until
 * it leaves, by then the blob is in the memory layer, so they find it
 * there.  A mutex and a condition variable, no file: it costs nothing
 * where the disk is not used.
 *
 * fork(): the child forgets every thread's place in the gate (only the
 * forking thread survives, and it leaves its own place as it would have);
 * the mutex is held across the fork.
 *
 * Layer 2 of the cache (see cache/cache.h): includes cache/key.h.
 */
#ifndef KDT_CACHE_GATE_H
#define KDT_CACHE_GATE_H

#include "cache/key.h"

typedef struct kdt_gate kdt_gate;

/* Enters the gate of `key`: at once when no other thread of the process
 * is inside, else after that thread leaves, waiting at most `timeout_s`
 * seconds (0: not at all).  Returns the place to leave, or NULL when the
 * wait timed out or no memory was left (the caller then goes on without
 * the gate: a second compile, never a hang).  *waited is set to 1 when
 * another thread was inside. */
kdt_gate *kdt_gate_enter(const kdt_key *key, double timeout_s, int *waited);

/* Leaves the gate, waking the threads that wait for it.  NULL is fine. */
void kdt_gate_leave(kdt_gate *g);

#endif /* KDT_CACHE_GATE_H */
