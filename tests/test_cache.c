/*
 * test_cache.c: the cache in one process: round trip, every corruption,
 * trust, modes, directory resolution, layers, unwritable and full
 * directories, the last-used stamp and eviction, the temp sweep and the
 * per-key lock.  Each test runs in its own forked process (Check's
 * default) with its own temp tree (cache_testutil.c).
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/admin.h"
#include "cache_testutil.h"
#include "base/error.h"
#include <xxhash.h>
#include "kdtree.h"

static kdtree_cache_stats
stats(void)
{
    kdtree_cache_stats s;

    ck_assert_int_eq(kdtree_cache_stats_get(&s), 0);
    return s;
}

/* Looks `key` up with an empty memory layer: 1 hit, 0 miss. */
static int
disk_lookup(const kdt_key *key, const kdt_preimage *p, kdt_blob *out,
            int *from)
{
    int r;

    kdt_cache_memory_clear();
    r = kdt_cache_lookup(key, p->text, p->len, out, from);
    ck_assert_int_ge(r, 0);
    return r;
}

static int
same_blob(const kdt_blob *a, const kdt_blob *b)
{
    return a->size == b->size && a->kind == b->kind
           && memcmp(a->data, b->data, a->size) == 0;
}

/* ---- round trip --------------------------------------------------------- */

START_TEST(test_round_trip)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(5000, 1), got;
    kdtree_cache_stats s;
    struct stat st;
    char *path, v1[400];
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    kdtree_cache_stats_reset();
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_int_eq(from, KDT_FROM_NONE);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);

    /* In memory straight away. */
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_MEMORY);
    ck_assert(same_blob(&got, &b));
    kdt_blob_free(&got);

    /* And on disk, as one 0600 file in 0700 directories. */
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_USER);
    ck_assert(same_blob(&got, &b));
    kdt_blob_free(&got);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_uint_eq((uint64_t)st.st_size,
                      KDT_ENTRY_HEADER_SIZE + p.len + b.size);
    ck_assert_int_eq(stat(ct_user, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ck_assert_int_eq(stat(v1, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);

    s = stats();
    ck_assert_uint_eq(s.memory_hits, 1);
    ck_assert_uint_eq(s.disk_hits, 1);
    ck_assert_uint_eq(s.disk_misses, 1);
    ck_assert_uint_eq(s.disk_rejects, 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_ptx_and_alias_kinds)
{
    static const int kinds[] = { KDT_PAYLOAD_PTX, KDT_PAYLOAD_ALIAS };
    kdt_preimage p;
    kdt_key key;
    kdt_blob b, got;
    int from, i;

    for (i = 0; i < 2; i++) {
        ct_preimage(&p, i ? "alias" : "ptx", "compute_90", &key);
        b = ct_blob(100, 2);
        b.kind = kinds[i];
        ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
        ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
        ck_assert_int_eq(got.kind, kinds[i]);
        ck_assert(same_blob(&got, &b));
        kdt_blob_free(&got);
        kdt_blob_free(&b);
        kdt_preimage_free(&p);
    }
}
END_TEST

/* ---- decode: every kind of damage, with its reason ------------------------ */

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
    uint64_t h = XXH3_64bits(e, 64);
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
    s0 = stats();
    ck_assert_msg(disk_lookup(key, p, &got, &from) == 0, "%s accepted", what);
    s1 = stats();
    ck_assert_msg(s1.disk_rejects == s0.disk_rejects + 1,
                  "%s not counted as rejected", what);
    ck_assert_int_eq(kdt_cache_store(key, p->text, p->len, good), 0);
    ck_assert_msg(disk_lookup(key, p, &got, &from) == 1,
                  "%s not replaced", what);
    ck_assert(same_blob(&got, good));
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

START_TEST(test_not_a_regular_file)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 8), got;
    char *path;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    path = ct_entry_path(ct_user, &key);
    ct_mkdirs(path); /* a directory where the entry should be */
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_uint_eq(stats().disk_rejects, 1);
    /* The store cannot rename over a directory: memory only, no failure. */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(rmdir(path), 0);
    /* A symlink to a valid entry is refused too (O_NOFOLLOW). */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    {
        char moved[600];
        snprintf(moved, sizeof moved, "%s.real", path);
        ck_assert_int_eq(rename(path, moved), 0);
        ck_assert_int_eq(symlink(moved, path), 0);
    }
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- trust -------------------------------------------------------------- */

START_TEST(test_group_writable_refused)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 9), got;
    char *path, v1[400];
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(chmod(path, 0660), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_int_eq(chmod(path, 0602), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    kdt_blob_free(&got);

    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ck_assert_int_eq(chmod(v1, 0770), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_uint_eq(stats().disk_rejects, 3);
    /* Nor does it publish into such a directory. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_ne(access(path, F_OK), 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_foreign_owner_refused)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 10), got;
    char *path, layer[400];
    int from;

    if (geteuid() != 0) {
        /* Only root can give a file away; the rule itself is also
         * covered by kdt_cache_trusted() below. */
        struct stat st;
        char why[160];
        memset(&st, 0, sizeof st);
        st.st_uid = geteuid() + 1;
        st.st_mode = S_IFREG | 0600;
        ck_assert_int_eq(kdt_cache_trusted(&st, 0, why, sizeof why), -1);
        ck_assert(strstr(why, "owned by") != NULL);
        return;
    }
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(chown(path, 4242, 4242), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_uint_eq(stats().disk_rejects, 1);
    /* Replaced by a store (we own the directory). */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    kdt_blob_free(&got);

    /* A layer owned by someone else (neither us nor root) is refused. */
    snprintf(layer, sizeof layer, "%s/layer", ct_base);
    free(path);
    path = ct_entry_path(layer, &key);
    ct_write_entry(path, &key, p.text, p.len, &b);
    ck_assert_int_eq(chown(path, 4242, 4242), 0);
    setenv("KDTREE_CACHE_PATH", layer, 1);
    setenv("KDTREE_CACHE", "readonly", 1);
    free(path);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- modes and directories ---------------------------------------------- */

START_TEST(test_mode_off)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 11), got;
    char *path;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(access(path, F_OK), 0);

    setenv("KDTREE_CACHE", "off", 1);
    ck_assert_ptr_null(kdt_cache_user_dir());
    kdtree_cache_stats_reset();
    /* The entry on disk is not read... */
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    ck_assert_uint_eq(stats().disk_misses, 0);
    /* ...and nothing is written. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_ne(access(path, F_OK), 0);
    /* The process still keeps what it compiled. */
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_MEMORY);
    kdt_blob_free(&got);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_mode_readonly)
{
    kdt_preimage p, q;
    kdt_key key, k2;
    kdt_blob b = ct_blob(100, 12), got;
    char *path, *p2;
    struct stat st;
    struct timespec old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ct_preimage(&q, "k2", "sm_90", &k2);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);
    setenv("KDTREE_CACHE", "readonly", 1);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_USER);
    kdt_blob_free(&got);
    /* readonly means no stamp either. */
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mtime, 1000000000);
    ck_assert_int_eq(kdt_cache_store(&k2, q.text, q.len, &b), 0);
    p2 = ct_entry_path(ct_user, &k2);
    ck_assert_int_ne(access(p2, F_OK), 0);
    /* An unknown mode reads as readwrite. */
    setenv("KDTREE_CACHE", "sideways", 1);
    ck_assert_int_eq(kdt_cache_mode(), KDT_CACHE_READWRITE);
    free(path);
    free(p2);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
    kdt_preimage_free(&q);
}
END_TEST

START_TEST(test_dir_resolution)
{
    char *d;

    setenv("KDTREE_CACHE_DIR", "/x/explicit", 1);
    setenv("XDG_CACHE_HOME", "/x/xdg", 1);
    setenv("HOME", "/x/home", 1);
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/explicit");
    free(d);
    setenv("KDTREE_CACHE_DIR", "", 1);
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/xdg/kdtree-jit");
    free(d);
    unsetenv("KDTREE_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "relative/ignored", 1);
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/home/.cache/kdtree-jit");
    free(d);
    unsetenv("XDG_CACHE_HOME");
    d = kdt_cache_user_dir();
    ck_assert_str_eq(d, "/x/home/.cache/kdtree-jit");
    free(d);
    unsetenv("HOME");
    ck_assert_ptr_null(kdt_cache_user_dir());
    d = kdt_cache_entry_dir("/a");
    ck_assert_str_eq(d, "/a/v1");
    free(d);
}
END_TEST

START_TEST(test_no_directory_at_all)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 13), got;
    int from;

    unsetenv("KDTREE_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    kdt_blob_free(&got);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- layers ------------------------------------------------------------- */

START_TEST(test_layers)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob lb = ct_blob(100, 14), ub = ct_blob(100, 15), pb = ct_blob(100, 16);
    kdt_blob got;
    char la[300], lb_dir[300], pre[300], path_env[1000], *path;
    struct stat st0, st1;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    snprintf(la, sizeof la, "%s/layer-a", ct_base);
    snprintf(lb_dir, sizeof lb_dir, "%s/layer-b", ct_base);
    snprintf(pre, sizeof pre, "%s/prebuilt", ct_base);
    /* Missing layers, empty components: all fine. */
    snprintf(path_env, sizeof path_env, "%s/missing::%s:%s", ct_base, la,
             lb_dir);
    setenv("KDTREE_CACHE_PATH", path_env, 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", pre, 1);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);

    /* User only. */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &ub), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_USER);
    kdt_blob_free(&got);

    /* The prebuilt layer is searched before the user's directory... */
    path = ct_entry_path(pre, &key);
    ct_write_entry(path, &key, p.text, p.len, &pb);
    free(path);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_LAYER);
    ck_assert(same_blob(&got, &pb));
    kdt_blob_free(&got);

    /* ...and KDTREE_CACHE_PATH before the prebuilt one, in order. */
    path = ct_entry_path(lb_dir, &key);
    ct_write_entry(path, &key, p.text, p.len, &lb);
    ck_assert_int_eq(stat(path, &st0), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    ck_assert_int_eq(from, KDT_FROM_LAYER);
    ck_assert(same_blob(&got, &lb));
    kdt_blob_free(&got);
    /* A layer is read-only: no stamp. */
    ck_assert_int_eq(stat(path, &st1), 0);
    ck_assert_int_eq(st1.st_mtim.tv_sec, st0.st_mtim.tv_sec);
    ck_assert_int_eq(st1.st_mtim.tv_nsec, st0.st_mtim.tv_nsec);

    /* A corrupt layer entry is skipped: the next layer serves. */
    {
        void *buf;
        size_t n;
        ck_assert_int_eq(ct_read(path, &buf, &n), 0);
        ((unsigned char *)buf)[n - 1] ^= 1;
        ck_assert_int_eq(ct_write(path, buf, n, 0600), 0);
        free(buf);
    }
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    ck_assert(same_blob(&got, &pb));
    kdt_blob_free(&got);
    free(path);

    /* Layers are never written. */
    {
        kdt_preimage q;
        kdt_key k2;
        char *p2;
        ct_preimage(&q, "k2", "sm_90", &k2);
        ck_assert_int_eq(kdt_cache_store(&k2, q.text, q.len, &ub), 0);
        p2 = ct_entry_path(lb_dir, &k2);
        ck_assert_int_ne(access(p2, F_OK), 0);
        free(p2);
        kdt_preimage_free(&q);
    }
    kdt_blob_free(&lb);
    kdt_blob_free(&ub);
    kdt_blob_free(&pb);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_layer_list)
{
    char **d;
    size_t n;

    setenv("KDTREE_CACHE_PATH", ":/a::/b:", 1);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "/pre", 1);
    d = kdt_cache_layer_dirs(&n);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(d[0], "/a");
    ck_assert_str_eq(d[1], "/b");
    ck_assert_str_eq(d[2], "/pre");
    kdt_cache_free_dirs(d, n);
    setenv("KDTREE_CACHE_PREBUILT_DIR", "", 1);
    unsetenv("KDTREE_CACHE_PATH");
    d = kdt_cache_layer_dirs(&n);
    ck_assert_uint_eq(n, 0);
    kdt_cache_free_dirs(d, n);
    /* Unset: the installed layer. */
    unsetenv("KDTREE_CACHE_PREBUILT_DIR");
    d = kdt_cache_layer_dirs(&n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(d[0], KDT_PREBUILT_CACHE_DIR);
    kdt_cache_free_dirs(d, n);
}
END_TEST

/* ---- unwritable and full ------------------------------------------------- */

/* Runs `fn` with stderr captured; returns the number of lines holding
 * `needle`. */
static void
store_three(void)
{
    static const char *names[] = { "a", "b", "c" };
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(4000, 17), got;
    int i, from;

    for (i = 0; i < 3; i++) {
        ct_preimage(&p, names[i], "sm_90", &key);
        /* Never the caller's failure. */
        ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
        /* Served from memory all the same. */
        ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from),
                         1);
        ck_assert_int_eq(from, KDT_FROM_MEMORY);
        kdt_blob_free(&got);
        kdt_preimage_free(&p);
    }
    kdt_blob_free(&b);
}

START_TEST(test_unwritable_dir_warns_once)
{
    ct_unwritable_dir();
    setenv("KDTREE_LOG", "warn", 1);
    kdt_log_reload();
    ck_assert_int_eq(ct_count_log_lines(store_three, "kdtree: warn:"), 1);
    /* Still nothing on the next batch: once per process. */
    ck_assert_int_eq(ct_count_log_lines(store_three, "kdtree: warn:"), 0);
    /* At info level the later failures are still explained. */
    setenv("KDTREE_LOG", "info", 1);
    kdt_log_reload();
    ck_assert_int_ge(ct_count_log_lines(store_three, "not published"), 3);
}
END_TEST

START_TEST(test_full_disk)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(1 << 20, 18), got;
    struct rlimit rl;
    char v1[400];
    kdt_cache_file *f;
    size_t n;
    int from;

    /* RLIMIT_FSIZE makes write() fail part-way (EFBIG) as a full disk
     * would (ENOSPC): the same path through publish. */
    signal(SIGXFSZ, SIG_IGN);
    rl.rlim_cur = rl.rlim_max = 64 * 1024;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    kdt_blob_free(&got);
    /* No entry and no temp file left behind. */
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 0);
    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ck_assert_int_eq(kdt_cache_scan(v1, &f, &n), 0);
    ck_assert_uint_eq(n, 0);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", v1);
        ck_assert_int_eq(system(cmd), 0);
    }
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

/* ---- stamp, eviction, sweep -------------------------------------------- */

START_TEST(test_hit_refreshes_stamp)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 19), got;
    struct timespec old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
    struct stat st;
    char *path;
    int from;

    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    path = ct_entry_path(ct_user, &key);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);
    ck_assert_int_eq(disk_lookup(&key, &p, &got, &from), 1);
    kdt_blob_free(&got);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_gt(st.st_mtime, time(NULL) - 3600);
    free(path);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

START_TEST(test_eviction_order)
{
    static const char *names[] = { "e0", "e1", "e2", "e3", "e4", "e5" };
    kdt_preimage p[6];
    kdt_key key[6];
    kdt_blob b = ct_blob(10000, 20), got;
    char *path[6];
    uint64_t entry_size;
    int i, from;

    for (i = 0; i < 5; i++) {
        struct timespec t[2];
        ct_preimage(&p[i], names[i], "sm_90", &key[i]);
        ck_assert_int_eq(kdt_cache_store(&key[i], p[i].text, p[i].len, &b), 0);
        path[i] = ct_entry_path(ct_user, &key[i]);
        /* Stamps 100 s apart, e0 oldest. */
        t[0].tv_sec = t[1].tv_sec = 1000000000 + 100 * i;
        t[0].tv_nsec = t[1].tv_nsec = 0;
        ck_assert_int_eq(utimensat(AT_FDCWD, path[i], t, 0), 0);
    }
    ct_preimage(&p[5], names[5], "sm_90", &key[5]);
    path[5] = ct_entry_path(ct_user, &key[5]);
    entry_size = KDT_ENTRY_HEADER_SIZE + p[0].len + b.size;
    /* Using e0 makes it the newest: e1 and e2 are now the oldest. */
    ck_assert_int_eq(disk_lookup(&key[0], &p[0], &got, &from), 1);
    kdt_blob_free(&got);
    /* Room for four: storing e5 must evict exactly e1 and e2. */
    {
        char cap[64];
        snprintf(cap, sizeof cap, "%llu",
                 (unsigned long long)(4 * entry_size + entry_size / 2));
        setenv("KDTREE_CACHE_MAX_BYTES", cap, 1);
    }
    ck_assert_int_eq(kdt_cache_store(&key[5], p[5].text, p[5].len, &b), 0);
    ck_assert_int_eq(access(path[0], F_OK), 0);
    ck_assert_int_ne(access(path[1], F_OK), 0);
    ck_assert_int_ne(access(path[2], F_OK), 0);
    ck_assert_int_eq(access(path[3], F_OK), 0);
    ck_assert_int_eq(access(path[4], F_OK), 0);
    ck_assert_int_eq(access(path[5], F_OK), 0);
    /* A cap below one entry keeps the one just stored. */
    setenv("KDTREE_CACHE_MAX_BYTES", "1", 1);
    ck_assert_int_eq(kdt_cache_store(&key[1], p[1].text, p[1].len, &b), 0);
    ck_assert_int_eq(access(path[1], F_OK), 0);
    for (i = 0; i < 6; i++)
        if (i != 1)
            ck_assert_int_ne(access(path[i], F_OK), 0);
    for (i = 0; i < 6; i++) {
        free(path[i]);
        kdt_preimage_free(&p[i]);
    }
    kdt_blob_free(&b);
}
END_TEST

START_TEST(test_max_bytes_parse)
{
    unsetenv("KDTREE_CACHE_MAX_BYTES");
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "12345", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), 12345);
    setenv("KDTREE_CACHE_MAX_BYTES", "3M", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), 3u << 20);
    setenv("KDTREE_CACHE_MAX_BYTES", "2G", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)2 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "0", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), 0);
    setenv("KDTREE_CACHE_MAX_BYTES", "lots", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "-5", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
    setenv("KDTREE_CACHE_MAX_BYTES", "99999999999T", 1);
    ck_assert_uint_eq(kdt_cache_max_bytes(), (uint64_t)1 << 30);
}
END_TEST

static void
make_temp(const char *dir, const char *name, time_t mtime)
{
    char path[600];
    struct timespec t[2] = { { mtime, 0 }, { mtime, 0 } };

    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(ct_write(path, "partial", 7, 0600), 0);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, t, 0), 0);
}

static int
exists_in(const char *dir, const char *name)
{
    char path[600];

    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

START_TEST(test_sweep_temps)
{
    char v1[400], host[48], dead[200], live[200], mine[200], far_new[200],
        far_old[200], other[200];
    const char *hex = "0123456789abcdef0123456789abcdef";
    time_t now = time(NULL);
    pid_t child;

    snprintf(v1, sizeof v1, "%s/v%d", ct_user, KDT_CACHE_FORMAT);
    ct_mkdirs(v1);
    kdt_cache_host_tag(host, sizeof host);
    /* A pid that surely is dead: a child we reaped. */
    child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    snprintf(dead, sizeof dead, ".%s.%ld.0.%s.tmp", hex, (long)child, host);
    snprintf(live, sizeof live, ".%s.%ld.0.%s.tmp", hex, (long)getppid(),
             host);
    snprintf(mine, sizeof mine, ".%s.%ld.3.%s.tmp", hex, (long)getpid(),
             host);
    snprintf(far_new, sizeof far_new, ".%s.%ld.0.elsewhere.tmp", hex,
             (long)child);
    snprintf(far_old, sizeof far_old, ".%s.1.0.elsewhere.tmp", hex);
    snprintf(other, sizeof other, "notes.tmp");
    make_temp(v1, dead, now);
    make_temp(v1, live, now);
    make_temp(v1, mine, now);
    make_temp(v1, far_new, now);
    make_temp(v1, far_old, now - 7200);
    make_temp(v1, other, now - 7200);
    ck_assert_int_eq(kdt_cache_sweep_temps(v1, KDT_CACHE_TEMP_STALE_S), 2);
    ck_assert(!exists_in(v1, dead));
    ck_assert(!exists_in(v1, far_old));
    ck_assert(exists_in(v1, live));
    ck_assert(exists_in(v1, mine));
    ck_assert(exists_in(v1, far_new));
    ck_assert(exists_in(v1, other)); /* not ours: never touched */
}
END_TEST

/* ---- the per-key lock ---------------------------------------------------- */

START_TEST(test_lock_basic)
{
    kdt_key key = kdt_key_of("lock", 4), k2 = kdt_key_of("other", 5);
    kdt_cache_lock *a, *b;
    char *dir;
    struct stat st;
    pid_t pid;
    int status;

    dir = kdt_cache_lock_dir();
    ck_assert(strncmp(dir, ct_base, strlen(ct_base)) == 0);
    a = kdt_cache_lock_acquire(&key);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    /* Another key is independent. */
    b = kdt_cache_lock_acquire(&k2);
    ck_assert_ptr_nonnull(b);
    kdt_cache_lock_release(b);
    /* Another process waits, then gives up after the timeout. */
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0.3", 1);
    pid = fork();
    if (pid == 0) {
        double t0 = kdt_now_ms();
        kdt_cache_lock *c = kdt_cache_lock_acquire(&key);
        double dt = kdt_now_ms() - t0;
        _exit(c == NULL && dt >= 250 ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kdt_cache_lock_release(a);
    /* Released: the next one gets it at once, and no file piles up. */
    a = kdt_cache_lock_acquire(&key);
    ck_assert_ptr_nonnull(a);
    kdt_cache_lock_release(a);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    kdt_cache_lock_release(NULL);
    free(dir);
}
END_TEST

START_TEST(test_lock_dies_with_holder)
{
    kdt_key key = kdt_key_of("lock", 4);
    kdt_cache_lock *a;
    int pfd[2], status;
    pid_t pid;
    char c;

    ck_assert_int_eq(pipe(pfd), 0);
    pid = fork();
    if (pid == 0) {
        kdt_cache_lock *l = kdt_cache_lock_acquire(&key);
        (void)!write(pfd[1], l ? "y" : "n", 1);
        pause();
        _exit(0);
    }
    ck_assert_int_eq(read(pfd[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "0", 1);
    ck_assert_ptr_null(kdt_cache_lock_acquire(&key));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    /* Its lock went with it, though its file is still there. */
    setenv("KDTREE_CACHE_LOCK_TIMEOUT", "5", 1);
    a = kdt_cache_lock_acquire(&key);
    ck_assert_ptr_nonnull(a);
    kdt_cache_lock_release(a);
}
END_TEST

START_TEST(test_lock_dir_untrusted)
{
    kdt_key key = kdt_key_of("lock", 4);
    char *dir = kdt_cache_lock_dir();

    ck_assert_int_eq(mkdir(dir, 0777), 0);
    ck_assert_int_eq(chmod(dir, 0777), 0);
    ck_assert_ptr_null(kdt_cache_lock_acquire(&key));
    ck_assert_int_eq(rmdir(dir), 0);
    ck_assert_int_eq(ct_write(dir, "", 0, 0600), 0);
    ck_assert_ptr_null(kdt_cache_lock_acquire(&key));
    free(dir);
}
END_TEST

START_TEST(test_lock_dir_fallbacks)
{
    char *d, want[64];

    unsetenv("XDG_RUNTIME_DIR");
    d = kdt_cache_lock_dir();
    snprintf(want, sizeof want, "kdtree-jit-%lu", (unsigned long)geteuid());
    ck_assert(strstr(d, "kdtree-jit") != NULL);
    if (access("/dev/shm", F_OK) == 0)
        ck_assert_str_eq(d + strlen("/dev/shm/"), want);
    free(d);
    setenv("XDG_RUNTIME_DIR", "relative", 1);
    d = kdt_cache_lock_dir();
    ck_assert(d[0] == '/');
    free(d);
}
END_TEST

START_TEST(test_memory_clear)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(10, 21), b2 = ct_blob(20, 22), got;
    int from;

    setenv("KDTREE_CACHE", "off", 1);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    /* A second store replaces the first. */
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b2), 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    ck_assert(same_blob(&got, &b2));
    kdt_blob_free(&got);
    kdt_cache_memory_clear();
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 0);
    kdt_blob_free(&b);
    kdt_blob_free(&b2);
    kdt_preimage_free(&p);
}
END_TEST

/* The memory layer survives fork() (its lock is held across it), and the
 * child sees what the parent had. */
START_TEST(test_fork_after_use)
{
    kdt_preimage p;
    kdt_key key;
    kdt_blob b = ct_blob(100, 23), got;
    int from, status;
    pid_t pid;

    setenv("KDTREE_CACHE", "off", 1);
    ct_preimage(&p, "k", "sm_90", &key);
    ck_assert_int_eq(kdt_cache_store(&key, p.text, p.len, &b), 0);
    pid = fork();
    if (pid == 0) {
        int r = kdt_cache_lookup(&key, p.text, p.len, &got, &from);
        _exit(r == 1 && from == KDT_FROM_MEMORY ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(kdt_cache_lookup(&key, p.text, p.len, &got, &from), 1);
    kdt_blob_free(&got);
    kdt_blob_free(&b);
    kdt_preimage_free(&p);
}
END_TEST

int
main(void)
{
    TCase *tc = ct_tcase("cache", 60);

    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_ptx_and_alias_kinds);
    tcase_add_test(tc, test_decode_reasons);
    tcase_add_test(tc, test_bit_flips_every_region);
    tcase_add_test(tc, test_truncated_and_extended);
    tcase_add_test(tc, test_wrong_magic_format_key_arch);
    tcase_add_test(tc, test_not_a_regular_file);
    tcase_add_test(tc, test_group_writable_refused);
    tcase_add_test(tc, test_foreign_owner_refused);
    tcase_add_test(tc, test_mode_off);
    tcase_add_test(tc, test_mode_readonly);
    tcase_add_test(tc, test_dir_resolution);
    tcase_add_test(tc, test_no_directory_at_all);
    tcase_add_test(tc, test_layers);
    tcase_add_test(tc, test_layer_list);
    tcase_add_test(tc, test_unwritable_dir_warns_once);
    tcase_add_test(tc, test_full_disk);
    tcase_add_test(tc, test_hit_refreshes_stamp);
    tcase_add_test(tc, test_eviction_order);
    tcase_add_test(tc, test_max_bytes_parse);
    tcase_add_test(tc, test_sweep_temps);
    tcase_add_test(tc, test_lock_basic);
    tcase_add_test(tc, test_lock_dies_with_holder);
    tcase_add_test(tc, test_lock_dir_untrusted);
    tcase_add_test(tc, test_lock_dir_fallbacks);
    tcase_add_test(tc, test_memory_clear);
    tcase_add_test(tc, test_fork_after_use);
    return ct_run("cache", tc);
}
