/*
 * cache_testutil.h: shared set-up of the cache tests: a private temp tree
 * per test (user cache, layers, lock directory) with the environment
 * pointing at it, and fake entries.
 */
#ifndef KDT_CACHE_TESTUTIL_H
#define KDT_CACHE_TESTUTIL_H

#include <check.h>
#include <stddef.h>

#include "cache/cache.h"
#include "cache/key.h"

/* The test's temp directory ("/tmp/kdt-cache-XXXXXX"). */
extern char ct_base[256];
/* $KDTREE_CACHE_DIR: ct_base/user. */
extern char ct_user[300];

/* Makes ct_base and points every cache variable into it:
 * KDTREE_CACHE_DIR=ct_base/user, XDG_RUNTIME_DIR=ct_base/run (locks),
 * KDTREE_CACHE_PREBUILT_DIR="" and no KDTREE_CACHE, KDTREE_CACHE_PATH,
 * KDTREE_CACHE_MAX_BYTES.  Also forgets the memory layer. */
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
/* Points KDTREE_CACHE_DIR below a regular file of ct_base: a directory
 * that cannot be created (ENOTDIR, which stops root too; chmod does not,
 * and CI runs as root). */
void ct_unwritable_dir(void);
/* Whether NVRTC loads and compiles `kernel` at `shape` for sm_90, asked in
 * a child (cache off) so the calling process stays clean. */
int ct_nvrtc_available(const char *kernel, const char *shape);

/* A test case with the ct_setup/ct_teardown fixture and a timeout. */
TCase *ct_tcase(const char *name, int timeout_s);
/* Runs `tc` as suite `name` (each test forked); EXIT_SUCCESS or
 * EXIT_FAILURE for main() to return. */
int ct_run(const char *name, TCase *tc);

#endif
