/*
 * test_nvrtc_signals.c: the program's signal handling is the program's,
 * whatever NVRTC does while the library loads it and compiles
 * (cuda/nvrtc_signals.h).  With each NVRTC the library could load here
 * (cuda/nvrtc_find.h's list, each in a process of its own through
 * KDTREE_NVRTC_LIBRARY), compiling through kdtree_compile():
 *   - every signal's disposition (handler, flags, mask) is the same after
 *     compiles as before, one thread or four at once (NVRTC 13.0 and 12.x
 *     put handlers back without SA_SIGINFO or SA_ONSTACK, with
 *     SA_RESTART);
 *   - a SIGINT pending while blocked is still pending after a compile
 *     (they set SIGINT to SIG_IGN, which discards it);
 *   - SIGINTs sent all through a compile reach the program's handler,
 *     and the compile succeeds (theirs ended the process with status 4).
 * Skipped (77) without NVRTC.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/nvrtc_find.h"
#include "harness.h"
#include "kdtree.h"

/* At most this many NVRTCs are tried: the list's first that load. */
#define MAX_NVRTCS 4

static kdt_nvrtc_search found;

static atomic_int caught;

static void
on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    /* SA_SIGINFO must still be in force: a handler installed without it
     * gets no siginfo. */
    if (si && si->si_signo == sig)
        atomic_fetch_add(&caught, 1);
}

/* The program's handling of `sig`: a handler with SA_SIGINFO and
 * SA_ONSTACK, SIGUSR2 in its mask, no SA_RESTART (as Python installs
 * its SIGINT handler, so that Ctrl-C interrupts a blocking read). */
static void
install(int sig)
{
    struct sigaction a;

    memset(&a, 0, sizeof a);
    a.sa_sigaction = on_signal;
    a.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&a.sa_mask);
    sigaddset(&a.sa_mask, SIGUSR2);
    sigaction(sig, &a, NULL);
}

/* The first signal whose disposition differs between `a` and `b` (a
 * sigset_t compared signal by signal), or 0. */
static int
first_change(const struct sigaction *a, const struct sigaction *b)
{
    for (int s = 1; s < NSIG; s++) {
        if (a[s].sa_handler != b[s].sa_handler
            || a[s].sa_flags != b[s].sa_flags)
            return s;
        for (int m = 1; m < NSIG; m++)
            if (sigismember(&a[s].sa_mask, m)
                != sigismember(&b[s].sa_mask, m))
                return s;
    }
    return 0;
}

static void
read_all(struct sigaction *all)
{
    memset(all, 0, NSIG * sizeof *all);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, NULL, &all[s]);
}

/* One compile of tree_accept with `shape`: 0, or says why not. */
static int
compile(const char *shape)
{
    int32_t cached;
    int st = kdtree_compile(&cached, "sm_90", "tree_accept", shape);

    if (st != KDTREE_OK)
        fprintf(stderr, "kdtree_compile(%s): %s: %s\n", shape,
                kdtree_status_name(st), kdtree_last_error());
    return st == KDTREE_OK ? 0 : 1;
}

static void *
compile_thread(void *shape)
{
    return (void *)(long)compile(shape);
}

/* ---- the checks, each in a process of its own -------------------------- */

/* Dispositions before and after compiles, in one thread, then four. */
static int
check_dispositions(void)
{
    static const char *const shapes[] = {"N_MAX=17,L=4", "N_MAX=18,L=4",
                                         "N_MAX=19,L=4", "N_MAX=20,L=4"};
    struct sigaction before[NSIG], after[NSIG];
    pthread_t t[4];
    void *r;
    int s, failed = 0;

    install(SIGINT);
    install(SIGTERM);
    install(SIGXFSZ);
    install(SIGHUP);
    read_all(before);
    if (compile("N_MAX=16,L=4"))
        return 1;
    read_all(after);
    if ((s = first_change(before, after)) != 0) {
        fprintf(stderr, "after a compile, %s's disposition changed (flags "
                "%#x, were %#x)\n", strsignal(s), after[s].sa_flags,
                before[s].sa_flags);
        return 1;
    }
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, compile_thread,
                           (void *)shapes[i]) != 0)
            return 1;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], &r);
        failed |= r != NULL;
    }
    read_all(after);
    if ((s = first_change(before, after)) != 0) {
        fprintf(stderr, "after four compiles at once, %s's disposition "
                "changed (flags %#x, were %#x)\n", strsignal(s),
                after[s].sa_flags, before[s].sa_flags);
        return 1;
    }
    return failed;
}

/* A SIGINT pending while every thread blocks it (a program that takes
 * its signals with sigwait) survives a compile. */
static int
check_pending(void)
{
    sigset_t block, pending;

    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    /* Before any thread exists: NVRTC's threads inherit the mask. */
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    raise(SIGINT);
    if (compile("N_MAX=16,L=4"))
        return 1;
    sigpending(&pending);
    if (!sigismember(&pending, SIGINT)) {
        fprintf(stderr, "a pending SIGINT was discarded by a compile\n");
        return 1;
    }
    return 0;
}

static atomic_int compiling;

/* Sends SIGINT to the process every millisecond while the compile runs
 * (this thread blocks it, so another thread takes each one). */
static void *
sender(void *arg)
{
    (void)arg;
    while (atomic_load(&compiling)) {
        kill(getpid(), SIGINT);
        usleep(1000);
    }
    return NULL;
}

/* SIGINTs all through a compile: each reaches the program's handler, the
 * process lives on, and the compile succeeds. */
static int
check_during_compile(void)
{
    sigset_t block;
    pthread_t t;
    int r;

    install(SIGINT);
    /* NVRTC loaded first, so that the signals fall in the compile. */
    kdtree_nvrtc_info(&(kdtree_library_info){0});
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    atomic_store(&compiling, 1);
    if (pthread_create(&t, NULL, sender, NULL) != 0)
        return 1;
    pthread_sigmask(SIG_UNBLOCK, &block, NULL);
    r = compile("N_MAX=16,L=4");
    atomic_store(&compiling, 0);
    pthread_join(t, NULL);
    if (r == 0 && atomic_load(&caught) == 0) {
        fprintf(stderr, "no SIGINT reached the program's handler\n");
        return 1;
    }
    return r;
}

/* A child's status for an NVRTC of the list that does not load (a
 * soname the loader does not know). */
#define NOT_HERE 77

/* Runs `check` in a child for each NVRTC found that loads; fails naming
 * the first that fails it. */
static void
each_nvrtc(int (*check)(void), const char *what)
{
    int tried = 0;

    for (int i = 0; i < found.n && tried < MAX_NVRTCS; i++) {
        const char *path = found.items[i].path;
        int status, seen = 0;
        pid_t pid;

        for (int j = 0; j < i; j++)
            seen |= strcmp(found.items[j].path, path) == 0;
        if (seen)
            continue;
        fflush(stdout); /* not the child's to write again */
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (!h)
                _exit(NOT_HERE);
            dlclose(h);
            setenv("KDTREE_NVRTC_LIBRARY", path, 1);
            /* Memory only: every compile is NVRTC's. */
            setenv("KDTREE_CACHE", "off", 1);
            _exit(check());
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        if (WIFEXITED(status) && WEXITSTATUS(status) == NOT_HERE)
            continue;
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "%s, NVRTC %s: %s %d", what, path,
                      WIFEXITED(status) ? "exit status" : "killed by signal",
                      WIFEXITED(status) ? WEXITSTATUS(status)
                                        : WTERMSIG(status));
        printf("%s: kept with NVRTC %s\n", what, path);
        tried++;
    }
    ck_assert_msg(tried > 0, "no NVRTC of the %d listed loads", found.n);
}

START_TEST(test_dispositions_kept)
{
    each_nvrtc(check_dispositions, "dispositions");
}
END_TEST

START_TEST(test_pending_sigint_kept)
{
    each_nvrtc(check_pending, "a pending SIGINT");
}
END_TEST

START_TEST(test_sigint_during_compile)
{
    each_nvrtc(check_during_compile, "SIGINT during a compile");
}
END_TEST

static Suite *
suite(void)
{
    kdt_nvrtc_places places = {NULL, NULL, "",
#ifdef KDT_CUDA_LIBDIR
                               KDT_CUDA_LIBDIR
#else
                               NULL
#endif
    };
    Suite *s = suite_create("nvrtc_signals");
    TCase *tc = tcase_create("signals");

    (void)kdt_nvrtc_find(&found, &places);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_dispositions_kept);
    tcase_add_test(tc, test_pending_sigint_kept);
    tcase_add_test(tc, test_sigint_during_compile);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_NVRTC);
}
