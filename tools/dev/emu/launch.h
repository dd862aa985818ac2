// launch.h: a kernel launch on the emulator, a thread-block cluster at a
// time: the blocks of one cluster (dims `cluster`, 1 x 1 x 1 when the
// launch has none) run together, a pthread per CUDA thread, each block
// with its own shared memory (filled with 0x5A); clusters run one after
// another.  A watchdog calls it a deadlock, and says what every blocked
// thread waits for, when all live threads of the cluster are blocked and
// no barrier has completed for three seconds (a thread that a completion
// woke is the only one left to run, so it cannot take that long), and it
// dies when a block exits with a named barrier that some threads arrived
// at and that never completed.
#pragma once
#include <map>
#include "cuda_emu.h"

template <class P> struct emu_arg { void (*k)(P); P *p; emu_block *b; unsigned tid; };

template <class P> static void *emu_thread(void *a) {
    emu_arg<P> *x = (emu_arg<P> *)a;
    threadIdx = {x->tid, 0, 0};
    emu_blk = x->b;
    if (emu_race_on) { emu_myvc.assign(x->b->nthreads, 0); emu_myvc[x->tid] = 1; }
    x->k(*x->p);
    if (!emu_cp_open.empty() || !emu_cp_groups.empty())
        emu_die("cp.async still in flight when the thread exits", "");
    emu_wg_exit_check();
    x->b->exited++;
    x->b->cl->live--;
    return NULL;
}

struct emu_watch { emu_cluster *cl; pthread_mutex_t mu; pthread_cond_t cv; bool stop; };
static void *emu_watchdog(void *a) {
    emu_watch *w = (emu_watch *)a;
    long last = -1;
    int still = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop) break;
        long p = w->cl->progress.load();
        bool stuck = w->cl->live.load() > 0 && w->cl->blocked.load() == w->cl->live.load() && p == last;
        still = stuck ? still + 1 : 0;
        last = p;
        if (still >= 3) {
            fprintf(stderr, "emu: deadlock: every live thread of the cluster is blocked:\n");
            for (unsigned b = 0; b < w->cl->n; b++) {
                emu_block *k = w->cl->blocks[b];
                std::map<std::string, int> why;
                for (const char *s : k->waiting) if (s) why[s]++;
                for (auto &e : why)
                    fprintf(stderr, "  block %u,%u,%u: %d threads wait for %s\n", k->idx.x, k->idx.y, k->idx.z, e.second, e.first.c_str());
            }
            abort();
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

template <class P> static void emu_launch_grid(void (*k)(P), P p, dim3e grid, unsigned block, unsigned smem, dim3e cluster = {1, 1, 1}) {
    if (smem > EMU_SMEM_MAX || block == 0 || block > 1024 || block % 32) { fprintf(stderr, "emu: bad launch: %u threads, %u bytes of shared memory\n", block, smem); exit(2); }
    if (!cluster.x || !cluster.y || !cluster.z || grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z) { fprintf(stderr, "emu: the grid is not whole clusters\n"); exit(2); }
    blockDim = {block, 1, 1};
    const unsigned nb = cluster.x * cluster.y * cluster.z;
    pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, 512 * 1024);
    for (unsigned cz = 0; cz < grid.z; cz += cluster.z)
        for (unsigned cy = 0; cy < grid.y; cy += cluster.y)
            for (unsigned cx = 0; cx < grid.x; cx += cluster.x) {
                emu_cluster cl;
                cl.n = nb;
                std::vector<emu_block *> blocks(nb);
                cl.blocks = blocks.data();
                for (unsigned r = 0; r < nb; r++) { // rank: x fastest
                    emu_block *b = new emu_block;
                    b->idx = {cx + r % cluster.x, cy + r / cluster.x % cluster.y, cz + r / (cluster.x * cluster.y)};
                    b->rank = r; b->cl = &cl; b->nthreads = block; b->dyn_size = smem;
                    memset(b->win, 0x5A, sizeof b->win);
                    b->wg = new emu_wg_log[(block + 127) / 128];
                    b->waiting.assign(block, nullptr);
                    if (emu_race_on) b->shadow.init(block, EMU_SMEM_WINDOW);
                    blocks[r] = b;
                }
                cl.live = (int)(nb * block);
                emu_watch w{&cl, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
                pthread_t wd;
                pthread_create(&wd, NULL, emu_watchdog, &w);
                std::vector<pthread_t> th(nb * block);
                std::vector<emu_arg<P>> args(nb * block);
                for (unsigned i = 0; i < nb * block; i++) {
                    args[i] = {k, &p, blocks[i / block], i % block};
                    if (pthread_create(&th[i], &at, emu_thread<P>, &args[i])) { fprintf(stderr, "emu: pthread_create failed\n"); exit(2); }
                }
                for (unsigned i = 0; i < nb * block; i++) pthread_join(th[i], NULL);
                pthread_mutex_lock(&w.mu); w.stop = true; pthread_cond_signal(&w.cv); pthread_mutex_unlock(&w.mu);
                pthread_join(wd, NULL);
                // a named barrier some threads arrived at and the rest never
                // reached: the block's arrivals and syncs do not pair up
                for (emu_block *b : blocks)
                    for (size_t i = 1; i < sizeof b->nbar / sizeof b->nbar[0]; i++)
                        if (b->nbar[i].arrived)
                            emu_die("block exits with " + std::to_string(b->nbar[i].arrived) + " threads arrived at named barrier " + std::to_string(i) + " that never completed", "");
                for (emu_block *b : blocks) { delete[] b->wg; delete b; }
            }
    pthread_attr_destroy(&at);
}

// The 1-D launch of the kernels that run one block at a time.
template <class P> static void emu_launch(void (*k)(P), P p, unsigned grid, unsigned block, unsigned smem) {
    emu_launch_grid(k, p, dim3e{grid, 1, 1}, block, smem);
}
