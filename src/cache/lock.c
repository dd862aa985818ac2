/*
 * cache/lock.c: one compile per key across the processes of a node.
 *
 * The lock is flock() on <lockdir>/<32 hex>.lock.  The lock directory is
 * node-local (tmpfs: $XDG_RUNTIME_DIR or /dev/shm), never the cache
 * directory, which may be on NFS where flock is emulated or absent.  The
 * kernel drops a flock when its holder dies, so a crash never leaves a
 * stuck lock.
 *
 * The holder unlinks the file before it unlocks, so lock files do not pile
 * up.  That opens the classic race (a waiter locks the unlinked inode while
 * a newcomer creates a fresh file and locks that); it is closed by checking,
 * after locking, that the path still names the inode we hold, and starting
 * over when it does not.
 *
 * Who releases: the thread that compiled hands the lock, with the entry,
 * to the process's publishing thread (cache/async.c), which releases it
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/admin.h"
#include "base/error.h"

struct kdt_cache_lock {
    int fd;
    char *path;
};

char *
kdt_cache_lock_dir(void)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    char buf[4096];

    if (x && x[0] == '/' && stat(x, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(buf, sizeof buf, "%s/kdtree-jit-locks", x);
    else if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(buf, sizeof buf, "/dev/shm/kdtree-jit-%lu",
                 (unsigned long)geteuid());
    else
        snprintf(buf, sizeof buf, "/tmp/kdtree-jit-locks-%lu",
                 (unsigned long)geteuid());
    return strdup(buf);
}

static double
lock_timeout_s(void)
{
    const char *v = getenv("KDTREE_CACHE_LOCK_TIMEOUT");
    char *end;
    double t;

    if (!v || !*v)
        return 120.0;
    t = strtod(v, &end);
    if (*end != '\0' || !(t >= 0) || t > 1e7) {
        kdt_log(KDT_LOG_WARN, "KDTREE_CACHE_LOCK_TIMEOUT=%s is not a number "
                "of seconds; using 120", v);
        return 120.0;
    }
    return t;
}

kdt_cache_lock *
kdt_cache_lock_acquire(const kdt_key *key)
{
    static atomic_int warned;
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
        /* Once per process at warn: every miss would say the same. */
        kdt_log(atomic_exchange(&warned, 1) ? KDT_LOG_INFO : KDT_LOG_WARN,
                "cache: lock directory %s unusable (%s); compiling without "
                "a lock", dir, why);
        free(dir);
        return NULL;
    }
    kdt_key_hex(key, hex);
    path = malloc(strlen(dir) + 48);
    if (!path) {
        free(dir);
        return NULL;
    }
    sprintf(path, "%s/%s.lock", dir, hex);
    free(dir);
    t0 = kdt_now_ms();
    deadline = t0 + 1000.0 * lock_timeout_s();
    for (;;) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            kdt_log(KDT_LOG_WARN, "cache: cannot open lock %s: %s; "
                    "compiling without a lock", path, strerror(errno));
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
            kdt_log(KDT_LOG_WARN, "cache: cannot lock %s: %s; compiling "
                    "without a lock", path, strerror(errno));
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
