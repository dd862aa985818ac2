/*
 * base/error.c: status names, this thread's last error, and the KDTREE_LOG log.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/error.h"

/* Large enough for a typical NVRTC log; a longer detail is cut with a note
 * (the whole log still goes to KDTREE_LOG=debug). */
#define KDT_ERROR_SIZE 16384

static _Thread_local char last_error[KDT_ERROR_SIZE];

static const char *const status_names[] = {
    "KDTREE_OK",
    "KDTREE_ERROR_INVALID_ARGUMENT",
    "KDTREE_ERROR_MISALIGNED",
    "KDTREE_ERROR_SHAPE",
    "KDTREE_ERROR_UNKNOWN_KERNEL",
    "KDTREE_ERROR_OUT_OF_MEMORY",
    "KDTREE_ERROR_NO_DRIVER",
    "KDTREE_ERROR_NO_DEVICE",
    "KDTREE_ERROR_NO_COMPILER",
    "KDTREE_ERROR_COMPILE",
    "KDTREE_ERROR_ARCH",
    "KDTREE_ERROR_CUDA",
    "KDTREE_ERROR_CACHE",
    "KDTREE_ERROR_TOO_MANY_SHAPES",
    "KDTREE_ERROR_INTERNAL",
    "KDTREE_ERROR_SHAPE_STRING",
};

KDT_EXPORT const char *
kdtree_status_name(int32_t status)
{
    int n = (int)(sizeof status_names / sizeof status_names[0]);
    if (status > 0 || status <= -n)
        return "KDTREE_ERROR_UNKNOWN";
    return status_names[-status];
}

KDT_EXPORT const char *
kdtree_last_error(void)
{
    return last_error;
}

void
kdt_clear_error(void)
{
    last_error[0] = '\0';
}

static void
set_error(int status, const char *extra, const char *fmt, va_list ap)
{
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    if (n < 0)
        n = 0;
    if (extra && extra[0] && (size_t)n < sizeof last_error - 1) {
        size_t room = sizeof last_error - (size_t)n;
        int m = snprintf(last_error + n, room, "\n%s", extra);
        if (m >= 0 && (size_t)m >= room) {
            static const char cut[] = "\n[... cut; KDTREE_LOG=debug logs it whole]";
            memcpy(last_error + sizeof last_error - sizeof cut, cut,
                   sizeof cut);
        }
    }
    if (kdt_log_enabled(KDT_LOG_DEBUG)) {
        kdt_log(KDT_LOG_DEBUG, "%s: %s", kdtree_status_name(status),
                last_error);
        if (extra && strlen(extra) + (size_t)n >= sizeof last_error)
            fprintf(stderr, "%s\n", extra);
    }
}

int
kdt_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(status, NULL, fmt, ap);
    va_end(ap);
    return status;
}

int
kdt_fail_long(int status, const char *extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(status, extra, fmt, ap);
    va_end(ap);
    return status;
}

/* ---- log ---------------------------------------------------------------- */

static int log_level = -1; /* -1: not read yet */

static const char *const level_names[] = {"off", "error", "warn", "info",
                                          "debug"};

/* -1 for a value that names no level. */
static int
parse_level(const char *s)
{
    if (!s || !*s)
        return KDT_LOG_WARN;
    for (int i = 0; i < 5; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return KDT_LOG_WARN;
    return -1;
}

void
kdt_log_reload(void)
{
    const char *v = getenv("KDTREE_LOG");
    int level = parse_level(v);

    if (level < 0) {
        level = KDT_LOG_WARN;
        /* Straight to stderr: the log itself is what is being set up. */
        fprintf(stderr, "kdtree: warn: KDTREE_LOG=%s is not off, error, "
                "warn, info or debug; using warn\n", v);
    }
    __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
}

int
kdt_log_enabled(int level)
{
    int cur = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (cur < 0) {
        kdt_log_reload();
        cur = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    }
    return level <= cur;
}

void
kdt_vlog(int level, const char *fmt, va_list ap)
{
    char line[2048], *big = NULL;
    const char *text = line;
    va_list again;

    if (!kdt_log_enabled(level) || level < 1 || level > 4)
        return;
    va_copy(again, ap);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    /* A long line (paths near PATH_MAX, twice) is printed whole: cutting
     * it would cut the reason, which comes last. */
    if (n >= (int)sizeof line && (big = malloc((size_t)n + 1)) != NULL) {
        vsnprintf(big, (size_t)n + 1, fmt, again);
        text = big;
    }
    va_end(again);
    /* One fprintf per line, so lines of concurrent threads do not mix. */
    fprintf(stderr, "kdtree: %s: %s\n", level_names[level], text);
    free(big);
}

void
kdt_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kdt_vlog(level, fmt, ap);
    va_end(ap);
}

double
kdt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
