/*
 * test_ref_verify_attn.c: the CPU reference of verify_attn against cases
 * whose answer is known without it (host only, runs in CI):
 *  - q = 0: every visible position weighs the same, so o is the plain mean
 *    of the visible V rows and lse = ln(count);
 *  - a row that sees one position returns that V row exactly, lse = logit;
 *  - two positions with logits a, b: weights by hand;
 *  - the mask: a row sees its ancestors and itself, never a sibling;
 *  - padded rows: o = 0, lse = -inf;
 *  - the block table: pages in any order give the same answer;
 *  - e4m3: every one of the 256 codes by its definition, rounding and
 *    saturation; an e4m3 cache gives what a bf16 cache of the same values
 *    gives, and its scale acts on the logits and the output alone;
 *  - MATH = e4m3's query side: the row quantization element by element
 *    against the definition, and the attention over quantized rows (what
 *    its error bound is measured from) with its per-row stats;
 *  - the references with the heads shared among threads: the same bits.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref/ref_math.h"
#include "ref/verify_attn.h"
#include "ref/verify_attn_heads.h"

#define D_QK REF_ATTN_D_QK
#define D_V REF_ATTN_D_V

static uint64_t seed = 42;

/* kv with `pages` pages of `page` tokens, random bf16 values. */
static uint16_t *
random_kv(int pages, int page)
{
    size_t n = (size_t)pages * page * D_QK;
    uint16_t *kv = malloc(2 * n);
    for (size_t i = 0; i < n; i++)
        kv[i] = ref_f32_to_bf16(ref_attn_randf(&seed));
    return kv;
}

static float
kvf(const uint16_t *kv, const int32_t *bt, int page, int pos, int k)
{
    int pg = bt[pos / page];
    return ref_bf16_to_f32(kv[((size_t)pg * page + pos % page) * D_QK + k]);
}

START_TEST(bf16_round_trip)
{
    ck_assert_uint_eq(ref_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(ref_f32_to_bf16(-2.0f), 0xc000);
    /* 1 + 2^-8 is halfway between bf16 neighbours: ties to even (down) */
    ck_assert_uint_eq(ref_f32_to_bf16(1.00390625f), 0x3f80);
    /* 1 + 3 * 2^-8: halfway, rounds up to the even 0x3f82 */
    ck_assert_uint_eq(ref_f32_to_bf16(1.01171875f), 0x3f82);
    ck_assert(ref_bf16_to_f32(0x3f80) == 1.0f);
    ck_assert(isnan(ref_bf16_to_f32(ref_f32_to_bf16(NAN))));
}
END_TEST

/* q = 0: o = mean of the visible V rows, lse = ln(count). */
START_TEST(zero_query_is_mean)
{
    enum { R = 1, H = 2, N = 4, PAGE = 3, PAST = 5 };
    int max_pages = 3;
    int32_t bt[3] = {2, 0, 1};
    int32_t past[1] = {PAST}, nn[1] = {3};
    uint16_t *kv = random_kv(3, PAGE);
    uint16_t *q = calloc((size_t)R * N * H * D_QK, 2);
    /* tree: 0 <- 1, 0 <- 2 (siblings) */
    uint32_t mask[N] = {0x1, 0x3, 0x5, 0x8};
    float *o = malloc(sizeof(float) * R * N * H * D_V);
    float lse[R * N * H];
    ref_verify_attn(o, lse, q, kv, bt, past, nn, mask, R, H, N, PAGE,
                    max_pages, 0.5f);
    for (int i = 0; i < N; i++) {
        for (int h = 0; h < H; h++) {
            float *orow = o + ((size_t)i * H + h) * D_V;
            if (i >= nn[0]) {
                for (int k = 0; k < D_V; k++)
                    ck_assert(orow[k] == 0.f);
                ck_assert(isinf(lse[i * H + h]) && lse[i * H + h] < 0);
                continue;
            }
            int count = 0;
            double want[D_V] = {0};
            for (int pos = 0; pos < PAST + nn[0]; pos++) {
                int j = pos - PAST;
                if (pos >= PAST && !((mask[i] >> j) & 1))
                    continue;
                count++;
                for (int k = 0; k < D_V; k++)
                    want[k] += kvf(kv, bt, PAGE, pos, k);
            }
            ck_assert_int_eq(count, PAST + (i == 0 ? 1 : 2));
            for (int k = 0; k < D_V; k++)
                ck_assert(fabs(orow[k] - want[k] / count) < 1e-6);
            ck_assert(fabs(lse[i * H + h] - log((double)count)) < 1e-6);
        }
    }
    free(kv);
    free(q);
    free(o);
}
END_TEST

/* No prefix and a root-only tree: the root sees itself only, so o is its
 * own V row exactly and lse its logit; then two positions by hand. */
START_TEST(one_and_two_positions)
{
    int32_t bt[2] = {1, 0};
    uint16_t *kv = random_kv(2, 1);
    uint16_t q[D_QK];
    for (int k = 0; k < D_QK; k++)
        q[k] = ref_f32_to_bf16(ref_attn_randf(&seed));
    uint32_t mask[1] = {1};
    int32_t past[1] = {0}, nn[1] = {1};
    float o[D_V], lse;
    float scale = 0.25f;
    ref_verify_attn(o, &lse, q, kv, bt, past, nn, mask, 1, 1, 1, 1, 2, scale);
    double logit = 0;
    for (int k = 0; k < D_QK; k++)
        logit += (double)ref_bf16_to_f32(q[k]) * kvf(kv, bt, 1, 0, k);
    for (int k = 0; k < D_V; k++)
        ck_assert(o[k] == kvf(kv, bt, 1, 0, k));
    ck_assert(fabs(lse - scale * logit) < 1e-5);

    /* prefix of one: positions 0 (prefix) and 1 (the root itself) */
    past[0] = 1;
    ref_verify_attn(o, &lse, q, kv, bt, past, nn, mask, 1, 1, 1, 1, 2, scale);
    double a = 0, b = 0;
    for (int k = 0; k < D_QK; k++) {
        a += (double)ref_bf16_to_f32(q[k]) * kvf(kv, bt, 1, 0, k);
        b += (double)ref_bf16_to_f32(q[k]) * kvf(kv, bt, 1, 1, k);
    }
    a *= scale;
    b *= scale;
    double wa = exp(a) / (exp(a) + exp(b)), wb = 1 - wa;
    for (int k = 0; k < D_V; k++)
        ck_assert(fabs(o[k] - (wa * kvf(kv, bt, 1, 0, k) +
                               wb * kvf(kv, bt, 1, 1, k))) < 1e-6);
    ck_assert(fabs(lse - log(exp(a) + exp(b))) < 1e-5);
    free(kv);
}
END_TEST

/* Random trees: the generated mask is ancestors-and-self, and shuffling
 * the physical pages (with the block table following) changes nothing. */
START_TEST(masks_and_pages)
{
    enum { N = 40, W = 2 };
    uint32_t mask[N * W];
    int32_t parent[N];
    ref_attn_random_tree(mask, parent, 30, N, &seed);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            int anc = 0;
            if (i < 30)
                for (int a = i; a >= 0; a = parent[a])
                    anc |= a == j;
            else
                anc = i == j;
            ck_assert_int_eq((mask[i * W + j / 32] >> (j % 32)) & 1, anc);
        }
    }

    enum { H = 3, PAGE = 4, PAGES = 20 };
    int32_t bt1[PAGES], bt2[PAGES];
    uint16_t *kv1 = random_kv(PAGES, PAGE);
    uint16_t *kv2 = malloc(2 * (size_t)PAGES * PAGE * D_QK);
    for (int i = 0; i < PAGES; i++)
        bt1[i] = i;
    /* kv2 holds kv1's pages reversed; bt2 points at them */
    for (int i = 0; i < PAGES; i++) {
        bt2[i] = PAGES - 1 - i;
        memcpy(kv2 + (size_t)(PAGES - 1 - i) * PAGE * D_QK,
               kv1 + (size_t)i * PAGE * D_QK, 2 * PAGE * D_QK);
    }
    size_t nq = (size_t)N * H * D_QK;
    uint16_t *q = malloc(2 * nq);
    for (size_t i = 0; i < nq; i++)
        q[i] = ref_f32_to_bf16(ref_attn_randf(&seed));
    int32_t past[1] = {37}, nn[1] = {30};
    float *o1 = malloc(sizeof(float) * N * H * D_V);
    float *o2 = malloc(sizeof(float) * N * H * D_V);
    float l1[N * H], l2[N * H];
    ref_verify_attn(o1, l1, q, kv1, bt1, past, nn, mask, 1, H, N, PAGE,
                    PAGES, 0.1f);
    ref_verify_attn(o2, l2, q, kv2, bt2, past, nn, mask, 1, H, N, PAGE,
                    PAGES, 0.1f);
    ck_assert_int_eq(memcmp(o1, o2, sizeof(float) * N * H * D_V), 0);
    ck_assert_int_eq(memcmp(l1, l2, sizeof l1), 0);
    free(kv1);
    free(kv2);
    free(q);
    free(o1);
    free(o2);
}
END_TEST

/* The e4m3 decoder against the format's definition, code by code, and
 * the encoder against the decoder: each finite code is its own value's
 * encoding, midpoints go to the even neighbour, the rest saturates. */
START_TEST(e4m3_codes)
{
    ck_assert(ref_e4m3_to_f32(0x00) == 0.f);
    ck_assert(ref_e4m3_to_f32(0x80) == 0.f && signbit(ref_e4m3_to_f32(0x80)));
    ck_assert(ref_e4m3_to_f32(0x01) == 0x1p-9f); /* smallest subnormal */
    ck_assert(ref_e4m3_to_f32(0x07) == 7 * 0x1p-9f);
    ck_assert(ref_e4m3_to_f32(0x08) == 0x1p-6f); /* smallest normal */
    ck_assert(ref_e4m3_to_f32(0x38) == 1.f);
    ck_assert(ref_e4m3_to_f32(0x3c) == 1.5f);
    ck_assert(ref_e4m3_to_f32(0x7e) == 448.f);   /* largest */
    ck_assert(ref_e4m3_to_f32(0xfe) == -448.f);
    ck_assert(isnan(ref_e4m3_to_f32(0x7f)) && isnan(ref_e4m3_to_f32(0xff)));
    for (int c = 0; c < 256; c++) {
        float v = ref_e4m3_to_f32((uint8_t)c);
        if (isnan(v))
            continue;
        /* the definition: (-1)^s 2^(e-7) (1 + m/8), or 2^-6 m/8 */
        int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
        double want = (e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6))
                      * (s ? -1 : 1);
        ck_assert_msg(v == want, "code 0x%02x: %g, want %g", c, v, want);
        ck_assert_msg(ref_f32_to_e4m3(v) == (c == 0x80 ? 0x80 : c),
                      "code 0x%02x does not encode to itself", c);
        /* the midpoint to the next larger magnitude rounds to the even
         * mantissa of the two */
        if ((c & 0x7f) < 0x7e) {
            float up = ref_e4m3_to_f32((uint8_t)(c + 1));
            float mid = (v + up) / 2;
            int even = (c & 1) == 0 ? c : c + 1;
            ck_assert_msg(ref_f32_to_e4m3(mid) == even,
                          "midpoint of 0x%02x and 0x%02x", c, c + 1);
        }
    }
    ck_assert_uint_eq(ref_f32_to_e4m3(449.f), 0x7e);
    ck_assert_uint_eq(ref_f32_to_e4m3(1e30f), 0x7e);
    ck_assert_uint_eq(ref_f32_to_e4m3(-INFINITY), 0xfe);
    ck_assert_uint_eq(ref_f32_to_e4m3(NAN), 0x7f);
    ck_assert_uint_eq(ref_f32_to_e4m3(0x1p-11f), 0x00); /* below half of 2^-9 */
    ck_assert_uint_eq(ref_f32_to_e4m3(0x1.8p-10f), 0x01);
}
END_TEST

/* A cache of e4m3 bytes holds the same numbers as a bf16 cache of their
 * values (e4m3 widens to bf16 exactly), so scale 1 gives the same answer
 * bit for bit; a scale s is the same as logits scaled by s and the output
 * by s. */
START_TEST(e4m3_cache)
{
    enum { H = 2, N = 20, W = 1, PAGE = 8, PAGES = 9 };
    size_t nkv = (size_t)PAGES * PAGE * D_QK;
    uint8_t *k8 = malloc(nkv);
    uint16_t *k16 = malloc(2 * nkv);
    for (size_t i = 0; i < nkv; i++) {
        /* uniform codes but NaN: values up to 448 in magnitude */
        uint8_t c;
        do
            c = (uint8_t)ref_attn_rand(&seed);
        while ((c & 0x7f) == 0x7f);
        k8[i] = c;
        k16[i] = ref_f32_to_bf16(ref_e4m3_to_f32(c));
        ck_assert(ref_bf16_to_f32(k16[i]) == ref_e4m3_to_f32(c));
    }
    int32_t bt[PAGES];
    for (int i = 0; i < PAGES; i++)
        bt[i] = (i * 5) % PAGES;
    uint32_t mask[N * W];
    ref_attn_random_tree(mask, NULL, 17, N, &seed);
    size_t nq = (size_t)N * H * D_QK;
    uint16_t *q = malloc(2 * nq);
    for (size_t i = 0; i < nq; i++)
        q[i] = ref_f32_to_bf16(ref_attn_randf(&seed) * 0x1p-8f);
    int32_t past[1] = {41}, nn[1] = {17};
    size_t no = (size_t)N * H * D_V;
    float *o1 = malloc(sizeof(float) * no), *o2 = malloc(sizeof(float) * no);
    float l1[N * H], l2[N * H];
    const float scale = 0.0722f, s = 0.37f;
    ref_verify_attn(o1, l1, q, k16, bt, past, nn, mask, 1, H, N, PAGE, PAGES,
                    scale);
    ref_verify_attn_kv(o2, l2, q, k8, 1, 1.f, bt, past, nn, mask, 1, H, N,
                       PAGE, PAGES, scale);
    ck_assert_int_eq(memcmp(o1, o2, sizeof(float) * no), 0);
    ck_assert_int_eq(memcmp(l1, l2, sizeof l1), 0);
    /* the bf16 entry point is the kv_dtype 0 case, whatever kv_scale says */
    ref_verify_attn_kv(o2, l2, q, k16, 0, 5.f, bt, past, nn, mask, 1, H, N,
                       PAGE, PAGES, scale);
    ck_assert_int_eq(memcmp(o1, o2, sizeof(float) * no), 0);

    ref_verify_attn_kv(o1, l1, q, k8, 1, s, bt, past, nn, mask, 1, H, N,
                       PAGE, PAGES, scale);
    ref_verify_attn_kv(o2, l2, q, k8, 1, 1.f, bt, past, nn, mask, 1, H, N,
                       PAGE, PAGES, scale * s);
    int seen = 0;
    for (size_t i = 0; i < no; i++) {
        ck_assert_msg(fabs(o1[i] - s * o2[i]) <= 1e-5 * (1 + fabs(o1[i])),
                      "o[%zu] = %g, want %g", i, o1[i], s * o2[i]);
        seen += o1[i] != 0.f;
    }
    ck_assert_int_gt(seen, (int)(no / 2)); /* the rows were not all padding */
    for (int i = 0; i < N * H; i++)
        ck_assert(isinf(l2[i])
                      ? l1[i] == l2[i]
                      : fabs(l1[i] - l2[i]) <= 1e-5 * (1 + fabs(l2[i])));
    free(k8);
    free(k16);
    free(q);
    free(o1);
    free(o2);
}
END_TEST

/* MATH = e4m3's query side: each element of a quantized row is
 * e4m3(q * (448 / a)) (f32) worth a / 448, checked against ref_f32_to_e4m3,
 * the definition, on rows of random magnitudes (subnormal codes and
 * saturation included); a row of zeros stays zeros. */
START_TEST(e4m3_quantized_rows)
{
    uint16_t q[D_QK];
    double out[D_QK];
    for (int t = 0; t < 200; t++) {
        int e = (int)(ref_attn_rand(&seed) % 40) - 20;
        for (int k = 0; k < D_QK; k++) {
            float x = ldexpf(ref_attn_randf(&seed), e);
            /* some elements far below the maximum: subnormal codes */
            if (k % 7 == 3)
                x *= 0x1p-12f;
            q[k] = ref_f32_to_bf16(x);
        }
        float a = 0.f;
        for (int k = 0; k < D_QK; k++)
            a = fmaxf(a, fabsf(ref_bf16_to_f32(q[k])));
        ref_e4m3_quantize_row(out, q);
        float sc = 448.f / a;
        for (int k = 0; k < D_QK; k++) {
            double want = (double)ref_e4m3_to_f32(
                              ref_f32_to_e4m3(ref_bf16_to_f32(q[k]) * sc))
                          * ((double)a / 448.0);
            ck_assert_msg(out[k] == want, "row %d dim %d: %.17g, want %.17g",
                          t, k, out[k], want);
        }
    }
    memset(q, 0, sizeof q);
    ref_e4m3_quantize_row(out, q);
    for (int k = 0; k < D_QK; k++)
        ck_assert(out[k] == 0.0);
    q[5] = 0x7fc0; /* NaN */
    ref_e4m3_quantize_row(out, q);
    ck_assert(isnan(out[0]) && isnan(out[5]));
}
END_TEST

/* The reference of MATH = e4m3 (o_q, lse_q) is the attention with the
 * quantized rows: equal to ref_verify_attn_kv's where every row already
 * is an e4m3 number times a power of two with 448 times it as its
 * maximum (quantization changes nothing), and its stats are each row's
 * visible count, S0 = sum of exp(logit - max), sum of their squares. */
START_TEST(e4m3_query_reference)
{
    enum { H = 3, N = 9, W = 1, PAGE = 4, PAGES = 12 };
    size_t nkv = (size_t)PAGES * PAGE * D_QK;
    uint8_t *k8 = malloc(nkv);
    for (size_t i = 0; i < nkv; i++)
        k8[i] = ref_f32_to_e4m3(ref_attn_randf(&seed));
    int32_t bt[PAGES];
    for (int i = 0; i < PAGES; i++)
        bt[i] = (i * 7) % PAGES;
    uint32_t mask[N * W];
    ref_attn_random_tree(mask, NULL, 8, N, &seed);
    uint16_t q[N * H * D_QK];
    for (int r = 0; r < N * H; r++)
        for (int k = 0; k < D_QK; k++) {
            /* e4m3 values times 2^-10, the maximum 448 times it */
            uint8_t c = k == 17 ? 0xfe : ref_f32_to_e4m3(ref_attn_randf(&seed));
            q[r * D_QK + k] = ref_f32_to_bf16(ldexpf(ref_e4m3_to_f32(c), -10));
        }
    int32_t past[1] = {30}, nn[1] = {8};
    float o1[N * H * D_V], o2[N * H * D_V], l1[N * H], l2[N * H];
    double st[N * H * 3];
    ref_verify_attn_kv(o1, l1, q, k8, 1, 0.5f, bt, past, nn, mask, 1, H, N,
                       PAGE, PAGES, 0.3f);
    ref_verify_attn_qe4m3(o2, l2, st, q, k8, 1, 0.5f, bt, past, nn, mask, 1,
                          H, N, PAGE, PAGES, 0.3f);
    ck_assert_int_eq(memcmp(o1, o2, sizeof o1), 0);
    ck_assert_int_eq(memcmp(l1, l2, sizeof l1), 0);
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++) {
            const double *r = st + 3 * (i * H + h);
            if (i >= nn[0]) {
                ck_assert(r[0] == 0 && r[1] == 0 && r[2] == 0);
                continue;
            }
            int vis = past[0];
            for (int j = 0; j < nn[0]; j++)
                vis += (mask[i] >> j) & 1;
            ck_assert_int_eq((int)r[0], vis);
            /* S0 >= 1 (the maximum's own weight), sum p^2 in (S0^2 / n,
             * S0], the row's lse = max + ln S0 */
            ck_assert(r[1] >= 1.0 && r[1] <= vis);
            ck_assert(r[2] <= r[1] && r[2] * vis >= r[1] * r[1] * (1 - 1e-12));
        }
    free(k8);
}
END_TEST

/* The references with the heads shared among threads
 * (ref/verify_attn_heads.h) give the same bits as one call: a bf16 and an
 * e4m3 cache, MATH = e4m3's reference with its stats, more threads than
 * heads and heads that do not divide among them, and one thread. */
START_TEST(heads_in_threads)
{
    enum { R = 2, H = 5, N = 17, W = 1, PAGE = 16, PAGES = 24 };
    size_t nkv = (size_t)PAGES * PAGE * D_QK;
    uint16_t *kv = random_kv(PAGES, PAGE);
    uint8_t *k8 = malloc(nkv);
    for (size_t i = 0; i < nkv; i++)
        k8[i] = ref_f32_to_e4m3(ref_attn_randf(&seed));
    int32_t bt[R * PAGES / 2];
    for (int i = 0; i < R * PAGES / 2; i++)
        bt[i] = (i * 5) % PAGES;
    uint32_t mask[R * N * W];
    for (int r = 0; r < R; r++)
        ref_attn_random_tree(mask + r * N * W, NULL, r ? 9 : N, N, &seed);
    static uint16_t q[R * N * H * D_QK];
    for (size_t i = 0; i < sizeof q / 2; i++)
        q[i] = ref_f32_to_bf16(ref_attn_randf(&seed));
    int32_t past[R] = {150, 3}, nn[R] = {N, 9};
    const int rows = R * N * H;
    float *o1 = malloc(4 * (size_t)rows * D_V);
    float *o2 = malloc(4 * (size_t)rows * D_V);
    float l1[R * N * H], l2[R * N * H];
    double s1[R * N * H * 3], s2[R * N * H * 3];
    static const int threads[] = {1, 2, 3, 5, 8};
    for (int dt = 0; dt < 2; dt++) {
        const void *cache = dt ? (const void *)k8 : (const void *)kv;
        ref_verify_attn_kv(o1, l1, q, cache, dt, 0.75f, bt, past, nn, mask,
                           R, H, N, PAGE, PAGES / 2, 0.2f);
        for (unsigned t = 0; t < sizeof threads / sizeof *threads; t++) {
            memset(o2, 0xff, 4 * (size_t)rows * D_V);
            memset(l2, 0xff, sizeof l2);
            ref_verify_attn_kv_heads(threads[t], o2, l2, q, cache, dt, 0.75f,
                                     bt, past, nn, mask, R, H, N, PAGE,
                                     PAGES / 2, 0.2f);
            ck_assert_int_eq(memcmp(o1, o2, 4 * (size_t)rows * D_V), 0);
            ck_assert_int_eq(memcmp(l1, l2, sizeof l1), 0);
        }
    }
    ref_verify_attn_qe4m3(o1, l1, s1, q, k8, 1, 0.75f, bt, past, nn, mask, R,
                          H, N, PAGE, PAGES / 2, 0.2f);
    for (unsigned t = 0; t < sizeof threads / sizeof *threads; t++) {
        memset(o2, 0xff, 4 * (size_t)rows * D_V);
        memset(l2, 0xff, sizeof l2);
        memset(s2, 0xff, sizeof s2);
        ref_verify_attn_qe4m3_heads(threads[t], o2, l2, s2, q, k8, 1, 0.75f,
                                    bt, past, nn, mask, R, H, N, PAGE,
                                    PAGES / 2, 0.2f);
        ck_assert_int_eq(memcmp(o1, o2, 4 * (size_t)rows * D_V), 0);
        ck_assert_int_eq(memcmp(l1, l2, sizeof l1), 0);
        ck_assert_int_eq(memcmp(s1, s2, sizeof s1), 0);
    }
    free(o1), free(o2), free(kv), free(k8);
}
END_TEST

/* The worst-case bounds of MATH = e4m3: the contract's expressions while
 * beta < 1/2 (o) and beta < 1 (lse); past that, bounds that still hold.
 * Checked on rows of one weight 1 (the maximum) and n - 1 weights w,
 * every weight rounded by its largest error, each way: V is +max|v| where
 * a weight grew and -max|v| where it shrank, the error the o bound must
 * cover. */
static void
rounded_row(int n, double w, int up, double *o_err, double *lse_err)
{
    /* e = 2^-4 p + 2^-10 at most (contract §3), never below 0 */
    double p1 = up ? 1 + 0x1p-4 + 0x1p-10 : 1 - 0x1p-4 - 0x1p-10;
    double pw = up ? w + 0x1p-4 * w + 0x1p-10 : w - 0x1p-4 * w - 0x1p-10;
    if (pw < 0)
        pw = 0;
    const double s = 1 + (n - 1) * w, s2 = p1 + (n - 1) * pw;
    /* o with V = +1 at the maximum's position and -1 elsewhere: the
     * rounding moves weight between the two signs */
    const double o = (1 - (n - 1) * w) / s, o2 = (p1 - (n - 1) * pw) / s2;
    *o_err = fabs(o2 - o);
    *lse_err = fabs(log(s2) - log(s));
}

START_TEST(e4m3_bounds)
{
    double ob, lb;
    /* small beta: the contract's expressions */
    ref_qe4m3_bounds(64, 16, &ob, &lb);
    const double beta = 0x1p-4 + 0x1p-10 * 4;
    ck_assert(fabs(ob - 2 * beta / (1 - beta)) < 1e-15);
    ck_assert(fabs(lb - beta / (1 - beta)) < 1e-15);
    /* a long prefix with one weight dominating: beta far past 1, bounds
     * finite and positive */
    ref_qe4m3_bounds(4161, 1.5, &ob, &lb);
    ck_assert(ob == 2.0);
    ck_assert(lb > 0 && isfinite(lb));
    static const int ns[] = {2, 65, 1000, 4161, 32833};
    static const double ws[] = {0.0, 1e-6, 0x1p-12, 1e-3, 0.01, 0.5, 1.0};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ws / sizeof *ws; b++)
            for (int up = 0; up < 2; up++) {
                const int n = ns[a];
                const double w = ws[b], s0 = 1 + (n - 1) * w;
                double oe, le;
                rounded_row(n, w, up, &oe, &le);
                ref_qe4m3_bounds(n, s0, &ob, &lb);
                ck_assert_msg(oe <= ob * (1 + 1e-12) && le <= lb * (1 + 1e-12),
                              "n=%d w=%g %s: |do| %g (bound %g), |dlse| %g "
                              "(bound %g)", n, w, up ? "up" : "down", oe, ob,
                              le, lb);
            }
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("ref_verify_attn");
    TCase *tc = tcase_create("reference");
    tcase_add_test(tc, bf16_round_trip);
    tcase_add_test(tc, zero_query_is_mean);
    tcase_add_test(tc, one_and_two_positions);
    tcase_add_test(tc, masks_and_pages);
    tcase_add_test(tc, e4m3_codes);
    tcase_add_test(tc, e4m3_cache);
    tcase_add_test(tc, e4m3_quantized_rows);
    tcase_add_test(tc, e4m3_query_reference);
    tcase_add_test(tc, e4m3_bounds);
    tcase_add_test(tc, heads_in_threads);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
