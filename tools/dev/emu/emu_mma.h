// emu_mma.h: the warp-level instructions: ldmatrix, stmatrix, mma.sync
// (m16n8k16 of 16-bit and m16n8k32 of 8-bit elements, f32 accumulators)
// and the packing conversions (cvt ... x2); and fma.rn.bf16x2, which
// widening e4m3 to bf16 ends with.  Each lane posts its operands
// to its warp's slots (emu_warp_post) and computes its own part of the
// result from everyone's.
#pragma once

// The lanes that hold element (r, k) of an mma.sync A fragment (m16 x K,
// row major) and (k, n) of a B fragment (K x n8, column major), as the PTX
// ISA lays out m16n8k16 for 16-bit and m16n8k32 for 8-bit types: e
// elements a 32-bit register, lane (r % 8) * 4 + (k % (K/2)) / e, A
// register r / 8 + 2 (k / (K/2)), B register k / (K/2), element k % e.
struct emu_frag_pos { int lane, reg, sub; };
static inline emu_frag_pos emu_frag_a(int r, int k, int K, int e) { return {(r % 8) * 4 + (k % (K / 2)) / e, r / 8 + 2 * (k / (K / 2)), k % e}; }
static inline emu_frag_pos emu_frag_b(int k, int n, int K, int e) { return {n * 4 + (k % (K / 2)) / e, k / (K / 2), k % e}; }

// "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": K and the A, B
// formats; false when it is not a shape this file knows.
static inline bool emu_mma_shape(const std::string &op, int &K, emu_fmt &fa, emu_fmt &fb) {
    char a[8], b[8], d[8], c[8];
    if (sscanf(op.c_str(), "mma.sync.aligned.m16n8k%d.row.col.%7[^.].%7[^.].%7[^.].%7s", &K, d, a, b, c) != 5) return false;
    fa = emu_fmt_of(a); fb = emu_fmt_of(b);
    if (strcmp(d, "f32") || strcmp(c, "f32") || !fa || !fb || fa == EMU_F32 || emu_fmt_bits(fa) != emu_fmt_bits(fb)) return false;
    return K == 256 / emu_fmt_bits(fa); // k16 for 16-bit, k32 for 8-bit
}

static inline bool emu_ptx_warp(emu_asm_state &s, const std::string &op, const std::vector<std::string> &a) {
    auto is = [&](const char *p) { return emu_is(op, p); };
    if (is("ldmatrix.sync.aligned.m8n8.")) {
        int n = op.find(".x4") != std::string::npos ? 4 : op.find(".x2") != std::string::npos ? 2 : 1;
        bool tr = op.find(".trans") != std::string::npos;
        std::vector<std::string> d = s.vec(a[0]);
        if ((int)d.size() != n) emu_die("ldmatrix register count", s.stmt);
        uint32_t addr = (uint32_t)s.get(a[1]);
        uint32_t (*sl)[8] = emu_warp_post(&addr, 1);
        int l = emu_lane();
        if (l < 8 * n) { // this lane's row address: its 16 bytes are read
            emu_smem_ptr(addr, 16, 16);
            emu_race_read(emu_blk->shadow, addr, 16, "ldmatrix");
        }
        for (int i = 0; i < n; i++) {
            uint32_t v;
            if (!tr) {
                const unsigned char *row = emu_smem_ptr(sl[8 * i + l / 4][0], 16, 16);
                memcpy(&v, row + 4 * (l % 4), 4);
            } else {
                uint16_t lo, hi;
                memcpy(&lo, emu_smem_ptr(sl[8 * i + 2 * (l % 4)][0], 16, 16) + 2 * (l / 4), 2);
                memcpy(&hi, emu_smem_ptr(sl[8 * i + 2 * (l % 4) + 1][0], 16, 16) + 2 * (l / 4), 2);
                v = lo | (uint32_t)hi << 16;
            }
            s.set(d[i], v);
        }
        return true;
    }
    if (is("stmatrix.sync.aligned.m8n8.")) {
        // the inverse of ldmatrix: register i of lane l holds row l / 4,
        // b16 columns 2 (l % 4) + {0, 1} of matrix i (.trans: the matrix
        // transposed); lanes 8i..8i+7 give the row addresses of matrix i
        int n = op.find(".x4") != std::string::npos ? 4 : op.find(".x2") != std::string::npos ? 2 : 1;
        bool tr = op.find(".trans") != std::string::npos;
        std::vector<std::string> r = s.vec(a[1]);
        if ((int)r.size() != n) emu_die("stmatrix register count", s.stmt);
        uint32_t mine[5] = {(uint32_t)s.get(a[0])};
        for (int i = 0; i < n; i++) mine[1 + i] = (uint32_t)s.get(r[i]);
        uint32_t (*sl)[8] = emu_warp_post(mine, 1 + n);
        int l = emu_lane();
        if (l < 8 * n) {
            int i = l / 8, j = l % 8; // row j of matrix i
            uint16_t row[8];
            for (int c = 0; c < 8; c++) {
                // element (j, c) of the stored matrix is fragment element
                // (j, c), or (c, j) when transposed
                int fr = tr ? c : j, fc = tr ? j : c;
                row[c] = (uint16_t)(sl[4 * fr + fc / 2][1 + i] >> (16 * (fc % 2)));
            }
            unsigned char *dst = emu_smem_ptr(mine[0], 16, 16);
            emu_race_write(emu_blk->shadow, mine[0], 16, false, "stmatrix");
            memcpy(dst, row, 16);
        }
        return true;
    }
    int K; emu_fmt fa, fb;
    if (is("mma.sync.") && emu_mma_shape(op, K, fa, fb)) {
        std::vector<std::string> d = s.vec(a[0]), av = s.vec(a[1]), bv = s.vec(a[2]), cv = s.vec(a[3]);
        if (d.size() != 4 || av.size() != 4 || bv.size() != 2 || cv.size() != 4) emu_die("mma.sync register count", s.stmt);
        uint32_t mine[6];
        for (int i = 0; i < 4; i++) mine[i] = (uint32_t)s.get(av[i]);
        for (int i = 0; i < 2; i++) mine[4 + i] = (uint32_t)s.get(bv[i]);
        float c[4];
        for (int i = 0; i < 4; i++) c[i] = s.getf(cv[i]);
        uint32_t (*sl)[8] = emu_warp_post(mine, 6);
        const int bits = emu_fmt_bits(fa), e = 32 / bits;
        const uint32_t msk = bits == 32 ? ~0u : (1u << bits) - 1;
        // D element i of lane l: row l/4 + 8 (i/2), column 2 (l%4) + i%2
        int l = emu_lane();
        for (int i = 0; i < 4; i++) {
            int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
            double prod[32];
            for (int k = 0; k < K; k++) {
                emu_frag_pos pa = emu_frag_a(row, k, K, e), pb = emu_frag_b(k, col, K, e);
                prod[k] = emu_decode(fa, (sl[pa.lane][pa.reg] >> (bits * pa.sub)) & msk)
                          * emu_decode(fb, (sl[pb.lane][4 + pb.reg] >> (bits * pb.sub)) & msk);
            }
            s.setf(d[i], emu_mma_step(prod, K, c[i], bits == 8));
        }
        return true;
    }
    // d = a b + c on each bf16 half, rounded once (subnormals kept)
    if (op == "fma.rn.bf16x2") {
        const uint32_t x = (uint32_t)s.get(a[1]), y = (uint32_t)s.get(a[2]), z = (uint32_t)s.get(a[3]);
        uint32_t d = 0;
        for (int i = 0; i < 2; i++) {
            auto half = [&](uint32_t v) { return emu_decode(EMU_BF16, v >> (16 * i) & 0xffff); };
            d |= emu_encode(EMU_BF16, half(x) * half(y) + half(z), false) << (16 * i);
        }
        s.set(a[0], d); return true;
    }
    // packing conversions: the first source goes to the high half
    if (op == "cvt.rn.bf16x2.f32" || op == "cvt.rn.f16x2.f32") {
        emu_fmt f = op == "cvt.rn.bf16x2.f32" ? EMU_BF16 : EMU_F16;
        s.set(a[0], emu_encode(f, s.getf(a[1]), false) << 16 | emu_encode(f, s.getf(a[2]), false)); return true;
    }
    if (op == "cvt.rn.satfinite.e4m3x2.f32" || op == "cvt.rn.satfinite.e5m2x2.f32") {
        emu_fmt f = op.find("e4m3") != std::string::npos ? EMU_E4M3 : EMU_E5M2;
        s.set(a[0], emu_encode(f, s.getf(a[1]), true) << 8 | emu_encode(f, s.getf(a[2]), true)); return true;
    }
    // two 8-bit values (low byte: the low half) to f16x2, exactly
    if (op == "cvt.rn.f16x2.e4m3x2" || op == "cvt.rn.f16x2.e5m2x2") {
        emu_fmt f = op.find("e4m3") != std::string::npos ? EMU_E4M3 : EMU_E5M2;
        uint32_t v = (uint32_t)s.get(a[1]);
        s.set(a[0], emu_encode(EMU_F16, emu_decode(f, v >> 8 & 0xff), false) << 16 | emu_encode(EMU_F16, emu_decode(f, v & 0xff), false));
        return true;
    }
    // one f16 (the low 16 bits of the source) to f32, exactly
    if (op == "cvt.f32.f16") { s.setf(a[0], (float)emu_decode(EMU_F16, (uint32_t)s.get(a[1]) & 0xffff)); return true; }
    // f16x2 to two 8-bit values, the high half to the high byte
    if (op == "cvt.rn.satfinite.e4m3x2.f16x2" || op == "cvt.rn.satfinite.e5m2x2.f16x2") {
        emu_fmt f = op.find("e4m3") != std::string::npos ? EMU_E4M3 : EMU_E5M2;
        uint32_t v = (uint32_t)s.get(a[1]);
        s.set(a[0], emu_encode(f, emu_decode(EMU_F16, v >> 16), true) << 8 | emu_encode(f, emu_decode(EMU_F16, v & 0xffff), true));
        return true;
    }
    return false;
}
