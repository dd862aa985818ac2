/*
 * cache/testhook.c: the test hooks of publishing and of a lock's takeover
 * (see cache/testhook.h).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/testhook.h"

/* Each error of KDTREE_CACHE_TEST_PUBLISH_FAIL and where a disk gives it. */
static const struct {
    const char *name;
    int err, step;
} failures[] = {
    {"EROFS", EROFS, KDT_STEP_CREATE},
    {"ENOSPC", ENOSPC, KDT_STEP_WRITE},
    {"EIO", EIO, KDT_STEP_FSYNC},
    {"EXDEV", EXDEV, KDT_STEP_RENAME},
};

void
kdt_cache_hooks_read(kdt_cache_hooks *h)
{
    const char *d = getenv("KDTREE_CACHE_TEST_PUBLISH_DELAY_US");
    const char *g = getenv("KDTREE_CACHE_TEST_PUBLISH_GATE");
    const char *f = getenv("KDTREE_CACHE_TEST_PUBLISH_FAIL");

    h->delay_us = d ? strtoul(d, NULL, 10) : 0;
    h->gate = g && *g ? strdup(g) : NULL;
    h->fail_step = h->fail_errno = 0;
    for (size_t i = 0; f && i < sizeof failures / sizeof failures[0]; i++)
        if (strcmp(f, failures[i].name) == 0) {
            h->fail_step = failures[i].step;
            h->fail_errno = failures[i].err;
        }
}

int
kdt_cache_hooks_fail(const kdt_cache_hooks *h, int step)
{
    if (!h || !h->fail_step || h->fail_step != step)
        return 0;
    errno = h->fail_errno;
    return 1;
}

void
kdt_cache_hooks_free(kdt_cache_hooks *h)
{
    free(h->gate);
    h->gate = NULL;
    h->delay_us = 0;
    h->fail_step = h->fail_errno = 0;
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

unsigned long
kdt_cache_hooks_takeover_delay_us(void)
{
    const char *d = getenv("KDTREE_CACHE_TEST_TAKEOVER_DELAY_US");

    return d ? strtoul(d, NULL, 10) : 0;
}
