/*
 * base/error.h: statuses, this thread's last error, and the KDTREE_LOG log.
 */
#ifndef KDT_ERROR_H
#define KDT_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "kdtree.h"

/* Marks a definition as part of the exported ABI (the library is built with
 * -fvisibility=hidden; only kdtree_* carry this). */
#define KDT_EXPORT __attribute__((visibility("default")))

#if defined(__GNUC__)
#define KDT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KDT_PRINTF(f, a)
#endif

enum kdt_log_level {
    KDT_LOG_OFF = 0,
    KDT_LOG_ERROR = 1,
    KDT_LOG_WARN = 2,
    KDT_LOG_INFO = 3,
    KDT_LOG_DEBUG = 4
};

/* Records `status` with a formatted detail as this thread's last error and
 * returns `status`, so a failure reads `return kdt_fail(KDTREE_..., ...)`.
 * Also logs the detail at debug level. */
int kdt_fail(int status, const char *fmt, ...) KDT_PRINTF(2, 3);
/* Like kdt_fail, then appends `extra` (an NVRTC log, say) on new lines. */
int kdt_fail_long(int status, const char *extra, const char *fmt, ...)
    KDT_PRINTF(3, 4);
/* Empties this thread's last error (every public entry point starts so). */
void kdt_clear_error(void);

/* 1 when KDTREE_LOG asks for `level` (read once per process: off, error,
 * warn (the default; also "warning"), info or debug, in any case; any
 * other value warns on stderr and means warn). */
int kdt_log_enabled(int level);
/* One line on stderr, "kdtree: warn: ...", when `level` is enabled; never
 * cut, however long. */
void kdt_log(int level, const char *fmt, ...) KDT_PRINTF(2, 3);
void kdt_vlog(int level, const char *fmt, va_list ap);
/* Test hook: re-reads KDTREE_LOG. */
void kdt_log_reload(void);

/* A monotonic clock in milliseconds. */
double kdt_now_ms(void);

#endif /* KDT_ERROR_H */
