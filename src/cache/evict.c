/*
 * cache/evict.c: housekeeping of the user's cache directory: the last-used
 * stamp, the sweep of temp files left by dead writers, and least-recently-
 * used eviction under a byte cap.
 *
 * The stamp is the entry's mtime (see cache/admin.h): publishing sets it,
 * a disk hit refreshes it.  Everything here tolerates other processes
 * doing the same at the same time: a file that vanished between readdir
 * and unlink is simply gone already, and a reader that opened an entry
 * before it was evicted still reads it whole (unlink keeps open files).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/admin.h"
#include "base/error.h"

static int
is_hex32(const char *s)
{
    int i;

    for (i = 0; i < 32; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int
is_entry_name(const char *name)
{
    return strlen(name) == 36 && is_hex32(name) && strcmp(name + 32, ".kdt") == 0;
}

static int
older(const kdt_cache_file *a, const kdt_cache_file *b)
{
    if (a->mtime.tv_sec != b->mtime.tv_sec)
        return a->mtime.tv_sec < b->mtime.tv_sec ? -1 : 1;
    if (a->mtime.tv_nsec != b->mtime.tv_nsec)
        return a->mtime.tv_nsec < b->mtime.tv_nsec ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int
cmp_files(const void *a, const void *b)
{
    return older(a, b);
}

int
kdt_cache_scan(const char *entry_dir, kdt_cache_file **files, size_t *n)
{
    kdt_cache_file *v = NULL, *t;
    size_t cap = 0, cnt = 0, plen = strlen(entry_dir);
    struct dirent *d;
    struct stat st;
    DIR *dp;

    *files = NULL;
    *n = 0;
    dp = opendir(entry_dir);
    if (!dp)
        return 0;
    while ((d = readdir(dp)) != NULL) {
        if (!is_entry_name(d->d_name))
            continue;
        if (fstatat(dirfd(dp), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0
            || !S_ISREG(st.st_mode))
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 32;
            t = realloc(v, cap * sizeof *v);
            if (!t)
                goto oom;
            v = t;
        }
        v[cnt].path = malloc(plen + 40);
        if (!v[cnt].path)
            goto oom;
        snprintf(v[cnt].path, plen + 40, "%s/%s", entry_dir, d->d_name);
        memcpy(v[cnt].name, d->d_name, 37); /* 36 + NUL: checked above */
        v[cnt].size = (uint64_t)st.st_size;
        v[cnt].mtime = st.st_mtim;
        cnt++;
    }
    closedir(dp);
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_files);
    *files = v;
    *n = cnt;
    return 0;
oom:
    closedir(dp);
    kdt_cache_scan_free(v, cnt);
    return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
}

void
kdt_cache_scan_free(kdt_cache_file *files, size_t n)
{
    size_t i;

    if (!files)
        return;
    for (i = 0; i < n; i++)
        free(files[i].path);
    free(files);
}

void
kdt_cache_touch(const char *path)
{
    struct timespec ts[2];

    /* atime left alone (UTIME_OMIT); mtime is the stamp. */
    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_sec = 0;
    ts[1].tv_nsec = UTIME_NOW;
    if (utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) != 0)
        kdt_log(KDT_LOG_DEBUG, "cache: cannot stamp %s: %s", path,
                strerror(errno));
}

/* Parses ".<32 hex>.<pid>.<n>.<host>.tmp"; returns 1 with *pid and the host
 * part (pointer and length into name), 0 for any other name. */
static int
parse_temp(const char *name, long *pid, const char **host, size_t *host_len)
{
    size_t len = strlen(name);
    const char *p;
    char *end;

    if (len < 1 + 32 + 1 + 1 + 1 + 1 + 1 + 4 || name[0] != '.'
        || !is_hex32(name + 1) || name[33] != '.'
        || strcmp(name + len - 4, ".tmp") != 0)
        return 0;
    p = name + 34;
    if (*p < '0' || *p > '9')
        return 0;
    errno = 0;
    *pid = strtol(p, &end, 10);
    if (errno || *end != '.' || *pid <= 0)
        return 0;
    p = end + 1;
    if (*p < '0' || *p > '9')
        return 0;
    (void)strtoul(p, &end, 10);
    if (*end != '.')
        return 0;
    *host = end + 1;
    if (name + len - 4 <= *host)
        return 0;
    *host_len = (size_t)(name + len - 4 - *host);
    return 1;
}

int
kdt_cache_sweep_temps(const char *entry_dir, double min_age_s)
{
    char host[48];
    struct dirent *d;
    struct stat st;
    DIR *dp;
    time_t now = time(NULL);
    int removed = 0;

    dp = opendir(entry_dir);
    if (!dp)
        return 0;
    kdt_cache_host_tag(host, sizeof host);
    while ((d = readdir(dp)) != NULL) {
        const char *h;
        size_t hl;
        long pid;
        int stale = 0;

        if (!parse_temp(d->d_name, &pid, &h, &hl))
            continue;
        if (fstatat(dirfd(dp), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0
            || !S_ISREG(st.st_mode))
            continue;
        /* Our own host: a writer that no longer exists will never rename
         * its temp file.  (A reused pid only delays the sweep.) */
        if (hl == strlen(host) && memcmp(h, host, hl) == 0
            && (pid_t)pid != getpid() && kill((pid_t)pid, 0) != 0
            && errno == ESRCH)
            stale = 1;
        if (difftime(now, st.st_mtime) > min_age_s)
            stale = 1;
        if (stale && unlinkat(dirfd(dp), d->d_name, 0) == 0) {
            kdt_log(KDT_LOG_DEBUG, "cache: swept stale temp file %s/%s",
                    entry_dir, d->d_name);
            removed++;
        }
    }
    closedir(dp);
    return removed;
}

uint64_t
kdt_cache_max_bytes(void)
{
    static atomic_int warned;
    const char *v = getenv("KDTREE_CACHE_MAX_BYTES");
    unsigned long long n;
    char *end;
    int shift = 0;

    if (!v || !*v)
        return KDT_CACHE_DEFAULT_MAX_BYTES;
    errno = 0;
    n = strtoull(v, &end, 10);
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    else if (*end == 'T' || *end == 't')
        shift = 40;
    if (shift)
        end++;
    if (errno || end == v || *end != '\0' || v[0] == '-'
        || (shift && n > (UINT64_MAX >> shift))) {
        kdt_log(atomic_exchange(&warned, 1) ? KDT_LOG_DEBUG : KDT_LOG_WARN,
                "KDTREE_CACHE_MAX_BYTES=%s is not a size; using %llu", v,
                (unsigned long long)KDT_CACHE_DEFAULT_MAX_BYTES);
        return KDT_CACHE_DEFAULT_MAX_BYTES;
    }
    return (uint64_t)n << shift;
}

int
kdt_cache_evict(const char *entry_dir, uint64_t max_bytes, const char *keep,
                uint64_t *bytes_left)
{
    kdt_cache_file *f;
    uint64_t total = 0;
    size_t n, i;
    int removed = 0;

    if (bytes_left)
        *bytes_left = 0;
    if (kdt_cache_scan(entry_dir, &f, &n) != 0)
        return 0;
    for (i = 0; i < n; i++)
        total += f[i].size;
    /* Oldest stamp first (the scan's order). */
    for (i = 0; max_bytes && total > max_bytes && i < n; i++) {
        if (keep && strcmp(f[i].name, keep) == 0)
            continue;
        if (unlink(f[i].path) == 0 || errno == ENOENT) {
            total -= f[i].size;
            removed++;
            kdt_log(KDT_LOG_DEBUG, "cache: evicted %s", f[i].path);
        }
    }
    kdt_cache_scan_free(f, n);
    if (bytes_left)
        *bytes_left = total;
    return removed;
}
