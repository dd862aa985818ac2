/*
 * cache/worker.c: the process's publishing thread (see cache/worker.h).
 *
 * Why: on the H200 a cold kdtree_prepare took 1.12x the bare NVRTC compile
 * for two kernels; the 1-2 ms over was publishing (temp file, fsync,
 * rename, the alias entry, and the first publish's sweep and size scan).
 * None of that is needed for the caller to launch: the blob is already in
 * the memory layer.  So the miss path queues its publish job
 * (cache/job.c: encoded copies of the entries, the settings, and the
 * per-key lock) and returns; one worker thread, started by the first job, runs the
 * jobs in order and releases each job's lock after its entries are
 * durable, which is all another process waiting on that lock relies on.
 *
 * Durability on return, where it is the contract, comes from
 * kdt_cache_flush(): kdtree_compile(), kdt_cache_memory_clear(),
 * kdtree_runtime_destroy(), and the destructor below (a normal exit, or
 * dlclose, which also stops the thread before its code is unmapped).  A
 * process that dies otherwise (_exit, a signal) loses its queued entries,
 * never an entry half-written (the rename is the publish), and its locks
 * die with it: a waiter then compiles the key itself.
 *
 * Bounded: at most KDT_CACHE_QUEUE_MAX jobs wait; beyond that the caller
 * publishes itself, as it always did.  Errors stay what they were: the
 * worker logs (once as a warning) and carries on in memory; it never
 * records a last error (that is thread-local, and the worker's own would
 * be read by nobody anyway) and never calls getenv() (a job carries what
 * it needs; KDTREE_LOG is read before the first job is queued).
 *
 * fork(): the handlers below hold the queue's mutex across fork(), so the
 * child's copy is consistent and unlocked.  The child has no worker (only
 * the forking thread survives), so it forgets that one existed and starts
 * its own on its first publish.  The jobs it inherited, queued or in
 * flight, are the parent's: the parent publishes them and releases their
 * locks.  The child neither publishes them (the parent does) nor releases
 * their locks (that would release the parent's; see cache/lock.c): it only
 * closes its copies of the lock descriptors and frees its copies of the
 * jobs.  A flush in the child therefore waits for the child's own jobs only.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cache/job.h"
#include "cache/worker.h"

enum worker_state {
    WORKER_NONE = 0,    /* not started (or lost over fork) */
    WORKER_RUNNING = 1,
    WORKER_STOPPED = 2  /* at exit/unload: later jobs run in their caller */
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_work = PTHREAD_COND_INITIALIZER; /* a job, or stop */
static pthread_cond_t q_done = PTHREAD_COND_INITIALIZER; /* a job finished */
static pthread_once_t q_once = PTHREAD_ONCE_INIT;
static kdt_publish_job *q_head, *q_tail;
/* The job the worker is publishing: still reachable here so that a child
 * forked meanwhile can free its copy.  The worker only reads it until it
 * takes it back under q_lock. */
static kdt_publish_job *q_running;
static int q_len;
/* Jobs queued and jobs finished (published, lock released) since the
 * start; a flush waits for finished to reach what was queued before it. */
static uint64_t q_submitted, q_finished;
static int q_stop;
static int worker_state;
static pthread_t worker;

static void
q_prefork(void)
{
    pthread_mutex_lock(&q_lock);
}

static void
q_postfork_parent(void)
{
    pthread_mutex_unlock(&q_lock);
}

static void
q_postfork_child(void)
{
    kdt_publish_job *j, *next;

    /* glibc makes malloc usable again before the child handlers run. */
    for (j = q_head; j; j = next) {
        next = j->next;
        kdt_job_discard(j);
    }
    kdt_job_discard(q_running);
    q_head = q_tail = q_running = NULL;
    q_len = 0;
    q_submitted = q_finished = 0;
    q_stop = 0;
    if (worker_state == WORKER_RUNNING)
        worker_state = WORKER_NONE;
    /* The parent's threads may have been waiting on these; none exist
     * here, and a condition variable that counts absent waiters can block
     * a signal: start them afresh. */
    pthread_cond_init(&q_work, NULL);
    pthread_cond_init(&q_done, NULL);
    pthread_mutex_unlock(&q_lock);
}

static void
q_init(void)
{
    pthread_atfork(q_prefork, q_postfork_parent, q_postfork_child);
}

static void *
worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&q_lock);
    for (;;) {
        kdt_publish_job *job;
        while (!q_head && !q_stop)
            pthread_cond_wait(&q_work, &q_lock);
        if (!q_head)
            break; /* stopping, and the queue is drained */
        job = q_head;
        q_head = job->next;
        if (!q_head)
            q_tail = NULL;
        q_len--;
        q_running = job;
        pthread_mutex_unlock(&q_lock);

        kdt_job_run(job);

        pthread_mutex_lock(&q_lock);
        q_running = NULL;
        pthread_mutex_unlock(&q_lock);
        /* Now only this thread knows the job: releasing its lock cannot
         * race a fork's handler freeing it. */
        kdt_job_free(job);
        pthread_mutex_lock(&q_lock);
        q_finished++;
        pthread_cond_broadcast(&q_done);
    }
    pthread_mutex_unlock(&q_lock);
    return NULL;
}

/* Under q_lock.  The worker gets every signal blocked: signals meant for
 * the application (SIGINT handlers, alarm()) must reach its own threads. */
static int
start_worker(void)
{
    sigset_t all, old;
    int r;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    r = pthread_create(&worker, NULL, worker_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        kdt_log(KDT_LOG_INFO, "cache: cannot start the publishing thread "
                "(error %d); publishing in the caller", r);
        return -1;
    }
    /* So that top -H, gdb and the tests can tell it apart; named here,
     * not by the thread itself, so the name is there on return. */
    pthread_setname_np(worker, KDT_CACHE_THREAD_NAME);
    worker_state = WORKER_RUNNING;
    return 0;
}

int
kdt_worker_submit(kdt_publish_job *job)
{
    pthread_once(&q_once, q_init);
    /* Reads KDTREE_LOG now if nothing has yet, so the worker never does. */
    (void)kdt_log_enabled(KDT_LOG_ERROR);
    pthread_mutex_lock(&q_lock);
    if (worker_state == WORKER_STOPPED || q_len >= KDT_CACHE_QUEUE_MAX
        || (worker_state == WORKER_NONE && start_worker() != 0)) {
        pthread_mutex_unlock(&q_lock);
        return -1;
    }
    job->next = NULL;
    if (q_tail)
        q_tail->next = job;
    else
        q_head = job;
    q_tail = job;
    q_len++;
    q_submitted++;
    pthread_cond_signal(&q_work);
    pthread_mutex_unlock(&q_lock);
    return 0;
}

void
kdt_worker_flush(void)
{
    uint64_t target;

    pthread_once(&q_once, q_init);
    pthread_mutex_lock(&q_lock);
    target = q_submitted;
    while (q_finished < target)
        pthread_cond_wait(&q_done, &q_lock);
    pthread_mutex_unlock(&q_lock);
}

/* A normal exit, or the library unloaded: publish what is queued, then
 * stop the worker (its code may be about to be unmapped).  A store after
 * this publishes in its caller. */
__attribute__((destructor)) static void
worker_fini(void)
{
    int join = 0;

    pthread_mutex_lock(&q_lock);
    if (worker_state == WORKER_RUNNING) {
        q_stop = 1;
        pthread_cond_signal(&q_work);
        join = 1;
    }
    worker_state = WORKER_STOPPED;
    pthread_mutex_unlock(&q_lock);
    if (join)
        pthread_join(worker, NULL);
}
