// emu_types.h: the element formats of the tensor-core and conversion
// instructions, as the PTX ISA defines them: a name in an opcode
// (".bf16", ".e4m3") to a format, its width, decoding to double, and
// round-to-nearest-even encoding (satfinite where PTX asks for it).
//   bf16  1 sign, 8 exponent bits (bias 127), 7 mantissa bits
//   f16   1, 5 (bias 15), 10; infinities, NaN
//   e4m3  1, 4 (bias 7), 3; no infinities, NaN = S.1111.111, max 448
//   e5m2  1, 5 (bias 15), 2; infinities, NaN, max 57344
#pragma once

enum emu_fmt { EMU_FMT_BAD, EMU_BF16, EMU_F16, EMU_E4M3, EMU_E5M2, EMU_F32 };

static inline emu_fmt emu_fmt_of(const std::string &s) {
    if (s == "bf16") return EMU_BF16;
    if (s == "f16") return EMU_F16;
    if (s == "e4m3") return EMU_E4M3;
    if (s == "e5m2") return EMU_E5M2;
    if (s == "f32") return EMU_F32;
    return EMU_FMT_BAD;
}
static inline int emu_fmt_bits(emu_fmt f) { return f == EMU_F32 ? 32 : f == EMU_E4M3 || f == EMU_E5M2 ? 8 : 16; }

// exponent and mantissa widths of the small formats
static inline void emu_fmt_widths(emu_fmt f, int &eb, int &mb) {
    switch (f) {
    case EMU_BF16: eb = 8; mb = 7; return;
    case EMU_F16: eb = 5; mb = 10; return;
    case EMU_E4M3: eb = 4; mb = 3; return;
    case EMU_E5M2: eb = 5; mb = 2; return;
    default: emu_die("no small format", std::to_string((int)f));
    }
}

static inline double emu_decode(emu_fmt f, uint32_t code) {
    if (f == EMU_F32) return __uint_as_float(code);
    int eb, mb;
    emu_fmt_widths(f, eb, mb);
    const int bias = (1 << (eb - 1)) - 1, emax = (1 << eb) - 1;
    const int e = (code >> mb) & emax;
    const uint32_t m = code & ((1u << mb) - 1);
    const double sign = (code >> (eb + mb)) & 1 ? -1.0 : 1.0;
    if (f == EMU_E4M3) {
        if (e == emax && m == (1u << mb) - 1) return NAN;
    } else if (e == emax) {
        return m ? NAN : sign * INFINITY;
    }
    const double frac = (double)m / (1 << mb);
    return sign * (e ? ldexp(1.0 + frac, e - bias) : ldexp(frac, 1 - bias));
}

// |x| (finite) rounded to nearest even in a format of eb exponent and mb
// mantissa bits, as its magnitude code: exponent field and mantissa
// together, subnormals included, past the largest finite value whenever
// it rounds there (the caller saturates or makes it infinite).
static inline uint32_t emu_round_code(double ax, int eb, int mb) {
    if (ax == 0) return 0;
    const int bias = (1 << (eb - 1)) - 1, emin = 1 - bias;
    int e;
    frexp(ax, &e);
    e = std::max(e - 1, emin);                 // ax = q 2^(e - mb), q < 2^(mb + 1)
    const double q = nearbyint(ldexp(ax, mb - e)); // to nearest, ties to even
    // a subnormal (e = emin, q < 2^mb) is its q; a normal's exponent field
    // is e + bias, its mantissa q - 2^mb: both are ((e + bias - 1) << mb) + q,
    // which also carries q = 2^(mb + 1) into the next exponent
    const double code = ldexp((double)(e + bias - 1), mb) + q;
    return code > 0x7fffffff ? 0x7fffffffu : (uint32_t)code;
}

// f (float) to the format, round to nearest even.  satfinite: a finite
// value past the largest is the largest (e4m3 always, as PTX requires),
// an infinity too; NaN is the canonical NaN.
static inline uint32_t emu_encode(emu_fmt f, double x, bool satfinite) {
    int eb, mb;
    emu_fmt_widths(f, eb, mb);
    const uint32_t sign = signbit(x) ? 1u << (eb + mb) : 0;
    const uint32_t inf = ((1u << eb) - 1) << mb;
    // largest finite code: e4m3's top exponent holds values, less NaN's
    const uint32_t maxc = f == EMU_E4M3 ? (1u << (eb + mb)) - 2 : inf - 1;
    if (isnan(x)) return f == EMU_E4M3 ? 0x7f : f == EMU_E5M2 ? 0x7f : (inf | ((1u << mb) - 1));
    if (f == EMU_E4M3) satfinite = true;
    if (isinf(x)) return sign | (satfinite ? maxc : inf);
    uint32_t c = emu_round_code(fabs(x), eb, mb);
    if (c > maxc) c = satfinite ? maxc : inf;
    return sign | c;
}

static inline float emu_bf16(uint32_t h) { return __uint_as_float((h & 0xffffu) << 16); }
static inline uint32_t emu_to_bf16(float f) { return emu_encode(EMU_BF16, f, false); }

// One k-step of an MMA: the products prod[0 .. K-1] (exact in double)
// added to the accumulator c, exactly and rounded once to f32 (what an
// error bound must not lean on).  With 8-bit float operands (fp8) and
// EMU_FP8_ACC=B (docs/contract.md §3), as the FP8 wgmma of sm_90a was
// measured to add (B = 13; the FP8 mma.sync of sm_89 is reported to do
// the same): the products and c aligned to the largest exponent among
// them, each cut toward zero to B bits below it, then added.
static inline int emu_fp8_acc_bits() {
    static const int b = [] { const char *e = getenv("EMU_FP8_ACC"); return e ? atoi(e) : 0; }();
    return b;
}
static inline float emu_mma_step(const double *prod, int K, double c, bool fp8) {
    const int bits = fp8 ? emu_fp8_acc_bits() : 0;
    double acc = 0;
    if (!bits) {
        for (int k = 0; k < K; k++) acc += prod[k];
        return (float)(acc + c);
    }
    int e = c != 0 ? ilogb(c) : INT_MIN;
    for (int k = 0; k < K; k++)
        if (prod[k] != 0) e = std::max(e, ilogb(prod[k]));
    if (e == INT_MIN) return (float)c; // all zero (c may be -0)
    const double q = ldexp(1.0, e - bits);
    acc = trunc(c / q) * q;
    for (int k = 0; k < K; k++) acc += trunc(prod[k] / q) * q;
    return (float)acc;
}
