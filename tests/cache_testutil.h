/*
 * cache_testutil.h: shared set-up of the cache tests: a private temp tree
 * per test (user cache, layers, lock directory) with the environment
 * pointing at it, and fake entries.
 */
#ifndef KDT_CACHE_TESTUTIL_H
#define KDT_CACHE_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <sys/types.h>

#include "cache/cache.h"
#include "cache/entry.h"
#include "cache/key.h"
#include "kdtree.h"

/* The test's temp directory ("/tmp/kdt-cache-XXXXXX"). */
extern char ct_base[256];
/* $KDTREE_CACHE_DIR: ct_base/user. */
extern char ct_user[300];
/* The spill store (cache/settings.h): ct_base/run/kdtree-jit-spill. */
extern char ct_spill[340];

/* Makes ct_base and points every cache variable into it:
 * KDTREE_CACHE_DIR=ct_base/user, XDG_RUNTIME_DIR=ct_base/run (locks),
 * KDTREE_CACHE_PREBUILT_DIR="" and no KDTREE_CACHE, KDTREE_CACHE_PATH,
 * KDTREE_CACHE_MAX_BYTES, KDTREE_CACHE_SPILL_MAX_BYTES.  Also forgets the
 * memory layer. */
void ct_setup(void);
/* Removes ct_base. */
void ct_teardown(void);
void ct_rm_rf(const char *path);

/* A preimage for a fake kernel and target, and its key. */
void ct_preimage(kdt_preimage *p, const char *kernel, const char *target,
                 kdt_key *key);
/* A payload of `size` bytes derived from `seed`. */
kdt_blob ct_blob(size_t size, unsigned seed);

/* <base>/v<FORMAT>/<hex>.kdt, malloc'ed. */
char *ct_entry_path(const char *base, const kdt_key *key);
/* Whole-file helpers; return 0 on success. */
int ct_read(const char *path, void **buf, size_t *size);
int ct_write(const char *path, const void *buf, size_t size, int mode);
/* Encodes an entry and writes it at `path` (creating directories 0700). */
void ct_write_entry(const char *path, const kdt_key *key, const char *pre,
                    size_t pre_len, const kdt_blob *blob);
/* mkdir -p with 0700. */
void ct_mkdirs(const char *path);

/* Runs fn() with this process's stderr captured; returns how many lines
 * it wrote that contain `needle`. */
int ct_count_log_lines(void (*fn)(void), const char *needle);
/* Captures this process's stderr from now on ... */
void ct_capture_begin(void);
/* ... until here: returns what was written (malloc'ed, NUL-terminated). */
char *ct_capture_end(void);
/* How many lines of `text` contain `needle`. */
int ct_count_lines(const char *text, const char *needle);
/* An alias's preimage for the entry ct_preimage(kernel, target) makes: the
 * same records without the last, NVRTC's, then "alias nvrtc"; its payload
 * is that NVRTC text (ct_alias_blob). */
void ct_alias_preimage(kdt_preimage *p, const char *kernel,
                       const char *target, kdt_key *key);
kdt_blob ct_alias_blob(void);
/* Makes the last-used stamp of `path` `t` seconds after 2001-09-09. */
void ct_stamp(const char *path, int t);
/* Points KDTREE_CACHE_DIR below a regular file of ct_base: a directory
 * that cannot be created (ENOTDIR, which stops root too; chmod does not,
 * and CI runs as root). */
void ct_unwritable_dir(void);
/* Looks `key` up with an empty memory layer: 1 hit (*out filled, unless
 * out is NULL), 0 miss. */
int ct_disk_lookup(const kdt_key *key, const kdt_preimage *p, kdt_blob *out,
                   int *from);
/* 1 when two blobs are the same bytes of the same kind. */
int ct_same_blob(const kdt_blob *a, const kdt_blob *b);
/* kdtree_cache_stats_get(), asserted to succeed. */
kdtree_cache_stats ct_stats(void);
/* 1 when a valid entry for `key` is in the user's directory (with payload
 * `want`, when not NULL), 0 when there is none, -1 when there is one that
 * the library would refuse.  No ck_assert: children call it too. */
int ct_entry_state(const kdt_key *key, const kdt_blob *want);
/* The same in the base directory `base` (ct_spill, say). */
int ct_entry_state_in(const char *base, const kdt_key *key,
                      const kdt_blob *want);
/* How many names of the user's entry directory look like entries. */
size_t ct_count_entries(void);
/* ct_user's entry directory opened, created if missing (asserted), for
 * the housekeeping functions. */
int ct_open_user_dir(void);

/* kdt_cache_lock_acquire() as the miss path takes it: the claim when it
 * holds the node-wide lock, else NULL (the claim released).  No
 * ck_assert: children call it too. */
kdt_cache_lock *ct_node_lock(const kdt_key *key);

/* 1 when `l` holds the node-wide lock for the cache directory `base`
 * (ct_user, ct_spill). */
int ct_locked_for(const kdt_cache_lock *l, const char *base);

/* A holder: a child that takes the node-wide lock of `key` (with the
 * environment as it is), then waits for a byte on `go` (or, with go < 0,
 * forever), releases and exits.  Returns its pid once it holds the lock
 * (asserted). */
pid_t ct_holder(const kdt_key *key, int go);
/* Kills (SIGKILL, and SIGCONT should it be stopped) and reaps `pid`. */
void ct_reap(pid_t pid);
/* The miss path's store of `kernel`'s entry (for sm_90, a 5000-byte
 * payload) and its alias, handing over `lock` (may be NULL), then the wait
 * for their publish.  Sets *key and *alias. */
void ct_store_pair(const char *kernel, kdt_cache_lock *lock, kdt_key *key,
                   kdt_key *alias);
/* kdtree_compile() of tree_accept (its default shape) for sm_90 in `n`
 * processes at once (at most 8), each with its stderr in a file; asserts
 * that each succeeded.  Returns their stderr, all of it (malloc'ed). */
char *ct_compile_in_processes(int n);
/* ct_compile_in_processes(n) at KDTREE_LOG=info, with a lock timeout
 * longer than any test, asserting that the node compiled the key once
 * (their log goes to stderr when not).  Returns their stderr. */
char *ct_compile_once_in_processes(int n);
/* KDTREE_LOG=level, read again. */
void ct_log_at(const char *level);

/* A test case with the ct_setup/ct_teardown fixture and a timeout. */
TCase *ct_tcase(const char *name, int timeout_s);
/* The suite `name` of the one test case `tc`, for kdt_test_main()
 * (tests/harness.h), which runs it with each test forked. */
Suite *ct_suite(const char *name, TCase *tc);

#endif
