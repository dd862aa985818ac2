/*
 * cache/cache.c: lookup and store on top of the cache's modules (see
 * cache/cache.h for the layers).
 *
 * Everything here is on the miss path: the runtime's own table serves
 * launches, so clarity wins over speed.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/stats.h"
#include "cache/cache.h"
#include "cache/settings.h"
#include "cache/entry.h"
#include "cache/file.h"
#include "cache/gate.h"
#include "cache/housekeep.h"
#include "cache/layout.h"
#include "cache/memory.h"
#include "cache/notice.h"
#include "cache/worker.h"

/* ---- lookup ------------------------------------------------------------- */

/* Tries entry `name` of the entry directory `fd` (`dir` in messages).
 * Returns 1 with *out filled, 0 on a miss (absent or rejected; rejections
 * logged and counted), or OUT_OF_MEMORY. */
static int
try_entry(int fd, const char *dir, const char *name, int allow_root,
          const kdt_key *key, const char *preimage, size_t preimage_len,
          kdt_blob *out)
{
    char why[KDT_WHY_SIZE];
    kdt_entry_view v;
    void *buf;
    size_t size;
    int r;

    r = kdt_cache_read_entry(fd, name, allow_root, &buf, &size, why,
                             sizeof why);
    if (r == 1) {
        kdt_log(KDT_LOG_DEBUG, "cache: miss %s/%s: no entry", dir, name);
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
    kdt_log(KDT_LOG_INFO, "cache: miss %s/%s: entry rejected: %s", dir, name,
            why);
    kdt_stat_add(KDT_STAT_DISK_REJECTS, 1);
    return 0;
}

/* What a base directory is to a lookup. */
enum where { IN_LAYER, IN_USER, IN_SPILL };

/* Looks `key` up in one base directory (a layer, the user's, or the spill
 * store).  Returns 1 (hit), 0 or a status; `touch`: stamp a hit. */
static int
lookup_in(const char *base, enum where where, int touch, const kdt_key *key,
          const char *preimage, size_t preimage_len, kdt_blob *out)
{
    static const int flags[] = {KDT_DIR_ALLOW_ROOT, 0, KDT_DIR_NO_LINK};
    char why[KDT_WHY_SIZE], name[KDT_NAME_SIZE], *dir;
    int fd, r;

    r = kdt_cache_dir_open(base, flags[where], &fd, why, sizeof why);
    if (r == 1) {
        kdt_log(KDT_LOG_DEBUG, "cache: miss %s: no such directory", base);
        return 0;
    }
    if (r != 0) {
        if (where == IN_LAYER)
            kdt_cache_notice(KDT_NOTICE_LAYER,
                             "cache: read-only layer %s not used: %s", base,
                             why);
        else if (where == IN_SPILL)
            kdt_cache_notice(KDT_NOTICE_SPILL,
                             "cache: spill store %s not used: %s", base, why);
        else
            kdt_cache_notice(KDT_NOTICE_USER_DIR,
                             "cache: cannot use %s: %s; compiled kernels "
                             "stay in memory only", base, why);
        kdt_stat_add(KDT_STAT_DISK_REJECTS, 1);
        return 0;
    }
    dir = kdt_layout_entry_dir(base);
    kdt_layout_entry_name(key, name);
    r = dir ? try_entry(fd, dir, name, where == IN_LAYER, key, preimage,
                        preimage_len, out)
            : kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
    if (r == 1) {
        kdt_log(KDT_LOG_DEBUG, "cache: hit %s/%s", dir, name);
        /* The last-used stamp that eviction orders by. */
        if (touch)
            kdt_cache_touch(fd, name);
    }
    free(dir);
    close(fd);
    return r;
}

/* ---- the spill store ---------------------------------------------------- */

/* The spill store (cache/settings.h) stands in for a user's directory
 * that cannot take an entry (a read-only or full file system, a directory
 * the trust rules refuse, a publish there that failed: EIO, EXDEV, a
 * quota), in readwrite mode only: readonly asks for no cache writes, and
 * gets none.  It is node-local and one per user: an entry is named by
 * everything that shaped it, so any cache directory's processes may share
 * it.  A process publishes there, and locks for it, instead of compiling
 * what each of its node's processes compiles too. */

/* The spill store's base, with its identity in *id (both malloc'ed), when
 * this process may use it: KDTREE_CACHE_SPILL_MAX_BYTES is not 0 and no
 * publish there has failed.  With `check`, also when the store is not
 * refused by the trust rules, nor shown unwritable (said once, and
 * marked).  Else NULL.  A job's fallback is named without the checks: a
 * process that never needs the store is never told about it. */
static char *
spill_store(char **id, uint64_t *cap, int check)
{
    char why[KDT_WHY_SIZE], *base;
    int fd, r;

    *id = NULL;
    *cap = kdt_cache_spill_max_bytes();
    if (*cap == 0 || !(base = kdt_cache_spill_dir()))
        return NULL;
    *id = kdt_cache_dir_id(base);
    if (*id && !kdt_cache_is_unwritable(*id)) {
        if (!check)
            return base;
        r = kdt_cache_dir_open(base, KDT_DIR_NO_LINK, &fd, why, sizeof why);
        if (r == 0)
            close(fd);
        if (r >= 0 && !kdt_cache_dir_unwritable(base, why, sizeof why))
            return base;
        if (kdt_cache_mark_unwritable(*id))
            kdt_cache_notice(KDT_NOTICE_SPILL, "cache: spill store %s not "
                             "used: %s", base, why);
    }
    free(*id);
    *id = NULL;
    free(base);
    return NULL;
}

/* Marks the user's directory `user` (identity `id`) unwritable for this
 * process, which found out before publishing there (`why`); the first
 * time, says so, naming the spill store when there is one. */
static void
user_found_unwritable(const char *user, const char *id, const char *why)
{
    char *spill, *spill_id;
    uint64_t cap;

    if (!kdt_cache_mark_unwritable(id))
        return;
    spill = spill_store(&spill_id, &cap, 1);
    if (spill)
        kdt_cache_notice(KDT_NOTICE_USER_DIR, "cache: cannot write to %s: "
                         "%s; compiled kernels go to the node's spill store "
                         "%s, shared by its processes", user, why, spill);
    else
        kdt_cache_notice(KDT_NOTICE_USER_DIR, "cache: cannot write to %s: "
                         "%s; compiled kernels stay in memory only, each "
                         "process compiling its own", user, why);
    free(spill);
    free(spill_id);
}

/* 1 when the user's directory `user` (identity `id`) cannot take an entry
 * as far as this process knows: a publish there failed, or it shows that
 * it would (cache/file.h: kdt_cache_dir_unwritable; the directory then
 * marked and said, as a publish would, so that a process whose every
 * kernel the spill store serves says why too). */
static int
user_unwritable(const char *user, const char *id)
{
    char why[KDT_WHY_SIZE];

    if (kdt_cache_is_unwritable(id))
        return 1;
    if (!kdt_cache_dir_unwritable(user, why, sizeof why))
        return 0;
    user_found_unwritable(user, id, why);
    return 1;
}

/* 1 when a publish into the user's directory `user` (identity `id`) may
 * succeed, else 0 (the directory then marked and said). */
static int
user_writable(const char *user, const char *id)
{
    char why[KDT_WHY_SIZE];
    int fd, r;

    if (kdt_cache_is_unwritable(id))
        return 0;
    r = kdt_cache_dir_open(user, 0, &fd, why, sizeof why);
    if (r == 0)
        close(fd);
    if (r >= 0 && !kdt_cache_dir_unwritable(user, why, sizeof why))
        return 1;
    user_found_unwritable(user, id, why);
    return 0;
}

/* Searches the layers, then the user's directory, then the spill store
 * where it stands in for the user's directory.  Returns 1 (hit, *from
 * set), 0, or a status. */
static int
disk_lookup(const kdt_key *key, const char *preimage, size_t preimage_len,
            kdt_blob *out, int *from, int mode)
{
    char **layers, *user, *id, *spill = NULL, *spill_id = NULL;
    uint64_t cap;
    size_t n, i;
    int r = 0;

    layers = kdt_cache_layer_dirs(&n);
    for (i = 0; r == 0 && i < n; i++) {
        r = lookup_in(layers[i], IN_LAYER, 0, key, preimage, preimage_len,
                      out);
        if (r == 1)
            *from = KDT_FROM_LAYER;
    }
    kdt_cache_free_dirs(layers, n);
    if (r != 0)
        return r;
    user = kdt_cache_user_dir();
    if (!user)
        return 0;
    r = lookup_in(user, IN_USER, mode == KDT_CACHE_READWRITE, key, preimage,
                  preimage_len, out);
    if (r == 1)
        *from = KDT_FROM_USER;
    if (r == 0 && mode == KDT_CACHE_READWRITE
        && (id = kdt_cache_dir_id(user)) != NULL) {
        if (user_unwritable(user, id))
            spill = spill_store(&spill_id, &cap, 1);
        free(id);
    }
    if (spill) {
        r = lookup_in(spill, IN_SPILL, 1, key, preimage, preimage_len, out);
        if (r == 1)
            *from = KDT_FROM_SPILL;
    }
    free(spill);
    free(spill_id);
    free(user);
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
    r = kdt_mem_get(key, out);
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
    (void)kdt_mem_put(key, out);
    return 1;
}

/* ---- store -------------------------------------------------------------- */

/* Where a store publishes, in order (cache/job.h): the user's directory
 * `user` (taken over, malloc'ed), unless it shows it cannot take the
 * entry, then the spill store, when there is one.  Sets dirs[0..*n) (none
 * when neither can be used; `user` is then freed).  Returns 0 or
 * KDTREE_ERROR_OUT_OF_MEMORY. */
static int
publish_dirs(char *user, kdt_publish_dir *dirs, int *n)
{
    char why[KDT_WHY_SIZE], *id = kdt_cache_dir_id(user), *spill_id;
    kdt_publish_dir *d = dirs;
    char *spill;
    uint64_t cap;

    *n = 0;
    if (!id) {
        free(user);
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
    }
    /* Tried even after a publish there failed, unless the file system
     * shows it would fail again: a mended directory is noticed by the
     * publish that succeeds (cache/notice.h). */
    if (!kdt_cache_dir_unwritable(user, why, sizeof why)) {
        *d++ = (kdt_publish_dir){user, id, kdt_cache_max_bytes(), 0};
    } else {
        user_found_unwritable(user, id, why);
        free(user);
        free(id);
    }
    /* The fallback, unchecked (the job's publish checks it, if it comes
     * to that); the only directory, checked. */
    spill = spill_store(&spill_id, &cap, d == dirs);
    if (spill)
        *d++ = (kdt_publish_dir){spill, spill_id, cap, 1};
    *n = (int)(d - dirs);
    return 0;
}

static int
store(const kdt_cache_item *items, int n, kdt_cache_lock *lock, int async)
{
    kdt_cache_item kept[32];
    kdt_publish_dir dirs[2];
    kdt_publish_job *job = NULL;
    char *user;
    int n_kept = 0, n_dirs = 0, r;

    if (n < 1 || n > 32) {
        kdt_cache_lock_release(lock);
        return kdt_fail(KDTREE_ERROR_INTERNAL, "cache: %d items in one store",
                        n);
    }
    for (int i = 0; i < n; i++) {
        r = kdt_mem_put(items[i].key, items[i].blob);
        if (r && i == 0) {
            kdt_cache_lock_release(lock);
            return r;
        }
        if (!r)
            kept[n_kept++] = items[i];
    }
    /* The entry is in memory: this process's threads waiting for the key
     * find it there, without waiting for the disk. */
    kdt_cache_lock_open_gate(lock);
    if (!kdt_cache_lock_held(lock)) {
        kdt_cache_lock_release(lock);
        lock = NULL;
    }
    if (kdt_cache_mode() != KDT_CACHE_READWRITE) {
        kdt_cache_lock_release(lock);
        return 0;
    }
    user = kdt_cache_user_dir();
    if (!user) {
        kdt_cache_notice(KDT_NOTICE_USER_DIR,
                         "cache: no cache directory (set KDTREE_CACHE_DIR or "
                         "HOME); compiled kernels stay in memory only");
        kdt_cache_lock_release(lock);
        return 0;
    }
    r = publish_dirs(user, dirs, &n_dirs);
    if (r == 0 && n_dirs)
        r = kdt_job_build(kept, n_kept, dirs, n_dirs, lock, &job);
    if (r || !job) {
        for (int i = 0; i < n_dirs; i++) {
            free(dirs[i].base);
            free(dirs[i].dir_id);
        }
        kdt_cache_lock_release(lock);
        return r;
    }
    if (async && kdt_worker_submit(job) == 0)
        return 0;
    kdt_job_run(job);
    kdt_job_free(job);
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

void
kdt_cache_flush(void)
{
    kdt_worker_flush();
}

kdt_cache_lock *
kdt_cache_lock_acquire(const kdt_key *key, const char *what)
{
    double timeout = kdt_cache_lock_timeout();
    char *user, *id, *spill = NULL, *spill_id = NULL;
    kdt_cache_lock *lock;
    kdt_gate *gate;
    uint64_t cap;
    int waited;

    /* One compile per key in this process, whatever the disk allows.  (In
     * two statements: a call's arguments are evaluated in no set order,
     * and `waited` is the gate's answer.) */
    gate = kdt_gate_enter(key, timeout, &waited);
    lock = kdt_lock_new(gate, waited);
    if (!lock)
        return NULL;
    /* The thread waited for has put its blob in memory: nobody else need
     * be asked. */
    if (waited && kdt_mem_has(key))
        return lock;
    /* Only a process that will publish waits for another's publish. */
    if (kdt_cache_mode() != KDT_CACHE_READWRITE)
        return lock;
    user = kdt_cache_user_dir();
    if (!user)
        return lock;
    id = kdt_cache_dir_id(user);
    /* The lock of a directory nobody can write is not taken: each holder
     * would compile, fail to publish and hand the lock to the next, who
     * would find nothing and compile again, one process after another.
     * A holder that found out only by failing says so in its lock file
     * (once the spill store has its entry); its waiters then stop. */
    if (id && user_writable(user, id)
        && (kdt_lock_node(lock, id, key, what, timeout)
            || !kdt_cache_is_unwritable(id)))
        goto done;
    /* The spill store stands in: its lock is the node's claim on the key
     * there, and its last holder's entry is found there. */
    spill = id ? spill_store(&spill_id, &cap, 1) : NULL;
    if (spill)
        (void)kdt_lock_node(lock, spill_id, key, what, timeout);
    free(spill);
    free(spill_id);
done:
    free(id);
    free(user);
    return lock;
}

void
kdt_cache_memory_clear(void)
{
    /* Callers expect the disk to be the source afterwards. */
    kdt_cache_flush();
    kdt_mem_clear();
}
