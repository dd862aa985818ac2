/*
 * cache/gate.c: one compile per key inside a process (see cache/gate.h).
 *
 * The keys being compiled are a list under one mutex: a process compiles
 * a handful of keys at a time, and the list is walked only on a miss.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "cache/gate.h"

struct kdt_gate {
    struct kdt_gate *next;
    kdt_key key;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_left;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static kdt_gate *g_inside;

static void
g_prefork(void)
{
    pthread_mutex_lock(&g_lock);
}

static void
g_postfork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
}

/* The places of the parent's threads are the parent's: the child forgets
 * them (it cannot free them: the handles that own them are the parent's
 * threads').  The forking thread's own place, if any, is then unknown
 * here, and kdt_gate_leave() just frees it. */
static void
g_postfork_child(void)
{
    pthread_condattr_t a;

    g_inside = NULL;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g_left, &a);
    pthread_condattr_destroy(&a);
    pthread_mutex_unlock(&g_lock);
}

static void
g_init(void)
{
    pthread_condattr_t a;

    /* A deadline on the monotonic clock: a clock step must not turn a
     * two-minute wait into a day's or none. */
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g_left, &a);
    pthread_condattr_destroy(&a);
    pthread_atfork(g_prefork, g_postfork_parent, g_postfork_child);
}

/* Under g_lock: 1 when another thread is inside for `key`. */
static int
inside(const kdt_key *key)
{
    for (kdt_gate *g = g_inside; g; g = g->next)
        if (kdt_key_equal(&g->key, key))
            return 1;
    return 0;
}

kdt_gate *
kdt_gate_enter(const kdt_key *key, double timeout_s, int *waited)
{
    kdt_gate *g = malloc(sizeof *g);
    struct timespec deadline;
    int r = 0;

    *waited = 0;
    if (!g)
        return NULL;
    g->key = *key;
    pthread_once(&g_once, g_init);
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)timeout_s;
    deadline.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_lock);
    while (r == 0 && inside(key)) {
        *waited = 1;
        r = timeout_s > 0
                ? pthread_cond_timedwait(&g_left, &g_lock, &deadline)
                : ETIMEDOUT;
    }
    if (r == 0) {
        g->next = g_inside;
        g_inside = g;
    }
    pthread_mutex_unlock(&g_lock);
    if (r != 0) {
        free(g);
        return NULL;
    }
    return g;
}

void
kdt_gate_leave(kdt_gate *g)
{
    kdt_gate **at;

    if (!g)
        return;
    pthread_once(&g_once, g_init);
    pthread_mutex_lock(&g_lock);
    for (at = &g_inside; *at && *at != g; at = &(*at)->next)
        ;
    if (*at) {
        *at = g->next;
        /* Every waiter looks again: the list is short, and waiters of
         * other keys go back to sleep. */
        pthread_cond_broadcast(&g_left);
    }
    pthread_mutex_unlock(&g_lock);
    free(g);
}
