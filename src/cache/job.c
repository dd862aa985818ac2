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
    free(job->base);
    free(job->dir_id);
    kdt_cache_hooks_free(&job->hooks);
    free(job);
}

int
kdt_job_build(const kdt_cache_item *items, int n, char *base,
              kdt_cache_lock *lock, kdt_publish_job **job)
{
    kdt_publish_job *j;
    int r;

    *job = NULL;
    if (n < 1 || n > JOB_MAX)
        return kdt_fail(KDTREE_ERROR_INTERNAL, "cache: %d items in one store",
                        n);
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
    j->dir_id = kdt_cache_dir_id(base);
    if (!j->dir_id) {
        free_data(j);
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: out of memory");
    }
    j->base = base;
    j->max_bytes = kdt_cache_max_bytes();
    kdt_cache_hooks_read(&j->hooks);
    j->lock = lock;
    *job = j;
    return 0;
}

/* The job's entry could not be published (`why`): said once as a notice,
 * and told to this process's later misses and, through the lock file, to
 * the processes waiting for this key, so that none of them waits for, or
 * locks for, a directory nobody can write. */
static void
entry_failed(kdt_publish_job *job, const char *why)
{
    kdt_cache_write_failed(job->base, why);
    (void)kdt_cache_mark_unwritable(job->dir_id);
    kdt_cache_lock_publish_failed(job->lock);
}

void
kdt_job_run(kdt_publish_job *job)
{
    char why[KDT_WHY_SIZE], *dir;
    char names[JOB_MAX][KDT_NAME_SIZE];
    const char *keep[JOB_MAX];
    uint64_t written = 0;
    int fd, n_keep = 0;

    if (kdt_cache_dir_open(job->base, KDT_DIR_CREATE, &fd, why,
                           sizeof why) != 0) {
        entry_failed(job, why);
        return;
    }
    dir = kdt_layout_entry_dir(job->base);
    for (int i = 0; i < job->n; i++) {
        const kdt_publish_entry *e = &job->e[i];
        /* Reasons name files relative to the base, which the notice
         * names. */
        if (kdt_cache_publish(fd, kdt_layout_subdir(), &e->key, e->enc,
                              e->size, e->durable, &job->hooks, why,
                              sizeof why) != 0) {
            if (i > 0) {
                kdt_cache_write_failed(job->base, why);
                continue;
            }
            /* The entry is not there: its aliases would lead nowhere. */
            entry_failed(job, why);
            break;
        }
        if (i == 0)
            kdt_cache_mark_writable(job->dir_id);
        kdt_layout_entry_name(&e->key, names[n_keep]);
        keep[n_keep] = names[n_keep];
        kdt_log(KDT_LOG_DEBUG, "cache: published %s/%s", dir ? dir : "",
                names[n_keep]);
        n_keep++;
        written += e->size;
    }
    if (n_keep && dir)
        kdt_cache_after_publish(fd, dir, keep, n_keep, written,
                                job->max_bytes);
    free(dir);
    close(fd);
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
