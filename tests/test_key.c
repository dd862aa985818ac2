/*
 * test_key.c: the cache key: preimage records, the golden key, hex, and
 * the preimage walker (which reads untrusted text from cache files).
 */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "harness.h"

/* A fixed preimage shaped like the ones kernels.c builds.  If this test
 * fails, the key format changed: that orphans every cache on every machine,
 * so do it on purpose (and bump KDT_CACHE_FORMAT), never by accident. */
static void
golden_preimage(kdt_preimage *p)
{
    kdt_preimage_init(p);
    kdt_preimage_add_str(p, "format", "1");
    kdt_preimage_add_str(p, "library", "0.1.0");
    kdt_preimage_add_str(p, "kernel", "tree_accept");
    kdt_preimage_add_str(p, "tree_accept.cu",
                         "extern \"C\" __global__ void f() {}\n");
    kdt_preimage_add_str(p, "constants", "N_MAX=65,L=15");
    kdt_preimage_add_str(p, "options", "-std=c++17 -arch=sm_90 -lineinfo");
    kdt_preimage_add_str(p, "target", "sm_90");
    kdt_preimage_add_str(p, "nvrtc", "13.0");
}

START_TEST(test_golden_text)
{
    kdt_preimage p;
    static const char want[] =
        "format 1\n1\n"
        "library 5\n0.1.0\n"
        "kernel 11\ntree_accept\n"
        "tree_accept.cu 34\nextern \"C\" __global__ void f() {}\n\n"
        "constants 13\nN_MAX=65,L=15\n"
        "options 32\n-std=c++17 -arch=sm_90 -lineinfo\n"
        "target 5\nsm_90\n"
        "nvrtc 4\n13.0\n";

    golden_preimage(&p);
    ck_assert_int_eq(p.failed, 0);
    ck_assert_uint_eq(p.len, sizeof want - 1);
    ck_assert(memcmp(p.text, want, p.len) == 0);
    ck_assert_int_eq(p.text[p.len], '\0');
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_golden_key)
{
    kdt_preimage p;
    kdt_key k;
    char hex[33];

    golden_preimage(&p);
    k = kdt_key_of(p.text, p.len);
    kdt_key_hex(&k, hex);
    ck_assert_str_eq(hex, "5cd47950b74b8a0f2c900aed84bccab7");
    kdt_preimage_free(&p);
}
END_TEST

/* The canonical form is XXH3-128's big-endian (high64, low64), checked
 * here against the empty input's published hash so the byte order is not
 * just self-consistent. */
START_TEST(test_key_empty_canonical)
{
    kdt_key k = kdt_key_of("", 0);
    char hex[33];

    kdt_key_hex(&k, hex);
    ck_assert_str_eq(hex, "99aa06d3014798d86001c324468d497f");
}
END_TEST

START_TEST(test_key_equal_and_hex)
{
    kdt_key a = kdt_key_of("abc", 3), b = kdt_key_of("abc", 3);
    kdt_key c = kdt_key_of("abd", 3);
    char hex[33];
    int i;

    ck_assert(kdt_key_equal(&a, &b));
    ck_assert(!kdt_key_equal(&a, &c));
    kdt_key_hex(&a, hex);
    ck_assert_uint_eq(strlen(hex), 32);
    for (i = 0; i < 32; i++)
        ck_assert(strchr("0123456789abcdef", hex[i]) != NULL);
}
END_TEST

/* Length prefixes make the encoding injective: moving bytes between
 * fields changes the text. */
START_TEST(test_fields_unambiguous)
{
    kdt_preimage a, b;
    kdt_key ka, kb;

    kdt_preimage_init(&a);
    kdt_preimage_add_str(&a, "x", "ab");
    kdt_preimage_add_str(&a, "y", "c");
    kdt_preimage_init(&b);
    kdt_preimage_add_str(&b, "x", "a");
    kdt_preimage_add_str(&b, "y", "bc");
    ka = kdt_key_of(a.text, a.len);
    kb = kdt_key_of(b.text, b.len);
    ck_assert(!kdt_key_equal(&ka, &kb));
    kdt_preimage_free(&a);
    kdt_preimage_free(&b);
}
END_TEST

START_TEST(test_walker_round_trip)
{
    static const char bin[] = { 0, '\n', ' ', 'x', '\n', 5, 0x7f };
    static const char *labels[] = { "format", "empty", "binary", "source.cu",
                                    "looks", "last" };
    const char *values[6];
    size_t lens[6];
    kdt_preimage p;
    size_t pos = 0, ll, vl;
    const char *l, *v;
    char *big;
    int i, n = 0, r;

    big = malloc(100000);
    ck_assert_ptr_nonnull(big);
    for (i = 0; i < 100000; i++)
        big[i] = (char)('a' + i % 26);
    values[0] = "1"; lens[0] = 1;
    values[1] = ""; lens[1] = 0;
    values[2] = bin; lens[2] = sizeof bin;
    values[3] = big; lens[3] = 100000;
    /* A value that looks like a record header must stay a value. */
    values[4] = "kernel 3\nabc\n"; lens[4] = strlen(values[4]);
    values[5] = "end"; lens[5] = 3;

    kdt_preimage_init(&p);
    for (i = 0; i < 6; i++)
        ck_assert_int_eq(kdt_preimage_add(&p, labels[i], values[i], lens[i]),
                         0);
    while ((r = kdt_preimage_next(p.text, p.len, &pos, &l, &ll, &v, &vl)) == 1) {
        ck_assert_int_lt(n, 6);
        ck_assert_uint_eq(ll, strlen(labels[n]));
        ck_assert(memcmp(l, labels[n], ll) == 0);
        ck_assert_uint_eq(vl, lens[n]);
        ck_assert(vl == 0 || memcmp(v, values[n], vl) == 0);
        n++;
    }
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(n, 6);
    ck_assert_uint_eq(pos, p.len);
    kdt_preimage_free(&p);
    free(big);
}
END_TEST

static int
walk_all(const char *text)
{
    size_t pos = 0, ll, vl, len = strlen(text);
    const char *l, *v;
    int r;

    while ((r = kdt_preimage_next(text, len, &pos, &l, &ll, &v, &vl)) == 1)
        ;
    return r;
}

START_TEST(test_walker_malformed)
{
    /* Each is refused, none read past its end (ASan build checks that). */
    static const char *bad[] = {
        " 1\na\n",             /* empty label */
        "a\n1\na\n",           /* no space */
        "a 1\na",              /* missing final newline */
        "a 2\na\n",            /* length past the end */
        "a 01\na\n",           /* leading zero */
        "a \na\n",             /* no digits */
        "a 1x\na\n",           /* junk after digits */
        "a 1\nab\n",           /* value longer than said */
        "a 99999999999999999999999\na\n", /* overflow */
        "a 1\na\nb",           /* trailing garbage */
        "a 1\na\nb 1\n",       /* truncated second record */
    };
    size_t i;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(walk_all(bad[i]) == -1, "accepted: %s", bad[i]);
    ck_assert_int_eq(walk_all(""), 0);
    ck_assert_int_eq(walk_all("a 0\n\n"), 0);
}
END_TEST

START_TEST(test_bad_label)
{
    kdt_preimage p;

    kdt_preimage_init(&p);
    ck_assert_int_ne(kdt_preimage_add_str(&p, "two words", "x"), 0);
    ck_assert(p.failed);
    /* Once failed, it stays failed: a key from half a preimage would
     * alias another. */
    ck_assert_int_ne(kdt_preimage_add_str(&p, "ok", "x"), 0);
    kdt_preimage_free(&p);
    kdt_preimage_init(&p);
    ck_assert_int_ne(kdt_preimage_add_str(&p, "", "x"), 0);
    kdt_preimage_free(&p);
}
END_TEST

static Suite *
key_suite(void)
{
    Suite *s = suite_create("key");
    TCase *tc = tcase_create("key");

    tcase_add_test(tc, test_golden_text);
    tcase_add_test(tc, test_golden_key);
    tcase_add_test(tc, test_key_empty_canonical);
    tcase_add_test(tc, test_key_equal_and_hex);
    tcase_add_test(tc, test_fields_unambiguous);
    tcase_add_test(tc, test_walker_round_trip);
    tcase_add_test(tc, test_walker_malformed);
    tcase_add_test(tc, test_bad_label);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(key_suite, KDT_TEST_FORK);
}
