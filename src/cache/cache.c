/*
 * cache/cache.c: the compiled-kernel cache: the in-process memory layer, the
 * read-only layers, the user's directory, and publishing to it.
 *
 * Everything here is on the miss path: the runtime's own table serves
 * launches, so clarity wins over speed.  The entry codec is in
 * cache/entry.c, the per-key lock in cache/lock.c, the housekeeping
 * (stamps, sweep, eviction) in cache/evict.c, the publishing thread that
 * runs the miss path's publish jobs (built here) in cache/async.c.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/admin.h"
#include "base/error.h"
#include "base/stats.h"

#ifndef KDT_PREBUILT_CACHE_DIR
#define KDT_PREBUILT_CACHE_DIR ""
#endif

/* ---- the memory layer --------------------------------------------------- */

/* A small chained hash table: a process holds tens of shapes, not
 * millions, and the key is already a good hash. */
#define MEM_BUCKETS 64

struct mem_entry {
    struct mem_entry *next;
    kdt_key key;
    int kind;
    size_t size;
    unsigned char data[];
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_entry *mem_table[MEM_BUCKETS];
static pthread_once_t mem_once = PTHREAD_ONCE_INIT;

/* The housekeeping's state (see maintain() below). */
static pthread_mutex_t maintain_lock = PTHREAD_MUTEX_INITIALIZER;
static char *maintain_dir;      /* the directory the estimate is of */
static uint64_t maintain_bytes; /* its bytes at the last scan + since */

/* A process that forks while another thread (the publishing thread, say)
 * holds mem_lock or maintain_lock would leave the child a lock nobody can
 * release: hold them across fork() instead.  Both are leaves (nothing else
 * is locked while either is held), so taking them here cannot deadlock.
 * (glibc drops these handlers if the library is dlclose'd.) */
static void
mem_prefork(void)
{
    pthread_mutex_lock(&mem_lock);
    pthread_mutex_lock(&maintain_lock);
}

static void
mem_postfork(void)
{
    pthread_mutex_unlock(&maintain_lock);
    pthread_mutex_unlock(&mem_lock);
}

static void
mem_init(void)
{
    pthread_atfork(mem_prefork, mem_postfork, mem_postfork);
}

static void
mem_enter(void)
{
    pthread_once(&mem_once, mem_init);
    pthread_mutex_lock(&mem_lock);
}

static unsigned
mem_bucket(const kdt_key *key)
{
    return key->bytes[15] % MEM_BUCKETS;
}

/* Returns 1 with a copy in *out, 0 when absent, or OUT_OF_MEMORY. */
static int
mem_get(const kdt_key *key, kdt_blob *out)
{
    struct mem_entry *e;
    int r = 0;

    mem_enter();
    for (e = mem_table[mem_bucket(key)]; e; e = e->next) {
        if (!kdt_key_equal(&e->key, key))
            continue;
        out->data = malloc(e->size);
        if (!out->data) {
            r = kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                         "cache: out of memory (%zu bytes)", e->size);
            break;
        }
        memcpy(out->data, e->data, e->size);
        out->size = e->size;
        out->kind = e->kind;
        r = 1;
        break;
    }
    pthread_mutex_unlock(&mem_lock);
    return r;
}

static int
mem_put(const kdt_key *key, const void *data, size_t size, int kind)
{
    struct mem_entry *e, **pp;
    unsigned b = mem_bucket(key);

    if (size > SIZE_MAX - sizeof *e)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: blob too large");
    e = malloc(sizeof *e + size);
    if (!e)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "cache: out of memory (%zu bytes)", size);
    e->key = *key;
    e->kind = kind;
    e->size = size;
    memcpy(e->data, data, size);
    mem_enter();
    for (pp = &mem_table[b]; *pp; pp = &(*pp)->next) {
        if (kdt_key_equal(&(*pp)->key, key)) {
            struct mem_entry *old = *pp;
            e->next = old->next;
            *pp = e;
            pthread_mutex_unlock(&mem_lock);
            free(old);
            return 0;
        }
    }
    e->next = mem_table[b];
    mem_table[b] = e;
    pthread_mutex_unlock(&mem_lock);
    return 0;
}

void
kdt_cache_memory_clear(void)
{
    struct mem_entry *e, *next;
    int i;

    /* Callers expect the disk to be the source afterwards. */
    kdt_cache_flush();
    mem_enter();
    for (i = 0; i < MEM_BUCKETS; i++) {
        for (e = mem_table[i]; e; e = next) {
            next = e->next;
            free(e);
        }
        mem_table[i] = NULL;
    }
    pthread_mutex_unlock(&mem_lock);
}

/* ---- configuration ------------------------------------------------------ */

int
kdt_cache_mode(void)
{
    static atomic_int warned;
    const char *v = getenv("KDTREE_CACHE");

    if (!v || !*v || strcmp(v, "readwrite") == 0)
        return KDT_CACHE_READWRITE;
    if (strcmp(v, "off") == 0)
        return KDT_CACHE_OFF;
    if (strcmp(v, "readonly") == 0)
        return KDT_CACHE_READONLY;
    if (!atomic_exchange(&warned, 1))
        kdt_log(KDT_LOG_WARN,
                "KDTREE_CACHE=%s is not off, readonly or readwrite; using "
                "readwrite", v);
    return KDT_CACHE_READWRITE;
}

static char *
join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);

    if (!s)
        return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

char *
kdt_cache_user_dir(void)
{
    const char *v;

    if (kdt_cache_mode() == KDT_CACHE_OFF)
        return NULL;
    v = getenv("KDTREE_CACHE_DIR");
    if (v && *v)
        return strdup(v);
    /* The XDG spec says a relative XDG_CACHE_HOME is invalid: ignore it. */
    v = getenv("XDG_CACHE_HOME");
    if (v && v[0] == '/')
        return join(v, "kdtree-jit");
    v = getenv("HOME");
    if (v && *v)
        return join(v, ".cache/kdtree-jit");
    return NULL;
}

char *
kdt_cache_entry_dir(const char *base)
{
    char sub[32];

    snprintf(sub, sizeof sub, "v%d", KDT_CACHE_FORMAT);
    return join(base, sub);
}

void
kdt_cache_free_dirs(char **dirs, size_t n)
{
    size_t i;

    if (!dirs)
        return;
    for (i = 0; i < n; i++)
        free(dirs[i]);
    free(dirs);
}

static int
push_dir(char ***dirs, size_t *n, const char *s, size_t len)
{
    char **d = realloc(*dirs, (*n + 1) * sizeof **dirs);

    if (!d)
        return -1;
    *dirs = d;
    d[*n] = strndup(s, len);
    if (!d[*n])
        return -1;
    (*n)++;
    return 0;
}

char **
kdt_cache_layer_dirs(size_t *n)
{
    char **dirs = NULL;
    const char *path = getenv("KDTREE_CACHE_PATH");
    const char *pre = getenv("KDTREE_CACHE_PREBUILT_DIR");

    *n = 0;
    while (path && *path) {
        const char *c = strchr(path, ':');
        size_t len = c ? (size_t)(c - path) : strlen(path);
        if (len && push_dir(&dirs, n, path, len) != 0)
            goto oom;
        path = c ? c + 1 : NULL;
    }
    if (!pre)
        pre = KDT_PREBUILT_CACHE_DIR;
    if (*pre && push_dir(&dirs, n, pre, strlen(pre)) != 0)
        goto oom;
    return dirs;
oom:
    kdt_cache_free_dirs(dirs, *n);
    *n = 0;
    return NULL;
}

/* ---- trust and reading -------------------------------------------------- */

int
kdt_cache_trusted(const struct stat *st, int allow_root, char *why,
                  size_t why_size)
{
    uid_t me = geteuid();

    if (st->st_uid != me && !(allow_root && st->st_uid == 0)) {
        snprintf(why, why_size, "owned by uid %lu, not %lu",
                 (unsigned long)st->st_uid, (unsigned long)me);
        return -1;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, why_size, "writable by group or others (mode %03o)",
                 (unsigned)(st->st_mode & 0777));
        return -1;
    }
    return 0;
}

static int
read_all(int fd, void *buf, size_t size)
{
    size_t done = 0;

    while (done < size) {
        ssize_t r = read(fd, (char *)buf + done, size - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

int
kdt_cache_read_file(const char *path, int allow_root, void **buf,
                    size_t *size, char *why, size_t why_size)
{
    const char *slash = strrchr(path, '/');
    struct stat st;
    char *dir;
    void *b;
    int fd, r;
    char w[160];

    *buf = NULL;
    *size = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 1;
        snprintf(why, why_size, "cannot open: %s", strerror(errno));
        return -1;
    }
    /* The directory first: in a directory others can write, they could
     * swap entries under us even if each file looks fine. */
    if (slash && slash != path) {
        dir = strndup(path, (size_t)(slash - path));
        if (!dir) {
            close(fd);
            return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                            "cache: out of memory");
        }
        r = stat(dir, &st);
        free(dir);
        if (r != 0 || kdt_cache_trusted(&st, allow_root, w, sizeof w) != 0) {
            snprintf(why, why_size, "directory %s",
                     r != 0 ? strerror(errno) : w);
            close(fd);
            return -1;
        }
    }
    if (fstat(fd, &st) != 0) {
        snprintf(why, why_size, "cannot stat: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_size, "not a regular file");
        close(fd);
        return -1;
    }
    if (kdt_cache_trusted(&st, allow_root, w, sizeof w) != 0) {
        snprintf(why, why_size, "%s", w);
        close(fd);
        return -1;
    }
    if (st.st_size < KDT_ENTRY_HEADER_SIZE
        || (uint64_t)st.st_size > KDT_ENTRY_HEADER_SIZE
                                      + KDT_ENTRY_MAX_PREIMAGE
                                      + KDT_ENTRY_MAX_PAYLOAD) {
        snprintf(why, why_size, "impossible size %lld",
                 (long long)st.st_size);
        close(fd);
        return -1;
    }
    b = malloc((size_t)st.st_size);
    if (!b) {
        close(fd);
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "cache: out of memory (%lld bytes)",
                        (long long)st.st_size);
    }
    if (read_all(fd, b, (size_t)st.st_size) != 0) {
        snprintf(why, why_size, "short read");
        free(b);
        close(fd);
        return -1;
    }
    close(fd);
    *buf = b;
    *size = (size_t)st.st_size;
    return 0;
}

/* ---- lookup ------------------------------------------------------------- */

/* Tries one entry file.  Returns 1 with *out filled, 0 on a miss (absent or
 * rejected; rejections logged and counted), or OUT_OF_MEMORY. */
static int
try_entry(const char *path, int allow_root, const kdt_key *key,
          const char *preimage, size_t preimage_len, kdt_blob *out)
{
    char why[200];
    kdt_entry_view v;
    void *buf;
    size_t size;
    int r;

    r = kdt_cache_read_file(path, allow_root, &buf, &size, why, sizeof why);
    if (r == 1) {
        kdt_log(KDT_LOG_DEBUG, "cache: miss %s: no entry", path);
        return 0;
    }
    if (r < 0 && r != -1)
        return r;
    if (r == 0
        && kdt_entry_decode(buf, size, key, &v, why, sizeof why) == 0) {
        if (preimage && (v.preimage_len != preimage_len
                         || memcmp(v.preimage, preimage, preimage_len) != 0)) {
            snprintf(why, sizeof why, "preimage differs from the wanted one");
        } else {
            out->data = malloc(v.payload_size);
            if (!out->data) {
                free(buf);
                return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                                "cache: out of memory (%zu bytes)",
                                v.payload_size);
            }
            memcpy(out->data, v.payload, v.payload_size);
            out->size = v.payload_size;
            out->kind = v.kind;
            free(buf);
            return 1;
        }
    }
    free(buf);
    kdt_log(KDT_LOG_INFO, "cache: miss %s: entry rejected: %s", path, why);
    kdt_stat_add(KDT_STAT_DISK_REJECTS, 1);
    return 0;
}

static char *
entry_path(const char *base, const kdt_key *key)
{
    char hex[33], name[48];
    char *dir, *path;

    kdt_key_hex(key, hex);
    snprintf(name, sizeof name, "%s.kdt", hex);
    dir = kdt_cache_entry_dir(base);
    if (!dir)
        return NULL;
    path = join(dir, name);
    free(dir);
    return path;
}

/* Searches the disk layers.  Returns 1 (hit, *from set), 0, or a status. */
static int
disk_lookup(const kdt_key *key, const char *preimage, size_t preimage_len,
            kdt_blob *out, int *from, int mode)
{
    char **layers;
    size_t n, i;
    char *user, *path;
    int r = 0;

    layers = kdt_cache_layer_dirs(&n);
    for (i = 0; r == 0 && i < n; i++) {
        path = entry_path(layers[i], key);
        if (!path) {
            r = kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
            break;
        }
        r = try_entry(path, 1, key, preimage, preimage_len, out);
        if (r == 1) {
            *from = KDT_FROM_LAYER;
            kdt_log(KDT_LOG_DEBUG, "cache: hit %s", path);
        }
        free(path);
    }
    kdt_cache_free_dirs(layers, n);
    if (r != 0)
        return r;
    user = kdt_cache_user_dir();
    if (!user)
        return 0;
    path = entry_path(user, key);
    free(user);
    if (!path)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
    r = try_entry(path, 0, key, preimage, preimage_len, out);
    if (r == 1) {
        *from = KDT_FROM_USER;
        kdt_log(KDT_LOG_DEBUG, "cache: hit %s", path);
        /* The last-used stamp that eviction orders by. */
        if (mode == KDT_CACHE_READWRITE)
            kdt_cache_touch(path);
    }
    free(path);
    return r;
}

int
kdt_cache_lookup(const kdt_key *key, const char *preimage,
                 size_t preimage_len, kdt_blob *out, int *from)
{
    double t0;
    int r, mode;

    out->data = NULL;
    out->size = 0;
    out->kind = 0;
    *from = KDT_FROM_NONE;
    r = mem_get(key, out);
    if (r != 0) {
        if (r == 1) {
            *from = KDT_FROM_MEMORY;
            kdt_stat_add(KDT_STAT_MEMORY_HITS, 1);
        }
        return r;
    }
    mode = kdt_cache_mode();
    if (mode == KDT_CACHE_OFF)
        return 0;
    t0 = kdt_now_ms();
    r = disk_lookup(key, preimage, preimage_len, out, from, mode);
    kdt_time_add(KDT_TIME_DISK, kdt_now_ms() - t0);
    if (r < 0)
        return r;
    if (r == 0) {
        kdt_stat_add(KDT_STAT_DISK_MISSES, 1);
        return 0;
    }
    kdt_stat_add(KDT_STAT_DISK_HITS, 1);
    /* Keep it for this process's next lookup; failing that is harmless. */
    (void)mem_put(key, out->data, out->size, out->kind);
    return 1;
}

/* ---- store -------------------------------------------------------------- */

/* Housekeeping after a publish, kept off most compiles' path (each scan
 * reads every entry's inode): the first publish of the process into a
 * directory sweeps stale temp files and scans the directory's size; later
 * ones add what they wrote to that estimate and scan again (evicting) only
 * when the estimate passes the cap.  Other processes' writes are not in
 * the estimate, so each process enforces the cap at its first publish and
 * whenever its own writes could break it.  Runs on the publishing thread
 * for the miss path, so maintain_lock is held across fork() (see
 * mem_prefork): a child must not inherit it locked mid-scan. */
static void
maintain(const char *dir, const char *keep, size_t written, uint64_t cap)
{
    pthread_once(&mem_once, mem_init);
    pthread_mutex_lock(&maintain_lock);
    int first = !maintain_dir || strcmp(maintain_dir, dir) != 0;
    if (first) {
        free(maintain_dir);
        maintain_dir = strdup(dir);
        kdt_cache_sweep_temps(dir, KDT_CACHE_TEMP_STALE_S);
    } else {
        maintain_bytes += written;
    }
    if (first || (cap && maintain_bytes > cap)) {
        uint64_t left = 0;
        int n = kdt_cache_evict(dir, cap, keep, &left);
        maintain_bytes = left;
        if (n > 0)
            kdt_log(KDT_LOG_INFO, "cache: evicted %d entries from %s, %llu "
                    "bytes left", n, dir, (unsigned long long)left);
    }
    pthread_mutex_unlock(&maintain_lock);
}

/* Once per process: the first failure to publish is a warning, the rest
 * info (every later compile would say the same). */
static atomic_int publish_warned;

/* Publishes one encoded entry and does the housekeeping.  Never fails:
 * unwritable, full, foreign directories are never the caller's failure,
 * and it sets no last error (it may run on the publishing thread). */
static void
publish_one(const kdt_publish_job *job, const kdt_publish_entry *e)
{
    char why[300], hex[33], keep[48];
    char *dir;

    if (kdt_cache_publish(job->base, &e->key, e->enc, e->size, e->durable,
                          job->delay_us, job->gate, why, sizeof why) != 0) {
        if (!atomic_exchange(&publish_warned, 1))
            kdt_log(KDT_LOG_WARN, "cache: cannot write to %s: %s; compiled "
                    "kernels stay in memory only", job->base, why);
        else
            kdt_log(KDT_LOG_INFO, "cache: not published to %s: %s",
                    job->base, why);
        return;
    }
    kdt_key_hex(&e->key, hex);
    snprintf(keep, sizeof keep, "%s.kdt", hex);
    kdt_log(KDT_LOG_DEBUG, "cache: published %s/v%d/%s", job->base,
            KDT_CACHE_FORMAT, keep);
    dir = kdt_cache_entry_dir(job->base);
    if (dir) {
        maintain(dir, keep, e->size, job->max_bytes);
        free(dir);
    }
}

void
kdt_cache_job_publish(kdt_publish_job *job)
{
    for (int i = 0; i < job->n; i++)
        publish_one(job, &job->e[i]);
}

static void
job_free_data(kdt_publish_job *job)
{
    for (int i = 0; i < job->n; i++)
        free(job->e[i].enc);
    free(job->base);
    free(job->gate);
    free(job);
}

void
kdt_cache_job_free(kdt_publish_job *job)
{
    if (!job)
        return;
    kdt_cache_lock_release(job->lock);
    job_free_data(job);
}

void
kdt_cache_job_discard(kdt_publish_job *job)
{
    if (!job)
        return;
    kdt_cache_lock_forget(job->lock);
    job_free_data(job);
}

/* Keeps items in memory and, when they are to be written to disk, builds
 * their publish job (*job; NULL when there is nothing to write).  The job
 * takes `lock` only when it is built.  Returns 0 or OUT_OF_MEMORY (items[0]
 * could not be kept; see kdt_cache_store_async). */
static int
build_job(const kdt_cache_item *items, int n, kdt_cache_lock *lock,
          kdt_publish_job **job)
{
    static atomic_int warned;
    unsigned kept = 0; /* bit i: items[i] is in memory */
    kdt_publish_job *j;
    char *user;
    int r;

    *job = NULL;
    if (n < 1 || n > 32)
        return kdt_fail(KDTREE_ERROR_INTERNAL, "cache: %d items in one store",
                        n);
    for (int i = 0; i < n; i++) {
        const kdt_blob *b = items[i].blob;
        r = mem_put(items[i].key, b->data, b->size, b->kind);
        if (r && i == 0)
            return r;
        if (!r)
            kept |= 1u << i;
    }
    if (kdt_cache_mode() != KDT_CACHE_READWRITE)
        return 0;
    user = kdt_cache_user_dir();
    if (!user) {
        if (!atomic_exchange(&warned, 1))
            kdt_log(KDT_LOG_WARN, "cache: no cache directory (set "
                    "KDTREE_CACHE_DIR or HOME); compiled kernels stay in "
                    "memory only");
        return 0;
    }
    j = calloc(1, sizeof *j + (size_t)n * sizeof j->e[0]);
    if (!j) {
        free(user);
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
    }
    j->base = user;
    for (int i = 0; i < n; i++) {
        kdt_publish_entry *e = &j->e[j->n];
        if (!(kept & (1u << i)))
            continue;
        r = kdt_entry_encode(items[i].key, items[i].preimage,
                             items[i].preimage_len, items[i].blob, &e->enc,
                             &e->size);
        if (r) {
            /* Only a bad blob or no memory gets here: memory-only is fine
             * for the first, and the status says the second. */
            if (i == 0 && r == KDTREE_ERROR_OUT_OF_MEMORY) {
                job_free_data(j);
                return r;
            }
            continue;
        }
        e->key = *items[i].key;
        e->durable = items[i].blob->kind != KDT_PAYLOAD_ALIAS;
        j->n++;
    }
    if (j->n == 0) {
        job_free_data(j);
        return 0;
    }
    j->max_bytes = kdt_cache_max_bytes();
    j->delay_us = kdt_cache_publish_delay_us();
    /* A test hook: without memory for it the publish is just not held. */
    const char *gate = kdt_cache_publish_gate();
    j->gate = gate ? strdup(gate) : NULL;
    j->lock = lock;
    *job = j;
    return 0;
}

static int
store(const kdt_cache_item *items, int n, kdt_cache_lock *lock, int async)
{
    kdt_publish_job *job;
    int r = build_job(items, n, lock, &job);

    if (r || !job) {
        kdt_cache_lock_release(lock);
        return r;
    }
    if (async && kdt_cache_async_submit(job) == 0)
        return 0;
    kdt_cache_job_publish(job);
    kdt_cache_job_free(job);
    return 0;
}

int
kdt_cache_store(const kdt_key *key, const char *preimage,
                size_t preimage_len, const kdt_blob *blob)
{
    kdt_cache_item it = {key, preimage, preimage_len, blob};

    return store(&it, 1, NULL, 0);
}

int
kdt_cache_store_async(const kdt_cache_item *items, int n,
                      kdt_cache_lock *lock)
{
    return store(items, n, lock, 1);
}
