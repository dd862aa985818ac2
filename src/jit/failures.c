/*
 * jit/failures.c: failed compiles of this process (see jit/failures.h).
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "jit/failures.h"

typedef struct failure {
    kdt_key key;
    int status; /* 0: empty slot */
    char *detail;
} failure;

static failure ring[KDT_FAILURES_MAX];
static unsigned next_slot;
/* Held across fork(), like the cache's locks: a child must not inherit it
 * locked by another thread. */
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;

static void
ring_prefork(void)
{
    pthread_mutex_lock(&ring_lock);
}

static void
ring_postfork(void)
{
    pthread_mutex_unlock(&ring_lock);
}

static void
ring_init(void)
{
    pthread_atfork(ring_prefork, ring_postfork, ring_postfork);
}

void
kdt_failure_remember(const kdt_key *key, int status)
{
    char *detail;

    if (status == KDTREE_OK || status == KDTREE_ERROR_OUT_OF_MEMORY)
        return;
    detail = strdup(kdtree_last_error());
    if (!detail)
        return;
    pthread_once(&ring_once, ring_init);
    pthread_mutex_lock(&ring_lock);
    failure *f = &ring[next_slot++ % KDT_FAILURES_MAX];
    free(f->detail);
    f->key = *key;
    f->status = status;
    f->detail = detail;
    pthread_mutex_unlock(&ring_lock);
}

int
kdt_failure_recall(const kdt_key *key)
{
    int status = 0;

    pthread_once(&ring_once, ring_init);
    pthread_mutex_lock(&ring_lock);
    for (int i = 0; i < KDT_FAILURES_MAX; i++) {
        if (ring[i].status && kdt_key_equal(&ring[i].key, key)) {
            status = ring[i].status;
            kdt_fail(status, "%s", ring[i].detail);
            break;
        }
    }
    pthread_mutex_unlock(&ring_lock);
    return status;
}
