/*
 * cache/file.h: the cache's file I/O and its trust rules.
 *
 * Trust: every directory and file the library reads or writes in a cache
 * (the base directory, its v<FORMAT>/ subdirectory, each entry) must be
 * owned by this effective uid and not writable by group or others; in a
 * read-only layer root may own them too (an installed prebuilt layer).
 * The base directory may be a symlink (a user may keep ~/.cache
 * elsewhere) when the link itself is ours (or, in a layer, root's); v1/
 * and entries never are.  An entry must be a regular file: it is checked
 * with fstatat() before it is opened, and opened with O_NONBLOCK, so a
 * FIFO or a device at an entry path can never block a lookup.  Anything
 * else is refused with a reason; nothing here logs.
 *
 * Layer 4 of the cache (see cache/cache.h): includes cache/entry.h,
 * cache/layout.h and base/.
 */
#ifndef KDT_CACHE_FILE_H
#define KDT_CACHE_FILE_H

#include <stddef.h>
#include <sys/stat.h>

/* Room for a reason.  Reasons name files relative to the base directory
 * (which the caller names), so a long path cannot crowd out the reason. */
#define KDT_WHY_SIZE 1024

/* 0 when `st` passes the owner and mode rules (allow_root: a read-only
 * layer), else -1 with the reason in `why`. */
int kdt_cache_trusted(const struct stat *st, int allow_root, char *why,
                      size_t why_size);

/* "a FIFO", "a directory", "a symbolic link", ... for a reason. */
const char *kdt_cache_type_name(mode_t mode);

enum {
    KDT_DIR_CREATE = 1,     /* create what is missing, 0700 */
    KDT_DIR_ALLOW_ROOT = 2, /* a read-only layer: root may own it */
    KDT_DIR_NO_LINK = 4     /* the base may not be a symbolic link (the
                             * spill store, in a directory every user
                             * shares) */
};

/* Opens the entry directory <base>/v<FORMAT> after checking the chain
 * (base, then v<FORMAT>/) against the rules above; with KDT_DIR_CREATE
 * creates the missing directories (and missing parents of base) 0700.
 * Returns 0 with *fd an O_DIRECTORY descriptor (close it), 1 when the
 * chain does not exist (without KDT_DIR_CREATE), or -1 with the reason in
 * `why` ("refused: writable by group or others (mode 777)", "v1/ refused:
 * a symbolic link, not a directory", "cannot create it: Read-only file
 * system"; with KDT_DIR_NO_LINK "refused: a symbolic link") and errno set
 * (EACCES for a refusal). */
int kdt_cache_dir_open(const char *base, int flags, int *fd, char *why,
                       size_t why_size);

/* The identity of a cache directory, malloc'ed (NULL without memory):
 * its absolute path with every symbolic link, ".", ".." and repeated "/"
 * resolved, as realpath() gives it for the part that exists; the part
 * that does not exist yet (a directory a publish will create) follows
 * lexically.  So /x/c, /x//c, /x/./c, x/c from /, and a link to /x/c are
 * one directory, and stay one after the directory is created.  It names
 * the node-wide locks (cache/lock.h) and the marks of cache/notice.h. */
char *kdt_cache_dir_id(const char *base);

/* 1 when a publish into the base directory `base` cannot succeed for a
 * reason that shows before trying, with the reason in `why`: the nearest
 * directory of <base>/v<FORMAT> that exists (it, base, or the ancestor the
 * publish would create the rest in) is on a read-only file system, is not
 * writable by this process, or its file system has no free block left.
 * 0 otherwise (a publish may still fail: EIO, EXDEV, a quota). */
int kdt_cache_dir_unwritable(const char *base, char *why, size_t why_size);

/* Reads the entry file `name` of the directory `dir_fd` into a malloc'ed
 * buffer once it is known to be a trusted regular file whose header
 * (cache/entry.h: kdt_entry_peek) is sound and declares the file's own
 * length: a junk or extended file is refused after its first 72 bytes,
 * never read whole.  One pass over the file.  Returns 0 with *buf and
 * *size set, 1 when there is no such file, -1 when it was refused or
 * unreadable (reason in `why`: the header's own reason, or "size
 * mismatch (file N bytes, header says M)"), or
 * KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_cache_read_entry(int dir_fd, const char *name, int allow_root,
                         void **buf, size_t *size, char *why,
                         size_t why_size);

/* Reads the first `size` bytes of the regular file `name` (housekeeping's
 * look at a header), never blocking.  Returns 0, or -1 (errno set). */
int kdt_cache_read_head(int dir_fd, const char *name, void *buf,
                        size_t size);

/* write() until done; a write of 0 bytes counts as ENOSPC.  0 or -1. */
int kdt_cache_write_all(int fd, const void *buf, size_t size);

#endif /* KDT_CACHE_FILE_H */
