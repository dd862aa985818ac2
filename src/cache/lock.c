/*
 * cache/lock.c: one compile per key and cache directory across the
 * processes of a node (see cache/lock.h).
 *
 * The holder unlinks the file before it unlocks, so lock files do not pile
 * up.  That opens the classic race (a waiter locks the unlinked inode while
 * a newcomer creates a fresh file and locks that); it is closed by checking,
 * after locking, that the path still names the inode we hold, and starting
 * over when it does not.
 *
 * Who releases: the thread that compiled hands the lock, with the entry,
 * to the process's publishing thread (cache/worker.c), which releases it
 * once the entry is durable.  That is fine for flock: the lock belongs to
 * the open file description, not to a thread, so any thread of the
 * process may close it.
 *
 * fork(): a child gets copies of the descriptors of every lock its parent
 * holds, and a copy refers to the same open file description, so the same
 * flock.  LOCK_UN through the copy would drop the parent's lock, and
 * unlinking the file would let a newcomer lock a fresh inode, both while
 * the parent is still compiling or publishing: a second compile of the key.
 * So a child never releases an inherited lock; kdt_cache_lock_forget()
 * just closes its copy (the lock stays with the parent's descriptor).  A
 * lock that another thread of the parent held mid-compile at the fork is
 * unknown to the child, whose copy of it then stays open until the child
 * exits; that blocks nobody: the parent unlinks the file when it releases,
 * and a waiter opens the path afresh on every try (the loop below), so it
 * locks a new inode instead of waiting on the child's copy.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/settings.h"
#include "cache/file.h"
#include "cache/lock.h"
#include "cache/notice.h"

struct kdt_cache_lock {
    int fd;
    char *path;
};

/* The lock file's name: a hash of the directory and the key, so that one
 * key under two directories is two locks. */
static void
lock_name(const char *dir, const kdt_key *key, char out[33])
{
    size_t len = strlen(dir);
    char hex[33], *text;
    kdt_key k;

    while (len > 1 && dir[len - 1] == '/')
        len--;
    kdt_key_hex(key, hex);
    text = malloc(len + 1 + 32);
    if (!text) {
        /* Without memory, by the key alone: two directories may wait on
         * each other, nothing worse. */
        memcpy(out, hex, 33);
        return;
    }
    memcpy(text, dir, len);
    text[len] = '\n';
    memcpy(text + len + 1, hex, 32);
    k = kdt_key_of(text, len + 1 + 32);
    free(text);
    kdt_key_hex(&k, out);
}

kdt_cache_lock *
kdt_lock_acquire(const char *cache_dir, const kdt_key *key, double timeout_s)
{
    char hex[33], why[160];
    char *dir, *path;
    struct stat st, fst;
    double deadline, t0;
    long sleep_us = 1000;
    kdt_cache_lock *l;
    int fd;

    dir = kdt_cache_lock_dir();
    if (!dir)
        return NULL;
    (void)mkdir(dir, 0700);
    /* /dev/shm is shared by every user: a directory someone else made in
     * our name could let them hold our locks, or read our key names. */
    if (lstat(dir, &st) != 0)
        snprintf(why, sizeof why, "%s", strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        snprintf(why, sizeof why, "not a directory");
    else if (kdt_cache_trusted(&st, 0, why, sizeof why) == 0)
        why[0] = '\0';
    if (why[0]) {
        kdt_cache_notice(KDT_NOTICE_LOCK_DIR,
                         "cache: lock directory %s unusable (%s); compiling "
                         "without a lock", dir, why);
        free(dir);
        return NULL;
    }
    lock_name(cache_dir, key, hex);
    path = malloc(strlen(dir) + 48);
    if (!path) {
        free(dir);
        return NULL;
    }
    sprintf(path, "%s/%s.lock", dir, hex);
    free(dir);
    t0 = kdt_now_ms();
    deadline = t0 + 1000.0 * timeout_s;
    for (;;) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            kdt_cache_notice(KDT_NOTICE_LOCK_DIR, "cache: cannot open lock "
                             "%s: %s; compiling without a lock", path,
                             strerror(errno));
            free(path);
            return NULL;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            if (fstat(fd, &fst) == 0 && stat(path, &st) == 0
                && st.st_dev == fst.st_dev && st.st_ino == fst.st_ino)
                break;
            /* The holder we waited for unlinked it: start over. */
            close(fd);
            continue;
        }
        if (errno != EWOULDBLOCK && errno != EINTR) {
            kdt_cache_notice(KDT_NOTICE_LOCK_DIR, "cache: cannot lock %s: "
                             "%s; compiling without a lock", path,
                             strerror(errno));
            close(fd);
            free(path);
            return NULL;
        }
        close(fd);
        if (kdt_now_ms() >= deadline) {
            kdt_log(KDT_LOG_WARN, "cache: waited %.0f s for lock %s; "
                    "compiling anyway", (kdt_now_ms() - t0) / 1000.0, path);
            free(path);
            return NULL;
        }
        /* Polling with a short, growing sleep: simpler than a blocking
         * flock raced against a timer, and a compile takes far longer. */
        usleep((useconds_t)sleep_us);
        if (sleep_us < 20000)
            sleep_us *= 2;
    }
    l = malloc(sizeof *l);
    if (!l) {
        close(fd);
        free(path);
        return NULL;
    }
    l->fd = fd;
    l->path = path;
    kdt_log(KDT_LOG_DEBUG, "cache: locked %s after %.1f ms", path,
            kdt_now_ms() - t0);
    return l;
}

void
kdt_cache_lock_release(kdt_cache_lock *lock)
{
    if (!lock)
        return;
    /* Unlink while still holding it; see the comment at the top. */
    (void)unlink(lock->path);
    close(lock->fd);
    free(lock->path);
    free(lock);
}

void
kdt_cache_lock_forget(kdt_cache_lock *lock)
{
    if (!lock)
        return;
    /* Close only: no LOCK_UN, no unlink (see the comment at the top). */
    close(lock->fd);
    free(lock->path);
    free(lock);
}
