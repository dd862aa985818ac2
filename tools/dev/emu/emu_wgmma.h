// emu_wgmma.h: Hopper's warpgroup MMA, wgmma.mma_async m64nNkK with both
// operands in shared memory (matrix descriptors) or A in registers and B
// in shared memory (the RS form), f32 accumulators, and wgmma.fence /
// commit_group / wait_group.
//
// A warpgroup (128 consecutive threads, the first a multiple of 128)
// issues each wgmma together: every thread of it must issue the same
// sequence with the same descriptors, shape and immediates (checked).
// The hardware reads the operands once all 128 have issued, so that is
// the earliest moment the emulator reads them; when, is EMU_WGMMA:
//   lazy (default)  a thread computes its accumulator fragment at its
//                   wgmma.wait_group, from shared memory as it is then:
//                   an operand overwritten before the wait, or an
//                   accumulator read before it, gives wrong numbers;
//   eager           at issue, as soon as all 128 have issued it.
// Either way: a wgmma needs a wgmma.fence after the thread's last
// wait_group (and before its first wgmma); an accumulator register, or a
// register of A in the RS form, that changes between issue and wait_group
// is an error; a thread may not exit with a wgmma in flight; and the race
// checker (emu_race.h) sees the shared operands read from the full issue
// (the join of the 128 issuers' clocks, which must hold every write and
// its fence.proxy.async) until the last of the 128 has waited (no write
// may land in between).
//
// The RS form, "{d...}, {a0, a1, a2, a3}, b-desc, p, imm-scale-a,
// imm-scale-b" and, for 16-bit A and B, ", imm-trans-b" (A in registers
// has no imm-trans-a): each warp holds its 16 rows of A as mma.sync holds
// its A, four 32-bit registers a thread, lowest element first.  Element
// i (of E = 4 / size, size the element's bytes) of register r (0..3) of
// thread (warp w, lane l) is
//   A[16 w + l / 4 + 8 (r % 2)][E (l % 4) + i + (K / 2) (r / 2)]
// The hardware may read a thread's registers until that thread's
// wait_group retires the wgmma, so each thread's values are recorded at
// its issue (they differ between threads; the rest of the wgmma must
// not) and used at either moment above; a write to one before the wait
// is an error, seen where the asm statement passed the register as a
// variable (a temporary, or a register the asm declares, nothing else
// can write).
//
// Operand addressing, from the PTX ISA's matrix descriptor (start address
// >> 4 in bits 0-13, leading byte offset >> 4 in 16-29, stride byte offset
// >> 4 in 32-45, base offset in 49-51, layout type in 62-63: 0 none
// (interleaved), 1 128-byte, 2 64-byte, 3 32-byte swizzle) and its
// canonical layouts, in 16-byte units, S = the swizzle width in units
// (8, 4, 2; 1 without swizzle):
//   K-major, row r (M or N), byte kb of the row's K extent:
//     swizzled  (r % 8) S 16 + (r / 8) SBO + kb
//     none      (r % 8) 16 + (r / 8) SBO + (kb / 16) LBO + kb % 16
//   MN-major, byte nb = n x size along M or N, k along K:
//     swizzled  nb % (16 S) + (nb / (16 S)) LBO + (k % 8) S 16 + (k / 8) SBO
//     none      (nb / 16) SBO + nb % 16 + (k % 8) 16 + (k / 8) LBO
// then the swizzle of the whole shared address, as the hardware applies
// it: the 16-byte unit's bits [4, 4 + log2 S) XOR bits [7, 7 + log2 S).
// The accumulator fragment: thread (warp w of the warpgroup, lane l) holds
// d[4 j + 2 h + e] = D[16 w + l / 4 + 8 h][8 j + 2 (l % 4) + e].
// Sums are exact (double) and rounded once to f32: the tensor core's own
// accumulation is less precise, so an error bound must not lean on this
// (EMU_FP8_ACC=13 adds FP8 steps as the hardware does: emu_types.h).
#pragma once

struct emu_wg_op {
    std::string shape;                 // the opcode: shape and formats
    bool rs = false;                   // A in registers (da, ta unused)
    uint64_t da = 0, db = 0;
    int scale_d = 0, sa = 1, sb = 1, ta = 0, tb = 0;
    std::vector<uint32_t> ra;          // with rs: [warpgroup thread * 4 + r], A at issue
    int issued = 0, done = 0;
    emu_vc vc;                         // join of the issuers' clocks
    std::vector<uint32_t> chunks;      // the 16-byte chunks it reads
    std::vector<uint32_t> waitclk;     // [warpgroup thread]: clock at its wait
    bool same(const emu_wg_op &o) const {
        return shape == o.shape && rs == o.rs && da == o.da && db == o.db && scale_d == o.scale_d && sa == o.sa && sb == o.sb && ta == o.ta && tb == o.tb;
    }
};
struct emu_wg_log {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    uint64_t base = 0;                 // sequence number of ops.front()
    std::deque<emu_wg_op> ops;
};

// This thread's wgmma: its place in the warpgroup's sequence, its
// accumulator registers, and (RS form) its A registers that are variables.
struct emu_wg_mine { uint64_t seq; std::vector<float *> d; std::vector<const uint32_t *> a; };
inline thread_local std::vector<emu_wg_mine> emu_wg_open;             // not committed
inline thread_local std::deque<std::vector<emu_wg_mine>> emu_wg_groups; // committed
inline thread_local uint64_t emu_wg_seq;
inline thread_local bool emu_wg_fenced;
// accumulator registers of wgmma in flight, and the value each must keep
inline thread_local std::vector<std::pair<float *, uint32_t>> emu_wg_regs;
// A registers of wgmma in flight (RS form), and the value each had at issue
inline thread_local std::vector<std::pair<const uint32_t *, uint32_t>> emu_wg_aregs;
inline int emu_wg_eager = emu_eager("EMU_WGMMA");

static inline emu_wg_log &emu_wg_mylog() { return emu_blk->wg[threadIdx.x / 128]; }

// The shared address of element (mn, k) of an operand (mn: its M or N
// index) of `size` bytes, under descriptor `desc`.
static inline uint32_t emu_wg_addr(uint64_t desc, int mn, int k, int size, bool kmajor) {
    const uint32_t start = (uint32_t)(desc & 0x3fff) << 4;
    const uint32_t lbo = (uint32_t)(desc >> 16 & 0x3fff) << 4, sbo = (uint32_t)(desc >> 32 & 0x3fff) << 4;
    const int mode = (int)(desc >> 62);
    const uint32_t S = mode == 1 ? 8 : mode == 2 ? 4 : mode == 3 ? 2 : 1;
    uint32_t off;
    if (kmajor) {
        const uint32_t kb = (uint32_t)(k * size);
        off = mode ? (mn % 8) * S * 16 + (mn / 8) * sbo + kb
                   : (mn % 8) * 16 + (mn / 8) * sbo + (kb / 16) * lbo + kb % 16;
    } else {
        const uint32_t nb = (uint32_t)(mn * size);
        off = mode ? nb % (16 * S) + nb / (16 * S) * lbo + (k % 8) * S * 16 + (k / 8) * sbo
                   : nb / 16 * sbo + nb % 16 + (k % 8) * 16 + (k / 8) * lbo;
    }
    const uint32_t a = start + off;
    return a ^ ((a >> 7) & (S - 1)) << 4;
}

// "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16": N, K and the
// formats of A and B.
static inline void emu_wg_shape(const emu_asm_state &s, const std::string &op, int &N, int &K, emu_fmt &fa, emu_fmt &fb) {
    char d[8], a[8], b[8];
    int M;
    if (sscanf(op.c_str(), "wgmma.mma_async.sync.aligned.m%dn%dk%d.%7[^.].%7[^.].%7s", &M, &N, &K, d, a, b) != 6)
        emu_die("unknown wgmma", s.stmt);
    fa = emu_fmt_of(a); fb = emu_fmt_of(b);
    if (M != 64 || N < 8 || N > 256 || N % 8 || strcmp(d, "f32") || !fa || fa == EMU_F32 || !fb || emu_fmt_bits(fa) != emu_fmt_bits(fb) || K != 256 / emu_fmt_bits(fa))
        emu_die("wgmma shape or formats this emulator does not know (f32 accumulators, 16- or 8-bit A and B, k of 32 bytes)", s.stmt);
}

static inline void emu_wg_check_desc(const emu_asm_state &s, uint64_t desc, const char *which) {
    // bits 14-15, 30-31, 46-48 and 52-61 are reserved: a carry into them
    // means an address or offset overflowed its field
    const uint64_t reserved = 0x3ull << 14 | 0x3ull << 30 | 0x7ull << 46 | 0x3ffull << 52;
    if (desc & reserved) emu_die(std::string("wgmma ") + which + " descriptor sets reserved bits", s.stmt);
    if (desc >> 49 & 7) emu_die(std::string("wgmma ") + which + " descriptor has a base offset (not emulated)", s.stmt);
}

// The shared chunks op reads (for the race checker: B's, and A's unless
// it is in registers), and their bounds and alignment, once a warpgroup.
static inline void emu_wg_operands(emu_wg_op &op, const emu_asm_state &s) {
    int N, K; emu_fmt fa, fb;
    emu_wg_shape(s, op.shape, N, K, fa, fb);
    const int size = emu_fmt_bits(fa) / 8;
    std::vector<uint32_t> &c = op.chunks;
    for (int m = 0; m < 64 && !op.rs; m++)
        for (int k = 0; k < K; k++) {
            uint32_t a = emu_wg_addr(op.da, m, k, size, !op.ta);
            emu_smem_ptr(a, size, size);
            c.push_back(a / 16);
        }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            uint32_t a = emu_wg_addr(op.db, n, k, size, !op.tb);
            emu_smem_ptr(a, size, size);
            c.push_back(a / 16);
        }
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
}

// The code of A[m][k] in the registers the warpgroup's threads issued op
// with (the fragment in the header comment, solved for the thread, the
// register and the element).
static inline uint32_t emu_wg_afrag(const emu_wg_op &o, int m, int k, int K, int size) {
    const int E = 4 / size, t = 32 * (m / 16) + 4 * (m % 8) + k % (K / 2) / E, r = m % 16 / 8 + 2 * (k / (K / 2));
    const int bits = 8 * size;
    return o.ra[4 * t + r] >> (bits * (k % E)) & ((1u << bits) - 1);
}

// This thread's part of op: its accumulator fragment, from shared memory
// as it is at the call (and A's registers as they were at issue), once
// all 128 threads have issued op.
static inline void emu_wg_exec(const emu_wg_mine &mine, const emu_asm_state &s) {
    emu_wg_log &lg = emu_wg_mylog();
    pthread_mutex_lock(&lg.mu);
    emu_wg_op *opp = &lg.ops[mine.seq - lg.base];
    emu_block_wait(lg.cv, lg.mu, "a wgmma that not all 128 threads of the warpgroup issued", [&] { return opp->issued == 128; });
    const emu_wg_op o = *opp; // the fields (the deque may move on)
    pthread_mutex_unlock(&lg.mu);

    int N, K; emu_fmt fa, fb;
    emu_wg_shape(s, o.shape, N, K, fa, fb);
    const int size = emu_fmt_bits(fa) / 8;
    const int wt = threadIdx.x % 128, w = wt / 32, l = wt % 32;
    auto elem = [&](uint64_t desc, emu_fmt f, int mn, int k, bool kmajor) {
        uint32_t v = 0;
        memcpy(&v, emu_smem_ptr(emu_wg_addr(desc, mn, k, size, kmajor), size, size), size);
        return emu_decode(f, v);
    };
    double arow[2][32], bcol[64][32];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < K; k++) {
            const int m = 16 * w + l / 4 + 8 * h;
            arow[h][k] = o.sa * (o.rs ? emu_decode(fa, emu_wg_afrag(o, m, k, K, size)) : elem(o.da, fa, m, k, !o.ta));
        }
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 2; e++)
            for (int k = 0; k < K; k++) bcol[2 * j + e][k] = o.sb * elem(o.db, fb, 8 * j + 2 * (l % 4) + e, k, !o.tb);
    for (int j = 0; j < N / 8; j++)
        for (int h = 0; h < 2; h++)
            for (int e = 0; e < 2; e++) {
                float *d = mine.d[4 * j + 2 * h + e];
                double prod[32];
                for (int k = 0; k < K; k++) prod[k] = arow[h][k] * bcol[2 * j + e][k];
                *d = emu_mma_step(prod, K, o.scale_d ? (double)*d : 0.0, size == 1);
                for (auto &r : emu_wg_regs) if (r.first == d) r.second = __float_as_uint(*d);
            }
}

// This thread is done waiting for op: the last of the 128 ends its reads.
static inline void emu_wg_done(const emu_wg_mine &mine) {
    emu_wg_log &lg = emu_wg_mylog();
    pthread_mutex_lock(&lg.mu);
    emu_wg_op &op = lg.ops[mine.seq - lg.base];
    op.waitclk[threadIdx.x % 128] = emu_race_on ? emu_race_clock() : 0;
    if (++op.done == 128) {
        if (emu_race_on) {
            emu_shadow &sh = emu_blk->shadow;
            const unsigned t0 = threadIdx.x / 128 * 128;
            pthread_mutex_lock(&sh.mu);
            for (uint32_t c : op.chunks) {
                sh.ch[c].inflight--;
                uint32_t *r = &sh.rvc[(size_t)c * sh.n + t0];
                for (int t = 0; t < 128; t++) r[t] = std::max(r[t], op.waitclk[t]);
            }
            pthread_mutex_unlock(&sh.mu);
        }
        while (!lg.ops.empty() && lg.ops.front().done == 128) { lg.ops.pop_front(); lg.base++; }
    }
    pthread_mutex_unlock(&lg.mu);
}

// Every accumulator register of a wgmma in flight still holds what the
// last wgmma on it left (or what it held at issue), and every A register
// what it held at issue.
static inline void emu_wg_check_regs(const emu_asm_state &s) {
    for (auto &r : emu_wg_regs)
        if (__float_as_uint(*r.first) != r.second) emu_die("an accumulator register of a wgmma in flight was written before its wgmma.wait_group", s.stmt);
    for (auto &r : emu_wg_aregs)
        if (*r.first != r.second) emu_die("an A register of a wgmma in flight was written before its wgmma.wait_group", s.stmt);
}

static inline void emu_wg_issue(emu_asm_state &s, const std::string &opc, const std::vector<std::string> &a) {
    if (blockDim.x % 128) emu_die("wgmma in a block that is not whole warpgroups", s.stmt);
    if (!emu_wg_fenced) emu_die("wgmma.mma_async without a wgmma.fence since the thread's last wgmma.wait_group", s.stmt);
    int N, K; emu_fmt fa, fb;
    emu_wg_shape(s, opc, N, K, fa, fb);
    // A in registers (a vector where the descriptor would be) has no
    // layout in memory to transpose
    const bool rs = s.trim(a[1])[0] == '{';
    // 16-bit A and B take imm-trans-a and imm-trans-b (RS: imm-trans-b
    // only); 8-bit ones are always K-major and take none
    const size_t nargs = emu_fmt_bits(fa) == 16 ? (rs ? 7 : 8) : 6;
    if (a.size() != nargs) emu_die("wgmma operand count", s.stmt);
    emu_wg_op op;
    op.shape = opc;
    op.rs = rs;
    if (!rs) op.da = s.get(a[1]);
    op.db = s.get(a[2]);
    op.scale_d = s.get(a[3]) != 0;
    op.sa = (int)(int64_t)s.get(a[4]); op.sb = (int)(int64_t)s.get(a[5]);
    if (nargs == 8) { op.ta = (int)s.get(a[6]); op.tb = (int)s.get(a[7]); }
    if (nargs == 7) op.tb = (int)s.get(a[6]);
    if ((op.sa != 1 && op.sa != -1) || (op.sb != 1 && op.sb != -1) || op.ta >> 1 || op.tb >> 1) emu_die("wgmma immediates", s.stmt);
    if (!rs) emu_wg_check_desc(s, op.da, "A");
    emu_wg_check_desc(s, op.db, "B");
    std::vector<std::string> dv = s.vec(a[0]);
    if ((int)dv.size() != N / 2) emu_die("wgmma accumulator count (N/2 f32 registers)", s.stmt);
    emu_wg_mine mine{emu_wg_seq++, {}, {}};
    // A's registers: their values now, which the hardware may read until
    // the wait, and where those the statement passed as variables live
    // (a register the asm declares, or a temporary, dies with the statement)
    uint32_t av[4] = {};
    if (rs) {
        std::vector<std::string> v = s.vec(a[1]);
        if (v.size() != 4) emu_die("wgmma A fragment count (4 32-bit registers)", s.stmt);
        for (int i = 0; i < 4; i++) {
            const std::string t = s.trim(v[i]);
            av[i] = (uint32_t)s.get(t);
            if (t[0] != '%' || !isdigit((unsigned char)t[1])) continue;
            const emu_opnd &o = s.ops[std::stoul(t.substr(1))];
            if (o.size != 4) emu_die("wgmma A operand not a 32-bit register", s.stmt);
            const uint32_t *p = (const uint32_t *)(o.p ? o.p : o.in);
            if (!p) continue;
            mine.a.push_back(p);
            bool known = false;
            for (auto &r : emu_wg_aregs) if (r.first == p) known = true;
            if (!known) emu_wg_aregs.push_back({p, av[i]});
        }
    }
    for (auto &t : dv) {
        emu_opnd &o = s.out(t);
        if (o.size != 4) emu_die("wgmma accumulator not a 32-bit register", s.stmt);
        float *p = (float *)o.p;
        mine.d.push_back(p);
        bool known = false;
        for (auto &r : emu_wg_regs) if (r.first == p) known = true;
        if (!known) emu_wg_regs.push_back({p, __float_as_uint(*p)});
    }
    emu_wg_check_regs(s);

    emu_wg_log &lg = emu_wg_mylog();
    pthread_mutex_lock(&lg.mu);
    const uint64_t i = mine.seq - lg.base;
    if (i > lg.ops.size()) emu_die("wgmma sequence out of step", s.stmt);
    if (i == lg.ops.size()) { // the first of the warpgroup to issue it
        op.waitclk.assign(128, 0);
        if (rs) op.ra.assign(4 * 128, 0);
        emu_wg_operands(op, s);
        lg.ops.push_back(op);
    } else if (!lg.ops[i].same(op)) {
        emu_die("wgmma differs from what the warpgroup's other threads issued (descriptors, shape or immediates)", s.stmt);
    }
    emu_wg_op &q = lg.ops[i];
    if (rs) memcpy(&q.ra[4 * (threadIdx.x % 128)], av, sizeof av);
    if (emu_race_on) emu_vc_join(q.vc, emu_myvc);
    if (++q.issued == 128) {
        // the hardware may read the operands from here on: every write to
        // them must be in the issuers' clocks, and none may land until the
        // last of them has waited
        if (emu_race_on) {
            emu_shadow &sh = emu_blk->shadow;
            pthread_mutex_lock(&sh.mu);
            for (uint32_t c : q.chunks) emu_race_check_read(sh, c, q.vc, true, "wgmma");
            for (uint32_t c : q.chunks) sh.ch[c].inflight++;
            pthread_mutex_unlock(&sh.mu);
        }
        emu_blk->cl->progress++;
        pthread_cond_broadcast(&lg.cv);
    }
    pthread_mutex_unlock(&lg.mu);
    emu_wg_open.push_back(mine);
    if (emu_wg_eager) emu_wg_exec(mine, s);
}

static inline void emu_wg_wait(emu_asm_state &s, size_t keep) {
    emu_wg_check_regs(s);
    while (emu_wg_groups.size() > keep) {
        for (auto &m : emu_wg_groups.front()) {
            if (!emu_wg_eager) emu_wg_exec(m, s);
            emu_wg_done(m);
        }
        emu_wg_groups.pop_front();
    }
    // registers no wgmma in flight uses any more
    auto prune = [](auto &regs, auto field) {
        std::remove_reference_t<decltype(regs)> live;
        for (auto &r : regs) {
            bool used = false;
            auto uses = [&](const emu_wg_mine &m) { auto &v = m.*field; return std::find(v.begin(), v.end(), r.first) != v.end(); };
            for (auto &m : emu_wg_open) used |= uses(m);
            for (auto &g : emu_wg_groups)
                for (auto &m : g) used |= uses(m);
            if (used) live.push_back(r);
        }
        regs.swap(live);
    };
    prune(emu_wg_regs, &emu_wg_mine::d);
    prune(emu_wg_aregs, &emu_wg_mine::a);
    emu_wg_fenced = false;
}

static inline bool emu_ptx_wgmma(emu_asm_state &s, const std::string &op, const std::vector<std::string> &a) {
    if (!emu_is(op, "wgmma.")) return false;
    if (op == "wgmma.fence.sync.aligned") { emu_wg_fenced = true; return true; }
    if (op == "wgmma.commit_group.sync.aligned") { emu_wg_groups.push_back(emu_wg_open); emu_wg_open.clear(); return true; }
    if (op == "wgmma.wait_group.sync.aligned") { emu_wg_wait(s, (size_t)s.get(a[0])); return true; }
    if (emu_is(op, "wgmma.mma_async.")) { emu_wg_issue(s, op, a); return true; }
    emu_die("unknown wgmma instruction " + op, s.stmt);
}

// At a thread's exit: nothing of it may still be in flight.
static inline void emu_wg_exit_check() {
    if (!emu_wg_open.empty() || !emu_wg_groups.empty()) emu_die("wgmma still in flight when the thread exits", "");
    if (blockDim.x % 128 == 0) {
        emu_wg_log &lg = emu_wg_mylog();
        pthread_mutex_lock(&lg.mu);
        bool behind = emu_wg_seq < lg.base + lg.ops.size();
        pthread_mutex_unlock(&lg.mu);
        if (behind) emu_die("thread exits without issuing a wgmma its warpgroup issued", "");
    }
}
