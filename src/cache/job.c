/*
 * cache/job.c: publish jobs (see cache/job.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/settings.h"
#include "cache/entry.h"
#include "cache/file.h"
#include "cache/housekeep.h"
#include "cache/job.h"
#include "cache/layout.h"
#include "cache/notice.h"
#include "cache/publish.h"

#define JOB_MAX 32

static void
free_data(kdt_publish_job *job)
{
    for (int i = 0; i < job->n; i++)
        free(job->e[i].enc);
    for (int i = 0; i < job->n_dirs; i++) {
        free(job->dir[i].base);
        free(job->dir[i].dir_id);
    }
    kdt_cache_hooks_free(&job->hooks);
    free(job);
}

int
kdt_job_build(const kdt_cache_item *items, int n,
              const kdt_publish_dir *dirs, int n_dirs,
              kdt_cache_lock *lock, kdt_publish_job **job)
{
    kdt_publish_job *j;
    int r;

    *job = NULL;
    if (n < 1 || n > JOB_MAX || n_dirs < 1 || n_dirs > 2)
        return kdt_fail(KDTREE_ERROR_INTERNAL, "cache: %d items for %d "
                        "directories in one store", n, n_dirs);
    j = calloc(1, sizeof *j + (size_t)n * sizeof j->e[0]);
    if (!j)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
    for (int i = 0; i < n; i++) {
        kdt_publish_entry *e = &j->e[j->n];
        r = kdt_entry_encode(items[i].key, items[i].preimage,
                             items[i].preimage_len, items[i].blob, &e->enc,
                             &e->size);
        if (r) {
            /* Only a bad blob or no memory gets here: memory-only is fine
             * for the first, and the status says the second.  Without
             * the entry its aliases would lead nowhere. */
            if (i == 0) {
                free_data(j);
                return r == KDTREE_ERROR_OUT_OF_MEMORY ? r : 0;
            }
            continue;
        }
        e->key = *items[i].key;
        e->durable = items[i].blob->kind != KDT_PAYLOAD_ALIAS;
        j->n++;
    }
    if (j->n == 0) {
        free_data(j);
        return 0;
    }
    for (int i = 0; i < n_dirs; i++)
        j->dir[i] = dirs[i];
    j->n_dirs = n_dirs;
    kdt_cache_hooks_read(&j->hooks);
    j->lock = lock;
    *job = j;
    return 0;
}

/* The entry could not be published into `d` (`why`): said once as a
 * notice (naming the directory tried next, if any), recorded for
 * kdtree-cache when `d` is the user's, and marked, so that this process's
 * later misses neither wait nor lock for a directory nobody can write. */
static void
entry_failed(const kdt_publish_dir *d, const kdt_publish_dir *next,
             const char *why)
{
    if (d->spill)
        kdt_cache_notice(KDT_NOTICE_SPILL, "cache: spill store %s not used: "
                         "%s", d->base, why);
    else
        kdt_cache_write_failed(d->base, why, next ? next->base : NULL);
    (void)kdt_cache_mark_unwritable(d->dir_id);
}

/* Publishes the job's entries into `d`.  Returns 1 when the entry landed
 * (its aliases may not have), 0 when it did not. */
static int
publish_into(kdt_publish_job *job, const kdt_publish_dir *d,
             const kdt_publish_dir *next)
{
    char why[KDT_WHY_SIZE], *dir;
    char names[JOB_MAX][KDT_NAME_SIZE];
    const char *keep[JOB_MAX];
    kdt_cache_hooks hooks = job->hooks;
    uint64_t written = 0;
    int fd, n_keep = 0;

    /* The hooks' failures stand for the user's directory's file system;
     * the spill store is tmpfs beside the locks. */
    if (d->spill)
        hooks.fail_step = hooks.fail_errno = 0;
    if (kdt_cache_dir_open(d->base, KDT_DIR_CREATE
                                        | (d->spill ? KDT_DIR_NO_LINK : 0),
                           &fd, why, sizeof why) != 0) {
        entry_failed(d, next, why);
        return 0;
    }
    dir = kdt_layout_entry_dir(d->base);
    for (int i = 0; i < job->n; i++) {
        const kdt_publish_entry *e = &job->e[i];
        /* Reasons name files relative to the base, which the notice
         * names. */
        if (kdt_cache_publish(fd, kdt_layout_subdir(), &e->key, e->enc,
                              e->size, e->durable, &hooks, why,
                              sizeof why) != 0) {
            if (i > 0) {
                kdt_cache_write_failed(d->base, why, NULL);
                continue;
            }
            /* The entry is not there: its aliases would lead nowhere. */
            entry_failed(d, next, why);
            break;
        }
        if (i == 0)
            kdt_cache_mark_writable(d->dir_id);
        kdt_layout_entry_name(&e->key, names[n_keep]);
        keep[n_keep] = names[n_keep];
        kdt_log(KDT_LOG_DEBUG, "cache: published %s/%s", dir ? dir : "",
                names[n_keep]);
        n_keep++;
        written += e->size;
    }
    if (n_keep && dir)
        kdt_cache_after_publish(fd, dir, keep, n_keep, written, d->max_bytes);
    free(dir);
    close(fd);
    return n_keep > 0;
}

void
kdt_job_run(kdt_publish_job *job)
{
    const char *locked = kdt_cache_lock_dir_id(job->lock);
    int landed = -1, at = -1;

    for (int i = 0; landed < 0 && i < job->n_dirs; i++)
        if (publish_into(job, &job->dir[i],
                         i + 1 < job->n_dirs ? &job->dir[i + 1] : NULL))
            landed = i;
    for (int i = 0; locked && i < job->n_dirs; i++)
        if (strcmp(job->dir[i].dir_id, locked) == 0)
            at = i;
    /* The processes waiting on the lock wait for its directory: when that
     * could not take the entry, the lock file says so (only then, once the
     * spill store has it), and they stop waiting for that directory. */
    if (locked && (landed < 0 || (at >= 0 && at < landed)))
        kdt_cache_lock_publish_failed(job->lock);
}

void
kdt_job_free(kdt_publish_job *job)
{
    if (!job)
        return;
    kdt_cache_lock_release(job->lock);
    free_data(job);
}

void
kdt_job_discard(kdt_publish_job *job)
{
    if (!job)
        return;
    kdt_cache_lock_forget(job->lock);
    free_data(job);
}
