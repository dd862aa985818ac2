/*
 * test_cache_entry.c: the entry codec and what the lookup makes of a
 * damaged entry: every field's damage has its reason, and a flipped bit
 * anywhere, a truncation, an extension, a wrong magic, format, key or
 * architecture is a counted miss that a store then replaces.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xxh3.h"
#include "cache/cache.h"
#include "cache/entry.h"
#include "cache_testutil.h"
#include "harness.h"
#include "base/error.h"
#include "kdtree.h"

static void *
encoded(const kdt_key *key, const kdt_preimage *p, const kdt_blob *b,
        size_t *n)
{
    void *e;

    ck_assert_int_eq(kdt_entry_encode(key, p->text, p->len, b, &e, n), 0);
    return e;
}

static void
expect_reject(const void *buf, size_t n, const kdt_key *key, const char *why)
{
    char got[200];
    kdt_entry_view v;

    ck_assert_int_eq(kdt_entry_decode(buf, n, key, &v, got, sizeof got), -1);
    ck_assert_msg(strstr(got, why) != NULL, "reason '%s', wanted '%s'", got,
                  why);
}

static void
put_le32(unsigned char *p, uint32_t v)
{
    int i;
    for (i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Recomputes the header checksum after an edit, to build entries that are
 * wrong in one field only. */
static void
reseal(unsigned char *e)
{
    uint64_t h = kdt_xxh3_64(e, 64);
    int i;

    for (i = 0; i < 8; i++)
        e[64 + i] = (unsigned char)(h >> (8 * i));
}

START_TEST(test_decode_reasons)
{
    kdt_preimage p, q;
    kdt_key key, other;
    kdt_blob b = ct_blob(300, 3);
    kdt_entry_view v;
    unsigned char *e, *c;
    size_t n;
    char why[200];

    ct_preimage(&p, "k", "sm_90", &key);
    ct_preimage(&q, "k", "sm_120", &other);
    e = encoded(&key, &p, &b, &n);
    ck_assert_int_eq(kdt_entry_decode(e, n, &key, &v, why, sizeof why), 0);
    ck_assert(kdt_key_equal(&v.key, &key));
    ck_assert_uint_eq(v.preimage_len, p.len);
    ck_assert(memcmp(v.preimage, p.text, p.len) == 0);
    ck_assert_uint_eq(v.payload_size, b.size);
    ck_assert(memcmp(v.payload, b.data, b.size) == 0);
    ck_assert_int_eq(kdt_entry_decode(e, n, NULL, &v, why, sizeof why), 0);

    c = malloc(n + 1);
    memcpy(c, e, n);
    c[0] ^= 1;
    expect_reject(c, n, &key, "bad magic");

    memcpy(c, e, n);
    put_le32(c + 8, KDT_CACHE_FORMAT + 1);
    reseal(c);
    expect_reject(c, n, &key, "entry format");

    memcpy(c, e, n);
    put_le32(c + 12, 80);
    reseal(c);
    expect_reject(c, n, &key, "header size");

    memcpy(c, e, n);
    c[40] ^= 4; /* preimage length, checksum not resealed */
    expect_reject(c, n, &key, "header checksum");

    memcpy(c, e, n);
    put_le32(c + 32, 7);
    reseal(c);
    expect_reject(c, n, &key, "payload kind");

    memcpy(c, e, n);
    put_le32(c + 36, 1);
    reseal(c);
    expect_reject(c, n, &key, "reserved");

    memcpy(c, e, n);
    c[47] = 0x40; /* a preimage length of 2^62 */
    reseal(c);
    expect_reject(c, n, &key, "out of bounds");

    memcpy(c, e, n);
    c[n] = 0;
    expect_reject(c, n + 1, &key, "size mismatch");
    expect_reject(c, n - 1, &key, "size mismatch");
    expect_reject(c, 71, &key, "truncated header");
    expect_reject(c, 0, &key, "truncated header");

    memcpy(c, e, n);
    c[KDT_ENTRY_HEADER_SIZE + 3] ^= 0x20;
    expect_reject(c, n, &key, "checksum mismatch");
    memcpy(c, e, n);
    c[n - 1] ^= 0x80;
    expect_reject(c, n, &key, "checksum mismatch");

    /* Wrong key: a valid entry, but for another key (or another arch). */
    expect_reject(e, n, &other, "another key");

    /* A stored key the preimage does not hash to. */
    free(e);
    e = encoded(&other, &p, &b, &n);
    expect_reject(e, n, NULL, "does not hash");

    /* A malformed preimage, consistently checksummed and keyed. */
    {
        static const char bad[] = "format 1\n1\ntrailing";
        kdt_key bk = kdt_key_of(bad, sizeof bad - 1);
        void *be;
        size_t bn;

        ck_assert_int_eq(kdt_entry_encode(&bk, bad, sizeof bad - 1, &b, &be,
                                          &bn), 0);
        expect_reject(be, bn, &bk, "malformed preimage");
        free(be);
    }
    free(c);
    free(e);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
    kdt_preimage_free(&q);
}
END_TEST

/* Writes `buf` as the entry of `key`, checks the lookup misses and counts
 * a rejection, then that a store replaces it and the lookup hits. */
static void
check_rejected_then_replaced(const kdt_key *key, const kdt_preimage *p,
                             const kdt_blob *good, const void *buf, size_t n,
                             const char *what)
{
    char *path = ct_entry_path(ct_user, key);
    kdtree_cache_stats s0, s1;
    kdt_blob got;
    int from;

    {
        char *dir = strdup(path);
        *strrchr(dir, '/') = '\0';
        ct_mkdirs(dir);
        free(dir);
    }
    ck_assert_int_eq(ct_write(path, buf, n, 0600), 0);
    s0 = ct_stats();
    ck_assert_msg(ct_disk_lookup(key, p, &got, &from) == 0, "%s accepted", what);
    s1 = ct_stats();
    ck_assert_msg(s1.disk_rejects == s0.disk_rejects + 1,
                  "%s not counted as rejected", what);
    ck_assert_int_eq(kdt_cache_store(key, p->text, p->len, good), 0);
    ck_assert_msg(ct_disk_lookup(key, p, &got, &from) == 1,
                  "%s not replaced", what);
    ck_assert(ct_same_blob(&got, good));
    kdt_blob_free(&got);
    free(path);
}

START_TEST(test_bit_flips_every_region)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(2000, 4);
    unsigned char *e, *c;
    size_t n, off;
    char what[64];
    int bit = 0;

    ct_preimage(&p, "k", "sm_90", &key);
    ct_mkdirs(ct_user);
    e = encoded(&key, &p, &b, &n);
    c = malloc(n);
    /* Every header byte, then a stride through preimage and payload, and
     * both ends of each region. */
    for (off = 0; off < n; off = off < KDT_ENTRY_HEADER_SIZE ? off + 1
                                                              : off + 97) {
        memcpy(c, e, n);
        c[off] ^= (unsigned char)(1u << (bit++ % 8));
        snprintf(what, sizeof what, "flip at byte %zu", off);
        check_rejected_then_replaced(&key, &p, &b, c, n, what);
    }
    {
        size_t ends[] = { KDT_ENTRY_HEADER_SIZE, KDT_ENTRY_HEADER_SIZE + p.len - 1,
                          KDT_ENTRY_HEADER_SIZE + p.len, n - 1 };
        size_t i;
        for (i = 0; i < 4; i++) {
            memcpy(c, e, n);
            c[ends[i]] ^= 0x01;
            snprintf(what, sizeof what, "flip at byte %zu", ends[i]);
            check_rejected_then_replaced(&key, &p, &b, c, n, what);
        }
    }
    free(c);
    free(e);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_truncated_and_extended)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(1000, 5);
    unsigned char *e, *c;
    size_t n, i;
    char what[64];

    ct_preimage(&p, "k", "sm_90", &key);
    ct_mkdirs(ct_user);
    e = encoded(&key, &p, &b, &n);
    {
        size_t cuts[] = { 0, 1, 8, 40, 71, 72, 73, 72 + p.len / 2,
                          72 + p.len, n - 1 };
        for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            snprintf(what, sizeof what, "truncated to %zu", cuts[i]);
            check_rejected_then_replaced(&key, &p, &b, e, cuts[i], what);
        }
    }
    c = malloc(n + 10);
    memcpy(c, e, n);
    memset(c + n, 0, 10);
    check_rejected_then_replaced(&key, &p, &b, c, n + 10, "extended");
    free(c);
    free(e);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_wrong_magic_format_key_arch)
{
    kdt_preimage p, q, r;
    kdt_key key, arch_key, other_key;
    kdt_blob b = ct_blob(800, 6), ob = ct_blob(800, 7);
    unsigned char *e;
    size_t n;

    ct_preimage(&p, "k", "sm_90", &key);
    ct_preimage(&q, "k", "sm_120", &arch_key);
    ct_preimage(&r, "other_kernel", "sm_90", &other_key);
    ct_mkdirs(ct_user);

    e = encoded(&key, &p, &b, &n);
    memcpy(e, "KDTCACHF", 8);
    check_rejected_then_replaced(&key, &p, &b, e, n, "wrong magic");
    free(e);

    e = encoded(&key, &p, &b, &n);
    put_le32(e + 8, 99);
    reseal(e);
    check_rejected_then_replaced(&key, &p, &b, e, n, "wrong format");
    free(e);

    /* Another kernel's valid entry under this key's name. */
    e = encoded(&other_key, &r, &ob, &n);
    check_rejected_then_replaced(&key, &p, &b, e, n, "wrong key");
    free(e);

    /* The same kernel built for sm_120, stored under the sm_90 name. */
    e = encoded(&arch_key, &q, &ob, &n);
    check_rejected_then_replaced(&key, &p, &b, e, n, "wrong arch");
    free(e);

    kdt_blob_free(&b);
    kdt_blob_free(&ob);
    kdt_preimage_free(&p);
    kdt_preimage_free(&q);
    kdt_preimage_free(&r);
}
END_TEST

static Suite *
suite(void)
{
    TCase *tc = ct_tcase("entry", 60);

    tcase_add_test(tc, test_decode_reasons);
    tcase_add_test(tc, test_bit_flips_every_region);
    tcase_add_test(tc, test_truncated_and_extended);
    tcase_add_test(tc, test_wrong_magic_format_key_arch);
    return ct_suite("cache_entry", tc);
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
