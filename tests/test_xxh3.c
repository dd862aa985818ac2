/*
 * test_xxh3.c: our XXH3 (src/base/xxh3.c) gives libxxhash's values.
 *
 * Everywhere: a table of XXH3-64 and XXH3-128 values that libxxhash 0.8.1
 * computed, one length or more in every code path of the specification
 * (0, 1-3, 4-8, 9-16, 17-128, 129-240, one block, several blocks, partial
 * last stripes).  Where libxxhash's header is installed (CI installs
 * libxxhash-dev for this test alone), also every length 0..4096, a few
 * large ones, three byte patterns, and the two-piece form split at every
 * position that matters.
 */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if KDT_HAVE_XXHASH_H
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

#include "base/xxh3.h"
#include "harness.h"

/* A fixed pseudo-random byte sequence (the table was computed on it). */
static void
fill(unsigned char *b, size_t n)
{
    uint32_t s = 0x12345678u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        b[i] = (unsigned char)(s >> 24);
    }
}

static const struct {
    size_t len;
    uint64_t h64, low, high;
} golden[] = {
    {0, 0x2d06800538d394c2ull, 0x6001c324468d497full, 0x99aa06d3014798d8ull},
    {1, 0x0de0f3cef1e76922ull, 0x0de0f3cef1e76922ull, 0x5e33aa40b898f6f9ull},
    {2, 0xbf170653a8c8139full, 0xbf170653a8c8139full, 0x3b2462d44bbfe1a7ull},
    {3, 0xa434d638feb579dcull, 0xa434d638feb579dcull, 0x3d10cb6802b68f06ull},
    {4, 0xd7e619dd92e873efull, 0x0dcaa12c359c6ae1ull, 0x9672e4b44f44b207ull},
    {5, 0xc54c0a6260be387dull, 0xc289403c46cb7abfull, 0xa965a14fb64ad189ull},
    {8, 0x5e894620868a925dull, 0x2523cd3549545611ull, 0xc55f9bfc342bc90bull},
    {9, 0x3d59e48ff92e2365ull, 0xccb73573bf4f3f50ull, 0x025faa7c2f136210ull},
    {12, 0x7d642898327731faull, 0xa159a01178dfc7f7ull, 0x2a88efad4f0662baull},
    {16, 0xcd5d6976a0b7b4feull, 0x0f7a68caa8759209ull, 0x1bf96d5f63f46cd5ull},
    {17, 0x7f25e237f3bee0d9ull, 0x6fcb7a39f5d12c04ull, 0xf128bc4b214ec3ebull},
    {31, 0x4a3e01628d6b6c5full, 0x0703cdb91f64c7c7ull, 0xd91d5c0cab74a7c2ull},
    {32, 0x664b90801938a34dull, 0x3b00d883dbb70db8ull, 0x0a077647098fbd89ull},
    {33, 0xf0d1fce7d5732f81ull, 0xa6c3d92b5229c189ull, 0xdd0918d96afdabe4ull},
    {64, 0x3db7ac69db1ab07eull, 0x9c909b0eceeccf7eull, 0xd9055d18e3151c26ull},
    {100, 0xba56e21a399cd28eull, 0x2a4212245a3dcd8aull, 0x81ff9aec9d47faceull},
    {127, 0xd4480c9614c1ddf0ull, 0xcb4a9162669b78c8ull, 0x9b9731e4774038f5ull},
    {128, 0x7a2c6c2e3e675cebull, 0xcd151da49daa5378ull, 0x9da5dfbd217ec644ull},
    {129, 0xb6870b60c5a0d438ull, 0x00a28cfadf372d44ull, 0x736740f77724d18bull},
    {130, 0x2edc7465e6f81ccdull, 0x2dc7ccb2d4dec8f1ull, 0x8b760868a08dd003ull},
    {200, 0x28af426eede0ace0ull, 0x27ad7d45ec0f66faull, 0xe8e87d04b46f796bull},
    {239, 0x3cb467f0387859a9ull, 0x3b0d1f06f0c65870ull, 0xfff9f95e71b95fb9ull},
    {240, 0xa69bd66ccab5ebb5ull, 0x41804516bc34e8baull, 0x11e89fa8990fc868ull},
    {241, 0x25ebd647d0cad5f9ull, 0x25ebd647d0cad5f9ull, 0x7fb64a3fe8a91936ull},
    {255, 0x6efd3095a145609bull, 0x6efd3095a145609bull, 0xf0c2524383322713ull},
    {256, 0xf4cad8f70bf31718ull, 0xf4cad8f70bf31718ull, 0x1407985dadf46e44ull},
    {500, 0xc7b159f02e9763e9ull, 0xc7b159f02e9763e9ull, 0x234aa5d92c90e731ull},
    {1023, 0x161999fff8e1f9aaull, 0x161999fff8e1f9aaull, 0xb8d2d34b4d2c723cull},
    {1024, 0xb67d9e9c04ceda9dull, 0xb67d9e9c04ceda9dull, 0x05b6d358992d0878ull},
    {1025, 0xf9c5ce44fe38d3c7ull, 0xf9c5ce44fe38d3c7ull, 0xecf397b86a2eb252ull},
    {1087, 0x738d6f5cb7d31f70ull, 0x738d6f5cb7d31f70ull, 0x9a7201d27a65834eull},
    {1088, 0xbc5a2758a622d9f1ull, 0xbc5a2758a622d9f1ull, 0xd7e86db549c52b24ull},
    {1089, 0xcc16df1f3e8ee23aull, 0xcc16df1f3e8ee23aull, 0xe14e29553a1fad81ull},
    {2048, 0x92a40c7f370f228aull, 0x92a40c7f370f228aull, 0x3e127a442cd5914aull},
    {2049, 0x9d43426428b58584ull, 0x9d43426428b58584ull, 0x8598031f8b6978d3ull},
    {4095, 0xd2fad35dd677cb98ull, 0xd2fad35dd677cb98ull, 0xcbcf9ab8e8a2b389ull},
    {4096, 0x201bfbe4dc0909dfull, 0x201bfbe4dc0909dfull, 0x4040c62abd3bc124ull},
    {4999, 0xa91ac6aa7714c4c8ull, 0xa91ac6aa7714c4c8ull, 0x427c4a37428f9c37ull},
};

START_TEST(test_golden_table)
{
    static unsigned char b[5000];
    fill(b, sizeof b);
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        size_t n = golden[i].len;
        kdt_xxh128 h = kdt_xxh3_128(b, n);
        ck_assert_msg(kdt_xxh3_64(b, n) == golden[i].h64, "XXH3-64, %zu bytes",
                      n);
        ck_assert_msg(h.low == golden[i].low && h.high == golden[i].high,
                      "XXH3-128, %zu bytes", n);
        /* The two-piece form reads the same bytes. */
        ck_assert_msg(kdt_xxh3_64_pair(b, n / 3, b + n / 3, n - n / 3) ==
                          golden[i].h64,
                      "XXH3-64 of two pieces, %zu bytes", n);
    }
}
END_TEST

#if KDT_HAVE_XXHASH_H
static void
check_one(const unsigned char *b, size_t n)
{
    XXH128_hash_t want = XXH3_128bits(b, n);
    kdt_xxh128 got = kdt_xxh3_128(b, n);
    ck_assert_msg(kdt_xxh3_64(b, n) == XXH3_64bits(b, n), "XXH3-64, %zu bytes",
                  n);
    ck_assert_msg(got.low == want.low64 && got.high == want.high64,
                  "XXH3-128, %zu bytes", n);
}

START_TEST(test_every_length)
{
    enum { N = 4096 };
    static unsigned char patterns[3][N];
    fill(patterns[0], N);
    memset(patterns[1], 0, N);
    memset(patterns[2], 0xff, N);
    for (int p = 0; p < 3; p++)
        for (size_t n = 0; n <= N; n++)
            check_one(patterns[p], n);
}
END_TEST

START_TEST(test_large)
{
    /* Several blocks with every kind of tail: none, a partial stripe, a
     * whole last block, one byte past a block. */
    static const size_t lens[] = {1 << 20, (1 << 20) + 1, (1 << 20) - 1,
                                  (1 << 20) + 63, 3 * 1024 * 1024 + 777,
                                  65536 + 1024, 100000};
    size_t max = 3 * 1024 * 1024 + 777;
    unsigned char *b = malloc(max);
    ck_assert_ptr_nonnull(b);
    fill(b, max);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        check_one(b, lens[i]);
    /* An unaligned start. */
    check_one(b + 3, 200003);
    free(b);
}
END_TEST

/* The two-piece form, split at every position of every length class
 * (a stripe or a 16-byte chunk straddling the split included). */
START_TEST(test_pair_splits)
{
    static const size_t lens[] = {0,   1,    3,    4,    8,    9,   16,
                                  17,  100,  128,  129,  240,  241, 1024,
                                  1025, 2000, 4096};
    static unsigned char b[4096];
    fill(b, sizeof b);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t n = lens[i];
        uint64_t want = XXH3_64bits(b, n);
        for (size_t cut = 0; cut <= n; cut++)
            ck_assert_msg(kdt_xxh3_64_pair(b, cut, b + cut, n - cut) == want,
                          "%zu bytes cut at %zu", n, cut);
    }
}
END_TEST
#endif

static Suite *
suite(void)
{
    Suite *s = suite_create("xxh3");
    TCase *tc = tcase_create("xxh3");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_golden_table);
#if KDT_HAVE_XXHASH_H
    tcase_add_test(tc, test_every_length);
    tcase_add_test(tc, test_large);
    tcase_add_test(tc, test_pair_splits);
#else
    fprintf(stderr, "test_xxh3: no xxhash.h; compared with the stored "
                    "table only\n");
#endif
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
