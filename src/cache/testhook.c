/*
 * cache/testhook.c: the test hooks of publishing (see cache/testhook.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/testhook.h"

void
kdt_cache_hooks_read(kdt_cache_hooks *h)
{
    const char *d = getenv("KDTREE_CACHE_TEST_PUBLISH_DELAY_US");
    const char *g = getenv("KDTREE_CACHE_TEST_PUBLISH_GATE");

    h->delay_us = d ? strtoul(d, NULL, 10) : 0;
    h->gate = g && *g ? strdup(g) : NULL;
}

void
kdt_cache_hooks_free(kdt_cache_hooks *h)
{
    free(h->gate);
    h->gate = NULL;
    h->delay_us = 0;
}

int
kdt_cache_hooks_set(const kdt_cache_hooks *h)
{
    return h && (h->delay_us || h->gate);
}

void
kdt_cache_hooks_pause(const kdt_cache_hooks *h)
{
    if (h->delay_us)
        usleep((useconds_t)h->delay_us);
    /* Polling each millisecond, for at most 30 s: a test that forgets to
     * open the gate is slow, not hung. */
    for (int i = 0; h->gate && i < 30000 && access(h->gate, F_OK) != 0; i++)
        usleep(1000);
}
