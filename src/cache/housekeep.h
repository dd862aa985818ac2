/*
 * cache/housekeep.h: housekeeping of an entry directory: the last-used
 * stamp, the sweep of temp files left by writers that died, removal of
 * what does not belong, and least-recently-used eviction under a byte cap.
 *
 * Last-used stamp: an entry's mtime.  Publishing sets it (the file is
 * new); a disk hit in the user's directory sets it to now.  atime is not
 * used (noatime/relatime mounts make it meaningless).
 *
 * Eviction removes units, oldest first: an entry together with the
 * aliases that name it (they live and die together: an alias without its
 * entry leads nowhere, an entry without its alias is lost to a process
 * without NVRTC).  A unit is as old as its newest member, and a unit that
 * holds a name in `keep` (what was just published) is never evicted, even
 * when it alone is over the cap.
 *
 * Everything here tolerates other processes doing the same at the same
 * time: a file that vanished between readdir and unlink is simply gone
 * already, and a reader that opened an entry before it was evicted still
 * reads it whole (unlink keeps open files).  Logs at debug only.
 *
 * Layer 5 of the cache (see cache/cache.h): includes cache/file.h,
 * cache/layout.h, cache/entry.h, cache/key.h.
 */
#ifndef KDT_CACHE_HOUSEKEEP_H
#define KDT_CACHE_HOUSEKEEP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/entry.h"
#include "cache/layout.h"

/* A temp file of another host older than this is stale (its writer's lock,
 * if any, is on that host's kernel). */
#define KDT_CACHE_TEMP_STALE_S 3600.0
/* A temp file of this host that nobody holds locked is stale once it is
 * this old: its writer died, or is a writer of a release that did not
 * lock its temp files, still writing.  Five minutes is far beyond any
 * publish (a write of a few MB and one fsync). */
#define KDT_CACHE_TEMP_GRACE_S 300.0

/* One name of an entry directory that looks like an entry. */
typedef struct kdt_cache_file {
    char name[KDT_NAME_SIZE]; /* "<32 hex>.kdt" */
    uint64_t size;
    struct timespec mtime;    /* the last-used stamp */
    mode_t mode;              /* type and permissions (not followed) */
} kdt_cache_file;

/* What a sweep, a removal or an eviction did. */
typedef struct kdt_cache_tally {
    int removed;
    int bad;             /* evict: files removed as no entry */
    int failed;          /* removals that failed... */
    char why[320];       /* ...the first one's reason */
    uint64_t bytes_left; /* evict: bytes of the regular entries after */
} kdt_cache_tally;

/* Every entry name of the directory (regular files or not: a FIFO or a
 * directory under an entry's name is listed, for verify and gc to
 * report), oldest stamp first.  Returns 0 or KDTREE_ERROR_OUT_OF_MEMORY;
 * free *files with free(). */
int kdt_cache_scan(int dir_fd, kdt_cache_file **files, size_t *n);

/* Sets the last-used stamp of entry `name` to now.  Best effort. */
void kdt_cache_touch(int dir_fd, const char *name);

/* Removes `name`: a file, or a directory with all it holds (links are
 * removed, never followed).  Counts into *t.  Returns 0 or -1. */
int kdt_cache_remove(int dir_fd, const char *name, kdt_cache_tally *t);

/* Removes stale temp files: this host's that nobody holds locked (the
 * writer died: the kernel dropped its lock, whatever PID namespace it ran
 * in) and that are older than `unlocked_age_s` seconds (the library and
 * the tool pass KDT_CACHE_TEMP_GRACE_S: a writer of an earlier release
 * locks nothing, and its file must outlive its publish), and other
 * hosts' older than `other_host_age_s` seconds (also this host's, on a
 * file system without locks).  Counts into *t. */
void kdt_cache_sweep_temps(int dir_fd, const char *dir,
                           double unlocked_age_s, double other_host_age_s,
                           kdt_cache_tally *t);

/* Why the regular file `name` of `dir_fd`, of `size` bytes, can be no
 * entry, judged by its header alone (cache/entry.h: kdt_entry_peek): an
 * unreadable or unsound header, or a length other than the one it
 * declares.  0 when it may be one, else -1 with the reason in `why`. */
int kdt_cache_bad_header(int dir_fd, const char *name, uint64_t size,
                         char *why, size_t why_size);

/* For verify and gc: an alias is bad when the entry it names is not in
 * its directory `dir_fd` as a regular file with a sound header (an alias
 * without its entry leads nowhere; a publish never leaves one, a crash or
 * a hand may).  `v` is the decoded file.  0 when `v` is no alias or its
 * entry is there, else -1 with the reason in `why`. */
int kdt_cache_alias_orphan(int dir_fd, const kdt_entry_view *v, char *why,
                           size_t why_size);

/* Evicts units (see above) until the directory's regular entries total at
 * most max_bytes (0: no cap), never one holding a name of keep[0..n_keep).
 * Files that are no entry by their header (kdt_cache_bad_header: junk, a
 * truncated or extended entry) go first, logged at info, and their bytes
 * never count against the good entries: a 10 GB junk file costs no good
 * entry its place.  Counts into *t (bytes_left set; `bad` the junk
 * removed). */
void kdt_cache_evict(int dir_fd, const char *dir, uint64_t max_bytes,
                     const char *const *keep, int n_keep,
                     kdt_cache_tally *t);

/* Housekeeping after a publish job wrote `written` bytes into `dir`, kept
 * off most compiles' path (each scan reads every entry's inode): the first
 * publish of the process into a directory sweeps stale temp files and
 * scans its size (evicting); later ones add what they wrote to that
 * estimate and evict again only when it passes the cap.  Other processes'
 * writes are not in the estimate, so each process enforces the cap at its
 * first publish and whenever its own writes could break it.  Safe across
 * fork(). */
void kdt_cache_after_publish(int dir_fd, const char *dir,
                             const char *const *keep, int n_keep,
                             uint64_t written, uint64_t cap);

#endif /* KDT_CACHE_HOUSEKEEP_H */
