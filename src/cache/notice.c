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

/* The last failure's reason: held under rec_lock, which fork() must not
 * leave locked in the child (the publishing thread may hold it then). */
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rec_once = PTHREAD_ONCE_INIT;
static unsigned long rec_count;
static char *rec_why;

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
kdt_cache_write_failed(const char *dir, const char *why)
{
    char *copy = strdup(why);

    pthread_once(&rec_once, rec_init);
    pthread_mutex_lock(&rec_lock);
    rec_count++;
    free(rec_why);
    rec_why = copy;
    pthread_mutex_unlock(&rec_lock);
    kdt_cache_notice(KDT_NOTICE_USER_DIR,
                     "cache: cannot write to %s: %s; compiled kernels stay "
                     "in memory only", dir, why);
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
