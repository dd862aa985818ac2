/*
 * cache/notice.c: notices about unusable directories and the record of
 * failed writes (see cache/notice.h).
 */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/notice.h"

static atomic_int warned[KDT_NOTICE_COUNT];

void
kdt_cache_notice(enum kdt_notice topic, const char *fmt, ...)
{
    int level = atomic_exchange(&warned[topic], 1) ? KDT_LOG_INFO
                                                   : KDT_LOG_WARN;
    va_list ap;

    va_start(ap, fmt);
    kdt_vlog(level, fmt, ap);
    va_end(ap);
}

/* The last failure's reason and the unwritable directories: held under
 * rec_lock, which fork() must not leave locked in the child (the
 * publishing thread may hold it then). */
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rec_once = PTHREAD_ONCE_INIT;
static unsigned long rec_count;
static char *rec_why;

/* A process publishes to one directory, rarely a few: a list will do. */
typedef struct dir_mark {
    struct dir_mark *next;
    int unwritable;
    double written_at; /* the last publish that succeeded; 0: none */
    char id[];
} dir_mark;
static dir_mark *rec_marks;

static void
rec_prefork(void)
{
    pthread_mutex_lock(&rec_lock);
}

static void
rec_postfork(void)
{
    pthread_mutex_unlock(&rec_lock);
}

static void
rec_init(void)
{
    pthread_atfork(rec_prefork, rec_postfork, rec_postfork);
}

void
kdt_cache_write_failed(const char *dir, const char *why,
                       const char *instead)
{
    char *copy = strdup(why);

    pthread_once(&rec_once, rec_init);
    pthread_mutex_lock(&rec_lock);
    rec_count++;
    free(rec_why);
    rec_why = copy;
    pthread_mutex_unlock(&rec_lock);
    if (instead)
        kdt_cache_notice(KDT_NOTICE_USER_DIR,
                         "cache: cannot write to %s: %s; compiled kernels go "
                         "to the node's spill store %s", dir, why, instead);
    else
        kdt_cache_notice(KDT_NOTICE_USER_DIR,
                         "cache: cannot write to %s: %s; compiled kernels "
                         "stay in memory only", dir, why);
}

unsigned long
kdt_cache_write_failures(char *why, size_t why_size)
{
    unsigned long n;

    pthread_once(&rec_once, rec_init);
    pthread_mutex_lock(&rec_lock);
    n = rec_count;
    if (why_size)
        snprintf(why, why_size, "%s", rec_why ? rec_why : "");
    pthread_mutex_unlock(&rec_lock);
    return n;
}

/* Under rec_lock: the mark of `dir_id`, made when `make` (NULL when it is
 * not there, or without memory). */
static dir_mark *
find_mark(const char *dir_id, int make)
{
    size_t len = strlen(dir_id);
    dir_mark *m;

    for (m = rec_marks; m; m = m->next)
        if (strcmp(m->id, dir_id) == 0)
            return m;
    if (!make || !(m = calloc(1, sizeof *m + len + 1)))
        return NULL;
    memcpy(m->id, dir_id, len + 1);
    m->next = rec_marks;
    rec_marks = m;
    return m;
}

int
kdt_cache_mark_unwritable(const char *dir_id)
{
    dir_mark *m;
    int added = 0;

    pthread_once(&rec_once, rec_init);
    pthread_mutex_lock(&rec_lock);
    m = find_mark(dir_id, 1);
    if (m && !m->unwritable)
        added = m->unwritable = 1;
    pthread_mutex_unlock(&rec_lock);
    return added;
}

void
kdt_cache_mark_writable(const char *dir_id)
{
    struct timespec t;
    dir_mark *m;

    clock_gettime(CLOCK_REALTIME, &t);
    pthread_once(&rec_once, rec_init);
    pthread_mutex_lock(&rec_lock);
    m = find_mark(dir_id, 1);
    if (m) {
        m->unwritable = 0;
        m->written_at = (double)t.tv_sec + t.tv_nsec * 1e-9;
    }
    pthread_mutex_unlock(&rec_lock);
}

/* The mark of `dir_id` as it is: unwritable, and when a publish there
 * last succeeded (0 and 0 without a mark). */
static void
read_mark(const char *dir_id, int *unwritable, double *written_at)
{
    dir_mark *m;

    pthread_once(&rec_once, rec_init);
    pthread_mutex_lock(&rec_lock);
    m = find_mark(dir_id, 0);
    *unwritable = m ? m->unwritable : 0;
    *written_at = m ? m->written_at : 0;
    pthread_mutex_unlock(&rec_lock);
}

int
kdt_cache_is_unwritable(const char *dir_id)
{
    double t;
    int u;

    read_mark(dir_id, &u, &t);
    return u;
}

double
kdt_cache_written_at(const char *dir_id)
{
    double t;
    int u;

    read_mark(dir_id, &u, &t);
    return t;
}
