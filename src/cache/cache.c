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

/* Looks `key` up in one base directory (a layer, or the user's).  Returns
 * 1 (hit), 0 or a status; `touch`: stamp a hit. */
static int
lookup_in(const char *base, int is_layer, int touch, const kdt_key *key,
          const char *preimage, size_t preimage_len, kdt_blob *out)
{
    char why[KDT_WHY_SIZE], name[KDT_NAME_SIZE], *dir;
    int fd, r;

    r = kdt_cache_dir_open(base, is_layer ? KDT_DIR_ALLOW_ROOT : 0, &fd, why,
                           sizeof why);
    if (r == 1) {
        kdt_log(KDT_LOG_DEBUG, "cache: miss %s: no such directory", base);
        return 0;
    }
    if (r != 0) {
        if (is_layer)
            kdt_cache_notice(KDT_NOTICE_LAYER,
                             "cache: read-only layer %s not used: %s", base,
                             why);
        else
            kdt_cache_notice(KDT_NOTICE_USER_DIR,
                             "cache: cannot use %s: %s; compiled kernels "
                             "stay in memory only", base, why);
        kdt_stat_add(KDT_STAT_DISK_REJECTS, 1);
        return 0;
    }
    dir = kdt_layout_entry_dir(base);
    kdt_layout_entry_name(key, name);
    r = dir ? try_entry(fd, dir, name, is_layer, key, preimage, preimage_len,
                        out)
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

/* Searches the layers, then the user's directory.  Returns 1 (hit, *from
 * set), 0, or a status. */
static int
disk_lookup(const kdt_key *key, const char *preimage, size_t preimage_len,
            kdt_blob *out, int *from, int mode)
{
    char **layers, *user;
    size_t n, i;
    int r = 0;

    layers = kdt_cache_layer_dirs(&n);
    for (i = 0; r == 0 && i < n; i++) {
        r = lookup_in(layers[i], 1, 0, key, preimage, preimage_len, out);
        if (r == 1)
            *from = KDT_FROM_LAYER;
    }
    kdt_cache_free_dirs(layers, n);
    if (r != 0)
        return r;
    user = kdt_cache_user_dir();
    if (!user)
        return 0;
    r = lookup_in(user, 0, mode == KDT_CACHE_READWRITE, key, preimage,
                  preimage_len, out);
    if (r == 1)
        *from = KDT_FROM_USER;
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

static int
store(const kdt_cache_item *items, int n, kdt_cache_lock *lock, int async)
{
    kdt_cache_item kept[32];
    kdt_publish_job *job;
    char *user;
    int n_kept = 0, r;

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
    r = kdt_job_build(kept, n_kept, user, lock, &job);
    if (r || !job) {
        free(user);
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
    char why[KDT_WHY_SIZE], *user, *id = NULL;
    double timeout = kdt_cache_lock_timeout();
    kdt_cache_lock *lock;
    kdt_gate *gate;
    int fd, r, waited;

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
    r = kdt_cache_dir_open(user, 0, &fd, why, sizeof why);
    if (r == 0)
        close(fd);
    if (r >= 0)
        id = kdt_cache_dir_id(user);
    /* A directory nobody can write is not locked for: each holder would
     * compile, fail to publish and hand the lock to the next, who would
     * find nothing and compile again, one process after another. */
    if (id && !kdt_cache_is_unwritable(id)) {
        if (kdt_cache_dir_unwritable(user, why, sizeof why)) {
            if (kdt_cache_mark_unwritable(id))
                kdt_cache_notice(KDT_NOTICE_USER_DIR,
                                 "cache: cannot write to %s: %s; compiled "
                                 "kernels stay in memory only, each process "
                                 "compiling its own", user, why);
        } else {
            (void)kdt_lock_node(lock, id, key, what, timeout);
        }
    }
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
