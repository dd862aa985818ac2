// Minimal host emulation of the CUDA features our kernels use: one pthread
// per CUDA thread, barriers for __syncthreads and warp ops.
#pragma once
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <vector>
#include <algorithm>

struct dim3e { unsigned x, y, z; };
extern thread_local dim3e threadIdx;
extern dim3e blockIdx;
extern dim3e blockDim;
extern pthread_barrier_t emu_block_bar;
extern pthread_barrier_t emu_warp_bar[32];
extern unsigned long long emu_slot[32][32];
extern unsigned char emu_dyn_smem[256 * 1024];
extern unsigned emu_dyn_size;

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(x) __attribute__((aligned(x)))
#define __shared__ static

struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline void __trap() { fprintf(stderr, "__trap\n"); abort(); }
extern long emu_bars; // block barriers thread 0 passed (statistics)
static inline void __syncthreads() { if (threadIdx.x == 0) emu_bars++; pthread_barrier_wait(&emu_block_bar); }
static inline int emu_warp() { return threadIdx.x >> 5; }
static inline int emu_lane() { return threadIdx.x & 31; }
static inline void __syncwarp(unsigned m = 0xffffffffu) { pthread_barrier_wait(&emu_warp_bar[emu_warp()]); }
template <class T> static inline T emu_xchg(T v, int src) {
    unsigned long long u = 0; memcpy(&u, &v, sizeof v);
    emu_slot[emu_warp()][emu_lane()] = u;
    __syncwarp();
    unsigned long long r = emu_slot[emu_warp()][src & 31];
    __syncwarp();
    T out; memcpy(&out, &r, sizeof out); return out;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_xchg(v, src); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_xchg(v, emu_lane() ^ o); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, int o) {
    int src = emu_lane() - o; T r = emu_xchg(v, src < 0 ? emu_lane() : src); return src < 0 ? v : r; }
static inline unsigned __ballot_sync(unsigned, int p) {
    unsigned m = 0;
    emu_slot[emu_warp()][emu_lane()] = p ? 1 : 0; __syncwarp();
    for (int l = 0; l < 32; l++) if (emu_slot[emu_warp()][l]) m |= 1u << l;
    __syncwarp(); return m; }
static inline int __any_sync(unsigned mk, int p) { return __ballot_sync(mk, p) != 0; }
static inline unsigned __reduce_max_sync(unsigned mk, unsigned v) {
    for (int o = 16; o; o >>= 1) { unsigned y = emu_xchg(v, emu_lane() ^ o); v = v > y ? v : y; }
    return v; }
template <class T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicMax(T *p, T v) { T o = __atomic_load_n(p, __ATOMIC_SEQ_CST); while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} return o; }

// ---- appended for verify_attn (tools/dev/emu/prep_attn.sh, t_attn.cc) ----
// Vector types, __syncthreads_or, and a small interpreter of the PTX that
// kernels_src/kdt_mma.cuh and verify_attn.cu write as inline asm.  Warp-wide
// instructions (mma.sync, ldmatrix) exchange operands through per-warp
// slots, double-buffered by a per-thread parity so that one __syncwarp per
// instruction suffices (all lanes of a warp run the same instruction
// sequence).  cp.async copies are queued per thread and performed at
// wait_group (EMU_CPASYNC=lazy, the default: a read before the wait sees the
// 0x5A poison) or at issue (EMU_CPASYNC=eager: a copy that overwrites a
// stage another warp still reads shows up).  Shared addresses are offsets
// into emu_dyn_smem and are bounds-checked against the launch's size.
#include <string>
#include <initializer_list>
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
inline int emu_or_acc[2];
inline thread_local unsigned emu_or_par;
static inline int __syncthreads_or(int p) {
    unsigned par = emu_or_par++ & 1;
    if (p) __atomic_store_n(&emu_or_acc[par], 1, __ATOMIC_SEQ_CST);
    __syncthreads();
    int r = __atomic_load_n(&emu_or_acc[par], __ATOMIC_SEQ_CST);
    if (threadIdx.x == 0) emu_or_acc[par ^ 1] = 0; // read by all before the last barrier
    __syncthreads();
    return r;
}

struct emu_opnd { void *p; uint64_t v; int size; };
template <class T> static inline emu_opnd EMU_OUT(T &x) { return emu_opnd{(void *)&x, 0, (int)sizeof(T)}; }
template <class T> static inline emu_opnd EMU_INOUT(T &x) { emu_opnd o{(void *)&x, 0, (int)sizeof(T)}; memcpy(&o.v, &x, sizeof(T)); return o; }
template <class T> static inline emu_opnd EMU_IN(const T &x) { emu_opnd o{nullptr, 0, (int)sizeof(T)}; memcpy(&o.v, &x, sizeof(T) < 8 ? sizeof(T) : 8); return o; }

[[noreturn]] static inline void emu_die(const std::string &what, const std::string &s) {
    fprintf(stderr, "emu: %s: %s (block %u,%u,%u thread %u)\n", what.c_str(), s.c_str(), blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
    abort();
}
// global ranges a cp.async may read (registered by the test; none = no check)
inline std::vector<std::pair<const void *, size_t>> emu_global_ranges;
static inline void emu_check_global(uint64_t a, int n) {
    if (emu_global_ranges.empty()) return;
    for (auto &r : emu_global_ranges)
        if (a >= (uint64_t)r.first && a + n <= (uint64_t)r.first + r.second) return;
    emu_die("cp.async reads outside every buffer", std::to_string(a));
}
static inline unsigned char *emu_smem_ptr(uint64_t a, int n, int align) {
    if (a + n > emu_dyn_size || a % align) emu_die("bad shared address", std::to_string(a) + " size " + std::to_string(n));
    return emu_dyn_smem + a;
}
struct emu_cp { uint64_t dst, src; int bytes; };
inline thread_local std::vector<std::vector<emu_cp>> emu_cp_groups; // committed
inline thread_local std::vector<emu_cp> emu_cp_open;
inline int emu_cp_eager = -1;
static inline void emu_cp_do(const emu_cp &c) {
    unsigned char *d = emu_smem_ptr(c.dst, 16, 16);
    memset(d, 0, 16);
    if (c.bytes) { emu_check_global(c.src, c.bytes); memcpy(d, (const void *)c.src, c.bytes); }
}
inline uint32_t emu_wslot[2][32][32][8];
inline thread_local unsigned emu_wpar;
// posts n words, waits for the warp, returns the slot row of this round
static inline uint32_t (*emu_warp_post(const uint32_t *v, int n))[8] {
    unsigned par = emu_wpar++ & 1;
    memcpy(emu_wslot[par][emu_warp()][emu_lane()], v, 4 * n);
    __syncwarp();
    return emu_wslot[par][emu_warp()];
}
static inline float emu_bf16(uint32_t h) { return __uint_as_float((h & 0xffffu) << 16); }
static inline uint32_t emu_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if (isnan(f)) return 0x7fffu;
    return (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
}
// named barriers (bar.sync / bar.arrive id, count): condition-variable
// barriers counted in threads
struct emu_nbar { pthread_mutex_t mu; pthread_cond_t cv; int arrived; unsigned gen; int red, res[2]; };
inline emu_nbar emu_nbars[16] = {};
inline pthread_once_t emu_nbar_once = PTHREAD_ONCE_INIT;
static inline void emu_nbar_init() { for (auto &b : emu_nbars) { pthread_mutex_init(&b.mu, 0); pthread_cond_init(&b.cv, 0); } }
// returns the OR of `pred` over the arrivals of this generation (bar.red.or)
static inline int emu_named_bar(int id, int count, bool wait, int pred = 0) {
    pthread_once(&emu_nbar_once, emu_nbar_init);
    if (id < 1 || id > 15 || count <= 0 || count % 32 || count > (int)blockDim.x) emu_die("bad named barrier", std::to_string(id) + "," + std::to_string(count));
    emu_nbar &b = emu_nbars[id];
    pthread_mutex_lock(&b.mu);
    unsigned g = b.gen;
    b.red |= pred != 0;
    if (++b.arrived == count) { b.res[g & 1] = b.red; b.red = 0; b.arrived = 0; b.gen++; pthread_cond_broadcast(&b.cv); }
    else if (wait) while (g == b.gen) pthread_cond_wait(&b.cv, &b.mu);
    int r = b.res[g & 1]; // gen g+2 cannot complete before this thread arrives again
    pthread_mutex_unlock(&b.mu);
    return r;
}

struct emu_asm_state {
    std::vector<emu_opnd> ops;
    std::vector<std::pair<std::string, uint64_t>> regs;
    std::string stmt;
    static std::string trim(const std::string &s) {
        size_t a = s.find_first_not_of(" \t\n"), b = s.find_last_not_of(" \t\n");
        return a == std::string::npos ? "" : s.substr(a, b - a + 1);
    }
    static std::vector<std::string> split(const std::string &s) { // top-level commas
        std::vector<std::string> r; std::string cur; int d = 0;
        for (char c : s) {
            if (c == '{' || c == '[') d++;
            if (c == '}' || c == ']') d--;
            if (c == ',' && d == 0) { r.push_back(trim(cur)); cur.clear(); } else cur += c;
        }
        if (!trim(cur).empty()) r.push_back(trim(cur));
        return r;
    }
    uint64_t *reg(const std::string &n) { for (auto &r : regs) if (r.first == n) return &r.second; return nullptr; }
    uint64_t get(const std::string &t0) {
        std::string t = trim(t0);
        if (t[0] == '[') return get(t.substr(1, t.size() - 2));
        size_t plus = t.find('+');
        if (plus != std::string::npos) return get(t.substr(0, plus)) + get(t.substr(plus + 1));
        if (t[0] == '%') { size_t k = std::stoul(t.substr(1)); if (k >= ops.size()) emu_die("operand", stmt); return ops[k].v; }
        if (uint64_t *r = reg(t)) return *r;
        if (isdigit((unsigned char)t[0]) || t[0] == '-') return (uint64_t)std::stoll(t, nullptr, 0);
        emu_die("unknown operand " + t, stmt);
    }
    void set(const std::string &t0, uint64_t v) {
        std::string t = trim(t0);
        if (t[0] == '%') {
            size_t k = std::stoul(t.substr(1));
            if (k >= ops.size() || !ops[k].p) emu_die("output operand", stmt);
            memcpy(ops[k].p, &v, ops[k].size); ops[k].v = v; return;
        }
        if (uint64_t *r = reg(t)) { *r = v; return; }
        emu_die("unknown destination " + t, stmt);
    }
    std::vector<std::string> vec(const std::string &t) { // "{a, b}" -> a, b
        std::string s = trim(t);
        if (s.front() != '{' || s.back() != '}') emu_die("expected a vector", stmt);
        return split(s.substr(1, s.size() - 2));
    }
    float getf(const std::string &t) { return __uint_as_float((uint32_t)get(t)); }
    void setf(const std::string &t, float f) { set(t, __float_as_uint(f)); }
    void run(const std::string &op, const std::vector<std::string> &a);
};

inline void emu_asm_state::run(const std::string &op, const std::vector<std::string> &a) {
    auto is = [&](const char *p) { return op.compare(0, strlen(p), p) == 0; };
    if (is(".reg")) { // ".reg .u64 t, u" arrives as op ".reg", a = {".u64 t", "u"}
        std::string rest = trim(a[0]); regs.push_back({trim(rest.substr(rest.find(' '))), 0});
        for (size_t i = 1; i < a.size(); i++) regs.push_back({a[i], 0});
        return;
    }
    if (op == "setp.ne.s32" || op == "setp.ne.u32") { set(a[0], (uint32_t)get(a[1]) != (uint32_t)get(a[2])); return; }
    if (op == "selp.s32" || op == "selp.u32") { set(a[0], get(a[3]) ? (uint32_t)get(a[1]) : (uint32_t)get(a[2])); return; }
    if (op == "bar.red.or.pred" || op == "barrier.red.or.pred") {
        std::string c = trim(a[3]);
        int pv = c[0] == '!' ? !get(c.substr(1)) : get(c) != 0;
        set(a[0], emu_named_bar((int)get(a[1]), (int)get(a[2]), true, pv)); return;
    }
    if (op == "cvta.to.shared.u64") {
        uint64_t g = get(a[1]);
        if (g < (uint64_t)emu_dyn_smem || g >= (uint64_t)emu_dyn_smem + sizeof emu_dyn_smem) emu_die("cvta.to.shared of a non-shared pointer", stmt);
        set(a[0], g - (uint64_t)emu_dyn_smem); return;
    }
    if (op == "cvt.u32.u64") { set(a[0], (uint32_t)get(a[1])); return; }
    if (is("cp.async.cg.shared.global") || is("cp.async.ca.shared.global")) {
        if (get(a[2]) != 16) emu_die("only 16-byte cp.async", stmt);
        int bytes = a.size() > 3 ? (int)get(a[3]) : 16;
        if (bytes != 0 && bytes != 16) emu_die("src-size other than 0/16", stmt);
        emu_cp c{get(a[0]), get(a[1]), bytes};
        if (emu_cp_eager < 0) { const char *e = getenv("EMU_CPASYNC"); emu_cp_eager = e && !strcmp(e, "eager"); }
        if (emu_cp_eager) emu_cp_do(c); else emu_cp_open.push_back(c);
        return;
    }
    if (op == "cp.async.commit_group") { emu_cp_groups.push_back(emu_cp_open); emu_cp_open.clear(); return; }
    if (op == "cp.async.wait_group" || op == "cp.async.wait_all") {
        size_t keep = op == "cp.async.wait_all" ? 0 : (size_t)get(a[0]);
        if (op == "cp.async.wait_all") { emu_cp_groups.push_back(emu_cp_open); emu_cp_open.clear(); }
        while (emu_cp_groups.size() > keep) {
            for (auto &c : emu_cp_groups.front()) emu_cp_do(c);
            emu_cp_groups.erase(emu_cp_groups.begin());
        }
        return;
    }
    if (is("ldmatrix.sync.aligned.m8n8.")) {
        int n = op.find(".x4") != std::string::npos ? 4 : op.find(".x2") != std::string::npos ? 2 : 1;
        bool tr = op.find(".trans") != std::string::npos;
        std::vector<std::string> d = vec(a[0]);
        if ((int)d.size() != n) emu_die("ldmatrix register count", stmt);
        uint32_t addr = (uint32_t)get(a[1]);
        uint32_t (*s)[8] = emu_warp_post(&addr, 1);
        int l = emu_lane();
        for (int i = 0; i < n; i++) {
            uint32_t v;
            if (!tr) {
                const unsigned char *row = emu_smem_ptr(s[8 * i + l / 4][0], 16, 16);
                memcpy(&v, row + 4 * (l % 4), 4);
            } else {
                uint16_t lo, hi;
                memcpy(&lo, emu_smem_ptr(s[8 * i + 2 * (l % 4)][0], 16, 16) + 2 * (l / 4), 2);
                memcpy(&hi, emu_smem_ptr(s[8 * i + 2 * (l % 4) + 1][0], 16, 16) + 2 * (l / 4), 2);
                v = lo | (uint32_t)hi << 16;
            }
            set(d[i], v);
        }
        return;
    }
    if (op == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") {
        std::vector<std::string> d = vec(a[0]), av = vec(a[1]), bv = vec(a[2]), cv = vec(a[3]);
        uint32_t mine[6];
        for (int i = 0; i < 4; i++) mine[i] = (uint32_t)get(av[i]);
        for (int i = 0; i < 2; i++) mine[4 + i] = (uint32_t)get(bv[i]);
        float c[4];
        for (int i = 0; i < 4; i++) c[i] = getf(cv[i]);
        uint32_t (*s)[8] = emu_warp_post(mine, 6);
        // PTX ISA, m16n8k16 .bf16: A row r, column k is in lane (r%8)*4 +
        // (k%8)/2, register (r/8) + 2*(k/8), half k%2; B row k, column n in
        // lane n*4 + (k%8)/2, register k/8, half k%2; D element i of lane l
        // is row l/4 + 8*(i/2), column 2*(l%4) + i%2.
        int l = emu_lane();
        for (int i = 0; i < 4; i++) {
            int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
            double acc = 0;
            for (int k = 0; k < 16; k++) {
                uint32_t aw = s[(row % 8) * 4 + (k % 8) / 2][(row / 8) + 2 * (k / 8)];
                uint32_t bw = s[col * 4 + (k % 8) / 2][4 + k / 8];
                acc += (double)emu_bf16(aw >> (16 * (k % 2))) * emu_bf16(bw >> (16 * (k % 2)));
            }
            setf(d[i], (float)(acc + c[i]));
        }
        return;
    }
    if (op == "cvt.rn.bf16x2.f32") { // d = {bf16(a) high, bf16(b) low}
        set(a[0], emu_to_bf16(getf(a[1])) << 16 | emu_to_bf16(getf(a[2]))); return;
    }
    if (op == "ex2.approx.ftz.f32") { setf(a[0], exp2f(getf(a[1]))); return; }
    if (op == "lg2.approx.ftz.f32") { setf(a[0], log2f(getf(a[1]))); return; }
    if (op == "bar.sync" || op == "barrier.sync" || op == "bar.arrive" || op == "barrier.arrive") {
        emu_named_bar((int)get(a[0]), (int)get(a[1]), op.find("arrive") == std::string::npos); return;
    }
    emu_die("unknown instruction " + op, stmt);
}

static inline void emu_asm(const char *tmpl, std::initializer_list<emu_opnd> ops) {
    emu_asm_state st;
    st.ops.assign(ops.begin(), ops.end());
    std::string t = emu_asm_state::trim(tmpl), body;
    if (!t.empty() && t.front() == '{' && t.back() == '}') t = t.substr(1, t.size() - 2); // a block
    for (size_t i = 0; i < t.size(); i++) // %% -> %
        body += t[i] == '%' && i + 1 < t.size() && t[i + 1] == '%' ? t[i++] : t[i];
    size_t p = 0;
    while (p < body.size()) {
        size_t e = body.find(';', p);
        if (e == std::string::npos) e = body.size();
        std::string s = emu_asm_state::trim(body.substr(p, e - p));
        p = e + 1;
        if (s.empty()) continue;
        st.stmt = s;
        size_t sp = s.find_first_of(" \t");
        std::string op = s.substr(0, sp);
        std::vector<std::string> args = sp == std::string::npos ? std::vector<std::string>() : emu_asm_state::split(s.substr(sp + 1));
        st.run(op, args);
    }
}
