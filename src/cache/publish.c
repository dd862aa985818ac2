/*
 * cache/publish.c: one entry into an entry directory, atomically (see
 * cache/publish.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/file.h"
#include "cache/layout.h"
#include "cache/publish.h"

/* Creates and locks a fresh temp file for `key`.  Returns its fd with its
 * name in `tmp`, or -1 (errno set).
 *
 * Between the open and the flock a sweep may find the file unlocked and
 * remove it; then the name no longer leads to our inode, and we start
 * over under a new name.  A file system without flock (ENOLCK, EINVAL,
 * EOPNOTSUPP) gets the file unlocked: the sweep then judges it by age. */
static int
create_temp(int dir_fd, const kdt_key *key, char tmp[KDT_NAME_SIZE])
{
    static atomic_ulong counter;
    struct stat a, b;

    for (int tries = 0; tries < 8; tries++) {
        kdt_layout_temp_name(key, atomic_fetch_add(&counter, 1), tmp);
        int fd = openat(dir_fd, tmp,
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600);
        /* EEXIST: another writer holds this name (same host name, pid
         * and count: containers in separate PID namespaces); the next
         * count is a new name. */
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0)
            return -1;
        if (flock(fd, LOCK_EX) != 0) {
            if (errno == EINTR) {
                close(fd);
                (void)unlinkat(dir_fd, tmp, 0);
                continue;
            }
            return fd; /* no locks here: see above */
        }
        if (fstat(fd, &a) == 0
            && fstatat(dir_fd, tmp, &b, AT_SYMLINK_NOFOLLOW) == 0
            && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return fd;
        close(fd); /* swept before we locked it */
    }
    errno = EAGAIN;
    return -1;
}

int
kdt_cache_publish(int dir_fd, const char *dir, const kdt_key *key,
                  const void *data, size_t size, int durable,
                  const kdt_cache_hooks *hooks, char *why, size_t why_size)
{
    char tmp[KDT_NAME_SIZE], fin[KDT_NAME_SIZE];
    const char *step = "write";
    int fd, saved;

    fd = kdt_cache_hooks_fail(hooks, KDT_STEP_CREATE)
             ? -1 : create_temp(dir_fd, key, tmp);
    if (fd < 0) {
        saved = errno;
        snprintf(why, why_size, "cannot create a temp file in %s: %s", dir,
                 strerror(saved));
        errno = saved;
        return -1;
    }
    if (kdt_cache_hooks_fail(hooks, KDT_STEP_WRITE))
        goto write_fail;
    if (kdt_cache_hooks_set(hooks) && size > 1) {
        if (kdt_cache_write_all(fd, data, size / 2) != 0)
            goto write_fail;
        kdt_cache_hooks_pause(hooks);
        if (kdt_cache_write_all(fd, (const char *)data + size / 2,
                                size - size / 2) != 0)
            goto write_fail;
    } else if (kdt_cache_write_all(fd, data, size) != 0) {
        goto write_fail;
    }
    step = "fsync";
    if (durable && (kdt_cache_hooks_fail(hooks, KDT_STEP_FSYNC)
                    || fsync(fd) != 0))
        goto write_fail;
    kdt_layout_entry_name(key, fin);
    if (kdt_cache_hooks_fail(hooks, KDT_STEP_RENAME)
        || renameat(dir_fd, tmp, dir_fd, fin) != 0) {
        saved = errno;
        snprintf(why, why_size, "cannot rename into %s/%s: %s", dir, fin,
                 strerror(saved));
        goto fail;
    }
    /* Closed (and so unlocked) only now: until the rename, the temp name
     * always names a locked file.  What close() could still report, the
     * fsync() already has (an alias is not fsync'ed: a hint, verified on
     * every read). */
    (void)close(fd);
    return 0;

write_fail:
    saved = errno;
    snprintf(why, why_size, "cannot %s %s/%s: %s", step, dir, tmp,
             strerror(saved));
fail:
    (void)unlinkat(dir_fd, tmp, 0);
    close(fd);
    errno = saved;
    return -1;
}
