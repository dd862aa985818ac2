// t_ptx.cc: the PTX interpreter's own tests (tools/dev/emu/run.sh builds
// and runs it): element formats and conversions, mma.sync and wgmma (A in
// shared memory or in registers) against a double product of operands
// laid out here, from the PTX ISA's
// tables and the canonical layouts of the matrix descriptors (written out
// again, row by row, not through emu_mma.h or emu_wgmma.h), and the
// errors the emulator must raise (each in a child process that must
// abort with its message).
#include <sys/wait.h>
#include <random>
#include "launch.h"

static int fails, checks;
#define CHECK(c, ...) do { checks++; if (!(c)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

// ---- formats and conversions --------------------------------------------
static void t_formats() {
    struct { double x; uint32_t code; } e4m3[] = {
        {0.0, 0x00}, {-0.0, 0x80}, {1.0, 0x38}, {-1.0, 0xb8}, {-0.5, 0xb0}, {240.0, 0x77},
        {448.0, 0x7e}, {-448.0, 0xfe},                  // the largest finite
        {464.0, 0x7e}, {500.0, 0x7e}, {1e30, 0x7e},     // satfinite: clamped
        {INFINITY, 0x7e}, {-INFINITY, 0xfe},
        {0x1p-9, 0x01}, {0x7p-9, 0x07}, {0x1p-6, 0x08},  // subnormals, the smallest normal
        {0x1p-10, 0x00}, {0x3p-10, 0x02}, {7.5 * 0x1p-9, 0x08}, // ties to even
        {1.0625, 0x38}, {1.1875, 0x3a}, {1.1, 0x39},
    };
    for (auto &t : e4m3)
        CHECK(emu_encode(EMU_E4M3, t.x, true) == t.code, "e4m3(%g) = 0x%02x, want 0x%02x", t.x, emu_encode(EMU_E4M3, t.x, true), t.code);
    CHECK(emu_encode(EMU_E4M3, NAN, true) == 0x7f, "e4m3(NaN)");
    CHECK(isnan(emu_decode(EMU_E4M3, 0x7f)) && isnan(emu_decode(EMU_E4M3, 0xff)), "e4m3 NaN codes");
    CHECK(emu_decode(EMU_E4M3, 0x7e) == 448.0 && emu_decode(EMU_E4M3, 0x01) == 0x1p-9 && emu_decode(EMU_E4M3, 0xb8) == -1.0, "e4m3 decode");
    int nans = 0;
    for (uint32_t c = 0; c < 256; c++) {
        double v = emu_decode(EMU_E4M3, c);
        if (isnan(v)) { nans++; continue; }
        CHECK(!isinf(v) && emu_encode(EMU_E4M3, v, true) == c, "e4m3 0x%02x round trip", c);
    }
    CHECK(nans == 2, "e4m3 has %d NaN codes", nans);
    struct { double x; uint32_t code; } e5m2[] = {
        {1.0, 0x3c}, {57344.0, 0x7b}, {1e9, 0x7b}, {INFINITY, 0x7b}, {-INFINITY, 0xfb}, {0x1p-16, 0x01},
    };
    for (auto &t : e5m2)
        CHECK(emu_encode(EMU_E5M2, t.x, true) == t.code, "e5m2(%g) = 0x%02x, want 0x%02x", t.x, emu_encode(EMU_E5M2, t.x, true), t.code);
    CHECK(isinf(emu_decode(EMU_E5M2, 0x7c)) && isnan(emu_decode(EMU_E5M2, 0x7d)) && emu_encode(EMU_E5M2, NAN, true) == 0x7f, "e5m2 specials");
    CHECK(emu_encode(EMU_F16, 65520.0, false) == 0x7c00 && emu_encode(EMU_F16, 65504.0, false) == 0x7bff, "f16 overflow");
    CHECK(emu_encode(EMU_BF16, 1.0, false) == 0x3f80 && emu_encode(EMU_BF16, NAN, false) == 0x7fff, "bf16");

    // the instructions: the first source is the high half
    uint16_t h = 0; float a = 1.0f, b = 448.0f;
    emu_asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;", {EMU_OUT(h), EMU_IN(a), EMU_IN(b)});
    CHECK(h == 0x387e, "cvt.rn.satfinite.e4m3x2.f32 = 0x%04x", h);
    float big = -1000.0f, tiny = 0x1p-12f;
    emu_asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;", {EMU_OUT(h), EMU_IN(big), EMU_IN(tiny)});
    CHECK(h == 0xfe00, "cvt e4m3x2 saturates and flushes: 0x%04x", h);
    uint32_t f = 0; uint16_t in = 0x387e;
    emu_asm("cvt.rn.f16x2.e4m3x2 %0, %1;", {EMU_OUT(f), EMU_IN(in)});
    CHECK(f == 0x3c005f00, "cvt.rn.f16x2.e4m3x2 = 0x%08x", f); // 1.0, 448
    // a 32-bit word into its 16-bit halves, each then widened
    uint32_t f0 = 0, f1 = 0, four = 0xb8387e01;
    emu_asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }",
            {EMU_OUT(f0), EMU_OUT(f1), EMU_IN(four)});
    CHECK(f0 == 0x5f001800 && f1 == 0xbc003c00, "mov.b32 {l, h}: 0x%08x 0x%08x", f0, f1); // 2^-9, 448; 1, -1
    uint32_t hf = 0x3c005f00;
    emu_asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;", {EMU_OUT(h), EMU_IN(hf)});
    CHECK(h == 0x387e, "cvt.rn.satfinite.e4m3x2.f16x2 = 0x%04x", h);
    float hi = 1.0f, lo = -2.0f;
    emu_asm("cvt.rn.bf16x2.f32 %0, %1, %2;", {EMU_OUT(f), EMU_IN(hi), EMU_IN(lo)});
    CHECK(f == 0x3f80c000, "cvt.rn.bf16x2.f32 = 0x%08x", f);
    // prmt: bytes of {b, a} by selector nibble, bit 3 of a nibble
    // replicating the byte's sign
    uint32_t pa = 0x80ff7f01, pb = 0x44332211, sel = 0x9b40, pd = 0;
    emu_asm("prmt.b32 %0, %1, %2, %3;", {EMU_OUT(pd), EMU_IN(pa), EMU_IN(pb), EMU_IN(sel)});
    CHECK(pd == 0x00ff1101, "prmt.b32 = 0x%08x", pd);
    // fma.rn.bf16x2: 2^-133 (a subnormal) x 2^120, and 3 x 1 + 2^-8 rounded
    // once (to even: 3)
    uint32_t fx = 0x00014040, fy = 0x7b803f80, fz = 0x80003b80, fd = 0;
    emu_asm("fma.rn.bf16x2 %0, %1, %2, %3;", {EMU_OUT(fd), EMU_IN(fx), EMU_IN(fy), EMU_IN(fz)});
    CHECK(fd == 0x39004040, "fma.rn.bf16x2 = 0x%08x", fd);
}

// ---- mma.sync -----------------------------------------------------------
// One warp: D (16 x 8) = C + A (16 x K) B (K x 8), codes of `fmt`, the
// fragments built from the PTX ISA's tables (groupID g = lane / 4,
// threadID_in_group t = lane % 4): 16-bit (k16): a_i row g (+ 8 for
// i % 4 >= 2), column 2t + i % 2 (+ 8 for i >= 4); b_i row 2t + i % 2
// (+ 8 for i >= 2), column g.  8-bit (k32): a_i row g (+ 8 for
// i % 8 >= 4), column 4t + i % 4 (+ 16 for i >= 8); b_i row 4t + i % 4
// (+ 16 for i >= 4), column g.  Two elements (four) a 32-bit register.
struct mma_p { const uint16_t *A, *B; float *D; int bits; const char *tmpl; };
static void k_mma(mma_p p) {
    const int l = threadIdx.x, g = l / 4, t = l % 4, e = 32 / p.bits, K = 8 * e;
    uint32_t a[4] = {}, b[2] = {};
    for (int i = 0; i < 4 * e; i++) {
        int row = e == 2 ? g + 8 * (i % 4 >= 2) : g + 8 * (i % 8 >= 4);
        int col = e == 2 ? 2 * t + i % 2 + 8 * (i >= 4) : 4 * t + i % 4 + 16 * (i >= 8);
        a[i / e] |= (uint32_t)p.A[row * K + col] << (p.bits * (i % e));
    }
    for (int i = 0; i < 2 * e; i++) {
        int k = e == 2 ? 2 * t + i % 2 + 8 * (i >= 2) : 4 * t + i % 4 + 16 * (i >= 4);
        b[i / e] |= (uint32_t)p.B[k * 8 + g] << (p.bits * (i % e));
    }
    float c[4];
    for (int i = 0; i < 4; i++) c[i] = 0.25f * (float)(i + l % 3);
    emu_asm(p.tmpl, {EMU_INOUT(c[0]), EMU_INOUT(c[1]), EMU_INOUT(c[2]), EMU_INOUT(c[3]),
                     EMU_IN(a[0]), EMU_IN(a[1]), EMU_IN(a[2]), EMU_IN(a[3]), EMU_IN(b[0]), EMU_IN(b[1])});
    for (int i = 0; i < 4; i++) p.D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = c[i];
}

static std::mt19937 rng(12345);
static uint32_t code_of(emu_fmt f) { // a random finite code, |v| <= 2
    for (;;) {
        uint32_t c = emu_fmt_bits(f) == 8 ? rng() & 0xff : emu_encode(f, std::uniform_real_distribution<double>(-2, 2)(rng), false);
        double v = emu_decode(f, c);
        if (!isnan(v) && fabs(v) <= 2) return c;
    }
}

static void t_mma(emu_fmt f, const char *tmpl) {
    const int bits = emu_fmt_bits(f), K = 256 / bits;
    std::vector<uint16_t> A(16 * K), B(K * 8);
    for (auto &x : A) x = (uint16_t)code_of(f);
    for (auto &x : B) x = (uint16_t)code_of(f);
    std::vector<float> D(128, NAN);
    emu_launch_grid(k_mma, mma_p{A.data(), B.data(), D.data(), bits, tmpl}, dim3e{1, 1, 1}, 32, 0);
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            const int lane = (r % 8) * 4 + n / 2, i = 2 * (r / 8) + n % 2; // C's
            double want = 0.25 * (i + lane % 3);
            for (int k = 0; k < K; k++) want += emu_decode(f, A[r * K + k]) * emu_decode(f, B[k * 8 + n]);
            if (fabs(D[r * 8 + n] - want) > 1e-6 * (fabs(want) + 1)) bad++;
        }
    CHECK(bad == 0, "%s: %d of 128 wrong", tmpl, bad);
}

// ---- wgmma --------------------------------------------------------------
// The canonical shared-memory layouts of an operand (PTX ISA, matrix
// descriptor), row by row: `mn` its M or N index, k its K index, `size`
// bytes an element; S the swizzle width in 16-byte units (8, 4, 2; 1
// without).  The swizzle as rows see it: unit u of row r of an 8-row atom
// sits at unit u ^ (r / (8 / S)) (the atom 1024-byte aligned).
struct layout { bool kmajor; int S; uint32_t lbo, sbo; };
static uint32_t place(const layout &L, int mn, int k, int size) {
    if (L.kmajor) {
        const uint32_t kb = k * size, row = 16 * L.S;
        if (L.S == 1) return (mn / 8) * L.sbo + (kb / 16) * L.lbo + (mn % 8) * 16 + kb % 16;
        const uint32_t u = (kb % row) / 16, su = u ^ ((mn % 8) / (8 / L.S));
        return (mn / 8) * L.sbo + (kb / row) * L.lbo + (mn % 8) * row + su * 16 + kb % 16;
    }
    const uint32_t nb = mn * size, row = 16 * L.S;
    if (L.S == 1) return (nb / 16) * L.sbo + (k / 8) * L.lbo + (k % 8) * 16 + nb % 16;
    const uint32_t u = (nb % row) / 16, su = u ^ ((k % 8) / (8 / L.S));
    return (nb / row) * L.lbo + (k / 8) * L.sbo + (k % 8) * row + su * 16 + nb % 16;
}
static uint64_t desc(uint32_t addr, const layout &L) {
    const uint64_t type = L.S == 8 ? 1 : L.S == 4 ? 2 : L.S == 2 ? 3 : 0;
    return (addr >> 4) | (uint64_t)(L.lbo >> 4) << 16 | (uint64_t)(L.sbo >> 4) << 32 | type << 62;
}

// "{ .reg .pred p; setp.ne.b32 p, %<last>, 0; wgmma... {%0..}, A, %b, p,
// 1, 1[, trans]; }": A a descriptor %a with trans "%ta, %tb", or (rs) four
// registers {%a0..%a3} with trans "%tb" alone; the predicate's operand last.
static std::string wg_tmpl(int N, const char *types, bool trans, bool rs = false) {
    const int nd = N / 2, na = rs ? 4 : 1, nt = trans ? (rs ? 1 : 2) : 0;
    std::string s = "{ .reg .pred p; setp.ne.b32 p, %" + std::to_string(nd + na + 1 + nt) + ", 0; wgmma.mma_async.sync.aligned.m64n" +
                    std::to_string(N) + "k" + (strstr(types, "e4m3") ? "32" : "16") + ".f32." + types + " {";
    for (int i = 0; i < nd; i++) s += (i ? ", %" : "%") + std::to_string(i);
    s += "}, ";
    if (rs) s += "{";
    for (int i = 0; i < na; i++) s += (i ? ", %" : "%") + std::to_string(nd + i);
    if (rs) s += "}";
    s += ", %" + std::to_string(nd + na) + ", p, 1, 1";
    for (int i = 0; i < nt; i++) s += ", %" + std::to_string(nd + na + 1 + i);
    return s + "; }";
}

// This thread's accumulator fragment into D (64 x N): d[4 j + 2 h + e]
// is D[16 w + l / 4 + 8 h][8 j + 2 (l % 4) + e].
static void wg_store_d(float *D, int N, const float *d) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    for (int j = 0; j < N / 8; j++)
        for (int h = 0; h < 2; h++)
            for (int e = 0; e < 2; e++) D[(16 * w + l / 4 + 8 * h) * N + 8 * j + 2 * (l % 4) + e] = d[4 * j + 2 * h + e];
}

// Matrix X (rows x K codes of `size` bytes) into the shared image at
// address base, laid out by l.
static void wg_place(std::vector<unsigned char> &img, uint32_t base, layout l, const std::vector<uint32_t> &X, int rows, int K, int size) {
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < K; k++) memcpy(&img[base - EMU_SMEM_DYN + place(l, r, k, size)], &X[r * K + k], size);
}

// How many of D's 64 x N entries differ from A B^T (exact sums).
static int wg_wrong(const std::vector<float> &D, const std::vector<uint32_t> &A, const std::vector<uint32_t> &B, int N, int K, emu_fmt f) {
    int wrong = 0;
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < N; n++) {
            double want = 0;
            for (int k = 0; k < K; k++) want += emu_decode(f, A[m * K + k]) * emu_decode(f, B[n * K + k]);
            if (fabs(D[m * N + n] - want) > 1e-6 * (fabs(want) + 1)) wrong++;
        }
    return wrong;
}

struct wg_p {
    const std::vector<unsigned char> *img; // the shared memory image
    const char *tmpl; int N, steps, ta, tb; bool trans;
    uint64_t da, db; uint32_t astep, bstep; // descriptor start per k step, bytes
    float *D;                               // 64 x N
};
static void k_wg(wg_p p) {
    unsigned char *sm = emu_dyn_smem;
    if (threadIdx.x == 0) memcpy(sm, p.img->data(), p.img->size());
    __syncthreads();
    float d[128];
    for (int i = 0; i < 128; i++) d[i] = 7.0f; // scale-d = 0 ignores it
    emu_asm("wgmma.fence.sync.aligned;", {});
    for (int s = 0; s < p.steps; s++) {
        std::vector<emu_opnd> o;
        for (int i = 0; i < p.N / 2; i++) o.push_back(EMU_INOUT(d[i]));
        uint64_t da = p.da + (s * p.astep >> 4), db = p.db + (s * p.bstep >> 4);
        int acc = s > 0;
        o.push_back(EMU_IN(da)); o.push_back(EMU_IN(db));
        if (p.trans) { o.push_back(EMU_IN(p.ta)); o.push_back(EMU_IN(p.tb)); }
        o.push_back(EMU_IN(acc));
        emu_asm(p.tmpl, o.data(), o.size());
    }
    emu_asm("wgmma.commit_group.sync.aligned;", {});
    emu_asm("wgmma.wait_group.sync.aligned 0;", {});
    wg_store_d(p.D, p.N, d);
}

// D = A B^T (A 64 x K, B N x K logical) through wgmma, A and B placed
// with layouts la and lb, `steps` k steps of 32 bytes.
static void t_wgmma(int N, emu_fmt f, layout la, layout lb, int steps, const char *what) {
    const int size = emu_fmt_bits(f) / 8, K = 32 / size * steps;
    const bool trans = size == 2;
    const std::string tmpl = wg_tmpl(N, f == EMU_BF16 ? "bf16.bf16" : "e4m3.e4m3", trans);
    std::vector<uint32_t> A(64 * K), B(N * K);
    for (auto &x : A) x = code_of(f);
    for (auto &x : B) x = code_of(f);
    // A at shared offset 1008 (address 1024, 1024-aligned), B at +32768
    const uint32_t a0 = 1024, b0 = 1024 + 32768;
    std::vector<unsigned char> img(b0 + 65536 - EMU_SMEM_DYN, 0);
    wg_place(img, a0, la, A, 64, K, size);
    wg_place(img, b0, lb, B, N, K, size);
    // the start of k step s: where element k = s * 32 / size of row 0 is
    const int ks = 32 / size;
    uint32_t astep = place(la, 0, ks, size) - place(la, 0, 0, size), bstep = place(lb, 0, ks, size) - place(lb, 0, 0, size);
    if (!la.kmajor) astep = place(la, 0, ks, size); // MN-major: 16 k rows on
    if (!lb.kmajor) bstep = place(lb, 0, ks, size);
    std::vector<float> D(64 * N, NAN);
    wg_p p{&img, tmpl.c_str(), N, steps, !la.kmajor, !lb.kmajor, trans, desc(a0, la), desc(b0, lb), astep, bstep, D.data()};
    emu_launch_grid(k_wg, p, dim3e{1, 1, 1}, 128, (unsigned)img.size());
    const int bad = wg_wrong(D, A, B, N, K, f);
    CHECK(bad == 0, "wgmma %s: %d of %d wrong", what, bad, 64 * N);
}

// ---- errors -------------------------------------------------------------
// fn must make the emulator abort with a message that contains `want`.
template <class F> static void expect_die(const char *want, F fn) {
    int fd[2];
    if (pipe(fd)) { perror("pipe"); exit(2); }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2); close(fd[0]);
        fn();
        _exit(0);
    }
    close(fd[1]);
    std::string err; char buf[512]; ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) > 0) err.append(buf, n);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && err.find(want) != std::string::npos, "expected an abort with \"%s\", got status %d: %s", want, st, err.c_str());
}

enum bad_kind { BAD_NOFENCE, BAD_ACC_WRITE, BAD_RESERVED, BAD_INFLIGHT_EXIT, BAD_CP_NOWAIT, BAD_NOT_UNIFORM, BAD_STMATRIX_RACE, BAD_NO_PROXY_FENCE, BAD_STSHARED_NO_FENCE, BAD_DEADLOCK, BAD_HALF_ARRIVED };
struct bad_p { bad_kind kind; const char *tmpl; };
// WG0 runs one wgmma over zeroed operands; WG1 only writes (the race kinds)
static void k_bad(bad_p p) {
    unsigned char *sm = emu_dyn_smem;
    const uint32_t base = 1024; // shared address of a 1024-aligned 8 KB operand
    if (threadIdx.x == 0) memset(sm, 0, 16384);
    __syncthreads();
    if (threadIdx.x / 32 == 4 && (p.kind == BAD_STMATRIX_RACE || p.kind == BAD_NO_PROXY_FENCE)) { // A's rows
        uint32_t addr = base + 128 * (threadIdx.x % 32), r = 0;
        emu_asm("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};", {EMU_IN(addr), EMU_IN(r), EMU_IN(r), EMU_IN(r), EMU_IN(r)});
        if (p.kind == BAD_STMATRIX_RACE) emu_asm("fence.proxy.async.shared::cta;", {});
    }
    if (threadIdx.x / 32 == 4 && p.kind == BAD_STSHARED_NO_FENCE) { // A's first rows
        uint32_t addr = base + 16 * (threadIdx.x % 32), r = 0;
        emu_asm("st.shared.v4.b32 [%0], {%1, %2, %3, %4};", {EMU_IN(addr), EMU_IN(r), EMU_IN(r), EMU_IN(r), EMU_IN(r)});
    }
    if (p.kind == BAD_NO_PROXY_FENCE || p.kind == BAD_STSHARED_NO_FENCE) __syncthreads();
    if (p.kind == BAD_DEADLOCK && threadIdx.x < 128) emu_asm("bar.sync 2, 256;", {}); // WG1 never comes
    if (p.kind == BAD_HALF_ARRIVED && threadIdx.x >= 128) emu_asm("bar.arrive 3, 256;", {}); // nobody syncs
    if (threadIdx.x >= 128) return;
    const layout L{true, 8, 16, 1024};
    uint64_t da = desc(base, L), db = desc(base + 8192, L);
    if (p.kind == BAD_RESERVED) db |= 1ull << 14;
    if (p.kind == BAD_NOT_UNIFORM && threadIdx.x == 5) db += 2;
    if (p.kind == BAD_CP_NOWAIT) { // a cp.async into B, no wait
        static const uint32_t src[4] = {};
        uint32_t dst = base + 8192 + 16 * threadIdx.x;
        int bytes = 16;
        const void *ps = src;
        emu_asm("cp.async.cg.shared.global [%0], [%1], 16, %2;", {EMU_IN(dst), EMU_IN(ps), EMU_IN(bytes)});
        emu_asm("cp.async.commit_group;", {});
        emu_asm("bar.sync 1, 128;", {});
    }
    float d[32] = {};
    if (p.kind != BAD_NOFENCE) emu_asm("wgmma.fence.sync.aligned;", {});
    std::vector<emu_opnd> o;
    for (int i = 0; i < 32; i++) o.push_back(EMU_INOUT(d[i]));
    int t = 0, acc = 1;
    o.push_back(EMU_IN(da)); o.push_back(EMU_IN(db)); o.push_back(EMU_IN(t)); o.push_back(EMU_IN(t)); o.push_back(EMU_IN(acc));
    emu_asm(p.tmpl, o.data(), o.size());
    emu_asm("wgmma.commit_group.sync.aligned;", {});
    if (p.kind == BAD_INFLIGHT_EXIT) return;
    if (p.kind == BAD_ACC_WRITE) d[3] = 1.0f;
    emu_asm("wgmma.wait_group.sync.aligned 0;", {});
    if (p.kind == BAD_CP_NOWAIT) emu_asm("cp.async.wait_all;", {});
}

static void t_errors() {
    static const std::string tmpl = wg_tmpl(64, "bf16.bf16", true);
    auto run = [](bad_kind k) { emu_race_on = true; emu_launch_grid(k_bad, bad_p{k, tmpl.c_str()}, dim3e{1, 1, 1}, 256, 20000); };
    expect_die("without a wgmma.fence", [&] { run(BAD_NOFENCE); });
    expect_die("was written before its wgmma.wait_group", [&] { run(BAD_ACC_WRITE); });
    expect_die("reserved bits", [&] { run(BAD_RESERVED); });
    expect_die("still in flight when the thread exits", [&] { run(BAD_INFLIGHT_EXIT); });
    expect_die("may not have written yet", [&] { run(BAD_CP_NOWAIT); });
    expect_die("differs from what the warpgroup's other threads issued", [&] { run(BAD_NOT_UNIFORM); });
    expect_die("race: ", [&] { run(BAD_STMATRIX_RACE); });
    expect_die("without a fence.proxy.async", [&] { run(BAD_NO_PROXY_FENCE); });
    expect_die("without a fence.proxy.async", [&] { run(BAD_STSHARED_NO_FENCE); });
    expect_die("deadlock", [&] { run(BAD_DEADLOCK); });
    expect_die("arrived at named barrier 3 that never completed", [&] { run(BAD_HALF_ARRIVED); });
    emu_race_on = true;
    emu_launch_grid(k_bad, bad_p{(bad_kind)-1, tmpl.c_str()}, dim3e{1, 1, 1}, 256, 20000); // the same, correct, runs
    emu_race_on = false;
    // an L2 prefetch names a byte of a registered buffer, or dies
    static unsigned char buf[640];
    emu_global_ranges = {{buf, sizeof buf}};
    auto prefetch = [](const void *p) { emu_asm("prefetch.global.L2 [%0];", {EMU_IN(p)}); };
    prefetch(buf);
    prefetch(buf + sizeof buf - 1);
    expect_die("prefetch.global.L2 names a byte outside every buffer", [&] { prefetch(buf + sizeof buf); });
    emu_global_ranges.clear();
}

// ---- wgmma with A in registers -----------------------------------------
struct wgrs_p {
    const std::vector<unsigned char> *img; // B's shared memory image
    const char *tmpl; int N, steps, bits, tb; bool trans, bad;
    const uint32_t *A; int K;              // 64 x K codes, K over all steps
    uint64_t db; uint32_t bstep;           // B's descriptor start per k step, bytes
    float *D;                              // 64 x N
};
// A's fragment, from the PTX ISA's figures for wgmma's A in registers
// (each warp's 16 rows as mma.sync's A): thread (warp w, lane l, g = l / 4,
// q = l % 4), register r, element i (lowest bits first) is, in k step s,
//   8-bit  A[16 w + g + 8 (r % 2)][32 s + 4 q + i + 16 (r / 2)]
//   16-bit A[16 w + g + 8 (r % 2)][16 s + 2 q + i + 8 (r / 2)]
// With `bad`, one thread writes a register of A between the issue and the
// wait.
static void k_wgrs(wgrs_p p) {
    unsigned char *sm = emu_dyn_smem;
    if (threadIdx.x == 0) memcpy(sm, p.img->data(), p.img->size());
    __syncthreads();
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, q = l % 4, e = 32 / p.bits, ks = 8 * e;
    uint32_t a[4][4] = {};
    for (int s = 0; s < p.steps; s++)
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < e; i++) {
                const int m = 16 * w + g + 8 * (r % 2), k = ks * s + (e == 4 ? 4 * q + i + 16 * (r / 2) : 2 * q + i + 8 * (r / 2));
                a[s][r] |= p.A[m * p.K + k] << (p.bits * i);
            }
    float d[128];
    for (int i = 0; i < 128; i++) d[i] = 7.0f; // scale-d = 0 ignores it
    emu_asm("wgmma.fence.sync.aligned;", {});
    for (int s = 0; s < p.steps; s++) {
        std::vector<emu_opnd> o;
        for (int i = 0; i < p.N / 2; i++) o.push_back(EMU_INOUT(d[i]));
        for (int r = 0; r < 4; r++) o.push_back(EMU_IN(a[s][r])); // variables, as a kernel's "r" operands
        uint64_t db = p.db + (s * p.bstep >> 4);
        int acc = s > 0;
        o.push_back(EMU_IN(db));
        if (p.trans) o.push_back(EMU_IN(p.tb));
        o.push_back(EMU_IN(acc));
        emu_asm(p.tmpl, o.data(), o.size());
    }
    emu_asm("wgmma.commit_group.sync.aligned;", {});
    if (p.bad && threadIdx.x == 37) a[0][2] ^= 1;
    emu_asm("wgmma.wait_group.sync.aligned 0;", {});
    wg_store_d(p.D, p.N, d);
}

// D = A B^T (A 64 x K in registers, B N x K logical in shared memory with
// layout lb), `steps` k steps of 32 bytes, under both wgmma modes.  A's
// elements are distinct where the format has the codes for it (bf16:
// all 64 K of them), else within each row (e4m3), and never 0: an
// element taken from the wrong thread, register or byte changes the sums.
// With `bad`, the launch must abort with the error of a written A register.
static void t_wgmma_rs(int N, emu_fmt f, layout lb, int steps, bool bad, const char *what) {
    const int size = emu_fmt_bits(f) / 8, K = 32 / size * steps;
    const bool trans = size == 2;
    const std::string tmpl = wg_tmpl(N, f == EMU_BF16 ? "bf16.bf16" : "e4m3.e4m3", trans, true);
    std::vector<uint32_t> pool;
    for (uint32_t c = 0; c < 1u << (8 * size); c++) {
        const double v = emu_decode(f, c);
        if (!isnan(v) && v != 0 && fabs(v) <= 2) pool.push_back(c);
    }
    std::vector<uint32_t> A(64 * K), B(N * K);
    const bool all = pool.size() >= A.size();
    for (int m = 0; m < 64; m++) {
        if (!all || m == 0) std::shuffle(pool.begin(), pool.end(), rng);
        for (int k = 0; k < K; k++) A[m * K + k] = pool[all ? m * K + k : k];
    }
    for (auto &x : B) x = code_of(f);
    const uint32_t b0 = 1024; // 1024-aligned
    std::vector<unsigned char> img(b0 + 65536 - EMU_SMEM_DYN, 0);
    wg_place(img, b0, lb, B, N, K, size);
    const uint32_t bstep = place(lb, 0, 32 / size, size) - place(lb, 0, 0, size);
    const int mode = emu_wg_eager;
    for (int eager = 0; eager < 2; eager++) {
        emu_wg_eager = eager;
        std::vector<float> D(64 * N, NAN);
        wgrs_p p{&img, tmpl.c_str(), N, steps, 8 * size, 0, trans, bad, A.data(), K, desc(b0, lb), bstep, D.data()};
        if (bad) {
            expect_die("an A register of a wgmma in flight was written before its wgmma.wait_group",
                       [&] { emu_launch_grid(k_wgrs, p, dim3e{1, 1, 1}, 128, (unsigned)img.size()); });
            continue;
        }
        emu_launch_grid(k_wgrs, p, dim3e{1, 1, 1}, 128, (unsigned)img.size());
        const int wrong = wg_wrong(D, A, B, N, K, f);
        CHECK(wrong == 0, "wgmma RS %s (%s): %d of %d wrong", what, eager ? "eager" : "lazy", wrong, 64 * N);
    }
    emu_wg_eager = mode;
}

int main() {
    t_formats();
    t_mma(EMU_BF16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};");
    t_mma(EMU_E4M3, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};");
    const layout k128{true, 8, 16, 1024}, k64{true, 4, 16, 512}, k32{true, 2, 16, 256}, kint{true, 1, 128, 512};
    const layout mn128{false, 8, 4096, 1024}, mn64{false, 4, 2048, 512}, mnint{false, 1, 1024, 128};
    t_wgmma(64, EMU_BF16, k128, k128, 4, "bf16 K-major 128B x K-major 128B");
    t_wgmma(64, EMU_BF16, k64, k32, 1, "bf16 K-major 64B x K-major 32B");
    t_wgmma(64, EMU_BF16, kint, kint, 2, "bf16 K-major interleaved");
    t_wgmma(256, EMU_BF16, k128, mn128, 2, "bf16 K-major x MN-major 128B, n256");
    t_wgmma(64, EMU_BF16, mn64, mnint, 2, "bf16 MN-major 64B x MN-major interleaved");
    t_wgmma(64, EMU_E4M3, k128, k128, 4, "e4m3 K-major 128B");
    t_wgmma(128, EMU_E4M3, k32, kint, 1, "e4m3 K-major 32B x interleaved, n128");
    t_wgmma_rs(64, EMU_E4M3, k64, 2, false, "m64n64k32 e4m3, B K-major 64B");
    t_wgmma_rs(64, EMU_BF16, k128, 4, false, "m64n64k16 bf16, B K-major 128B");
    t_wgmma_rs(64, EMU_BF16, k128, 1, true, "bf16, an A register written before the wait");
    t_errors();
    printf("t_ptx: %d checks, %d failed  %s\n", checks, fails, fails ? "FAIL" : "ok");
    return fails != 0;
}
