/*
 * test_cubin_info.c: the cubin reader on images built here byte by byte
 * (host only, no NVRTC): every field read from where the tools write it,
 * the sections it must not mistake for a kernel's, a clear reason for
 * each malformed image, and no read outside the image however it is cut
 * or damaged.  tests/test_cubin_tools.c checks it on NVRTC's cubins
 * against cuobjdump.
 */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "jit/cubin_info.h"

/* ---- a small ELF writer ------------------------------------------------ */

#define IMG_MAX 4096

typedef struct sec {
    uint32_t name, type, link;
    uint64_t off, size;
} sec;

typedef struct img {
    uint8_t b[IMG_MAX];
    size_t len;
    sec s[16];
    int n;
    char names[512];
    size_t names_len;
} img;

static void
put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static void
put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t
add_name(img *m, const char *name)
{
    uint32_t at = (uint32_t)m->names_len;
    memcpy(m->names + at, name, strlen(name) + 1);
    m->names_len += strlen(name) + 1;
    return at;
}

/* Appends a section with `size` bytes of `data` (NULL: a NOBITS section
 * of that size, no bytes in the file).  Returns its index. */
static int
add_sec(img *m, const char *name, uint32_t type, const void *data,
        size_t size, uint32_t link)
{
    sec *s = &m->s[++m->n];
    s->name = add_name(m, name);
    s->type = type;
    s->link = link;
    s->size = size;
    m->len = (m->len + 7) & ~(size_t)7;
    s->off = data ? m->len : 0xdeadbeef;
    if (data) {
        memcpy(m->b + m->len, data, size);
        m->len += size;
    }
    return m->n;
}

/* Lays out the section-name table and the headers; returns the size. */
static size_t
finish(img *m)
{
    int shstr = add_sec(m, ".shstrtab", 3, NULL, 0, 0);
    m->s[shstr].off = m->len;
    m->s[shstr].size = m->names_len;
    memcpy(m->b + m->len, m->names, m->names_len);
    m->len += m->names_len;
    m->len = (m->len + 7) & ~(size_t)7;
    memset(m->b, 0, 64);
    memcpy(m->b, "\177ELF", 4);
    m->b[4] = 2; /* 64-bit */
    m->b[5] = 1; /* little-endian */
    m->b[6] = 1;
    m->b[18] = 190; /* EM_CUDA */
    put64(m->b + 0x28, m->len);
    m->b[0x3a] = 64;
    m->b[0x3c] = (uint8_t)(m->n + 1);
    m->b[0x3e] = (uint8_t)shstr;
    memset(m->b + m->len, 0, 64); /* section 0 */
    for (int i = 1; i <= m->n; i++) {
        uint8_t *h = m->b + m->len + 64 * i;
        memset(h, 0, 64);
        put32(h, m->s[i].name);
        put32(h + 4, m->s[i].type);
        put64(h + 0x18, m->s[i].off);
        put64(h + 0x20, m->s[i].size);
        put32(h + 0x28, m->s[i].link);
    }
    m->len += 64 * (size_t)(m->n + 1);
    return m->len;
}

/* .nv.info entries. */
typedef struct info {
    uint8_t b[256];
    size_t len;
} info;

static void
sval(info *f, uint8_t attr, const uint32_t *w, int n)
{
    f->b[f->len] = 4;
    f->b[f->len + 1] = attr;
    f->b[f->len + 2] = (uint8_t)(4 * n);
    f->b[f->len + 3] = 0;
    for (int i = 0; i < n; i++)
        put32(f->b + f->len + 4 + 4 * i, w[i]);
    f->len += 4 + 4 * (size_t)n;
}

static void
hval(info *f, uint8_t fmt, uint8_t attr, uint16_t v)
{
    f->b[f->len] = fmt;
    f->b[f->len + 1] = attr;
    f->b[f->len + 2] = (uint8_t)v;
    f->b[f->len + 3] = (uint8_t)(v >> 8);
    f->len += 4;
}

static void
symbol(uint8_t *p, uint32_t name, uint8_t info_byte, uint16_t shndx)
{
    memset(p, 0, 24);
    put32(p, name);
    p[4] = info_byte;
    p[5] = 0x10; /* what NVIDIA's tools set on an entry point */
    p[6] = (uint8_t)shndx;
}

/* Knobs for the damaged variants of the standard image. */
typedef struct variant {
    int class32, machine, no_symtab, no_k_two_symbol, bad_format;
    int info_nobits, sval_overrun;
} variant;

#define SEC_MODULE_INFO 3

/* Two kernels: k_one (40 registers, 16-byte frame, 48-byte stack with its
 * callee, 2048 bytes of static shared memory, a 600-byte parameter bank,
 * __launch_bounds__(256)) and k_two (255 registers, no stack, .reqntid
 * 32x4x2), beside a device function and sections whose names only
 * contain a kernel's. */
static size_t
standard(img *m, variant v)
{
    static const char strtab[] = "\0k_one\0k_two\0helper\0";
    uint8_t syms[4 * 24];
    info mod = {{0}, 0}, one = {{0}, 0}, two = {{0}, 0};
    static const uint8_t text[64] = {0};
    static const uint8_t cbank[600] = {0};

    memset(m, 0, sizeof *m);
    m->len = 64;
    m->names_len = 1;
    add_sec(m, ".strtab", 3, strtab, sizeof strtab, 0);          /* 1 */
    memset(syms, 0, 24);
    symbol(syms + 24, 1, 0x12, 6);                /* k_one: global func */
    symbol(syms + 48, v.no_k_two_symbol ? 13 : 7, 0x12, 7);
    symbol(syms + 72, 13, 0x02, 6);               /* helper: local func */
    if (!v.no_symtab)
        add_sec(m, ".symtab", 2, syms, sizeof syms, 1);          /* 2 */
    else
        add_sec(m, ".symtabx", 1, syms, sizeof syms, 1);
    sval(&mod, 0x2f, (const uint32_t[]){1, 40}, 2);
    sval(&mod, 0x11, (const uint32_t[]){3, 96}, 2); /* helper's frame */
    sval(&mod, 0x11, (const uint32_t[]){1, 16}, 2);
    hval(&mod, 1, 0x04, 0); /* an NVAL entry to step over */
    sval(&mod, 0x2f, (const uint32_t[]){2, 255}, 2);
    sval(&mod, 0x12, (const uint32_t[]){1, 48}, 2);
    sval(&mod, 0x11, (const uint32_t[]){2, 0}, 2);
    if (v.bad_format)
        mod.b[0] = 9;
    if (v.sval_overrun)
        mod.b[2] = 200;
    add_sec(m, ".nv.info", 0x70000000, mod.b, mod.len, 2);       /* 3 */
    hval(&one, 3, 0x1b, 255); /* HVAL: MAXREG_COUNT */
    hval(&one, 2, 0x4c, 1);   /* BVAL: NUM_BARRIERS */
    sval(&one, 0x05, (const uint32_t[]){256, 1, 1}, 3);
    sval(&two, 0x10, (const uint32_t[]){32, 4, 2}, 3);
    add_sec(m, ".nv.info.k_one", 0x70000000, v.info_nobits ? NULL : one.b,
            v.info_nobits ? 0 : one.len, 2);                     /* 4 */
    if (v.info_nobits)
        m->s[4].type = 8;
    add_sec(m, ".nv.info.k_two", 0x70000000, two.b, two.len, 2); /* 5 */
    add_sec(m, ".text.k_one", 1, text, sizeof text, 2);          /* 6 */
    add_sec(m, ".text.k_two", 1, text, sizeof text, 2);          /* 7 */
    add_sec(m, ".nv.shared.k_one", 8, NULL, 2048, 0);
    add_sec(m, ".nv.constant0.k_one", 1, cbank, sizeof cbank, 0);
    /* What sm_100 and later images repeat for their own use: not kernels,
     * and never the sizes of k_two. */
    add_sec(m, ".nv.merc.nv.info.k_one", 0x70000083, one.b, one.len, 2);
    add_sec(m, ".nv.merc.nv.shared.k_two", 8, NULL, 4096, 0);
    finish(m);
    if (v.class32)
        m->b[4] = 1;
    if (v.machine)
        m->b[18] = (uint8_t)v.machine;
    return m->len;
}

static img the_img;

START_TEST(test_fields)
{
    kdt_cubin_kernel k[4];
    char why[160];
    int n = -1;
    size_t size = standard(&the_img, (variant){0});
    ck_assert_int_eq(kdt_cubin_kernels(the_img.b, size, k, 4, &n, why,
                                       sizeof why), 0);
    ck_assert_str_eq(why, "");
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(k[0].name, "k_one");
    ck_assert_uint_eq(k[0].registers, 40);
    ck_assert_uint_eq(k[0].stack_bytes, 48);
    ck_assert_uint_eq(k[0].shared_bytes, 2048);
    ck_assert_uint_eq(k[0].param_bytes, 600);
    ck_assert_uint_eq(k[0].max_threads, 256);
    ck_assert_str_eq(k[1].name, "k_two");
    ck_assert_uint_eq(k[1].registers, 255);
    ck_assert_uint_eq(k[1].stack_bytes, 0);
    ck_assert_uint_eq(k[1].shared_bytes, 0);
    ck_assert_uint_eq(k[1].param_bytes, 0);
    ck_assert_uint_eq(k[1].max_threads, 256);
}
END_TEST

START_TEST(test_max_counts_all)
{
    kdt_cubin_kernel k[1];
    int n = -1;
    size_t size = standard(&the_img, (variant){0});
    ck_assert_int_eq(kdt_cubin_kernels(the_img.b, size, k, 1, &n, NULL, 0),
                     0);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(k[0].name, "k_one");
    ck_assert_int_eq(kdt_cubin_kernels(the_img.b, size, NULL, 0, &n, NULL,
                                       0), 0);
    ck_assert_int_eq(n, 2);
}
END_TEST

/* One damaged image: refused with a reason that contains `want`. */
static void
refused(const void *p, size_t size, const char *want)
{
    kdt_cubin_kernel k[4];
    char why[160];
    int n = -1;
    ck_assert_int_eq(kdt_cubin_kernels(p, size, k, 4, &n, why, sizeof why),
                     -1);
    ck_assert_msg(strstr(why, want) != NULL, "reason \"%s\", wanted \"%s\"",
                  why, want);
    ck_assert_int_eq(n, 0);
}

START_TEST(test_refused)
{
    size_t size;
    refused("", 0, "not an ELF image");
    refused("\177ELF", 4, "not an ELF image");
    size = standard(&the_img, (variant){.class32 = 1});
    refused(the_img.b, size, "not a 64-bit little-endian");
    size = standard(&the_img, (variant){.machine = 62});
    refused(the_img.b, size, "not a CUDA image (ELF machine 62)");
    size = standard(&the_img, (variant){.no_symtab = 1});
    refused(the_img.b, size, "no symbol table");
    size = standard(&the_img, (variant){.no_k_two_symbol = 1});
    refused(the_img.b, size, "kernel k_two has no function symbol");
    size = standard(&the_img, (variant){.bad_format = 1});
    refused(the_img.b, size, ".nv.info: unknown entry format 9");
    size = standard(&the_img, (variant){.sval_overrun = 1});
    refused(the_img.b, size, "attribute 0x2f runs past its section");
    size = standard(&the_img, (variant){.info_nobits = 1});
    refused(the_img.b, size, ".nv.info.k_one has no bytes in the image");
    /* The headers cut off, then a section's bytes past the end. */
    size = standard(&the_img, (variant){0});
    refused(the_img.b, size - 1, "section headers run past the end");
    put64(the_img.b + size - 64 * (the_img.n + 1) + 64 * SEC_MODULE_INFO
              + 0x20, 1u << 20);
    refused(the_img.b, size, "section 3 (.nv.info) runs past the end");
    refused(NULL, 10, "no image");
}
END_TEST

/* Every prefix of the image and single-byte damage anywhere: an answer
 * each time (run under ASan by .ci/sanitize.sh, a read outside fails). */
START_TEST(test_cut_and_damaged)
{
    kdt_cubin_kernel k[4];
    char why[160];
    int n;
    size_t size = standard(&the_img, (variant){0});
    uint8_t *copy = malloc(size);
    uint64_t rng = 0x9e3779b97f4a7c15ull;

    ck_assert_ptr_nonnull(copy);
    for (size_t len = 0; len < size; len++) {
        /* A copy of exactly len bytes, so reads past it are caught. */
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, the_img.b, len);
        int r = kdt_cubin_kernels(cut, len, k, 4, &n, why, sizeof why);
        ck_assert_msg(r == -1 && why[0], "cut at %zu: %d \"%s\"", len, r,
                      why);
        free(cut);
    }
    for (int t = 0; t < 4000; t++) {
        memcpy(copy, the_img.b, size);
        for (int f = 0; f < 1 + t % 3; f++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            copy[rng % size] ^= (uint8_t)(1u << (rng >> 60) % 8);
        }
        int r = kdt_cubin_kernels(copy, size, k, 4, &n, why, sizeof why);
        ck_assert(r == 0 || (r == -1 && why[0]));
        ck_assert(r == -1 || (n >= 0 && n <= 16));
    }
    free(copy);
}
END_TEST

static Suite *
cubin_info_suite(void)
{
    Suite *s = suite_create("cubin_info");
    TCase *tc = tcase_create("synthetic");
    tcase_add_test(tc, test_fields);
    tcase_add_test(tc, test_max_counts_all);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_cut_and_damaged);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(cubin_info_suite, KDT_TEST_FORK);
}
