/*
 * cache/lock.c: the miss path's claim on a key (see cache/lock.h).
 *
 * The holder unlinks its file before it unlocks, so lock files do not pile
 * up.  That opens the classic race (a waiter locks the unlinked inode while
 * a newcomer creates a fresh file and locks that); it is closed by checking,
 * after locking, that the name still leads to the inode we hold, and
 * starting over when it does not.  Whoever removes a lock file's name (a
 * release, a takeover, kdtree-cache gc) does it under the takeover lock
 * (flock of the lock directory itself) and
 * only while the name leads to the inode it judged, so no two of them can
 * remove each other's file.
 *
 * Who releases: the thread that compiled hands the claim, with the entry,
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
 * exits; that blocks nobody for long: the parent unlinks the file when it
 * releases, and a waiter opens the name afresh on every try (the loop
 * below), so it locks a new inode instead of waiting on the child's copy;
 * were the parent to die first, the holder it names is gone, and a waiter
 * takes over.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/file.h"
#include "cache/lock.h"
#include "cache/notice.h"
#include "cache/settings.h"
#include "cache/testhook.h"

/* "<32 hex>.lock" and its NUL. */
#define LOCK_NAME_SIZE 48

struct kdt_cache_lock {
    kdt_gate *gate;
    int fd;        /* the lock file, locked; -1: no node-wide lock */
    int dir_fd;    /* the lock directory, with fd */
    char *dir_id;  /* the cache directory locked for, with fd */
    char name[LOCK_NAME_SIZE];
    off_t state_at; /* where the state word is in the file */
    int failed;    /* the publish failed: the file keeps saying so */
    int waited;    /* another thread was in the gate first */
};

/* What a holder says of itself: one line,
 *   kdtree-jit lock: pid P pidns N start S since T state W what TEXT
 * (N and S "-" when /proc cannot tell; T seconds since the epoch; W
 * "compiling" or "nopublish", the same length, so the word changes in
 * place). */
typedef struct holder {
    int ok;
    long pid;
    char ns[32], start[32];
    double since;
    int nopublish;
    char what[200];
} holder;

static double
wall_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- processes ---------------------------------------------------------- */

/* The state letter and start time (clock ticks after boot) of process
 * `pid`, from /proc.  0, 1 when there is no such process, -1 when /proc
 * cannot tell. */
static int
proc_stat(long pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024], *p, *save = NULL;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? 1 : -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return n == 0 ? 1 : -1;
    buf[n] = '\0';
    /* The name may hold anything, parentheses too: fields follow the
     * last ')'.  Field 3 is the state, field 22 the start time. */
    p = strrchr(buf, ')');
    if (!p)
        return -1;
    field = 3;
    for (char *t = strtok_r(p + 1, " ", &save); t;
         t = strtok_r(NULL, " ", &save), field++) {
        if (field == 3)
            *state = t[0];
        if (field == 22) {
            *start = strtoull(t, NULL, 10);
            return 0;
        }
    }
    return -1;
}

/* This process's PID namespace ("4026531836") and start time, "-" each
 * when /proc cannot tell: a pid means something only in its namespace. */
static void
self_ids(char ns[32], char start[32])
{
    char link[64];
    unsigned long long st;
    ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
    char s, *b;

    snprintf(ns, 32, "-");
    snprintf(start, 32, "-");
    if (n > 0) {
        link[n] = '\0';
        b = strchr(link, '[');
        if (b && strchr(b, ']')) {
            *strchr(b, ']') = '\0';
            snprintf(ns, 32, "%.30s", b + 1);
        }
    }
    if (proc_stat((long)getpid(), &s, &st) == 0)
        snprintf(start, 32, "%llu", st);
}

enum { HOLDER_UNKNOWN, HOLDER_RUNNING, HOLDER_STOPPED, HOLDER_GONE };

/* What has become of the holder `h` said it was, seen from here. */
static int
holder_state(const holder *h)
{
    char ns[32], start[32], s = '?';
    unsigned long long st = 0;
    int r;

    if (!h->ok)
        return HOLDER_UNKNOWN;
    self_ids(ns, start);
    if (strcmp(ns, "-") == 0 || strcmp(h->ns, ns) != 0)
        return HOLDER_UNKNOWN;
    r = proc_stat(h->pid, &s, &st);
    if (r == 1)
        return HOLDER_GONE;
    if (r < 0)
        return HOLDER_UNKNOWN;
    /* The pid of a holder that died may have gone to another process. */
    if (strcmp(h->start, "-") != 0 && st != strtoull(h->start, NULL, 10))
        return HOLDER_GONE;
    if (s == 'T' || s == 't')
        return HOLDER_STOPPED;
    /* A zombie's descriptors are closed: whoever holds the lock inherited
     * it, and is not compiling anything. */
    if (s == 'Z' || s == 'X')
        return HOLDER_GONE;
    return HOLDER_RUNNING;
}

/* ---- the lock file ------------------------------------------------------ */

/* Reads what the holder of `fd` wrote (h->ok 0 when nothing is there yet,
 * or it is not the line above: a release before this one wrote none). */
static void
read_holder(int fd, holder *h)
{
    char buf[512], state[16];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    int at = 0;

    memset(h, 0, sizeof *h);
    if (n <= 0)
        return;
    buf[n] = '\0';
    if (sscanf(buf, "kdtree-jit lock: pid %ld pidns %31s start %31s since "
                    "%lf state %15s what %n", &h->pid, h->ns, h->start,
               &h->since, state, &at) != 5 || at == 0)
        return;
    /* A word read while the holder rewrote it may be half of each: then
     * it is neither, and says nothing. */
    if (strcmp(state, "nopublish") == 0)
        h->nopublish = 1;
    else if (strcmp(state, "compiling") != 0)
        return;
    snprintf(h->what, sizeof h->what, "%.*s", (int)strcspn(buf + at, "\n"),
             buf + at);
    h->ok = 1;
}

/* A holder that wrote no line (stopped before it could, or of a release
 * that wrote none): its pid from the kernel's table of locks, as seen in
 * this PID namespace (0 where it is not seen).  The compile is the one we
 * wait for.  Sets h and returns 1 when the lock of `st` is found. */
static int
holder_from_locks(const struct stat *st, const char *what, holder *h)
{
    char line[256], kind[16], start[32];
    unsigned maj, min;
    unsigned long ino;
    long pid;
    FILE *f = fopen("/proc/locks", "re");
    int found = 0;

    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", kind, &pid,
                       &maj, &min, &ino) == 5
                && strcmp(kind, "FLOCK") == 0 && pid > 0
                && maj == major(st->st_dev) && min == minor(st->st_dev)
                && ino == (unsigned long)st->st_ino;
    fclose(f);
    if (!found)
        return 0;
    memset(h, 0, sizeof *h);
    h->ok = 1;
    h->pid = pid;
    self_ids(h->ns, start);
    snprintf(h->start, sizeof h->start, "-");
    snprintf(h->what, sizeof h->what, "%s", what);
    return 1;
}

/* Writes this holder's line over whatever the file held. */
static void
write_holder(kdt_cache_lock *l, const char *what)
{
    char line[512], ns[32], start[32];
    int n, at = 0;

    self_ids(ns, start);
    n = snprintf(line, sizeof line, "kdtree-jit lock: pid %ld pidns %s "
                 "start %s since %.3f state %ncompiling what %.200s\n",
                 (long)getpid(), ns, start, wall_s(), &at, what);
    if (n <= 0 || (size_t)n >= sizeof line)
        return;
    l->state_at = at;
    if (pwrite(l->fd, line, (size_t)n, 0) == n)
        (void)!ftruncate(l->fd, n);
}

/* 1 when the name `name` of `dir_fd` still leads to the file `fd`. */
static int
same_file(int dir_fd, const char *name, int fd)
{
    struct stat a, b;

    return fstat(fd, &a) == 0
           && fstatat(dir_fd, name, &b, AT_SYMLINK_NOFOLLOW) == 0
           && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Takes the takeover lock: flock() on the lock directory itself, through
 * this claim's own descriptor of it (each claim opens the directory, so
 * two claims conflict even inside one process).  0, or -1 when another
 * holds it through `tries` milliseconds or it cannot be had. */
static int
takeover_lock(int dir_fd, int tries)
{
    for (int i = 0; flock(dir_fd, LOCK_EX | LOCK_NB) != 0; i++) {
        if (i >= tries || (errno != EWOULDBLOCK && errno != EINTR))
            return -1;
        usleep(1000);
    }
    return 0;
}

static void
takeover_unlock(int dir_fd)
{
    (void)flock(dir_fd, LOCK_UN);
}

/* Removes the name of the locked file `fd` if it still leads there.  A
 * takeover holding the second lock for long leaves the name (a stale
 * file, which the next locker or gc deals with): a release never waits.
 * 1 removed, 0 left, -1 failed (errno set). */
static int
unlink_own(int dir_fd, const char *name, int fd)
{
    int r = 0, saved = 0;

    if (takeover_lock(dir_fd, 100) != 0)
        return 0;
    if (same_file(dir_fd, name, fd)) {
        r = unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT ? 1 : -1;
        saved = errno;
    }
    takeover_unlock(dir_fd);
    errno = saved;
    return r;
}

/* The lock directory, opened and checked: its fd, -2 when it does not
 * exist (and `create` is 0), or -1 with the reason. */
static int
open_lock_dir(const char *path, int create, char *why, size_t why_size)
{
    struct stat st;
    int fd;

    if (create)
        (void)mkdir(path, 0700);
    /* O_NOFOLLOW: /dev/shm is shared by every user, and a link there
     * could be anyone's. */
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && !create)
            return -2;
        snprintf(why, why_size, "%s",
                 errno == ELOOP ? "a symbolic link, not a directory"
                 : errno == ENOTDIR ? "not a directory" : strerror(errno));
        return -1;
    }
    /* Someone else's directory in our name could let them hold our
     * locks, or read what we compile. */
    if (fstat(fd, &st) != 0
        || kdt_cache_trusted(&st, 0, why, why_size) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* "<hex>.lock": a hash of the directory's identity and the key, so that
 * one key under two directories is two locks. */
static void
lock_name(const char *dir_id, const kdt_key *key, char out[LOCK_NAME_SIZE])
{
    size_t len = strlen(dir_id);
    char hex[33], *text;
    kdt_key k;

    kdt_key_hex(key, hex);
    text = malloc(len + 1 + 32);
    if (!text) {
        /* Without memory, by the key alone: two directories may wait on
         * each other, nothing worse. */
        snprintf(out, LOCK_NAME_SIZE, "%s.lock", hex);
        return;
    }
    memcpy(text, dir_id, len);
    text[len] = '\n';
    memcpy(text + len + 1, hex, 32);
    k = kdt_key_of(text, len + 1 + 32);
    free(text);
    kdt_key_hex(&k, hex);
    snprintf(out, LOCK_NAME_SIZE, "%s.lock", hex);
}

/* ---- the claim ---------------------------------------------------------- */

kdt_cache_lock *
kdt_lock_new(kdt_gate *gate, int waited)
{
    kdt_cache_lock *l = calloc(1, sizeof *l);

    if (!l) {
        kdt_gate_leave(gate);
        return NULL;
    }
    l->gate = gate;
    l->waited = waited;
    l->fd = -1;
    l->dir_fd = -1;
    return l;
}

int
kdt_cache_lock_held(const kdt_cache_lock *l)
{
    return l && l->fd >= 0;
}

const char *
kdt_cache_lock_dir_id(const kdt_cache_lock *l)
{
    return l && l->fd >= 0 ? l->dir_id : NULL;
}

int
kdt_cache_lock_recheck(const kdt_cache_lock *l)
{
    return l && (l->waited || l->fd >= 0);
}

/* The process's first such notice warns, the rest are info lines: a node
 * where one rank hangs says so once, not once a key. */
static int
warn_once(atomic_int *warned)
{
    return atomic_exchange(warned, 1) ? KDT_LOG_INFO : KDT_LOG_WARN;
}

/* 1 when `h` says it could not publish, and that is news: not older than
 * KDT_LOCK_NOPUBLISH_S, nor than this process's last publish into
 * `dir_id` that succeeded. */
static int
holder_failed(const holder *h, const char *dir_id)
{
    return h->ok && h->nopublish && wall_s() - h->since < KDT_LOCK_NOPUBLISH_S
           && h->since > kdt_cache_written_at(dir_id);
}

/* A holder that said it could not publish to `dir_id`: that directory is
 * marked, and this process neither waits nor locks for it any more. */
static void
holder_could_not_publish(const holder *h, const char *dir_id)
{
    if (kdt_cache_mark_unwritable(dir_id))
        kdt_log(KDT_LOG_INFO, "cache: pid %ld could not publish %s to %s; "
                "this process no longer waits or locks for that directory",
                h->pid, h->what, dir_id);
}

/* The lock file `fd`, named `name` in `dir_fd`, is locked by `l` for the
 * cache directory `dir_id`: kept, and the holder's line written. */
static void
hold(kdt_cache_lock *l, int dir_fd, int fd, const char *name,
     const char *dir_id, const char *what)
{
    l->fd = fd;
    l->dir_fd = dir_fd;
    /* Without memory the job cannot tell which directory the lock is
     * for, and says nothing in the file: its waiters find out by their
     * own compile. */
    l->dir_id = strdup(dir_id);
    snprintf(l->name, sizeof l->name, "%s", name);
    write_holder(l, what);
}

/* `fd` is locked and its name leads to it: the lock is ours, unless the
 * last holder left word that it could not publish (then it is let go, and
 * 0 returned). */
static int
claim(kdt_cache_lock *l, int dir_fd, int fd, const char *name,
      const char *dir_id, const char *what)
{
    holder h;

    read_holder(fd, &h);
    if (holder_failed(&h, dir_id)) {
        holder_could_not_publish(&h, dir_id);
        close(fd); /* the word stays for the others */
        return 0;
    }
    hold(l, dir_fd, fd, name, dir_id, what);
    return 1;
}

/* take_over's outcomes besides a locked fd */
enum { TAKEN_BY_OTHER = -1, TAKEN_FOR_NEWCOMER = -2 };

/* The takeover of a holder judged stopped, gone or too slow, whose file
 * `fd` the caller has open: under the takeover lock, if the name still leads
 * to that file, removes the name and creates and locks a new file there.
 * Returns the new locked fd; TAKEN_FOR_NEWCOMER when the old holder's file
 * was replaced but a newcomer locked the new one first (it compiles, which
 * is as good); TAKEN_BY_OTHER when someone else took it over first (or the
 * holder let go meanwhile).  The caller then looks again.  delay_us: a
 * test's sleep between creating the new file and locking it
 * (KDTREE_CACHE_TEST_TAKEOVER_DELAY_US). */
static int
take_over(int dir_fd, const char *name, int fd, unsigned long delay_us)
{
    int nfd = TAKEN_BY_OTHER;

    if (takeover_lock(dir_fd, 0) != 0)
        return TAKEN_BY_OTHER;
    if (same_file(dir_fd, name, fd) && unlinkat(dir_fd, name, 0) == 0) {
        nfd = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC
                                       | O_NOFOLLOW, 0600);
        if (nfd < 0) {
            /* EEXIST: a newcomer created it first; else the loop's next
             * open says what is wrong */
            nfd = errno == EEXIST ? TAKEN_FOR_NEWCOMER : TAKEN_BY_OTHER;
        } else {
            if (delay_us)
                usleep((useconds_t)delay_us);
            if (flock(nfd, LOCK_EX | LOCK_NB) != 0) {
                close(nfd);
                nfd = TAKEN_FOR_NEWCOMER;
            }
        }
    }
    takeover_unlock(dir_fd);
    return nfd;
}

/* The state of one wait, across the loop's tries. */
typedef struct waiting {
    double t0;       /* the wait's start (kdt_now_ms) */
    dev_t dev;       /* the file waited on: a new one is a new holder */
    ino_t ino;
    double since;    /* when this holder's file was first seen */
    double dead_since; /* when it was first seen stopped or gone; 0 */
    int said;        /* 1: the info line said, 2: the warning too */
    int take_level;  /* WAIT_TAKE: the level of take_why */
    char take_why[512]; /* WAIT_TAKE: what is said once it is taken */
} waiting;

static atomic_int warned_wait, warned_timeout;

/* "pid 123 (compiling WHAT, locked 2.5 s ago)"; without the time when
 * only the kernel's table named the holder; "another process (compiling
 * WHAT)" when nothing does. */
static void
describe(const holder *h, const char *what, char *out, size_t size)
{
    if (h->ok && h->since > 0)
        snprintf(out, size, "pid %ld (compiling %s, locked %.1f s ago)",
                 h->pid, h->what, wall_s() - h->since);
    else if (h->ok)
        snprintf(out, size, "pid %ld (compiling %s)", h->pid, h->what);
    else
        snprintf(out, size, "another process (compiling %s)", what);
}

enum { WAIT_ON, WAIT_STOP, WAIT_TAKE };

/* One look at the holder of the locked file `fd`: whether to wait on,
 * stop waiting (compile without the lock), or take the compile over. */
static int
wait_step(waiting *w, int fd, const char *dir_id, const char *what,
          double timeout_s)
{
    char who[320];
    double now = kdt_now_ms(), waited = (now - w->t0) / 1000.0;
    struct stat st;
    holder h;
    int s, have_st = fstat(fd, &st) == 0;

    if (have_st && (st.st_dev != w->dev || st.st_ino != w->ino)) {
        w->dev = st.st_dev;
        w->ino = st.st_ino;
        w->since = now;
        w->dead_since = 0;
    }
    read_holder(fd, &h);
    if (!h.ok && have_st)
        (void)holder_from_locks(&st, what, &h);
    describe(&h, what, who, sizeof who);
    if (holder_failed(&h, dir_id)) {
        holder_could_not_publish(&h, dir_id);
        return WAIT_STOP;
    }
    if (timeout_s <= 0) {
        kdt_log(KDT_LOG_INFO, "cache: not waiting for %s: "
                "KDTREE_CACHE_LOCK_TIMEOUT=0; compiling too", who);
        return WAIT_STOP;
    }
    if (w->said < 1 && waited >= 1.0) {
        kdt_log(KDT_LOG_INFO, "cache: waiting for %s; up to %g s", who,
                timeout_s);
        w->said = 1;
    }
    /* (A timeout that comes first says more.) */
    if (w->said < 2 && waited >= KDT_LOCK_WARN_S && waited < timeout_s) {
        kdt_log(warn_once(&warned_wait), "cache: waited %.0f s for %s; "
                "waiting up to %g s (KDTREE_CACHE_LOCK_TIMEOUT)", waited,
                who, timeout_s);
        w->said = 2;
    }
    s = holder_state(&h);
    if (s == HOLDER_STOPPED || s == HOLDER_GONE) {
        if (w->dead_since == 0)
            w->dead_since = now;
        if (now - w->dead_since >= 1000.0 * KDT_LOCK_DEAD_S) {
            w->take_level = KDT_LOG_INFO;
            snprintf(w->take_why, sizeof w->take_why, "cache: %s is %s; "
                     "took its compile over", who,
                     s == HOLDER_STOPPED ? "stopped" : "gone");
            return WAIT_TAKE;
        }
    } else {
        w->dead_since = 0;
    }
    if (now - w->since >= 1000.0 * timeout_s) {
        w->take_level = -1; /* a warning, once per process */
        snprintf(w->take_why, sizeof w->take_why, "cache: waited %.1f s for "
                 "%s; took its compile over (KDTREE_CACHE_LOCK_TIMEOUT=%g)",
                 (now - w->since) / 1000.0, who, timeout_s);
        return WAIT_TAKE;
    }
    return WAIT_ON;
}

int
kdt_lock_node(kdt_cache_lock *l, const char *dir_id, const kdt_key *key,
              const char *what, double timeout_s)
{
    char name[LOCK_NAME_SIZE], why[KDT_WHY_SIZE], *dir;
    waiting w = {0};
    long sleep_us = 1000;
    int dir_fd, fd, r;

    if (!l || l->fd >= 0)
        return l != NULL;
    dir = kdt_cache_lock_dir();
    if (!dir)
        return 0;
    dir_fd = open_lock_dir(dir, 1, why, sizeof why);
    if (dir_fd < 0) {
        kdt_cache_notice(KDT_NOTICE_LOCK_DIR, "cache: lock directory %s "
                         "unusable (%s); compiling without a lock", dir, why);
        free(dir);
        return 0;
    }
    lock_name(dir_id, key, name);
    w.t0 = kdt_now_ms();
    for (;;) {
        fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                    0600);
        if (fd < 0) {
            kdt_cache_notice(KDT_NOTICE_LOCK_DIR, "cache: cannot open lock "
                             "%s/%s: %s; compiling without a lock", dir, name,
                             strerror(errno));
            break;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            if (!same_file(dir_fd, name, fd)) {
                /* The holder we waited for unlinked it: start over. */
                close(fd);
                continue;
            }
            r = claim(l, dir_fd, fd, name, dir_id, what);
            if (r)
                kdt_log(KDT_LOG_DEBUG, "cache: locked %s/%s after %.1f ms",
                        dir, name, kdt_now_ms() - w.t0);
            free(dir);
            if (!r)
                close(dir_fd);
            return r;
        }
        if (errno == EINTR) {
            close(fd);
            continue;
        }
        if (errno != EWOULDBLOCK) {
            kdt_cache_notice(KDT_NOTICE_LOCK_DIR, "cache: cannot lock %s/%s: "
                             "%s; compiling without a lock", dir, name,
                             strerror(errno));
            close(fd);
            break;
        }
        r = wait_step(&w, fd, dir_id, what, timeout_s);
        if (r == WAIT_TAKE) {
            int nfd = take_over(dir_fd, name, fd,
                                kdt_cache_hooks_takeover_delay_us());
            /* Said by the one that removed the holder's file, whoever
             * locks the new one: a takeover is said exactly once. */
            if (nfd >= 0 || nfd == TAKEN_FOR_NEWCOMER)
                kdt_log(w.take_level < 0 ? warn_once(&warned_timeout)
                                         : w.take_level, "%s%s", w.take_why,
                        nfd >= 0 ? "" : "; another process locked the new "
                                        "lock first and compiles it");
            if (nfd >= 0) {
                close(fd);
                hold(l, dir_fd, nfd, name, dir_id, what);
                free(dir);
                return 1;
            }
            /* Another process holds it now: wait for that one. */
        }
        close(fd);
        if (r == WAIT_STOP)
            break;
        /* Polling with a short, growing sleep: simpler than a blocking
         * flock raced against a timer, and a compile takes far longer. */
        usleep((useconds_t)sleep_us);
        if (sleep_us < 20000)
            sleep_us *= 2;
    }
    free(dir);
    close(dir_fd);
    return 0;
}

void
kdt_cache_lock_open_gate(kdt_cache_lock *l)
{
    if (!l)
        return;
    kdt_gate_leave(l->gate);
    l->gate = NULL;
}

void
kdt_cache_lock_publish_failed(kdt_cache_lock *l)
{
    static const char word[] = "nopublish";

    if (!l || l->fd < 0 || l->state_at <= 0)
        return;
    /* The same length as "compiling": the line changes in place. */
    if (pwrite(l->fd, word, sizeof word - 1, l->state_at)
        == (ssize_t)(sizeof word - 1))
        l->failed = 1;
}

void
kdt_cache_lock_release(kdt_cache_lock *lock)
{
    if (!lock)
        return;
    kdt_gate_leave(lock->gate);
    if (lock->fd >= 0) {
        /* Unlinked while still held (see the top); a holder that could
         * not publish leaves its word there for the waiters. */
        if (!lock->failed)
            (void)unlink_own(lock->dir_fd, lock->name, lock->fd);
        close(lock->fd);
        close(lock->dir_fd);
    }
    free(lock->dir_id);
    free(lock);
}

void
kdt_cache_lock_forget(kdt_cache_lock *lock)
{
    if (!lock)
        return;
    /* Close only: no LOCK_UN, no unlink (see the top).  The gate's place
     * is unknown in the child; leaving it just frees it. */
    kdt_gate_leave(lock->gate);
    if (lock->fd >= 0) {
        close(lock->fd);
        close(lock->dir_fd);
    }
    free(lock->dir_id);
    free(lock);
}

/* 1 when `name` is a lock file's name. */
static int
is_lock_name(const char *name)
{
    size_t len = strlen(name);

    if (len != 32 + 5 || strcmp(name + 32, ".lock") != 0)
        return 0;
    for (size_t i = 0; i < 32; i++)
        if (!((name[i] >= '0' && name[i] <= '9')
              || (name[i] >= 'a' && name[i] <= 'f')))
            return 0;
    return 1;
}

int
kdt_cache_lock_sweep(int *removed, int *failed, char *why, size_t why_size)
{
    char *path = kdt_cache_lock_dir(), w[KDT_WHY_SIZE];
    struct dirent *d;
    DIR *dp;
    int dir_fd, fd;

    *removed = *failed = 0;
    why[0] = '\0';
    if (!path)
        return 1;
    dir_fd = open_lock_dir(path, 0, w, sizeof w);
    if (dir_fd < 0) {
        if (dir_fd == -1)
            snprintf(why, why_size, "lock directory %s: %s", path, w);
        free(path);
        return dir_fd == -2 ? 1 : -1;
    }
    free(path);
    fd = dup(dir_fd);
    dp = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dp) {
        if (fd >= 0)
            close(fd);
        close(dir_fd);
        snprintf(why, why_size, "cannot read the lock directory: %s",
                 strerror(errno));
        return -1;
    }
    while ((d = readdir(dp)) != NULL) {
        int lf, r;

        if (!is_lock_name(d->d_name))
            continue;
        lf = openat(dir_fd, d->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK
                                           | O_CLOEXEC);
        if (lf < 0)
            continue;
        /* Held: a compile in progress, or a waiter about to find the
         * name gone; either way not stale. */
        if (flock(lf, LOCK_EX | LOCK_NB) == 0) {
            r = unlink_own(dir_fd, d->d_name, lf);
            if (r > 0) {
                (*removed)++;
            } else if (r < 0 && (*failed)++ == 0) {
                snprintf(why, why_size, "cannot remove %s: %s", d->d_name,
                         strerror(errno));
            }
        }
        close(lf);
    }
    closedir(dp);
    close(dir_fd);
    return 0;
}
