/*
 * kdtree-cache: look after libkdtree's compiled-kernel cache.
 *
 *   kdtree-cache [--dir DIR] list [--all]
 *   kdtree-cache [--dir DIR] resources [--all]
 *   kdtree-cache [--dir DIR] verify [--all] [--delete]
 *   kdtree-cache [--dir DIR] explain KERNEL [SHAPE] [--arch A] [--nvrtc V]
 *   kdtree-cache [--dir DIR] populate [--arch "sm_90a sm_120"] [KERNEL[:SHAPE]]...
 *   kdtree-cache [--dir DIR] gc [--max-bytes N]
 *   kdtree-cache [--dir DIR] clear
 *
 * It works on the user's cache directory as the library would find it
 * (--dir overrides it, as KDTREE_CACHE_DIR does, and must exist unless
 * populate is to make it); --all adds the read-only layers; gc and clear
 * look after the node's spill store too (docs/cache.md).  It reads a cache by the library's own rules (src/cache/file.h):
 * what the library would refuse, it reports as bad.  Exit codes, for
 * scripts:
 *   0  done, nothing wrong (explain: the lookup would hit)
 *   1  the answer is "no": verify found bad entries, explain would miss,
 *      populate could not compile something
 *   2  usage error (unknown command, option, kernel, shape or target)
 *   3  the cache cannot be used (no directory, a --dir that does not
 *      exist, refused by the trust rules, not writable, full, I/O
 *      error), with the reason on stderr
 *   128 + N  stopped by signal N (SIGINT 130, SIGTERM 143, SIGHUP 129),
 *      with "kdtree-cache: stopped by SIGINT" on stderr (but for one that
 *      comes while the program is still being loaded); every entry on
 *      disk is whole
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "cache/settings.h"
#include "cache/entry.h"
#include "cache/file.h"
#include "cache/housekeep.h"
#include "cache/key.h"
#include "cache/layout.h"
#include "cache/lock.h"
#include "cache/notice.h"
#include "cache_entries.h"
#include "cache_explain.h"
#include "cache_tool.h"
#include "cuda/nvrtc.h"
#include "jit/cubin_info.h"
#include "kdtree.h"

static void
format_time(const struct timespec *t, char *out, size_t size)
{
    struct tm tm;
    time_t s = t->tv_sec;

    localtime_r(&s, &tm);
    strftime(out, size, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ---- list and verify ---------------------------------------------------- */

/* The NVRTC an entry was compiled by, short enough for a column: "13.0
 * 65be0db" for "13.0 build 65be0db342ad...".  Two entries of one kernel,
 * shape and target that differ only here were made by two NVRTCs (a
 * system toolkit and NVIDIA's pip wheel, say): the key tells them apart,
 * and so must the listing. */
static void
nvrtc_text(const entry *e, char *out, size_t size)
{
    char v[256], *build;

    kdt_tool_field_text(e, "nvrtc", v, sizeof v);
    build = strstr(v, " build ");
    if (build)
        *build = '\0';
    snprintf(out, size, "%.*s%s%.7s", (int)(size / 2), v, build ? " " : "",
             build ? build + 7 : "");
}

/* The user's cache directory, or NULL (said why on stderr). */
static char *
need_user_dir(void)
{
    char *u = kdt_cache_user_dir();

    if (!u)
        fprintf(stderr, "kdtree-cache: no cache directory (KDTREE_CACHE=off, "
                "or no KDTREE_CACHE_DIR, XDG_CACHE_HOME or HOME)\n");
    return u;
}

/* The entries list and verify look at: the user's (which must be
 * configured unless `all`), and with `all` the layers'.  EXIT_OK or
 * EXIT_CACHE. */
static int
collect_for(int all, collection *c)
{
    char *u;

    if (!all) {
        if (!(u = need_user_dir()))
            return EXIT_CACHE;
        free(u);
    }
    return kdt_tool_collect(all, c) == 0 ? EXIT_OK : EXIT_CACHE;
}

static int
cmd_list(int all)
{
    collection c;
    uint64_t total = 0;

    if (collect_for(all, &c) != EXIT_OK)
        return EXIT_CACHE;
    printf("%-12s %-14s %-28s %-11s %-5s %-12s %9s  %-19s %s\n", "KEY",
           "KERNEL", "SHAPE", "TARGET", "KIND", "NVRTC", "BYTES", "LAST USED",
           "WHERE");
    for (size_t i = 0; i < c.n; i++) {
        char kernel[256], shape[128], target[32], nvrtc[32], when[32];
        entry *e = &c.v[i];

        format_time(&e->file.mtime, when, sizeof when);
        if (e->ok) {
            kdt_tool_field_text(e, "kernel", kernel, sizeof kernel);
            kdt_tool_field_text(e, "constants", shape, sizeof shape);
            kdt_tool_field_text(e, "target", target, sizeof target);
            nvrtc_text(e, nvrtc, sizeof nvrtc);
        } else {
            snprintf(kernel, sizeof kernel, "(bad: %.200s)", e->why);
            shape[0] = target[0] = '\0';
            snprintf(nvrtc, sizeof nvrtc, "-");
        }
        printf("%-12.12s %-14s %-28s %-11s %-5s %-12s %9llu  %-19s %s\n",
               e->file.name, kernel, shape, target,
               e->ok ? kdt_tool_kind_name(e->view.kind) : "-", nvrtc,
               (unsigned long long)e->file.size, when, e->layer);
        total += e->file.size;
    }
    printf("%zu entries, %llu bytes\n", c.n, (unsigned long long)total);
    int refused = c.refused;
    kdt_tool_entries_free(&c);
    return refused ? EXIT_CACHE : EXIT_OK;
}

/* What each cubin entry's kernels hold: the numbers a shape is tuned by
 * (a stack above 0 is local memory: spills, local arrays or calls). */
static int
cmd_resources(int all)
{
    collection c;
    int unreadable = 0;

    if (collect_for(all, &c) != EXIT_OK)
        return EXIT_CACHE;
    printf("%-12s %-14s %-28s %-8s %-24s %5s %6s %7s %7s %8s\n", "KEY",
           "KERNEL", "SHAPE", "TARGET", "FUNCTION", "REGS", "STACK",
           "SHARED", "PARAMS", "THREADS");
    for (size_t i = 0; i < c.n; i++) {
        char kernel[256], shape[128], target[32], why[200];
        kdt_cubin_kernel k[8];
        entry *e = &c.v[i];
        int nk = 0;

        if (!e->ok || e->view.kind != KDT_PAYLOAD_CUBIN)
            continue;
        kdt_tool_field_text(e, "kernel", kernel, sizeof kernel);
        kdt_tool_field_text(e, "constants", shape, sizeof shape);
        kdt_tool_field_text(e, "target", target, sizeof target);
        if (kdt_cubin_kernels(e->view.payload, e->view.payload_size, k, 8,
                              &nk, why, sizeof why) != 0) {
            printf("%-12.12s %-14s %-28s %-8s (unreadable: %s)\n",
                   e->file.name, kernel, shape, target, why);
            unreadable++;
            continue;
        }
        for (int f = 0; f < nk && f < 8; f++)
            printf("%-12.12s %-14s %-28s %-8s %-24s %5u %6u %7u %7u %8u\n",
                   e->file.name, kernel, shape, target, k[f].name,
                   k[f].registers, k[f].stack_bytes, k[f].shared_bytes,
                   k[f].param_bytes, k[f].max_threads);
    }
    printf("STACK: bytes of local memory a thread uses (0: no spills); "
           "SHARED: static, with\nthe 1 KB the system reserves (dynamic "
           "shared memory is set at launch); THREADS:\n__launch_bounds__ "
           "(0: none)\n");
    int refused = c.refused;
    kdt_tool_entries_free(&c);
    return refused ? EXIT_CACHE : unreadable ? EXIT_NO : EXIT_OK;
}

static int
cmd_verify(int all, int del)
{
    collection c;
    size_t bad = 0;

    if (collect_for(all, &c) != EXIT_OK)
        return EXIT_CACHE;
    for (size_t i = 0; i < c.n; i++) {
        entry *e = &c.v[i];
        if (e->ok)
            continue;
        bad++;
        printf("bad: %s: %s", e->path, e->why);
        if (del && strcmp(e->layer, "user") == 0) {
            kdt_cache_tally t = {0};
            if (kdt_cache_remove(e->dir_fd, e->file.name, &t) == 0)
                printf(" (deleted)");
            else
                printf(" (%s)", t.why);
        }
        printf("\n");
    }
    printf("%zu entries checked, %zu bad\n", c.n, bad);
    int refused = c.refused;
    kdt_tool_entries_free(&c);
    return refused ? EXIT_CACHE : bad ? EXIT_NO : EXIT_OK;
}

/* ---- populate ----------------------------------------------------------- */

/* The user's directory, made and checked as a publish would, and a file
 * created in it: a read-only or foreign directory fails here, before any
 * compile.  Returns the directory (malloc'ed) or NULL (said why). */
static char *
writable_user_dir(void)
{
    char why[KDT_WHY_SIZE], name[KDT_NAME_SIZE], *user;
    int mode = kdt_cache_mode(), fd, probe;
    kdt_key zero = {{0}};

    if (mode != KDT_CACHE_READWRITE) {
        fprintf(stderr, "kdtree-cache: KDTREE_CACHE=%s: populate would write "
                "nothing\n", kdt_cache_mode_name(mode));
        return NULL;
    }
    if (!(user = need_user_dir()))
        return NULL;
    if (kdt_cache_dir_open(user, KDT_DIR_CREATE, &fd, why, sizeof why) != 0) {
        fprintf(stderr, "kdtree-cache: cannot use %s: %s\n", user, why);
        free(user);
        return NULL;
    }
    /* A temp name: were this process killed here, a sweep removes it. */
    kdt_layout_temp_name(&zero, 0, name);
    probe = openat(fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (probe < 0) {
        fprintf(stderr, "kdtree-cache: cannot write to %s: %s\n", user,
                strerror(errno));
        close(fd);
        free(user);
        return NULL;
    }
    close(probe);
    unlinkat(fd, name, 0);
    close(fd);
    return user;
}

/* ---- signals ------------------------------------------------------------ */

/* SIGINT, SIGTERM and SIGHUP end the tool at once with a line that says so
 * and exit status 128 + N (130 for SIGINT), as a shell reports a command a
 * signal ended.  The signals are blocked in every thread (threads
 * inherit the mask) and one thread takes them with sigwait(), at once,
 * whatever the thread that gets them is doing; the library keeps NVRTC
 * from installing a handler of its own or discarding a pending signal
 * (src/cuda/nvrtc_signals.h). */
static sigset_t stop_signals;

static void *
stop_watch(void *arg)
{
    int sig = 0;

    (void)arg;
    while (sigwait(&stop_signals, &sig) != 0)
        ;
    fflush(stdout);
    fprintf(stderr, "kdtree-cache: stopped by %s\n",
            sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
    /* Entries on disk are whole (a publish is a rename); a temp file cut
     * short is swept later. */
    _exit(128 + sig);
}

/* Before any other thread exists. */
static void
watch_stop_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    pthread_t t;

    sigemptyset(&stop_signals);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* A signal ignored by whoever started us (nohup) stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaddset(&stop_signals, sigs[i]);
    }
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    if (pthread_create(&t, NULL, stop_watch, NULL) == 0)
        pthread_detach(t);
    else
        pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
}

/* Compiles one; EXIT_CACHE when the entry could not be written. */
static int
populate_one(const char *arch, const char *kernel, const char *shape,
             const char *user)
{
    char why[KDT_WHY_SIZE];
    int32_t cached = 0;
    unsigned long failures = kdt_cache_write_failures(NULL, 0);
    double t0 = kdt_now_ms();
    int st = kdtree_compile(&cached, arch, kernel, shape);

    if (st) {
        printf("populate: %-7s %-14s %-28s FAILED: %s: %s\n", arch, kernel,
               shape, kdtree_status_name(st), kdtree_last_error());
        fflush(stdout);
        return st == KDTREE_ERROR_UNKNOWN_KERNEL || st == KDTREE_ERROR_SHAPE
                       || st == KDTREE_ERROR_SHAPE_STRING
                       || st == KDTREE_ERROR_ARCH
                   ? EXIT_USAGE : EXIT_NO;
    }
    if (kdt_cache_write_failures(why, sizeof why) != failures) {
        printf("populate: %-7s %-14s %-28s FAILED: compiled, but not "
               "written to %s: %s\n", arch, kernel, shape, user, why);
        fflush(stdout);
        return EXIT_CACHE;
    }
    printf("populate: %-7s %-14s %-28s %s in %.0f ms\n", arch, kernel, shape,
           cached ? "already cached" : "compiled", kdt_now_ms() - t0);
    fflush(stdout);
    return EXIT_OK;
}

/* Splits --arch's list (blanks or commas) into archs[]; usage errors for
 * an empty list or a name that is no target. */
static int
parse_archs(char *list, char **archs, int *n)
{
    char *save = NULL;
    int kind;

    *n = 0;
    for (char *a = strtok_r(list, ", \t", &save); a;
         a = strtok_r(NULL, ", \t", &save)) {
        if (kdt_target_parse(a, &kind, NULL) < 0)
            return kdt_tool_usage_error("--arch %s: not of the form sm_XY or "
                               "compute_XY (e.g. sm_90a, sm_120)", a);
        if (*n == 16)
            return kdt_tool_usage_error("%s", "--arch: more than 16 architectures");
        archs[(*n)++] = a;
    }
    if (*n == 0)
        return kdt_tool_usage_error("%s", "--arch: no architecture given");
    return EXIT_OK;
}

/* One architecture: every item, or every kernel's default shape. */
static int
populate_arch(const char *a, char **items, int n_items, const char *user)
{
    int worst = EXIT_OK, r;

    for (int k = 0; n_items == 0 && k < kdtree_kernel_count(); k++) {
        const char *name = kdtree_kernel_name(k);
        r = populate_one(a, name, kdtree_kernel_default_shape(name), user);
        if (r > worst)
            worst = r;
        if (r == EXIT_CACHE)
            return r;
    }
    for (int i = 0; i < n_items; i++) {
        char kernel[128];
        const char *colon = strchr(items[i], ':'), *shape;
        size_t kl = colon ? (size_t)(colon - items[i]) : strlen(items[i]);
        snprintf(kernel, sizeof kernel, "%.*s", (int)kl, items[i]);
        shape = colon ? colon + 1 : kdtree_kernel_default_shape(kernel);
        if (!shape) {
            fprintf(stderr, "kdtree-cache: no kernel named '%s'\n", kernel);
            worst = EXIT_USAGE;
            continue;
        }
        r = populate_one(a, kernel, shape, user);
        if (r > worst)
            worst = r;
        if (r == EXIT_CACHE)
            return r;
    }
    return worst;
}

static int
cmd_populate(const char *arch_list, char **items, int n_items)
{
    char *list = strdup(arch_list), *archs[16], *user;
    int worst = EXIT_OK, n, r;

    if (!list)
        return EXIT_CACHE;
    if ((r = parse_archs(list, archs, &n)) != EXIT_OK) {
        free(list);
        return r;
    }
    if (!(user = writable_user_dir())) {
        free(list);
        return EXIT_CACHE;
    }
    for (int i = 0; i < n && worst != EXIT_CACHE; i++) {
        r = populate_arch(archs[i], items, n_items, user);
        if (r > worst)
            worst = r;
    }
    free(user);
    free(list);
    return worst;
}

/* ---- gc and clear ------------------------------------------------------- */

/* The user's entry directory for gc and clear: 0 with *fd, 1 when it does
 * not exist (nothing to do), or EXIT_CACHE (said why). */
static int
open_user_entry_dir(char **dir, int *fd)
{
    char why[KDT_WHY_SIZE], *user = need_user_dir();
    int r;

    *dir = NULL;
    if (!user)
        return EXIT_CACHE;
    r = kdt_cache_dir_open(user, 0, fd, why, sizeof why);
    if (r < 0)
        fprintf(stderr, "kdtree-cache: cannot use %s: %s\n", user, why);
    *dir = kdt_layout_entry_dir(user);
    free(user);
    if (!*dir) {
        if (r == 0)
            close(*fd);
        return EXIT_CACHE;
    }
    return r < 0 ? EXIT_CACHE : r;
}

/* Says why removals failed; EXIT_CACHE when any did. */
static int
report_failures(const char *cmd, const kdt_cache_tally *t, const char *dir)
{
    if (!t->failed)
        return EXIT_OK;
    fprintf(stderr, "kdtree-cache: %s: %d file%s of %s could not be removed "
            "(first: %s)\n", cmd, t->failed, t->failed == 1 ? "" : "s", dir,
            t->why);
    return EXIT_CACHE;
}

/* Removes a bad entry of the user's directory and says so. */
static void
remove_bad(const entry *e, kdt_cache_tally *t)
{
    int removed = t->removed;

    if (kdt_cache_remove(e->dir_fd, e->file.name, t) == 0
        && t->removed > removed)
        printf("gc: removed bad entry %s: %s\n", e->file.name, e->why);
}

/* Opens the spill store's entry directory (cache/settings.h) for gc and
 * clear: 0 with *fd, or 1 when there is none to look at (it does not
 * exist, or it is refused, which is said: the library does not use it
 * either). */
static int
open_spill_entry_dir(char **dir, int *fd)
{
    char why[KDT_WHY_SIZE], *spill = kdt_cache_spill_dir();
    int r;

    *dir = spill ? kdt_layout_entry_dir(spill) : NULL;
    if (!*dir) {
        free(spill);
        return 1;
    }
    r = kdt_cache_dir_open(spill, KDT_DIR_NO_LINK, fd, why, sizeof why);
    if (r < 0)
        fprintf(stderr, "kdtree-cache: spill store %s not used: %s\n", spill,
                why);
    free(spill);
    return r == 0 ? 0 : 1;
}

/* What gc does in one entry directory `fd` (`dir` in messages): sweeps
 * stale temp files, removes entries that fail verification (then the
 * aliases whose entry that removed), evicts down to `cap`.  Counts into
 * the tallies.  Returns EXIT_OK, or EXIT_CACHE without memory to scan. */
static int
gc_dir(int fd, const char *dir, uint64_t cap, kdt_cache_tally *swept,
       kdt_cache_tally *bad, kdt_cache_tally *ev)
{
    kdt_cache_file *f;
    entry **aliases;
    size_t n, n_aliases = 0;

    kdt_cache_sweep_temps(fd, dir, KDT_CACHE_TEMP_GRACE_S,
                          KDT_CACHE_TEMP_STALE_S, swept);
    if (kdt_cache_scan(fd, &f, &n) != 0)
        return EXIT_CACHE;
    aliases = calloc(n ? n : 1, sizeof *aliases);
    for (size_t i = 0; i < n; i++) {
        entry *e = calloc(1, sizeof *e);
        if (!e)
            break;
        e->file = f[i];
        e->dir_fd = fd;
        kdt_tool_load_entry(e, 0);
        if (!e->ok)
            remove_bad(e, bad);
        if (e->ok && e->view.kind == KDT_PAYLOAD_ALIAS && aliases) {
            aliases[n_aliases++] = e;
            continue;
        }
        free(e->buf);
        free(e);
    }
    /* An alias whose entry was bad, and went above, leads nowhere. */
    for (size_t i = 0; i < n_aliases; i++) {
        entry *e = aliases[i];
        if (kdt_cache_alias_orphan(fd, &e->view, e->why, sizeof e->why) != 0)
            remove_bad(e, bad);
        free(e->buf);
        free(e);
    }
    free(aliases);
    free(f);
    kdt_cache_evict(fd, dir, cap, NULL, 0, ev);
    return EXIT_OK;
}

/* The first of the tallies' failures, said; EXIT_OK when none failed. */
static int
report_all(const char *cmd, const kdt_cache_tally *t, int n, const char *dir)
{
    int r = EXIT_OK;

    for (int i = 0; r == EXIT_OK && i < n; i++)
        r = report_failures(cmd, &t[i], dir);
    return r;
}

/* gc of the spill store, when there is one: the same as the user's
 * directory, under its own cap.  EXIT_OK or EXIT_CACHE (said why). */
static int
gc_spill(void)
{
    kdt_cache_tally t[3] = {{0}};
    char *dir;
    uint64_t cap = kdt_cache_spill_max_bytes();
    int fd, r;

    if (open_spill_entry_dir(&dir, &fd) != 0) {
        free(dir);
        return EXIT_OK;
    }
    r = gc_dir(fd, dir, cap, &t[0], &t[1], &t[2]);
    if (r == EXIT_OK) {
        printf("gc: spill store: %d stale temp files, %d bad entries, %d "
               "evicted (cap %llu bytes); %llu bytes left in %s\n",
               t[0].removed, t[1].removed + t[2].bad, t[2].removed,
               (unsigned long long)cap, (unsigned long long)t[2].bytes_left,
               dir);
        r = report_all("gc", t, 3, dir);
    }
    close(fd);
    free(dir);
    return r;
}

static int
cmd_gc(const char *max_bytes)
{
    kdt_cache_tally t[3] = {{0}}, locks = {0};
    uint64_t cap;
    char *dir;
    int fd, r, rs, n_failed;

    if (max_bytes && kdt_cache_parse_size(max_bytes, &cap) != 0)
        return kdt_tool_usage_error("--max-bytes %s: not a size (digits, then "
                           "optionally K, M, G or T)", max_bytes);
    if (!max_bytes)
        cap = kdt_cache_max_bytes();
    /* Lock files nobody holds (left by kills, or by a holder that could
     * not publish), whatever the cache directory's state. */
    locks.failed = kdt_cache_lock_sweep(&locks.removed, &n_failed, locks.why,
                                        sizeof locks.why) < 0 ? 1 : n_failed;
    r = open_user_entry_dir(&dir, &fd);
    if (r == 1)
        printf("gc: nothing to do: %s does not exist; %d stale lock files\n",
               dir, locks.removed);
    if (r == 0) {
        r = gc_dir(fd, dir, cap, &t[0], &t[1], &t[2]);
        if (r == EXIT_OK) {
            printf("gc: %d stale temp files, %d bad entries, %d evicted (cap "
                   "%llu bytes), %d stale lock files; %llu bytes left in "
                   "%s\n", t[0].removed, t[1].removed + t[2].bad,
                   t[2].removed, (unsigned long long)cap, locks.removed,
                   (unsigned long long)t[2].bytes_left, dir);
            r = report_all("gc", t, 3, dir);
        }
        close(fd);
    }
    free(dir);
    /* Whatever became of the user's directory: the spill store stands in
     * for one that cannot be written. */
    rs = gc_spill();
    if (r == 1)
        r = EXIT_OK;
    if (r == EXIT_OK)
        r = rs;
    if (r == EXIT_OK)
        r = report_failures("gc", &locks, "the lock directory");
    return r;
}

/* Removes every entry of the entry directory `fd` (`dir`) and its stale
 * temp files (a live writer's are its own), says how many, and returns
 * EXIT_OK or EXIT_CACHE (said why). */
static int
clear_dir(int fd, const char *dir, const char *what)
{
    kdt_cache_tally t = {0}, swept = {0};
    kdt_cache_file *f;
    size_t n;

    if (kdt_cache_scan(fd, &f, &n) != 0)
        return EXIT_CACHE;
    for (size_t i = 0; i < n; i++)
        kdt_cache_remove(fd, f[i].name, &t);
    free(f);
    kdt_cache_sweep_temps(fd, dir, KDT_CACHE_TEMP_GRACE_S,
                          KDT_CACHE_TEMP_STALE_S, &swept);
    printf("clear: removed %d entries from %s%s\n", t.removed, dir, what);
    return report_failures("clear", &t, dir);
}

static int
cmd_clear(void)
{
    char *dir;
    int fd, r, rs = EXIT_OK;

    r = open_user_entry_dir(&dir, &fd);
    if (r == 1)
        printf("clear: removed 0 entries from %s\n", dir);
    if (r == 0) {
        r = clear_dir(fd, dir, "");
        close(fd);
    }
    free(dir);
    if (open_spill_entry_dir(&dir, &fd) == 0) {
        rs = clear_dir(fd, dir, " (the spill store)");
        close(fd);
    }
    free(dir);
    if (r == 1)
        r = EXIT_OK;
    return r == EXIT_OK ? rs : r;
}

/* ---- arguments ---------------------------------------------------------- */

typedef struct args {
    const char *cmd, *arch, *nvrtc, *max_bytes, *dir;
    char *pos[64];
    int all, del, n_pos;
} args;

/* Which options each command takes. */
static const struct {
    const char *cmd;
    const char *opts; /* " --all --delete " */
} commands[] = {
    {"list", " --all "},
    {"resources", " --all "},
    {"verify", " --all --delete "},
    {"explain", " --arch --nvrtc "},
    {"populate", " --arch "},
    {"gc", " --max-bytes "},
    {"clear", " "},
};

/* The options `cmd` takes, or NULL for no such command. */
static const char *
options_of(const char *cmd)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].cmd, cmd) == 0)
            return commands[i].opts;
    return NULL;
}

static int
takes_option(const char *cmd, const char *opt)
{
    const char *opts = options_of(cmd);
    char word[64];

    snprintf(word, sizeof word, " %s ", opt);
    return opts && strstr(opts, word) != NULL;
}

static int
parse_args(int argc, char **argv, args *a)
{
    int i = 1;

    memset(a, 0, sizeof *a);
    if (i < argc && strcmp(argv[i], "--dir") == 0) {
        if (i + 1 >= argc)
            return kdt_tool_usage_error("%s", "--dir needs a directory");
        a->dir = argv[i + 1];
        setenv("KDTREE_CACHE_DIR", a->dir, 1);
        i += 2;
    }
    if (i >= argc)
        return kdt_tool_usage_error("%s", "no command given");
    a->cmd = argv[i++];
    if (strcmp(a->cmd, "--help") == 0 || strcmp(a->cmd, "-h") == 0)
        return EXIT_OK;
    if (!options_of(a->cmd))
        return kdt_tool_usage_error("unknown command '%s'", a->cmd);
    for (; i < argc; i++) {
        const char *o = argv[i];
        const char **value = strcmp(o, "--arch") == 0 ? &a->arch
                             : strcmp(o, "--nvrtc") == 0 ? &a->nvrtc
                             : strcmp(o, "--max-bytes") == 0 ? &a->max_bytes
                                                              : NULL;
        if (o[0] == '-' && o[1] == '-' && !takes_option(a->cmd, o))
            return kdt_tool_usage_error("unknown option '%s'", o);
        if (value) {
            if (i + 1 >= argc)
                return kdt_tool_usage_error("%s needs a value", o);
            *value = argv[++i];
        } else if (strcmp(o, "--all") == 0) {
            a->all = 1;
        } else if (strcmp(o, "--delete") == 0) {
            a->del = 1;
        } else if (a->n_pos < 64) {
            a->pos[a->n_pos++] = argv[i];
        } else {
            return kdt_tool_usage_error("%s", "too many arguments");
        }
    }
    return EXIT_OK;
}

int
main(int argc, char **argv)
{
    args a;
    int r;

    watch_stop_signals();
    r = parse_args(argc, argv, &a);
    if (r != EXIT_OK)
        return r;
    if (strcmp(a.cmd, "--help") == 0 || strcmp(a.cmd, "-h") == 0) {
        kdt_tool_usage(stdout);
        return EXIT_OK;
    }
    /* A --dir names a cache the user means: absent, it is an error, not
     * an empty cache (the user's default directory may well not exist
     * yet).  populate makes it. */
    if (a.dir && strcmp(a.cmd, "populate") != 0) {
        struct stat st;
        if (stat(a.dir, &st) != 0) {
            fprintf(stderr, "kdtree-cache: --dir %s: %s\n", a.dir,
                    strerror(errno));
            return EXIT_CACHE;
        }
    }
    if (strcmp(a.cmd, "explain") == 0) {
        if (a.n_pos != 1 && a.n_pos != 2)
            return kdt_tool_usage_error("%s", "explain takes KERNEL [SHAPE]");
        return kdt_tool_explain(a.pos[0], a.n_pos == 2 ? a.pos[1] : NULL,
                           a.arch ? a.arch : "sm_90a", a.nvrtc);
    }
    if (strcmp(a.cmd, "populate") == 0)
        return cmd_populate(a.arch ? a.arch : "sm_90a sm_100 sm_120", a.pos,
                            a.n_pos);
    if (a.n_pos != 0)
        return kdt_tool_usage_error("%s takes no argument", a.cmd);
    if (strcmp(a.cmd, "list") == 0)
        return cmd_list(a.all);
    if (strcmp(a.cmd, "resources") == 0)
        return cmd_resources(a.all);
    if (strcmp(a.cmd, "verify") == 0)
        return cmd_verify(a.all, a.del);
    if (strcmp(a.cmd, "gc") == 0)
        return cmd_gc(a.max_bytes);
    return cmd_clear();
}
