/*
 * cache/settings.h: the cache's settings, read from the environment each
 * time they are asked for (the miss path only, so tests may change them
 * between calls).  A value that does not parse warns, once per variable
 * and process, and the default is used.
 *
 *   KDTREE_CACHE             off | readonly | readwrite (default)
 *   KDTREE_CACHE_DIR         the user's cache directory; else
 *                            $XDG_CACHE_HOME/kdtree-jit (absolute only),
 *                            else $HOME/.cache/kdtree-jit
 *   KDTREE_CACHE_PATH        read-only layers, colon-separated, searched
 *                            first; then the layers packages add
 *                            (kdtree_add_cache_layer(), not the environment)
 *   KDTREE_CACHE_PREBUILT_DIR  the prebuilt layer, searched after them
 *                            ("" for none; unset: the installed one)
 *   KDTREE_CACHE_MAX_BYTES   the user directory's byte cap
 *   KDTREE_CACHE_SPILL_MAX_BYTES  the spill store's byte cap (0: no
 *                            spill store)
 *   KDTREE_CACHE_LOCK_TIMEOUT  seconds to wait for another compile
 *
 * A relative directory (KDTREE_CACHE_DIR, a component of
 * KDTREE_CACHE_PATH, KDTREE_CACHE_PREBUILT_DIR) is made absolute against
 * the working directory the first time the process reads that value, said
 * at info, and kept: a later chdir() does not move the cache.
 *
 * Layer 1 of the cache (see cache/cache.h): includes only base/.
 */
#ifndef KDT_CACHE_SETTINGS_H
#define KDT_CACHE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

enum kdt_cache_mode {
    KDT_CACHE_OFF = 0,
    KDT_CACHE_READONLY = 1,
    KDT_CACHE_READWRITE = 2
};

/* KDTREE_CACHE as it is now (an unknown value: readwrite, with a warning). */
int kdt_cache_mode(void);
/* The name of a mode ("readonly"). */
const char *kdt_cache_mode_name(int mode);

/* The user's cache directory as configured now (absolute), or NULL when
 * KDTREE_CACHE is off or no directory can be named ($HOME unset).
 * Malloc'ed. */
char *kdt_cache_user_dir(void);

/* The read-only layers in search order ($KDTREE_CACHE_PATH, the package
 * layers, then the prebuilt layer: $KDTREE_CACHE_PREBUILT_DIR when set, ""
 * meaning none, else the installed KDT_PREBUILT_CACHE_DIR).  Base
 * directories, without the v<FORMAT> part; free with kdt_cache_free_dirs().
 * NULL with *n = 0 when there are none (or no memory for them). */
char **kdt_cache_layer_dirs(size_t *n);
void kdt_cache_free_dirs(char **dirs, size_t n);

/* At most this many package layers (a process has one or two: the
 * companion cubin package, a framework's own). */
#define KDT_CACHE_MAX_PACKAGE_LAYERS 8

/* kdtree_add_cache_layer(): a read-only layer a package ships, named
 * `name` in messages.  Returns 0 when added, 1 when `dir` was there
 * already (unchanged), -1 when the table is full or memory ran out. */
int kdt_cache_add_package_layer(const char *dir, const char *name);

/* The package layers as "NAME (DIR)", "; "-joined, into buf ("" when there
 * are none; cut at `size`). */
void kdt_cache_package_layers_text(char *buf, size_t size);

/* Default byte cap of the user's directory. */
#define KDT_CACHE_DEFAULT_MAX_BYTES ((uint64_t)1 << 30)

/* Parses a byte count: decimal digits (nothing before them, not even a
 * blank or a sign), then optionally one of K, M, G, T (powers of 1024).
 * Returns 0 with *out set, or -1. */
int kdt_cache_parse_size(const char *s, uint64_t *out);

/* KDTREE_CACHE_MAX_BYTES (0: no cap), default KDT_CACHE_DEFAULT_MAX_BYTES. */
uint64_t kdt_cache_max_bytes(void);

/* The spill store: a node-local cache directory (tmpfs, beside the lock
 * directory) that stands in for a user's directory the process cannot
 * write, so that the processes of a node still share one compile of each
 * key (cache/cache.h).  KDTREE_CACHE_SPILL_MAX_BYTES caps it, parsed as
 * KDTREE_CACHE_MAX_BYTES is; 0 means no spill store at all (it holds
 * memory: tmpfs pages are RAM). */
#define KDT_CACHE_SPILL_DEFAULT_MAX_BYTES ((uint64_t)256 << 20)
uint64_t kdt_cache_spill_max_bytes(void);

/* KDTREE_CACHE_LOCK_TIMEOUT: how long the miss path waits for another
 * process's compile of a key before it takes the compile over.  Decimal
 * seconds ("12", "0.5"; 0: never wait), at most the bound below; anything
 * else warns once and means the default. */
#define KDT_CACHE_LOCK_TIMEOUT_DEFAULT 120.0
/* An hour: no compile takes that long, and a bound keeps "1e7" (115 days)
 * from passing for a number. */
#define KDT_CACHE_LOCK_TIMEOUT_MAX 3600.0
double kdt_cache_lock_timeout(void);

/* The node-local directory for the per-key locks, malloc'ed:
 * $XDG_RUNTIME_DIR/kdtree-jit-locks, else /dev/shm/kdtree-jit-<uid>, else
 * /tmp/kdtree-jit-locks-<uid>. */
char *kdt_cache_lock_dir(void);

/* The spill store's base directory, beside it, malloc'ed:
 * $XDG_RUNTIME_DIR/kdtree-jit-spill, else /dev/shm/kdtree-jit-spill-<uid>,
 * else /tmp/kdtree-jit-spill-<uid>.  Never the cache directory. */
char *kdt_cache_spill_dir(void);

#endif /* KDT_CACHE_SETTINGS_H */
