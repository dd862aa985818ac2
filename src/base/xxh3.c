/*
 * base/xxh3.c: XXH3-64 and XXH3-128 after the xxHash specification.
 *
 * Each function below is one section of the specification, in its order
 * and with its names (mixStep -> mix_step, finalMerge -> final_merge), so
 * the two can be read side by side.  The seed is always 0 here; it is kept
 * as a named constant in the formulas rather than simplified away, so that
 * every line still matches the text.
 *
 * The input is a span of up to two pieces, read as one sequence of bytes,
 * so that an entry's checksum covers preimage || payload without a copy.
 * Every read goes through in64()/in32()/in8() or stripe_at(), which handle
 * a read that straddles the two pieces.
 *
 * The helpers of the large-input loop are `inline`: at -O2 that is what
 * lets GCC fold them into it (about 10 GB/s instead of 2 on one core).
 */
#include <string.h>

#include "base/xxh3.h"

#define PRIME32_1 0x9E3779B1u
#define PRIME32_2 0x85EBCA77u
#define PRIME32_3 0xC2B2AE3Du
#define PRIME64_1 0x9E3779B185EBCA87ull
#define PRIME64_2 0xC2B2AE3D27D4EB4Full
#define PRIME64_3 0x165667B19E3779F9ull
#define PRIME64_4 0x85EBCA77C2B2AE63ull
#define PRIME64_5 0x27D4EB2F165667C5ull
#define PRIME_MX1 0x165667919E3779F9ull
#define PRIME_MX2 0x9FB21C651E98DF25ull

static const uint64_t seed = 0;

/* The specification's defaultSecret. */
#define SECRET_LEN 192
static const uint8_t secret[SECRET_LEN] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c,
    0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb,
    0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e,
    0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6,
    0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb,
    0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97,
    0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7,
    0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31,
    0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83,
    0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26,
    0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc,
    0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f,
    0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

/* Large inputs: 64-byte stripes, (SECRET_LEN - 64) / 8 = 16 a block. */
#define STRIPE_LEN 64
#define STRIPES_PER_BLOCK ((SECRET_LEN - 64) / 8)
#define BLOCK_LEN (STRIPE_LEN * STRIPES_PER_BLOCK)

/* ---- operations ------------------------------------------------------- */

static inline uint64_t
le64(const uint8_t *b)
{
    return (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 |
           (uint64_t)b[3] << 24 | (uint64_t)b[4] << 32 |
           (uint64_t)b[5] << 40 | (uint64_t)b[6] << 48 |
           (uint64_t)b[7] << 56;
}

static inline uint32_t
le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
           (uint32_t)b[3] << 24;
}

static inline uint64_t
secret64(size_t off)
{
    return le64(secret + off);
}

static inline uint32_t
secret32(size_t off)
{
    return le32(secret + off);
}

static uint64_t
rotl64(uint64_t x, int s)
{
    return x << s | x >> (64 - s);
}

static uint32_t
rotl32(uint32_t x, int s)
{
    return x << s | x >> (32 - s);
}

static uint32_t
bswap32(uint32_t x)
{
    return x >> 24 | (x >> 8 & 0xff00u) | (x << 8 & 0xff0000u) | x << 24;
}

static uint64_t
bswap64(uint64_t x)
{
    return (uint64_t)bswap32((uint32_t)x) << 32 | bswap32((uint32_t)(x >> 32));
}

/* (u128)a * (u128)b from four 32x32 -> 64 products. */
typedef struct {
    uint64_t low, high;
} u128;

static u128
mul128(uint64_t a, uint64_t b)
{
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32;
    uint64_t b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi;
    uint64_t hl = a_hi * b_lo, hh = a_hi * b_hi;
    /* At most 3 * (2^32 - 1): no overflow. */
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    u128 r;
    r.low = mid << 32 | (uint32_t)ll;
    r.high = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return r;
}

static uint64_t
mul128_fold64(uint64_t a, uint64_t b)
{
    u128 r = mul128(a, b);
    return r.low ^ r.high;
}

static uint64_t
avalanche(uint64_t x)
{
    x ^= x >> 37;
    x *= PRIME_MX1;
    x ^= x >> 32;
    return x;
}

static uint64_t
avalanche_xxh64(uint64_t x)
{
    x ^= x >> 33;
    x *= PRIME64_2;
    x ^= x >> 29;
    x *= PRIME64_3;
    x ^= x >> 32;
    return x;
}

/* ---- the input: one or two pieces ---------------------------------------- */

typedef struct {
    const uint8_t *piece[2];
    size_t piece_len[2];
    size_t len; /* piece_len[0] + piece_len[1] */
} span;

static span
span_of(const void *a, size_t a_len, const void *b, size_t b_len)
{
    span in;
    in.piece[0] = a;
    in.piece_len[0] = a_len;
    in.piece[1] = b;
    in.piece_len[1] = b_len;
    in.len = a_len + b_len;
    return in;
}

/* Copies n bytes of the input from offset off into dst. */
static void
span_copy(const span *in, size_t off, size_t n, uint8_t *dst)
{
    for (int i = 0; i < 2 && n > 0; i++) {
        if (off >= in->piece_len[i]) {
            off -= in->piece_len[i];
            continue;
        }
        size_t m = in->piece_len[i] - off;
        if (m > n)
            m = n;
        memcpy(dst, in->piece[i] + off, m);
        dst += m;
        n -= m;
        off = 0;
    }
}

/* The n input bytes at off: in place when one piece holds them all, else
 * copied into tmp (n bytes). */
static inline const uint8_t *
span_at(const span *in, size_t off, size_t n, uint8_t *tmp)
{
    size_t a = in->piece_len[0];
    if (off + n <= a)
        return in->piece[0] + off;
    if (off >= a && off - a + n <= in->piece_len[1])
        return in->piece[1] + (off - a);
    span_copy(in, off, n, tmp);
    return tmp;
}

static uint64_t
in64(const span *in, size_t off)
{
    uint8_t tmp[8];
    return le64(span_at(in, off, 8, tmp));
}

static uint32_t
in32(const span *in, size_t off)
{
    uint8_t tmp[4];
    return le32(span_at(in, off, 4, tmp));
}

static uint8_t
in8(const span *in, size_t off)
{
    uint8_t tmp[1];
    return *span_at(in, off, 1, tmp);
}

/* ---- small inputs (0-16 bytes) ------------------------------------------- */

static uint64_t
xxh3_64_empty(void)
{
    return avalanche_xxh64(seed ^ secret64(56) ^ secret64(64));
}

static kdt_xxh128
xxh3_128_empty(void)
{
    kdt_xxh128 h;
    h.low = avalanche_xxh64(seed ^ secret64(64) ^ secret64(72));
    h.high = avalanche_xxh64(seed ^ secret64(80) ^ secret64(88));
    return h;
}

static uint32_t
combined_1to3(const span *in)
{
    size_t len = in->len;
    return (uint32_t)in8(in, len - 1) | (uint32_t)len << 8 |
           (uint32_t)in8(in, 0) << 16 | (uint32_t)in8(in, len >> 1) << 24;
}

static uint64_t
xxh3_64_1to3(const span *in)
{
    uint32_t combined = combined_1to3(in);
    uint64_t value =
        ((uint64_t)(secret32(0) ^ secret32(4)) + seed) ^ (uint64_t)combined;
    return avalanche_xxh64(value);
}

static kdt_xxh128
xxh3_128_1to3(const span *in)
{
    uint32_t combined = combined_1to3(in);
    uint64_t low =
        ((uint64_t)(secret32(0) ^ secret32(4)) + seed) ^ (uint64_t)combined;
    uint64_t high = ((uint64_t)(secret32(8) ^ secret32(12)) - seed) ^
                    (uint64_t)rotl32(bswap32(combined), 13);
    kdt_xxh128 h;
    h.low = avalanche_xxh64(low);
    h.high = avalanche_xxh64(high);
    return h;
}

static uint64_t
modified_seed(void)
{
    return seed ^ ((uint64_t)bswap32((uint32_t)seed) << 32);
}

static uint64_t
xxh3_64_4to8(const span *in)
{
    size_t len = in->len;
    uint32_t input_first = in32(in, 0);
    uint32_t input_last = in32(in, len - 4);
    uint64_t combined = (uint64_t)input_last | (uint64_t)input_first << 32;
    uint64_t value =
        ((secret64(8) ^ secret64(16)) - modified_seed()) ^ combined;
    value ^= rotl64(value, 49) ^ rotl64(value, 24);
    value *= PRIME_MX2;
    value ^= (value >> 35) + len;
    value *= PRIME_MX2;
    value ^= value >> 28;
    return value;
}

static kdt_xxh128
xxh3_128_4to8(const span *in)
{
    size_t len = in->len;
    uint32_t input_first = in32(in, 0);
    uint32_t input_last = in32(in, len - 4);
    uint64_t combined = (uint64_t)input_first | (uint64_t)input_last << 32;
    uint64_t value =
        ((secret64(16) ^ secret64(24)) + modified_seed()) ^ combined;
    u128 m = mul128(value, PRIME64_1 + ((uint64_t)len << 2));
    uint64_t high = m.high, low = m.low;
    high += low << 1;
    low ^= high >> 3;
    low ^= low >> 35;
    low *= PRIME_MX2;
    low ^= low >> 28;
    kdt_xxh128 h;
    h.low = low;
    h.high = avalanche(high);
    return h;
}

static uint64_t
xxh3_64_9to16(const span *in)
{
    size_t len = in->len;
    uint64_t input_first = in64(in, 0);
    uint64_t input_last = in64(in, len - 8);
    uint64_t low = ((secret64(24) ^ secret64(32)) + seed) ^ input_first;
    uint64_t high = ((secret64(40) ^ secret64(48)) - seed) ^ input_last;
    u128 m = mul128(low, high);
    uint64_t value = len + bswap64(low) + high + (m.low ^ m.high);
    return avalanche(value);
}

static kdt_xxh128
xxh3_128_9to16(const span *in)
{
    size_t len = in->len;
    uint64_t input_first = in64(in, 0);
    uint64_t input_last = in64(in, len - 8);
    uint64_t val1 = ((secret64(32) ^ secret64(40)) - seed) ^ input_first ^
                    input_last;
    uint64_t val2 = ((secret64(48) ^ secret64(56)) + seed) ^ input_last;
    u128 m = mul128(val1, PRIME64_1);
    uint64_t low = m.low + ((uint64_t)(len - 1) << 54);
    uint64_t high = m.high + ((val2 >> 32) << 32) +
                    (uint64_t)(uint32_t)val2 * PRIME32_2;
    low ^= bswap64(high);
    u128 m2 = mul128(low, PRIME64_2);
    low = m2.low;
    high = m2.high + high * PRIME64_2;
    kdt_xxh128 h;
    h.low = avalanche(low);
    h.high = avalanche(high);
    return h;
}

/* ---- medium inputs (17-240 bytes) ---------------------------------------- */

static uint64_t
mix_step(const span *in, size_t data_off, size_t secret_off, uint64_t sd)
{
    uint64_t d0 = in64(in, data_off), d1 = in64(in, data_off + 8);
    return mul128_fold64(d0 ^ (secret64(secret_off) + sd),
                         d1 ^ (secret64(secret_off + 8) - sd));
}

static void
mix_two_chunks(uint64_t acc[2], const span *in, size_t data1, size_t data2,
               size_t secret_off, uint64_t sd)
{
    acc[0] += mix_step(in, data1, secret_off, sd);
    acc[1] += mix_step(in, data2, secret_off + 16, sd);
    acc[0] ^= in64(in, data2) + in64(in, data2 + 8);
    acc[1] ^= in64(in, data1) + in64(in, data1 + 8);
}

static uint64_t
xxh3_64_17to240(const span *in)
{
    size_t len = in->len;
    uint64_t acc = (uint64_t)len * PRIME64_1;
    if (len <= 128) {
        int rounds = (int)((len - 1) >> 5) + 1;
        for (int i = rounds - 1; i >= 0; i--) {
            size_t start = (size_t)i * 16;
            size_t end = len - (size_t)i * 16 - 16;
            acc += mix_step(in, start, (size_t)i * 32, seed);
            acc += mix_step(in, end, (size_t)i * 32 + 16, seed);
        }
    } else {
        size_t chunks = len >> 4;
        for (size_t i = 0; i < 8; i++)
            acc += mix_step(in, i * 16, i * 16, seed);
        acc = avalanche(acc);
        for (size_t i = 8; i < chunks; i++)
            acc += mix_step(in, i * 16, (i - 8) * 16 + 3, seed);
        acc += mix_step(in, len - 16, 119, seed);
    }
    return avalanche(acc);
}

static kdt_xxh128
xxh3_128_17to240(const span *in)
{
    size_t len = in->len;
    uint64_t acc[2] = {(uint64_t)len * PRIME64_1, 0};
    if (len <= 128) {
        int rounds = (int)((len - 1) >> 5) + 1;
        for (int i = rounds - 1; i >= 0; i--) {
            size_t start = (size_t)i * 16;
            size_t end = len - (size_t)i * 16 - 16;
            mix_two_chunks(acc, in, start, end, (size_t)i * 32, seed);
        }
    } else {
        size_t chunks = len >> 5;
        for (size_t i = 0; i < 4; i++)
            mix_two_chunks(acc, in, i * 32, i * 32 + 16, i * 32, seed);
        acc[0] = avalanche(acc[0]);
        acc[1] = avalanche(acc[1]);
        for (size_t i = 4; i < chunks; i++)
            mix_two_chunks(acc, in, i * 32, i * 32 + 16, (i - 4) * 32 + 3,
                           seed);
        /* The half-chunk order and the seed's sign differ here. */
        mix_two_chunks(acc, in, len - 16, len - 32, 103, (uint64_t)0 - seed);
    }
    kdt_xxh128 h;
    uint64_t low = acc[0] + acc[1];
    uint64_t high = acc[0] * PRIME64_1 + acc[1] * PRIME64_4 +
                    ((uint64_t)len - seed) * PRIME64_2;
    h.low = avalanche(low);
    h.high = (uint64_t)0 - avalanche(high);
    return h;
}

/* ---- large inputs (241 bytes and more) ----------------------------------- */

static inline void
accumulate(uint64_t acc[8], const uint8_t *stripe, size_t secret_off)
{
    for (int i = 0; i < 8; i++) {
        uint64_t lane = le64(stripe + 8 * i);
        uint64_t value = lane ^ secret64(secret_off + 8 * (size_t)i);
        acc[i ^ 1] += lane;
        acc[i] += (uint64_t)(uint32_t)value * (value >> 32);
    }
}

static inline void
round_scramble(uint64_t acc[8])
{
    for (int i = 0; i < 8; i++) {
        acc[i] ^= acc[i] >> 47;
        acc[i] ^= secret64(SECRET_LEN - 64 + 8 * (size_t)i);
        acc[i] *= PRIME32_1;
    }
}

static inline void
accumulate_at(uint64_t acc[8], const span *in, size_t off, size_t secret_off)
{
    uint8_t tmp[STRIPE_LEN];
    accumulate(acc, span_at(in, off, STRIPE_LEN, tmp), secret_off);
}

/* Steps 1-3: the accumulators after every block and the last stripe. */
static void
hash_large(uint64_t acc[8], const span *in)
{
    static const uint64_t init[8] = {PRIME32_3, PRIME64_1, PRIME64_2,
                                     PRIME64_3, PRIME64_4, PRIME32_2,
                                     PRIME64_5, PRIME32_1};
    size_t len = in->len;
    memcpy(acc, init, sizeof init);
    /* Whole blocks, leaving the last one (1..BLOCK_LEN bytes) for step 3
     * even when it is full. */
    size_t blocks = (len - 1) / BLOCK_LEN;
    for (size_t b = 0; b < blocks; b++) {
        for (size_t n = 0; n < STRIPES_PER_BLOCK; n++)
            accumulate_at(acc, in, b * BLOCK_LEN + n * STRIPE_LEN, n * 8);
        round_scramble(acc);
    }
    size_t start = blocks * BLOCK_LEN;
    size_t full_stripes = (len - start - 1) / STRIPE_LEN;
    for (size_t n = 0; n < full_stripes; n++)
        accumulate_at(acc, in, start + n * STRIPE_LEN, n * 8);
    accumulate_at(acc, in, len - STRIPE_LEN, SECRET_LEN - 71);
}

static uint64_t
final_merge(const uint64_t acc[8], uint64_t init_value, size_t secret_off)
{
    uint64_t result = init_value;
    for (size_t i = 0; i < 4; i++)
        result += mul128_fold64(acc[2 * i] ^ secret64(secret_off + 16 * i),
                                acc[2 * i + 1] ^
                                    secret64(secret_off + 16 * i + 8));
    return avalanche(result);
}

static uint64_t
xxh3_64_large(const span *in)
{
    uint64_t acc[8];
    hash_large(acc, in);
    return final_merge(acc, (uint64_t)in->len * PRIME64_1, 11);
}

static kdt_xxh128
xxh3_128_large(const span *in)
{
    uint64_t acc[8];
    hash_large(acc, in);
    kdt_xxh128 h;
    h.low = final_merge(acc, (uint64_t)in->len * PRIME64_1, 11);
    h.high = final_merge(acc, ~((uint64_t)in->len * PRIME64_2),
                         SECRET_LEN - 75);
    return h;
}

/* ---- entry points ---------------------------------------------------- */

static uint64_t
xxh3_64(const span *in)
{
    if (in->len == 0)
        return xxh3_64_empty();
    if (in->len <= 3)
        return xxh3_64_1to3(in);
    if (in->len <= 8)
        return xxh3_64_4to8(in);
    if (in->len <= 16)
        return xxh3_64_9to16(in);
    if (in->len <= 240)
        return xxh3_64_17to240(in);
    return xxh3_64_large(in);
}

uint64_t
kdt_xxh3_64(const void *data, size_t len)
{
    span in = span_of(data, len, NULL, 0);
    return xxh3_64(&in);
}

uint64_t
kdt_xxh3_64_pair(const void *a, size_t a_len, const void *b, size_t b_len)
{
    span in = span_of(a, a_len, b, b_len);
    return xxh3_64(&in);
}

kdt_xxh128
kdt_xxh3_128(const void *data, size_t len)
{
    span in = span_of(data, len, NULL, 0);
    if (len == 0)
        return xxh3_128_empty();
    if (len <= 3)
        return xxh3_128_1to3(&in);
    if (len <= 8)
        return xxh3_128_4to8(&in);
    if (len <= 16)
        return xxh3_128_9to16(&in);
    if (len <= 240)
        return xxh3_128_17to240(&in);
    return xxh3_128_large(&in);
}
