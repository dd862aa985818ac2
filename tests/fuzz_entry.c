/*
 * fuzz_entry.c: fuzz target over kdt_entry_decode(), the parser of files
 * from the (untrusted) cache directory.
 *
 * Built three ways:
 *  - libFuzzer (.ci/sanitize.sh: clang -fsanitize=fuzzer,address,undefined
 *    -DKDT_FUZZ_LIBFUZZER, linked with src/cache/key.c and src/cache/entry.c
 *    only; the stubs below stand in for error.c);
 *  - -DKDT_FUZZ_STANDALONE (make check's test_cache_fuzz): two Check
 *    tests (tests/harness.h), the seed corpus, then a bounded
 *    deterministic mutation loop ($KDT_FUZZ_ITERS, default 1000000), so
 *    every CI run fuzzes a little without clang;
 *    `test_cache_fuzz --write-corpus DIR` regenerates the seeds.
 *
 * Random bytes almost never get past the header checksum, so each input is
 * also decoded once more after "resealing" it: both checksums recomputed
 * from whatever the header claims.  That sends mutated lengths, kinds and
 * preimages through the deep checks too.
 */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/entry.h"
#include "base/error.h"
#include "base/xxh3.h"

#ifdef KDT_FUZZ_STANDALONE
#include <check.h>

#include "harness.h"
#endif

#ifdef KDT_FUZZ_LIBFUZZER
/* error.c's part, without the rest of the library. */
int
kdt_fail(int status, const char *fmt, ...)
{
    (void)fmt;
    return status;
}
#endif

static void
put64(unsigned char *p, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t
get64(const unsigned char *p)
{
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Recomputes the checksums of `b` in place where its lengths allow. */
static void
reseal(unsigned char *b, size_t size)
{
    uint64_t pre, pay;

    if (size < KDT_ENTRY_HEADER_SIZE)
        return;
    pre = get64(b + 40);
    pay = get64(b + 48);
    if (pre <= size - KDT_ENTRY_HEADER_SIZE
        && pay == size - KDT_ENTRY_HEADER_SIZE - pre) {
        put64(b + 56, kdt_xxh3_64_pair(b + KDT_ENTRY_HEADER_SIZE, (size_t)pre,
                                       b + KDT_ENTRY_HEADER_SIZE + pre,
                                       (size_t)pay));
    }
    put64(b + 64, kdt_xxh3_64(b, 64));
}

static unsigned long accepted;

static void
check_one(const unsigned char *data, size_t size)
{
    kdt_entry_view v;
    char why[128];

    if (kdt_entry_decode(data, size, NULL, &v, why, sizeof why) != 0) {
        if (why[0] == '\0')
            abort(); /* every refusal says why */
        return;
    }
    accepted++;
    /* What it accepted must really be consistent. */
    {
        const unsigned char *end = data + size;
        const unsigned char *pre = (const unsigned char *)v.preimage;
        const unsigned char *pay = v.payload;
        kdt_key k = kdt_key_of(v.preimage, v.preimage_len);
        kdt_blob b;
        void *enc;
        size_t n;

        if (pre < data || pre + v.preimage_len > end || pay < data
            || pay + v.payload_size != end || !kdt_key_equal(&k, &v.key))
            abort();
        if (kdt_entry_decode(data, size, &k, NULL, why, sizeof why) != 0)
            abort();
        /* Re-encoding gives the same bytes: one spelling per entry. */
        b.data = (void *)pay;
        b.size = v.payload_size;
        b.kind = v.kind;
        if (kdt_entry_encode(&v.key, v.preimage, v.preimage_len, &b, &enc,
                             &n) != 0)
            abort();
        if (n != size || memcmp(enc, data, n) != 0)
            abort();
        free(enc);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *copy;

    check_one(data, size);
    if (size < KDT_ENTRY_HEADER_SIZE || size > (1u << 20))
        return 0;
    copy = malloc(size);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    reseal(copy, size);
    check_one(copy, size);
    free(copy);
    return 0;
}

#ifdef KDT_FUZZ_STANDALONE

#ifndef KDT_FUZZ_CORPUS
#define KDT_FUZZ_CORPUS "tests/fuzz_corpus"
#endif

typedef struct seed {
    unsigned char *data;
    size_t size;
} seed;

static seed *seeds;
static size_t n_seeds;

static void
add_seed(const void *data, size_t size)
{
    seeds = realloc(seeds, (n_seeds + 1) * sizeof *seeds);
    if (!seeds)
        abort();
    seeds[n_seeds].data = malloc(size ? size : 1);
    if (!seeds[n_seeds].data)
        abort();
    memcpy(seeds[n_seeds].data, data, size);
    seeds[n_seeds].size = size;
    n_seeds++;
}

static void
add_entry_seed(const char *kernel, int kind, size_t payload)
{
    kdt_preimage p;
    kdt_key k;
    kdt_blob b;
    void *enc;
    size_t n, i;

    kdt_preimage_init(&p);
    kdt_preimage_add_str(&p, "format", "1");
    kdt_preimage_add_str(&p, "kernel", kernel);
    kdt_preimage_add_str(&p, "constants", "N_MAX=65,L=15");
    kdt_preimage_add_str(&p, "target", kind == KDT_PAYLOAD_PTX ? "compute_90"
                                                               : "sm_90");
    k = kdt_key_of(p.text, p.len);
    b.data = malloc(payload);
    for (i = 0; i < payload; i++)
        ((unsigned char *)b.data)[i] = (unsigned char)(i * 7 + 3);
    b.size = payload;
    b.kind = kind;
    if (kdt_entry_encode(&k, p.text, p.len, &b, &enc, &n) != 0)
        abort();
    add_seed(enc, n);
    free(enc);
    free(b.data);
    kdt_preimage_free(&p);
}

/* The built-in seeds: what --write-corpus writes. */
static void
builtin_seeds(void)
{
    add_entry_seed("tree_accept", KDT_PAYLOAD_CUBIN, 64);
    add_entry_seed("draft_topk", KDT_PAYLOAD_PTX, 200);
    add_entry_seed("alias", KDT_PAYLOAD_ALIAS, 4);
    add_entry_seed("x", KDT_PAYLOAD_CUBIN, 1);
    /* A header alone. */
    add_seed(seeds[0].data, KDT_ENTRY_HEADER_SIZE);
}

static int
load_corpus(const char *dir)
{
    struct dirent *d;
    DIR *dp = opendir(dir);
    int n = 0;

    if (!dp)
        return 0;
    while ((d = readdir(dp)) != NULL) {
        char path[4096];
        FILE *f;
        unsigned char buf[65536];
        size_t size;

        if (d->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, d->d_name);
        f = fopen(path, "rb");
        if (!f)
            continue;
        size = fread(buf, 1, sizeof buf, f);
        fclose(f);
        add_seed(buf, size);
        n++;
    }
    closedir(dp);
    return n;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t
rng(void)
{
    /* splitmix64: deterministic, so a failure replays. */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t
mutate(unsigned char *b, size_t size, size_t cap)
{
    static const uint64_t interesting[] = {
        0, 1, 71, 72, 73, 0x7fffffff, 0x80000000, 0xffffffff,
        0xffffffffffffffffull, 0x8000000000000000ull, 16u << 20,
        (16u << 20) + 1, 512u << 20, (512u << 20) + 1
    };
    int m, n_mut = 1 + (int)(rng() % 4);

    for (m = 0; m < n_mut; m++) {
        size_t pos = size ? rng() % size : 0;
        switch (rng() % 8) {
        case 0: /* flip a bit */
            if (size)
                b[pos] ^= (unsigned char)(1u << (rng() % 8));
            break;
        case 1: /* set a byte */
            if (size)
                b[pos] = (unsigned char)rng();
            break;
        case 2: /* truncate */
            size = size ? rng() % size : 0;
            break;
        case 3: /* grow */
            if (size < cap) {
                size_t add = 1 + rng() % 16;
                if (add > cap - size)
                    add = cap - size;
                memset(b + size, (int)(rng() & 0xff), add);
                size += add;
            }
            break;
        case 4: /* an interesting value in a header field */
            if (size >= KDT_ENTRY_HEADER_SIZE) {
                static const int fields[] = { 8, 12, 32, 36, 40, 48 };
                int f = fields[rng() % 6];
                uint64_t v = interesting[rng() % (sizeof interesting
                                                  / sizeof interesting[0])];
                if (f < 40) {
                    int i;
                    for (i = 0; i < 4; i++)
                        b[f + i] = (unsigned char)(v >> (8 * i));
                } else {
                    put64(b + f, v);
                }
            }
            break;
        case 5: /* corrupt the preimage's text structure */
            if (size > KDT_ENTRY_HEADER_SIZE) {
                static const char chars[] = " \n0123456789";
                pos = KDT_ENTRY_HEADER_SIZE
                      + rng() % (size - KDT_ENTRY_HEADER_SIZE);
                b[pos] = (unsigned char)chars[rng() % (sizeof chars - 1)];
            }
            break;
        case 6: /* splice another seed's bytes in */
            if (n_seeds && size) {
                const seed *s = &seeds[rng() % n_seeds];
                size_t len = 1 + rng() % 32, from;
                if (s->size) {
                    from = rng() % s->size;
                    if (len > s->size - from)
                        len = s->size - from;
                    if (len > size - pos)
                        len = size - pos;
                    memcpy(b + pos, s->data + from, len);
                }
            }
            break;
        default: /* reseal: valid checksums over whatever is there */
            reseal(b, size);
            break;
        }
    }
    return size;
}

static int
write_corpus(const char *dir)
{
    size_t i;

    for (i = 0; i < n_seeds; i++) {
        char path[4096];
        FILE *f;
        snprintf(path, sizeof path, "%s/seed-%02zu.kdt", dir, i);
        f = fopen(path, "wb");
        if (!f || fwrite(seeds[i].data, 1, seeds[i].size, f) != seeds[i].size)
            return 1;
        fclose(f);
    }
    printf("wrote %zu seeds to %s\n", n_seeds, dir);
    return 0;
}

/* Where the seed corpus is (argv[1], else KDT_FUZZ_CORPUS), and how many
 * seeds came from it; loaded before the tests fork. */
static const char *corpus_dir = KDT_FUZZ_CORPUS;
static int from_disk;

/* The seeds, built in and from the corpus: every decode is consistent and
 * the valid ones are accepted. */
START_TEST(seeds_decode)
{
    ck_assert_msg(from_disk > 0, "no seed corpus in %s", corpus_dir);
    for (size_t i = 0; i < n_seeds; i++)
        LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size);
    ck_assert_msg(accepted >= 4, "valid seeds were refused (%lu accepted)",
                  accepted);
}
END_TEST

/* $KDT_FUZZ_ITERS (default 1000000) deterministic mutations of the seeds:
 * no decode crashes or accepts an inconsistent entry (either aborts). */
START_TEST(mutated_inputs)
{
    const char *it = getenv("KDT_FUZZ_ITERS");
    unsigned long iters = it ? strtoul(it, NULL, 10) : 1000000, i;
    size_t cap = 1 << 16;
    unsigned char *buf = malloc(cap);
    double t0 = kdt_now_ms();

    ck_assert_ptr_nonnull(buf);
    for (i = 0; i < iters; i++) {
        const seed *s = &seeds[rng() % n_seeds];
        size_t size = s->size < cap ? s->size : cap;
        memcpy(buf, s->data, size);
        size = mutate(buf, size, cap);
        LLVMFuzzerTestOneInput(buf, size);
    }
    free(buf);
    printf("fuzz_entry: %zu seeds (%d from the corpus), %lu mutated inputs "
           "(%lu decodes accepted) in %.0f ms, no failure\n", n_seeds,
           from_disk, iters, accepted, kdt_now_ms() - t0);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("cache_fuzz");
    TCase *tc = tcase_create("fuzz");

    /* A bounded loop: a second here, longer under the sanitizers
     * (.ci/sanitize.sh asks for more iterations). */
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, seeds_decode);
    tcase_add_test(tc, mutated_inputs);
    suite_add_tcase(s, tc);
    return s;
}

int
main(int argc, char **argv)
{
    builtin_seeds();
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2]);
    if (argc > 1)
        corpus_dir = argv[1];
    from_disk = load_corpus(corpus_dir);
    return kdt_test_main(suite, KDT_TEST_FORK);
}

#endif /* KDT_FUZZ_STANDALONE */
