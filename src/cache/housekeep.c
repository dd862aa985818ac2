/*
 * cache/housekeep.c: stamps, the temp sweep, removal and eviction of an
 * entry directory (see cache/housekeep.h).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/entry.h"
#include "cache/file.h"
#include "cache/housekeep.h"
#include "cache/key.h"
#include "cache/layout.h"

static int
ts_cmp(const struct timespec *a, const struct timespec *b)
{
    if (a->tv_sec != b->tv_sec)
        return a->tv_sec < b->tv_sec ? -1 : 1;
    if (a->tv_nsec != b->tv_nsec)
        return a->tv_nsec < b->tv_nsec ? -1 : 1;
    return 0;
}

static int
cmp_files(const void *a, const void *b)
{
    const kdt_cache_file *x = a, *y = b;
    int c = ts_cmp(&x->mtime, &y->mtime);

    return c ? c : strcmp(x->name, y->name);
}

/* A DIR stream of dir_fd that leaves dir_fd itself open. */
static DIR *
open_stream(int dir_fd)
{
    int fd = dup(dir_fd);
    DIR *dp;

    if (fd < 0)
        return NULL;
    dp = fdopendir(fd);
    if (!dp) {
        close(fd);
        return NULL;
    }
    rewinddir(dp);
    return dp;
}

int
kdt_cache_scan(int dir_fd, kdt_cache_file **files, size_t *n)
{
    kdt_cache_file *v = NULL, *t;
    size_t cap = 0, cnt = 0;
    struct dirent *d;
    struct stat st;
    DIR *dp;

    *files = NULL;
    *n = 0;
    dp = open_stream(dir_fd);
    if (!dp)
        return 0;
    while ((d = readdir(dp)) != NULL) {
        if (!kdt_layout_parse_entry_name(d->d_name, NULL)
            || fstatat(dir_fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 32;
            t = realloc(v, cap * sizeof *v);
            if (!t) {
                closedir(dp);
                free(v);
                return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                                "cache: out of memory");
            }
            v = t;
        }
        memcpy(v[cnt].name, d->d_name, 37); /* 36 + NUL: checked above */
        v[cnt].size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
        v[cnt].mtime = st.st_mtim;
        v[cnt].mode = st.st_mode;
        cnt++;
    }
    closedir(dp);
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_files);
    *files = v;
    *n = cnt;
    return 0;
}

void
kdt_cache_touch(int dir_fd, const char *name)
{
    struct timespec ts[2];

    /* atime left alone (UTIME_OMIT); mtime is the stamp. */
    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_sec = 0;
    ts[1].tv_nsec = UTIME_NOW;
    if (utimensat(dir_fd, name, ts, AT_SYMLINK_NOFOLLOW) != 0)
        kdt_log(KDT_LOG_DEBUG, "cache: cannot stamp %s: %s", name,
                strerror(errno));
}

static void
count_failure(kdt_cache_tally *t, const char *name, int err)
{
    if (!t->failed++)
        snprintf(t->why, sizeof t->why, "cannot remove %s: %s", name,
                 strerror(err));
}

/* Removes a directory's contents, then the directory; depth-limited (a
 * directory under an entry's name holds whatever someone put there). */
static int
remove_tree(int dir_fd, const char *name, int depth)
{
    struct dirent *d;
    DIR *dp;
    int fd, r = 0;

    if (unlinkat(dir_fd, name, AT_REMOVEDIR) == 0)
        return 0;
    if ((errno != ENOTEMPTY && errno != EEXIST) || depth > 16)
        return -1;
    fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW
                                  | O_CLOEXEC);
    if (fd < 0)
        return -1;
    dp = fdopendir(fd);
    if (!dp) {
        close(fd);
        return -1;
    }
    while (r == 0 && (d = readdir(dp)) != NULL) {
        struct stat st;
        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
            continue;
        if (fstatat(fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            r = remove_tree(fd, d->d_name, depth + 1);
        else if (unlinkat(fd, d->d_name, 0) != 0 && errno != ENOENT)
            r = -1;
    }
    int saved = errno;
    closedir(dp);
    if (r != 0) {
        errno = saved;
        return -1;
    }
    return unlinkat(dir_fd, name, AT_REMOVEDIR);
}

int
kdt_cache_remove(int dir_fd, const char *name, kdt_cache_tally *t)
{
    struct stat st;
    int r;

    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : (count_failure(t, name, errno), -1);
    r = S_ISDIR(st.st_mode) ? remove_tree(dir_fd, name, 0)
                            : unlinkat(dir_fd, name, 0);
    if (r != 0 && errno != ENOENT) {
        count_failure(t, name, errno);
        return -1;
    }
    t->removed++;
    return 0;
}

/* 1 when the temp file `name` of this host has no live writer: nobody
 * holds its lock.  0 when one does, -1 when locks cannot tell here. */
static int
writer_gone(int dir_fd, const char *name, const struct stat *st)
{
    struct stat now;
    int fd, r;

    fd = openat(dir_fd, name,
                O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* gone, or not ours to judge */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        r = errno == EWOULDBLOCK ? 0 : -1;
        close(fd);
        return r;
    }
    /* Locked: the writer is dead, or renamed it and left.  Still the file
     * the name gave us? */
    r = fstat(fd, &now) == 0 && now.st_dev == st->st_dev
        && now.st_ino == st->st_ino;
    if (r && unlinkat(dir_fd, name, 0) != 0)
        r = errno == ENOENT ? 0 : -2;
    close(fd);
    return r;
}

void
kdt_cache_sweep_temps(int dir_fd, const char *dir, double unlocked_age_s,
                      double other_host_age_s, kdt_cache_tally *t)
{
    char host[48];
    struct dirent *d;
    struct stat st;
    time_t now = time(NULL);
    DIR *dp;

    dp = open_stream(dir_fd);
    if (!dp)
        return;
    kdt_layout_host_tag(host, sizeof host);
    while ((d = readdir(dp)) != NULL) {
        const char *h;
        size_t hl;
        int gone = -1;

        if (!kdt_layout_parse_temp_name(d->d_name, &h, &hl)
            || fstatat(dir_fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0
            || !S_ISREG(st.st_mode))
            continue;
        if (hl == strlen(host) && memcmp(h, host, hl) == 0) {
            /* Young: its writer may be alive without a lock (an earlier
             * release's), whatever the lock says. */
            if (difftime(now, st.st_mtime) < unlocked_age_s)
                continue;
            gone = writer_gone(dir_fd, d->d_name, &st);
        }
        if (gone == 1) {
            /* writer_gone() removed it, still holding its lock. */
        } else if (gone == -2) {
            count_failure(t, d->d_name, errno);
            continue;
        } else if (gone == 0
                   || difftime(now, st.st_mtime) <= other_host_age_s) {
            continue;
        } else if (unlinkat(dir_fd, d->d_name, 0) != 0) {
            if (errno != ENOENT)
                count_failure(t, d->d_name, errno);
            continue;
        }
        kdt_log(KDT_LOG_DEBUG, "cache: swept stale temp file %s/%s", dir,
                d->d_name);
        t->removed++;
    }
    closedir(dp);
}

/* ---- eviction ------------------------------------------------------------ */

/* A name and its index in the scan, for finding an alias's entry by a
 * binary search. */
typedef struct named {
    const char *name;
    size_t i;
} named;

static int
cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* The index of the entry alias f[i] names when that entry is in the
 * directory, else i.  Reads the header; only an alias is read whole. */
static size_t
alias_target(int dir_fd, const kdt_cache_file *f, size_t i,
             const named *by_name, size_t n)
{
    unsigned char head[KDT_ENTRY_HEADER_SIZE];
    char why[200], target[KDT_NAME_SIZE];
    kdt_entry_view v;
    kdt_key key;
    uint64_t fsize;
    void *buf;
    size_t size, r = i;
    int kind;

    if (kdt_cache_read_head(dir_fd, f[i].name, head, sizeof head) != 0
        || kdt_entry_peek(head, sizeof head, &kind, &fsize, why, sizeof why)
               != 0
        || kind != KDT_PAYLOAD_ALIAS
        || kdt_cache_read_entry(dir_fd, f[i].name, 0, &buf, &size, why,
                                sizeof why) != 0)
        return i;
    if (kdt_entry_decode(buf, size, NULL, &v, why, sizeof why) == 0
        && kdt_alias_target(v.preimage, v.preimage_len, v.payload,
                            v.payload_size, &key) == 0) {
        named want = {target, 0}, *hit;
        kdt_layout_entry_name(&key, target);
        hit = bsearch(&want, by_name, n, sizeof *by_name, cmp_named);
        if (hit)
            r = hit->i;
    }
    free(buf);
    return r;
}

int
kdt_cache_bad_header(int dir_fd, const char *name, uint64_t size, char *why,
                     size_t why_size)
{
    unsigned char head[KDT_ENTRY_HEADER_SIZE];
    uint64_t want;
    int kind;

    if (size < sizeof head
        || kdt_cache_read_head(dir_fd, name, head, sizeof head) != 0) {
        snprintf(why, why_size, "truncated header (%llu bytes)",
                 (unsigned long long)size);
        return -1;
    }
    if (kdt_entry_peek(head, sizeof head, &kind, &want, why, why_size) != 0)
        return -1;
    if (want != size) {
        snprintf(why, why_size, "size mismatch (file %llu bytes, header "
                 "says %llu)", (unsigned long long)size,
                 (unsigned long long)want);
        return -1;
    }
    return 0;
}

int
kdt_cache_alias_orphan(int dir_fd, const kdt_entry_view *v, char *why,
                       size_t why_size)
{
    char name[KDT_NAME_SIZE], w[200];
    struct stat st;
    kdt_key key;

    if (v->kind != KDT_PAYLOAD_ALIAS)
        return 0;
    if (kdt_alias_target(v->preimage, v->preimage_len, v->payload,
                         v->payload_size, &key) != 0) {
        snprintf(why, why_size, "an alias that names no entry");
        return -1;
    }
    kdt_layout_entry_name(&key, name);
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0
        || !S_ISREG(st.st_mode)) {
        snprintf(why, why_size, "an alias of %s, which is not in the "
                 "directory", name);
        return -1;
    }
    if (kdt_cache_bad_header(dir_fd, name, (uint64_t)st.st_size, w,
                             sizeof w) != 0) {
        snprintf(why, why_size, "an alias of %s, which is no entry (%s)",
                 name, w);
        return -1;
    }
    return 0;
}

/* Removes the regular files of f[] that are no entry by their header, and
 * takes them out of f[] (mode 0: neither counted nor in a unit).
 * Returns the bytes they held. */
static uint64_t
drop_bad(int dir_fd, const char *dir, kdt_cache_file *f, size_t n,
         kdt_cache_tally *t)
{
    char why[200];
    uint64_t freed = 0;

    for (size_t i = 0; i < n; i++) {
        if (!S_ISREG(f[i].mode)
            || kdt_cache_bad_header(dir_fd, f[i].name, f[i].size, why,
                                    sizeof why) == 0)
            continue;
        if (unlinkat(dir_fd, f[i].name, 0) != 0 && errno != ENOENT) {
            count_failure(t, f[i].name, errno);
            continue;
        }
        kdt_log(KDT_LOG_INFO, "cache: removed %s/%s, no entry: %s", dir,
                f[i].name, why);
        freed += f[i].size;
        f[i].size = 0;
        f[i].mode = 0;
        t->bad++;
    }
    return freed;
}

typedef struct unit_info {
    size_t head;           /* the f[] index that names the unit */
    struct timespec stamp; /* its newest member's */
    int keep;
} unit_info;

static int
cmp_units(const void *a, const void *b)
{
    const unit_info *x = a, *y = b;
    int c = ts_cmp(&x->stamp, &y->stamp);

    return c ? c : (x->head < y->head ? -1 : x->head > y->head);
}

/* Groups the regular files of f[] into units: unit[i] gets the head of
 * f[i]'s unit, units[] (oldest first) one record per unit.  Returns how
 * many units, or 0 without memory. */
static size_t
build_units(int dir_fd, const kdt_cache_file *f, size_t n, size_t *unit,
            unit_info *units, const char *const *keep, int n_keep)
{
    named *by_name = malloc(n * sizeof *by_name);
    size_t *slot = malloc(n * sizeof *slot), nu = 0;

    if (!by_name || !slot) {
        free(by_name);
        free(slot);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        by_name[i] = (named){f[i].name, i};
        slot[i] = SIZE_MAX;
    }
    qsort(by_name, n, sizeof *by_name, cmp_named);
    for (size_t i = 0; i < n; i++)
        unit[i] = S_ISREG(f[i].mode) ? alias_target(dir_fd, f, i, by_name, n)
                                     : i;
    for (size_t i = 0; i < n; i++) {
        size_t u = unit[i];
        if (!S_ISREG(f[i].mode))
            continue;
        if (slot[u] == SIZE_MAX) {
            slot[u] = nu;
            units[nu++] = (unit_info){u, f[i].mtime, 0};
        }
        unit_info *x = &units[slot[u]];
        if (ts_cmp(&f[i].mtime, &x->stamp) > 0)
            x->stamp = f[i].mtime;
        for (int j = 0; j < n_keep; j++)
            if (strcmp(f[i].name, keep[j]) == 0)
                x->keep = 1;
    }
    free(by_name);
    free(slot);
    qsort(units, nu, sizeof *units, cmp_units);
    return nu;
}

/* Removes every regular member of unit `head`; returns the bytes freed. */
static uint64_t
evict_unit(int dir_fd, const char *dir, const kdt_cache_file *f, size_t n,
           const size_t *unit, size_t head, kdt_cache_tally *t)
{
    uint64_t freed = 0;

    for (size_t i = 0; i < n; i++) {
        if (unit[i] != head || !S_ISREG(f[i].mode))
            continue;
        if (unlinkat(dir_fd, f[i].name, 0) != 0 && errno != ENOENT) {
            count_failure(t, f[i].name, errno);
            continue;
        }
        freed += f[i].size;
        t->removed++;
        kdt_log(KDT_LOG_DEBUG, "cache: evicted %s/%s", dir, f[i].name);
    }
    return freed;
}

void
kdt_cache_evict(int dir_fd, const char *dir, uint64_t max_bytes,
                const char *const *keep, int n_keep, kdt_cache_tally *t)
{
    kdt_cache_file *f;
    uint64_t total = 0;
    size_t n, nu = 0, *unit = NULL;
    unit_info *units = NULL;

    t->bytes_left = 0;
    if (kdt_cache_scan(dir_fd, &f, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++)
        total += f[i].size;
    if (max_bytes && total > max_bytes)
        total -= drop_bad(dir_fd, dir, f, n, t);
    if (max_bytes && total > max_bytes) {
        unit = malloc(n * sizeof *unit);
        units = malloc(n * sizeof *units);
        if (unit && units)
            nu = build_units(dir_fd, f, n, unit, units, keep, n_keep);
    }
    for (size_t k = 0; k < nu && total > max_bytes; k++)
        if (!units[k].keep)
            total -= evict_unit(dir_fd, dir, f, n, unit, units[k].head, t);
    free(unit);
    free(units);
    free(f);
    t->bytes_left = total;
}

/* ---- after a publish ----------------------------------------------------- */

/* The estimate of kdt_cache_after_publish(), held across fork() so that a
 * child never inherits it locked mid-scan (the publishing thread runs
 * this). */
static pthread_mutex_t est_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t est_once = PTHREAD_ONCE_INIT;
static char *est_dir;      /* the directory the estimate is of */
static uint64_t est_bytes; /* its bytes at the last scan + since */

static void
est_prefork(void)
{
    pthread_mutex_lock(&est_lock);
}

static void
est_postfork(void)
{
    pthread_mutex_unlock(&est_lock);
}

static void
est_init(void)
{
    pthread_atfork(est_prefork, est_postfork, est_postfork);
}

void
kdt_cache_after_publish(int dir_fd, const char *dir, const char *const *keep,
                        int n_keep, uint64_t written, uint64_t cap)
{
    kdt_cache_tally t = {0};

    pthread_once(&est_once, est_init);
    pthread_mutex_lock(&est_lock);
    int first = !est_dir || strcmp(est_dir, dir) != 0;
    if (first) {
        free(est_dir);
        est_dir = strdup(dir);
        kdt_cache_sweep_temps(dir_fd, dir, KDT_CACHE_TEMP_GRACE_S,
                              KDT_CACHE_TEMP_STALE_S, &t);
        t.removed = 0;
    } else {
        est_bytes += written;
    }
    if (first || (cap && est_bytes > cap)) {
        kdt_cache_evict(dir_fd, dir, cap, keep, n_keep, &t);
        est_bytes = t.bytes_left;
        if (t.removed > 0)
            kdt_log(KDT_LOG_INFO, "cache: evicted %d entries from %s, %llu "
                    "bytes left", t.removed, dir,
                    (unsigned long long)t.bytes_left);
    }
    pthread_mutex_unlock(&est_lock);
}
