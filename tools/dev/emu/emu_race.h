// emu_race.h: a happens-before check of the shared memory that the
// interpreted instructions touch, so that a missing barrier, wait or fence
// fails every run instead of the runs whose thread schedule exposes it.
//
// Vector clocks over a block's threads: a thread's own entry counts its
// barrier arrivals; arriving at a barrier joins its clock into the
// barrier's, and waiting for the barrier's generation takes the join in
// (emu_bar_go in cuda_emu.h; barrier.cluster the same, a block at a time).
// A shadow word a 16-byte chunk of the block's shared memory keeps the
// last write (thread, clock; pending while a cp.async is in flight; the
// clock of the writer's fence.proxy.async after it) and the clock of each
// thread's last read.  Checked:
//  - a read (ldmatrix; wgmma, as the join of its warpgroup's clocks at
//    issue) must come after the last write: its clock, and for wgmma's
//    async proxy the writer's fence.proxy.async, are in the reader's
//    clock; a cp.async that has not completed (wait_group) is never;
//  - a write (cp.async at issue, stmatrix, st.shared) must come after
//    the last write and after every thread's last read, and never while
//    a wgmma that reads the chunk is in flight (issued, not waited for by
//    all 128).
// Plain C++ loads and stores of shared memory are not seen, so memory that
// only they write is not checked (its 0x5A poison still shows).
#pragma once

typedef std::vector<uint32_t> emu_vc;
inline bool emu_race_on = false;          // set by the test before a launch
inline thread_local emu_vc emu_myvc;      // this thread's clock
inline thread_local std::vector<uint32_t> emu_unfenced; // chunks written since its last fence

constexpr uint32_t EMU_PENDING = 0xffffffffu; // a cp.async write in flight

struct emu_chunk { uint32_t wclk = 0, fclk = 0; uint16_t wtid = 0, inflight = 0; };
struct emu_shadow {
    unsigned n = 0; // threads of the block
    std::vector<emu_chunk> ch;
    std::vector<uint32_t> rvc; // [chunk * n + thread]: its last read's clock
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    void init(unsigned threads, unsigned bytes) {
        n = threads; ch.assign(bytes / 16, emu_chunk()); rvc.assign((size_t)bytes / 16 * threads, 0);
    }
};

static inline void emu_vc_join(emu_vc &d, const emu_vc &s) {
    if (d.size() < s.size()) d.resize(s.size(), 0);
    for (size_t i = 0; i < s.size(); i++) d[i] = std::max(d[i], s[i]);
}
static inline void emu_race_release(emu_vc &acc) { if (emu_race_on) emu_vc_join(acc, emu_myvc); }
static inline void emu_race_publish(emu_vc &acc, emu_vc &dst) {
    if (!emu_race_on) return;
    dst = acc; std::fill(acc.begin(), acc.end(), 0u);
}
static inline void emu_race_acquire(const emu_vc &src) { if (emu_race_on) emu_vc_join(emu_myvc, src); }
static inline void emu_race_tick() { if (emu_race_on) emu_myvc[threadIdx.x]++; }
static inline uint32_t emu_race_clock() { return emu_myvc[threadIdx.x]; }

static inline std::string emu_race_where(uint32_t c) { return "shared bytes " + std::to_string(16 * c) + ".." + std::to_string(16 * c + 15); }

// A write of [a, a + n) by this thread.  pending: a cp.async, whose data
// lands at its wait_group (emu_race_landed).
static inline void emu_race_write(emu_shadow &sh, uint32_t a, int n, bool pending, const char *what) {
    if (!emu_race_on) return;
    const unsigned me = threadIdx.x;
    pthread_mutex_lock(&sh.mu);
    for (uint32_t c = a / 16; c <= (a + n - 1) / 16; c++) {
        emu_chunk &k = sh.ch[c];
        if (k.inflight) emu_die("race: " + std::string(what) + " overwrites what an in-flight wgmma reads", emu_race_where(c));
        if (k.wclk == EMU_PENDING)
            emu_die("race: " + std::string(what) + " overwrites a cp.async in flight (thread " + std::to_string(k.wtid) + ")", emu_race_where(c));
        if (k.wclk && k.wtid != me && k.wclk > emu_myvc[k.wtid])
            emu_die("race: " + std::string(what) + " and the write of thread " + std::to_string(k.wtid) + " have no barrier between them", emu_race_where(c));
        const uint32_t *r = &sh.rvc[(size_t)c * sh.n];
        for (unsigned t = 0; t < sh.n; t++)
            if (t != me && r[t] > emu_myvc[t])
                emu_die("race: " + std::string(what) + " overwrites what thread " + std::to_string(t) + " read, with no barrier between", emu_race_where(c));
        k.wtid = (uint16_t)me; k.wclk = pending ? EMU_PENDING : emu_race_clock(); k.fclk = 0;
        if (!pending) emu_unfenced.push_back(c);
    }
    pthread_mutex_unlock(&sh.mu);
}

// This thread's cp.async of [a, a + n) completed.
static inline void emu_race_landed(emu_shadow &sh, uint32_t a, int n) {
    if (!emu_race_on) return;
    pthread_mutex_lock(&sh.mu);
    for (uint32_t c = a / 16; c <= (a + n - 1) / 16; c++) {
        sh.ch[c].wclk = emu_race_clock();
        emu_unfenced.push_back(c);
    }
    pthread_mutex_unlock(&sh.mu);
}

// Must a read with clock `vc` see the last write of chunk c?  async: the
// reader is the async proxy (wgmma), so the writer must have fenced.
static inline void emu_race_check_read(emu_shadow &sh, uint32_t c, const emu_vc &vc, bool async, const char *what) {
    const emu_chunk &k = sh.ch[c];
    if (k.wclk == EMU_PENDING)
        emu_die("race: " + std::string(what) + " reads what a cp.async of thread " + std::to_string(k.wtid) + " may not have written yet (no wait_group and barrier between)", emu_race_where(c));
    if (!k.wclk) return; // never written by a tracked instruction
    if (k.wclk > vc[k.wtid])
        emu_die("race: " + std::string(what) + " and the write of thread " + std::to_string(k.wtid) + " have no barrier between them", emu_race_where(c));
    if (async && (!k.fclk || k.fclk > vc[k.wtid]))
        emu_die("race: " + std::string(what) + " reads, through the async proxy, what thread " + std::to_string(k.wtid) + " wrote without a fence.proxy.async before the barrier", emu_race_where(c));
}

// A read of [a, a + n) by this thread at its current clock (ldmatrix).
static inline void emu_race_read(emu_shadow &sh, uint32_t a, int n, const char *what) {
    if (!emu_race_on) return;
    pthread_mutex_lock(&sh.mu);
    for (uint32_t c = a / 16; c <= (a + n - 1) / 16; c++) {
        emu_race_check_read(sh, c, emu_myvc, false, what);
        uint32_t &r = sh.rvc[(size_t)c * sh.n + threadIdx.x];
        r = std::max(r, emu_race_clock());
    }
    pthread_mutex_unlock(&sh.mu);
}

// fence.proxy.async: this thread's writes so far are visible to the async
// proxy of whoever synchronises with it after this point.
static inline void emu_race_fence(emu_shadow &sh) {
    if (!emu_race_on) return;
    pthread_mutex_lock(&sh.mu);
    for (uint32_t c : emu_unfenced)
        if (sh.ch[c].wtid == threadIdx.x && sh.ch[c].wclk != EMU_PENDING) sh.ch[c].fclk = emu_race_clock();
    emu_unfenced.clear();
    pthread_mutex_unlock(&sh.mu);
}
