/*
 * cache/admin.h: the cache's internals that tools/kdtree-cache and the
 * tests need beyond cache.h: where things live, the trust rules, reading an
 * entry file, and the housekeeping (stale temp files, LRU eviction).
 *
 * Last-used stamp: an entry's mtime.  Publishing sets it (the file is
 * new); a disk hit in the user's directory sets it to now with
 * utimensat().  Eviction removes the oldest mtimes first.  atime is not
 * used (noatime/relatime mounts make it meaningless).
 *
 * Trust: the user's directory, its v<FORMAT> subdirectory and every entry
 * must be owned by this effective uid and not writable by group or others;
 * a read-only layer may also be owned by root (an installed prebuilt
 * layer).  Anything else is refused with a logged reason.
 */
#ifndef KDT_CACHE_ADMIN_H
#define KDT_CACHE_ADMIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/cache.h"

/* The fixed header of an entry (see cache/entry.c for the layout). */
#define KDT_ENTRY_HEADER_SIZE 72
/* Bounds a decoder accepts: far above any real kernel, far below sizes
 * whose sum could overflow. */
#define KDT_ENTRY_MAX_PREIMAGE ((uint64_t)16 << 20)
#define KDT_ENTRY_MAX_PAYLOAD ((uint64_t)512 << 20)

/* Default byte cap of the user's directory (KDTREE_CACHE_MAX_BYTES). */
#define KDT_CACHE_DEFAULT_MAX_BYTES ((uint64_t)1 << 30)
/* A temp file older than this is stale even if its writer cannot be
 * checked (another host on a shared home directory). */
#define KDT_CACHE_TEMP_STALE_S 3600.0

enum kdt_cache_mode {
    KDT_CACHE_OFF = 0,
    KDT_CACHE_READONLY = 1,
    KDT_CACHE_READWRITE = 2
};

/* KDTREE_CACHE as it is now (unknown values: readwrite, warned once). */
int kdt_cache_mode(void);

/* "<base>/v<FORMAT>", malloc'ed, or NULL. */
char *kdt_cache_entry_dir(const char *base);

/* The read-only layers in search order ($KDTREE_CACHE_PATH, then the
 * prebuilt layer: $KDTREE_CACHE_PREBUILT_DIR when set, "" meaning none,
 * else the installed KDT_PREBUILT_CACHE_DIR).  Base directories, without
 * the v<FORMAT> part; free with kdt_cache_free_dirs(). */
char **kdt_cache_layer_dirs(size_t *n);
void kdt_cache_free_dirs(char **dirs, size_t n);

/* 0 when `st` passes the trust rules above (allow_root: a read-only
 * layer), else -1 with the reason in `why`. */
int kdt_cache_trusted(const struct stat *st, int allow_root, char *why,
                      size_t why_size);

/* Reads one entry file into a malloc'ed buffer after checking that it and
 * its directory are trusted, regular and of a size a valid entry can have.
 * Returns 0 with *buf and *size set, 1 when there is no such file, -1 when it
 * was refused or unreadable (reason in `why`), or
 * KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_cache_read_file(const char *path, int allow_root, void **buf,
                        size_t *size, char *why, size_t why_size);

/* Writes one entry to <entry_dir>/<hex>.kdt: temp file (O_EXCL, named
 * .<hex>.<pid>.<n>.<host>.tmp) in the same directory, fsync (when
 * `durable`), rename; creates the directories 0700.  Returns 0, or -1 with
 * errno set and a reason in `why`.  Not durable is for alias entries only:
 * a hint that is verified like any entry, so one left empty by a power cut
 * is a miss, and skipping its fsync keeps ~0.7 ms off every cold compile.
 * Test hooks, between writing the halves of the file: `delay_us`
 * (kdt_cache_publish_delay_us()) is slept, so a kill or a fork can land
 * mid-write; with `gate` (kdt_cache_publish_gate()) non-NULL the publish
 * waits until that path exists (at most 30 s), so a test decides when an
 * in-flight publish may finish, whatever the machine's load.  Reads no
 * environment (it runs on the publishing thread). */
int kdt_cache_publish(const char *base, const kdt_key *key, const void *data,
                      size_t size, int durable, unsigned long delay_us,
                      const char *gate, char *why, size_t why_size);

/* KDTREE_CACHE_TEST_PUBLISH_DELAY_US, microseconds (0 when unset). */
unsigned long kdt_cache_publish_delay_us(void);

/* KDTREE_CACHE_TEST_PUBLISH_GATE, a path (NULL when unset or empty). */
const char *kdt_cache_publish_gate(void);

/* ---- publish jobs (cache.c builds and runs them, cache/async.c queues) -- */

/* One encoded entry of a job. */
typedef struct kdt_publish_entry {
    kdt_key key;
    void *enc; /* kdt_entry_encode()'s buffer, owned by the job */
    size_t size;
    int durable; /* 0 for an alias (see kdt_cache_publish) */
} kdt_publish_entry;

/* Everything one store writes to disk, self-contained: the settings it
 * needs were read from the environment when it was built (the publishing
 * thread must not call getenv(), which races a setenv() elsewhere), and it
 * owns copies of the data, so the caller's buffers are free once it is
 * built.  `lock` (may be NULL) is released after the last entry is
 * published, so a process waiting on it finds every entry complete. */
typedef struct kdt_publish_job {
    struct kdt_publish_job *next; /* the queue's link */
    char *base;                   /* the user's cache directory */
    uint64_t max_bytes;           /* KDTREE_CACHE_MAX_BYTES */
    unsigned long delay_us;       /* the test hooks above */
    char *gate;                   /* (owned; NULL without the hook) */
    kdt_cache_lock *lock;
    int n;
    kdt_publish_entry e[];
} kdt_publish_job;

/* Publishes each entry of `job` and does the housekeeping that follows
 * (sweep, eviction).  Failures are logged (the first one of the process as
 * a warning) and leave the entries in memory only; nothing is returned and
 * no thread's last error is set.  Leaves `job` itself unchanged. */
void kdt_cache_job_publish(kdt_publish_job *job);
/* Releases the job's lock and frees it. */
void kdt_cache_job_free(kdt_publish_job *job);
/* Frees a job inherited over fork() without publishing it or releasing
 * its lock: both are the parent's (kdt_cache_lock_forget). */
void kdt_cache_job_discard(kdt_publish_job *job);

/* Hands `job` to the process's publishing thread (started on the first
 * call).  Returns 0 when it was queued (the thread now owns it), -1 when
 * the caller must run it itself: the queue is full
 * (KDT_CACHE_QUEUE_MAX jobs waiting), the thread cannot be started, or the
 * library is being unloaded. */
int kdt_cache_async_submit(kdt_publish_job *job);
#define KDT_CACHE_QUEUE_MAX 64
/* The publishing thread's name (/proc/<pid>/task/<tid>/comm). */
#define KDT_CACHE_THREAD_NAME "kdtree-publish"

/* A child's copy of a lock its parent holds, after fork(): closes the
 * child's descriptor and frees the handle, but neither unlocks nor unlinks
 * (see cache/lock.c). */
void kdt_cache_lock_forget(kdt_cache_lock *lock);

/* This host's name reduced to [A-Za-z0-9-] (at most 40 characters), as it
 * appears in temp names. */
void kdt_cache_host_tag(char *out, size_t size);

/* One file of an entry directory, from kdt_cache_scan(). */
typedef struct kdt_cache_file {
    char *path;           /* malloc'ed */
    char name[64];        /* "<32 hex>.kdt" */
    uint64_t size;
    struct timespec mtime; /* the last-used stamp */
} kdt_cache_file;

/* The entries (*.kdt regular files with a 32-hex name) of `entry_dir`,
 * oldest stamp first.  Returns 0 (an absent directory is empty) or a
 * negative status. */
int kdt_cache_scan(const char *entry_dir, kdt_cache_file **files, size_t *n);
void kdt_cache_scan_free(kdt_cache_file *files, size_t n);

/* Sets an entry's last-used stamp to now.  Best effort. */
void kdt_cache_touch(const char *path);

/* Removes stale temp files of `entry_dir`: those whose writer (same host)
 * is dead, and any older than min_age_s seconds.  Returns how many. */
int kdt_cache_sweep_temps(const char *entry_dir, double min_age_s);

/* KDTREE_CACHE_MAX_BYTES: bytes, with an optional K/M/G/T suffix (powers
 * of 1024); 0 means no cap.  Default KDT_CACHE_DEFAULT_MAX_BYTES. */
uint64_t kdt_cache_max_bytes(void);

/* Removes least-recently-used entries until the directory's entries total
 * at most max_bytes (0: no cap), never the one named `keep` (may be NULL).
 * Returns how many were removed; *bytes_left gets the total after. */
int kdt_cache_evict(const char *entry_dir, uint64_t max_bytes,
                    const char *keep, uint64_t *bytes_left);

/* The node-local directory for the per-key locks, malloc'ed:
 * $XDG_RUNTIME_DIR/kdtree-jit-locks, else /dev/shm/kdtree-jit-<uid>, else
 * /tmp/kdtree-jit-locks-<uid>. */
char *kdt_cache_lock_dir(void);

#endif /* KDT_CACHE_ADMIN_H */
