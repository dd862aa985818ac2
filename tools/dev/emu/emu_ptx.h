// emu_ptx.h: a small interpreter of the PTX that kernels write as inline
// asm.  prep_attn.sh turns each asm statement into emu_asm(template,
// {operands in asm numbering}), so the operand order written in the kernel
// (which register is the high half of a cvt, which address is which
// ldmatrix row) is what runs here.  A template is parsed once a thread
// (cached by its address); each statement goes to the first family that
// knows its opcode:
//   emu_ptx_core    registers, predicates, prmt, conversions of
//                   addresses, st.shared, cp.async, named barriers,
//                   fences, clusters (here)
//   emu_ptx_warp    ldmatrix, stmatrix, mma.sync, packing cvt,
//                   fma.rn.bf16x2 (emu_mma.h)
//   emu_ptx_wgmma   wgmma.* (emu_wgmma.h)
// Shared addresses are offsets into the block's window (cuda_emu.h) and
// are bounds- and alignment-checked against the launch's dynamic size.
//
// cp.async copies are queued per thread and performed at wait_group
// (EMU_CPASYNC=lazy, the default: a read before the wait sees the 0x5A
// poison) or at issue (EMU_CPASYNC=eager: a copy that overwrites a stage
// another warp still reads shows up); either way the race checker counts
// them written only at the wait.
#pragma once
#include <type_traits>
#include <unordered_map>

// An operand: p, where an output goes; v, the value (of an input, or an
// in-out's at the statement); in, where an input that is a variable lives,
// for an instruction that goes on reading its register after the statement
// (wgmma's A fragment: a write to it before the wait is an error), null
// for a temporary, which nothing can write and whose address would dangle.
struct emu_opnd { void *p; uint64_t v; int size; const void *in = nullptr; };
template <class T> static inline emu_opnd EMU_OUT(T &x) { return emu_opnd{(void *)&x, 0, (int)sizeof(T)}; }
template <class T> static inline emu_opnd EMU_INOUT(T &x) { emu_opnd o{(void *)&x, 0, (int)sizeof(T)}; memcpy(&o.v, &x, sizeof(T)); return o; }
template <class T> static inline emu_opnd EMU_IN(T &&x) {
    typedef typename std::remove_reference<T>::type U;
    emu_opnd o{nullptr, 0, (int)sizeof(U), std::is_lvalue_reference<T>::value ? (const void *)&x : nullptr};
    memcpy(&o.v, &x, sizeof(U) < 8 ? sizeof(U) : 8);
    return o;
}

// global ranges a cp.async may read or a prefetch name (registered by the
// test; none = no check)
inline std::vector<std::pair<const void *, size_t>> emu_global_ranges;
static inline void emu_check_global(uint64_t a, int n, const char *what = "cp.async reads") {
    if (emu_global_ranges.empty()) return;
    for (auto &r : emu_global_ranges)
        if (a >= (uint64_t)r.first && a + n <= (uint64_t)r.first + r.second) return;
    emu_die(std::string(what) + " outside every buffer", std::to_string(a));
}
// [a, a + n) of the dynamic shared memory of block b (this one by default)
static inline unsigned char *emu_smem_ptr(uint64_t a, int n, int align, emu_block *b = nullptr) {
    if (!b) b = emu_blk;
    if (a < EMU_SMEM_DYN || a + n > EMU_SMEM_DYN + b->dyn_size || a % align)
        emu_die("bad shared address", std::to_string(a) + " size " + std::to_string(n) + " (dynamic shared memory is " +
                std::to_string(EMU_SMEM_DYN) + ".." + std::to_string(EMU_SMEM_DYN + b->dyn_size - 1) + ")");
    return b->win + a;
}

// An env switch, read once: 1 when `var` is `eager`.
static inline int emu_eager(const char *var) { const char *e = getenv(var); return e && !strcmp(e, "eager"); }

struct emu_cp { uint64_t dst, src; int bytes; };
inline thread_local std::vector<std::vector<emu_cp>> emu_cp_groups; // committed
inline thread_local std::vector<emu_cp> emu_cp_open;
inline int emu_cp_eager = emu_eager("EMU_CPASYNC");
static inline void emu_cp_do(const emu_cp &c) {
    unsigned char *d = emu_smem_ptr(c.dst, 16, 16);
    memset(d, 0, 16);
    if (c.bytes) { emu_check_global(c.src, c.bytes); memcpy(d, (const void *)c.src, c.bytes); }
}

// Warp-wide instructions (mma.sync, ldmatrix, stmatrix) exchange operands
// through per-warp slots, double-buffered by a per-thread parity so that
// one __syncwarp an instruction suffices (all lanes of a warp run the
// same instruction sequence).  Posts n words, waits for the warp, returns
// the slot row of this round.
inline thread_local unsigned emu_wpar;
static inline uint32_t (*emu_warp_post(const uint32_t *v, int n))[8] {
    unsigned par = emu_wpar++ & 1;
    memcpy(emu_blk->wslot[par][emu_warp()][emu_lane()], v, 4 * n);
    __syncwarp();
    return emu_blk->wslot[par][emu_warp()];
}

// bar.sync / bar.arrive id, count; bar 0 is __syncthreads's.
static inline int emu_named_bar(int id, int count, bool wait, int pred = 0) {
    if (id < 0 || id > 15 || count <= 0 || count % 32 || count > (int)blockDim.x) emu_die("bad named barrier", std::to_string(id) + "," + std::to_string(count));
    return emu_bar_go(emu_blk->nbar[id], count, wait, pred, wait ? "bar.sync" : "bar.arrive");
}

// barrier.cluster: arrive (release) and wait (acquire) are separate
// instructions; the clocks join a block at a time (clacc), since a vector
// clock spans one block's threads.
inline thread_local int emu_cl_arrived = -1; // the generation arrived at, or -1
static inline void emu_cluster_arrive() {
    if (emu_cl_arrived >= 0) emu_die("barrier.cluster.arrive twice without a wait", "");
    emu_cluster *cl = emu_blk->cl;
    emu_bar &b = cl->bar;
    pthread_mutex_lock(&b.mu);
    emu_cl_arrived = (int)(b.gen & 0x7fffffff);
    emu_race_release(emu_blk->clacc.acc);
    if (++b.arrived == (int)(cl->n * blockDim.x)) {
        b.arrived = 0;
        for (unsigned i = 0; i < cl->n; i++) {
            emu_bar &c = cl->blocks[i]->clacc;
            emu_race_publish(c.acc, c.vres[b.gen & 3]);
        }
        b.gen++;
        cl->progress++;
        pthread_cond_broadcast(&b.cv);
    }
    pthread_mutex_unlock(&b.mu);
    emu_race_tick();
}
static inline void emu_cluster_wait() {
    if (emu_cl_arrived < 0) emu_die("barrier.cluster.wait without an arrive", "");
    emu_bar &b = emu_blk->cl->bar;
    unsigned g = (unsigned)emu_cl_arrived;
    pthread_mutex_lock(&b.mu);
    emu_block_wait(b.cv, b.mu, "barrier.cluster", [&] { return (b.gen & 0x7fffffff) != g; });
    emu_race_acquire(emu_blk->clacc.vres[g & 3]);
    pthread_mutex_unlock(&b.mu);
    emu_cl_arrived = -1;
}
// A shared::cluster address: the block's rank + 1 in bits 24.., its
// shared address below (a shared::cta address, rank bits 0, is this
// block's own).
static inline unsigned char *emu_cluster_ptr(uint32_t a, int n) {
    emu_block *b = emu_blk;
    if (a >> 24) {
        unsigned r = (a >> 24) - 1;
        if (r >= emu_blk->cl->n) emu_die("shared::cluster address of no block", std::to_string(a));
        b = emu_blk->cl->blocks[r];
    }
    if (b->exited.load() == b->nthreads) emu_die("ld.shared::cluster from a block that has exited", std::to_string(a));
    return emu_smem_ptr(a & 0xffffff, n, n, b);
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
    // %k: operand k, %name: a special register
    uint64_t special(const std::string &t) {
        if (t == "%cluster_nctarank") return emu_blk->cl->n;
        if (t == "%cluster_ctarank") return emu_blk->rank;
        if (t == "%dynamic_smem_size") return emu_blk->dyn_size;
        if (t == "%tid.x") return threadIdx.x;
        emu_die("unknown special register " + t, stmt);
    }
    uint64_t get(const std::string &t0) {
        std::string t = trim(t0);
        if (t[0] == '[') return get(t.substr(1, t.size() - 2));
        size_t plus = t.find('+');
        if (plus != std::string::npos) return get(t.substr(0, plus)) + get(t.substr(plus + 1));
        if (t[0] == '!') return !get(t.substr(1));
        if (t[0] == '%' && !isdigit((unsigned char)t[1])) return special(t);
        if (t[0] == '%') { size_t k = std::stoul(t.substr(1)); if (k >= ops.size()) emu_die("operand", stmt); return ops[k].v; }
        if (uint64_t *r = reg(t)) return *r;
        if (isdigit((unsigned char)t[0]) || t[0] == '-') return (uint64_t)std::stoll(t, nullptr, 0);
        emu_die("unknown operand " + t, stmt);
    }
    emu_opnd &out(const std::string &t0) { // an output operand %k
        std::string t = trim(t0);
        size_t k = t[0] == '%' && isdigit((unsigned char)t[1]) ? std::stoul(t.substr(1)) : ops.size();
        if (k >= ops.size() || !ops[k].p) emu_die("output operand " + t, stmt);
        return ops[k];
    }
    void set(const std::string &t0, uint64_t v) {
        std::string t = trim(t0);
        if (t[0] == '%') { emu_opnd &o = out(t); memcpy(o.p, &v, o.size); o.v = v; return; }
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
static inline bool emu_is(const std::string &op, const char *p) { return op.compare(0, strlen(p), p) == 0; }

static inline bool emu_ptx_core(emu_asm_state &s, const std::string &op, const std::vector<std::string> &a) {
    auto is = [&](const char *p) { return emu_is(op, p); };
    if (is(".reg")) { // ".reg .u64 t, u" arrives as op ".reg", a = {".u64 t", "u"}
        std::string rest = s.trim(a[0]); s.regs.push_back({s.trim(rest.substr(rest.find(' '))), 0});
        for (size_t i = 1; i < a.size(); i++) s.regs.push_back({a[i], 0});
        return true;
    }
    if (op == "setp.ne.s32" || op == "setp.ne.u32" || op == "setp.ne.b32") { s.set(a[0], (uint32_t)s.get(a[1]) != (uint32_t)s.get(a[2])); return true; }
    if (op == "setp.eq.s32" || op == "setp.eq.u32" || op == "setp.eq.b32") { s.set(a[0], (uint32_t)s.get(a[1]) == (uint32_t)s.get(a[2])); return true; }
    if (op == "selp.s32" || op == "selp.u32" || op == "selp.b32") { s.set(a[0], s.get(a[3]) ? (uint32_t)s.get(a[1]) : (uint32_t)s.get(a[2])); return true; }
    if (op == "mov.b32" && s.trim(a[0])[0] == '{') { // {lo, hi} = the 16-bit halves
        std::vector<std::string> d = s.vec(a[0]);
        if (d.size() != 2) emu_die("mov.b32 unpacks into two halves", s.stmt);
        uint32_t v = (uint32_t)s.get(a[1]);
        s.set(d[0], v & 0xffffu); s.set(d[1], v >> 16); return true;
    }
    if (op == "mov.u32" || op == "mov.b32") { s.set(a[0], (uint32_t)s.get(a[1])); return true; }
    if (op == "prmt.b32") { // default mode: byte i of d is byte (c nibble i) & 7 of {b, a}; nibble bit 3 replicates its sign
        const uint64_t ab = (uint64_t)(uint32_t)s.get(a[2]) << 32 | (uint32_t)s.get(a[1]);
        const uint32_t c = (uint32_t)s.get(a[3]);
        uint32_t d = 0;
        for (int i = 0; i < 4; i++) {
            const uint32_t n = c >> (4 * i) & 15, byte = (uint32_t)(ab >> (8 * (n & 7))) & 0xff;
            d |= (n & 8 ? (byte & 0x80 ? 0xffu : 0u) : byte) << (8 * i);
        }
        s.set(a[0], d); return true;
    }
    if (op == "bar.red.or.pred" || op == "barrier.red.or.pred") {
        s.set(a[0], emu_named_bar((int)s.get(a[1]), (int)s.get(a[2]), true, s.get(a[3]) != 0)); return true;
    }
    if (op == "bar.sync" || op == "barrier.sync" || op == "bar.arrive" || op == "barrier.arrive") {
        emu_named_bar((int)s.get(a[0]), a.size() > 1 ? (int)s.get(a[1]) : (int)blockDim.x, op.find("arrive") == std::string::npos);
        return true;
    }
    if (op == "setmaxnreg.inc.sync.aligned.u32" || op == "setmaxnreg.dec.sync.aligned.u32") {
        // registers are not modelled: the count must be one the hardware takes
        const uint64_t n = s.get(a[0]);
        if (n < 24 || n > 256 || n % 8) emu_die("setmaxnreg of " + std::to_string(n) + " registers (8 k, 24..256)", s.stmt);
        return true;
    }
    if (op == "cvta.to.shared.u64") {
        uint64_t g = s.get(a[1]), w = (uint64_t)emu_blk->win;
        if (g < w || g >= w + EMU_SMEM_WINDOW) emu_die("cvta.to.shared of a non-shared pointer", s.stmt);
        s.set(a[0], g - w); return true;
    }
    if (op == "cvt.u32.u64") { s.set(a[0], (uint32_t)s.get(a[1])); return true; }
    if (is("cp.async.cg.shared.global") || is("cp.async.ca.shared.global")) {
        if (s.get(a[2]) != 16) emu_die("only 16-byte cp.async", s.stmt);
        int bytes = a.size() > 3 ? (int)s.get(a[3]) : 16;
        if (bytes != 0 && bytes != 16) emu_die("src-size other than 0/16", s.stmt);
        emu_cp c{s.get(a[0]), s.get(a[1]), bytes};
        emu_smem_ptr(c.dst, 16, 16);
        emu_race_write(emu_blk->shadow, (uint32_t)c.dst, 16, true, "cp.async");
        if (emu_cp_eager) emu_cp_do(c);
        emu_cp_open.push_back(c);
        return true;
    }
    if (op == "prefetch.global.L2") { // a hint, no data moves: its address must lie in a buffer
        emu_check_global(s.get(a[0]), 1, "prefetch.global.L2 names a byte");
        return true;
    }
    if (op == "cp.async.commit_group") { emu_cp_groups.push_back(emu_cp_open); emu_cp_open.clear(); return true; }
    if (op == "cp.async.wait_group" || op == "cp.async.wait_all") {
        size_t keep = op == "cp.async.wait_all" ? 0 : (size_t)s.get(a[0]);
        if (op == "cp.async.wait_all") { emu_cp_groups.push_back(emu_cp_open); emu_cp_open.clear(); }
        while (emu_cp_groups.size() > keep) {
            for (auto &c : emu_cp_groups.front()) {
                if (!emu_cp_eager) emu_cp_do(c);
                emu_race_landed(emu_blk->shadow, (uint32_t)c.dst, 16);
            }
            emu_cp_groups.erase(emu_cp_groups.begin());
        }
        return true;
    }
    if (is("st.shared.")) { // .b32, .v2.b32, .v4.b32: generic-proxy stores the race checker sees
        const int nv = op == "st.shared.v4.b32" ? 4 : op == "st.shared.v2.b32" ? 2 : op == "st.shared.b32" ? 1 : 0;
        if (!nv) emu_die("st.shared of a width this emulator does not know", s.stmt);
        std::vector<std::string> v = nv > 1 ? s.vec(a[1]) : std::vector<std::string>{a[1]};
        if ((int)v.size() != nv) emu_die("st.shared register count", s.stmt);
        const uint32_t addr = (uint32_t)s.get(a[0]);
        unsigned char *dst = emu_smem_ptr(addr, 4 * nv, 4 * nv);
        emu_race_write(emu_blk->shadow, addr, 4 * nv, false, "st.shared");
        for (int i = 0; i < nv; i++) { uint32_t x = (uint32_t)s.get(v[i]); memcpy(dst + 4 * i, &x, 4); }
        return true;
    }
    if (op == "ex2.approx.ftz.f32") { s.setf(a[0], exp2f(s.getf(a[1]))); return true; }
    if (op == "lg2.approx.ftz.f32") { s.setf(a[0], log2f(s.getf(a[1]))); return true; }
    if (op == "fence.proxy.async" || op == "fence.proxy.async.shared::cta") { emu_race_fence(emu_blk->shadow); return true; }
    if (is("barrier.cluster.arrive")) { emu_cluster_arrive(); return true; }
    if (is("barrier.cluster.wait")) { emu_cluster_wait(); return true; }
    if (op == "mapa.shared::cluster.u32") {
        uint32_t addr = (uint32_t)s.get(a[1]), r = (uint32_t)s.get(a[2]);
        if (r >= emu_blk->cl->n || addr >> 24) emu_die("mapa of rank " + std::to_string(r) + " in a cluster of " + std::to_string(emu_blk->cl->n), s.stmt);
        s.set(a[0], addr | (r + 1) << 24);
        return true;
    }
    if (is("ld.shared::cluster.")) { // .b32/.u32/.f32/.u64, or .v2/.v4 of 32 bits
        int nv = op.find(".v4.") != std::string::npos ? 4 : op.find(".v2.") != std::string::npos ? 2 : 1;
        int w = op.back() == '4' && op[op.size() - 2] == '6' ? 8 : 4;
        std::vector<std::string> d = nv > 1 ? s.vec(a[0]) : std::vector<std::string>{a[0]};
        if ((int)d.size() != nv) emu_die("ld.shared::cluster register count", s.stmt);
        const unsigned char *p = emu_cluster_ptr((uint32_t)s.get(a[1]), nv * w);
        for (int i = 0; i < nv; i++) { uint64_t v = 0; memcpy(&v, p + i * w, w); s.set(d[i], v); }
        return true;
    }
    return false;
}

#include "emu_types.h"
#include "emu_mma.h"
#include "emu_wgmma.h"

inline void emu_asm_state::run(const std::string &op, const std::vector<std::string> &a) {
    if (emu_ptx_core(*this, op, a) || emu_ptx_warp(*this, op, a) || emu_ptx_wgmma(*this, op, a)) return;
    emu_die("unknown instruction " + op, stmt);
}

// A template's statements: "op args" split once and cached a thread.
struct emu_stmt { std::string text, op; std::vector<std::string> args; };
static inline const std::vector<emu_stmt> &emu_parse(const char *tmpl) {
    static thread_local std::unordered_map<const char *, std::vector<emu_stmt>> cache;
    auto it = cache.find(tmpl);
    if (it != cache.end()) return it->second;
    std::vector<emu_stmt> out;
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
        size_t sp = s.find_first_of(" \t\n");
        out.push_back({s, s.substr(0, sp), sp == std::string::npos ? std::vector<std::string>() : emu_asm_state::split(s.substr(sp + 1))});
    }
    return cache.emplace(tmpl, std::move(out)).first->second;
}

static inline void emu_asm(const char *tmpl, const emu_opnd *ops, size_t n) {
    emu_asm_state st;
    st.ops.assign(ops, ops + n);
    for (const emu_stmt &s : emu_parse(tmpl)) {
        st.stmt = s.text;
        st.run(s.op, s.args);
    }
}
static inline void emu_asm(const char *tmpl, std::initializer_list<emu_opnd> ops) { emu_asm(tmpl, ops.begin(), ops.size()); }
