/*
 * jit/cubin_info.c: see cubin_info.h.
 *
 * A cubin is an ELF64 little-endian image with e_machine EM_CUDA.  Each
 * kernel has a section ".nv.info.<name>" of attributes about it (its
 * launch bounds among them); the module-wide ".nv.info" holds, per
 * function symbol, its register count, frame size and stack size;
 * ".nv.shared.<name>" (no file bytes) is sized to its static shared
 * memory and ".nv.constant0.<name>" to its parameter bank.  An .nv.info
 * section is a run of entries, each a 4-byte header (format, attribute,
 * 16-bit value) and, for the SVAL format, as many bytes as that value
 * says.  The names below are the ones `cuobjdump -elf` prints.
 *
 * Every read goes through a bounds check against the image: a cache entry
 * passed its checksums, but a user may point the tools at any file.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jit/cubin_info.h"

#define ELF_HEADER_BYTES 64
#define ELF_SECTION_BYTES 64
#define ELF_SYMBOL_BYTES 24
#define EM_CUDA 190
#define SHT_SYMTAB 2
#define SHT_NOBITS 8
#define STT_FUNC 2

enum nvinfo_format { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3,
                     EIFMT_SVAL = 4 };

enum nvinfo_attribute {
    EIATTR_MAX_THREADS = 0x05,    /* x, y, z of .maxntid */
    EIATTR_REQNTID = 0x10,        /* x, y, z of .reqntid */
    EIATTR_FRAME_SIZE = 0x11,     /* symbol, bytes */
    EIATTR_MIN_STACK_SIZE = 0x12, /* symbol, bytes (with the callees) */
    EIATTR_REGCOUNT = 0x2f        /* symbol, registers */
};

typedef struct image {
    const uint8_t *p;
    size_t size;
    char *why;
    size_t why_size;
    uint64_t shoff;
    uint32_t shnum;
    uint64_t shstr_off, shstr_size;
} image;

typedef struct section {
    const char *name;
    uint32_t type;
    uint64_t offset, size;
    uint32_t link;
} section;

static uint16_t
rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
           | (uint32_t)p[3] << 24;
}

static uint64_t
rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int
fail(image *im, const char *fmt, ...)
{
    va_list ap;
    if (im->why && im->why_size) {
        va_start(ap, fmt);
        vsnprintf(im->why, im->why_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* 1 when [off, off + len) lies inside the image. */
static int
inside(const image *im, uint64_t off, uint64_t len)
{
    return off <= im->size && len <= im->size - off;
}

/* A NUL-terminated string at `off` of a table [base, base + size), or
 * NULL when it does not end inside the table. */
static const char *
string_at(const image *im, uint64_t base, uint64_t size, uint64_t off)
{
    const uint8_t *s;
    if (off >= size)
        return NULL;
    s = im->p + base + off;
    return memchr(s, 0, (size_t)(size - off)) ? (const char *)s : NULL;
}

static int
read_header(image *im)
{
    const uint8_t *p = im->p;
    uint16_t shentsize, shstrndx;
    uint64_t str_hdr;

    if (im->size < ELF_HEADER_BYTES || memcmp(p, "\177ELF", 4) != 0)
        return fail(im, "not an ELF image");
    if (p[4] != 2 || p[5] != 1)
        return fail(im, "not a 64-bit little-endian ELF image");
    if (rd16(p + 18) != EM_CUDA)
        return fail(im, "not a CUDA image (ELF machine %u)", rd16(p + 18));
    im->shoff = rd64(p + 0x28);
    shentsize = rd16(p + 0x3a);
    im->shnum = rd16(p + 0x3c);
    shstrndx = rd16(p + 0x3e);
    if (shentsize != ELF_SECTION_BYTES)
        return fail(im, "section headers of %u bytes, not %d", shentsize,
                    ELF_SECTION_BYTES);
    if (im->shnum == 0)
        return fail(im, "no sections");
    if (!inside(im, im->shoff, (uint64_t)im->shnum * ELF_SECTION_BYTES))
        return fail(im, "the section headers run past the end of the image");
    if (shstrndx >= im->shnum)
        return fail(im, "no section-name table (index %u of %u)", shstrndx,
                    im->shnum);
    str_hdr = im->shoff + (uint64_t)shstrndx * ELF_SECTION_BYTES;
    im->shstr_off = rd64(p + str_hdr + 0x18);
    im->shstr_size = rd64(p + str_hdr + 0x20);
    if (!inside(im, im->shstr_off, im->shstr_size))
        return fail(im, "the section-name table runs past the end of the "
                    "image");
    return 0;
}

/* Section i, its bytes checked to lie inside the image (those that have
 * bytes in the file). */
static int
read_section(image *im, uint32_t i, section *s)
{
    const uint8_t *h = im->p + im->shoff + (uint64_t)i * ELF_SECTION_BYTES;
    s->name = string_at(im, im->shstr_off, im->shstr_size, rd32(h));
    if (!s->name)
        return fail(im, "section %u has no name in the section-name table",
                    i);
    s->type = rd32(h + 4);
    s->offset = rd64(h + 0x18);
    s->size = rd64(h + 0x20);
    s->link = rd32(h + 0x28);
    if (s->type != SHT_NOBITS && !inside(im, s->offset, s->size))
        return fail(im, "section %u (%s) runs past the end of the image", i,
                    s->name);
    return 0;
}

/* -1 (with the reason) when section s, about to be read, has no bytes in
 * the file: a NOBITS section's offset and size were never checked. */
static int
need_bytes(image *im, const section *s)
{
    return s->type == SHT_NOBITS
               ? fail(im, "%s has no bytes in the image", s->name)
               : 0;
}

/* The section called exactly prefix + suffix: 1 found, 0 none, -1 bad. */
static int
find_section(image *im, const char *prefix, const char *suffix, section *out)
{
    size_t lp = strlen(prefix);
    for (uint32_t i = 1; i < im->shnum; i++) {
        if (read_section(im, i, out))
            return -1;
        if (strncmp(out->name, prefix, lp) == 0
            && strcmp(out->name + lp, suffix) == 0)
            return 1;
    }
    return 0;
}

/* The next entry of an .nv.info section: 1 with its attribute and value
 * (val/len: an SVAL's bytes; hval: the header's 16-bit value), 0 at the
 * end, -1 when an entry is cut off or of a format not known here. */
static int
nvinfo_next(image *im, const section *s, uint64_t *pos, unsigned *attr,
            const uint8_t **val, uint32_t *len, unsigned *hval)
{
    const uint8_t *e;
    if (*pos >= s->size)
        return 0;
    if (s->size - *pos < 4)
        return fail(im, "%s: an entry cut off at byte %llu", s->name,
                    (unsigned long long)*pos);
    e = im->p + s->offset + *pos;
    *attr = e[1];
    *hval = rd16(e + 2);
    *val = e + 4;
    *len = 0;
    switch (e[0]) {
    case EIFMT_NVAL:
    case EIFMT_BVAL:
    case EIFMT_HVAL:
        *pos += 4;
        return 1;
    case EIFMT_SVAL:
        if (s->size - *pos - 4 < *hval)
            return fail(im, "%s: attribute 0x%02x runs past its section",
                        s->name, *attr);
        *len = *hval;
        *pos += 4 + (uint64_t)*hval;
        return 1;
    default:
        return fail(im, "%s: unknown entry format %u at byte %llu", s->name,
                    e[0], (unsigned long long)*pos);
    }
}

/* The index of the function symbol `name` in the symbol table, or -1. */
static int64_t
function_symbol(image *im, const section *symtab, const section *strtab,
                const char *name)
{
    uint64_t n = symtab->size / ELF_SYMBOL_BYTES;
    for (uint64_t i = 1; i < n; i++) {
        const uint8_t *sym = im->p + symtab->offset + i * ELF_SYMBOL_BYTES;
        const char *sname;
        if ((sym[4] & 0xf) != STT_FUNC)
            continue;
        sname = string_at(im, strtab->offset, strtab->size, rd32(sym));
        if (sname && strcmp(sname, name) == 0)
            return (int64_t)i;
    }
    return -1;
}

/* The kernel's own attributes: its launch bounds. */
static int
read_kernel_info(image *im, const section *info, kdt_cubin_kernel *k)
{
    uint64_t pos = 0;
    uint32_t maxntid = 0, reqntid = 0;
    const uint8_t *val;
    uint32_t len;
    unsigned attr, hval;
    int r;

    while ((r = nvinfo_next(im, info, &pos, &attr, &val, &len, &hval)) > 0) {
        uint64_t t;
        if ((attr != EIATTR_MAX_THREADS && attr != EIATTR_REQNTID)
            || len < 12)
            continue;
        /* Each step stays under 2^64: x * y, then at most 2^32 * z. */
        t = (uint64_t)rd32(val) * rd32(val + 4);
        t = t > UINT32_MAX ? UINT32_MAX : t * rd32(val + 8);
        t = t > UINT32_MAX ? UINT32_MAX : t;
        if (attr == EIATTR_MAX_THREADS)
            maxntid = (uint32_t)t;
        else
            reqntid = (uint32_t)t;
    }
    k->max_threads = maxntid ? maxntid : reqntid;
    return r;
}

/* The module-wide attributes of symbol `sym`: registers and stack. */
static int
read_module_info(image *im, const section *info, int64_t sym,
                 kdt_cubin_kernel *k)
{
    uint64_t pos = 0;
    uint32_t frame = 0, stack = 0;
    const uint8_t *val;
    uint32_t len;
    unsigned attr, hval;
    int r;

    while ((r = nvinfo_next(im, info, &pos, &attr, &val, &len, &hval)) > 0) {
        if (len < 8 || rd32(val) != (uint64_t)sym)
            continue;
        if (attr == EIATTR_REGCOUNT)
            k->registers = rd32(val + 4);
        else if (attr == EIATTR_FRAME_SIZE)
            frame = rd32(val + 4);
        else if (attr == EIATTR_MIN_STACK_SIZE)
            stack = rd32(val + 4);
    }
    k->stack_bytes = stack > frame ? stack : frame;
    return r;
}

/* Everything about the kernel whose attributes are section `info`. */
static int
read_kernel(image *im, const section *info, const section *symtab,
            const section *strtab, const section *module, kdt_cubin_kernel *k)
{
    const char *name = info->name + strlen(".nv.info.");
    section s;
    int64_t sym;
    int r;

    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    if (need_bytes(im, info) || (module && need_bytes(im, module)))
        return -1;
    sym = function_symbol(im, symtab, strtab, name);
    if (sym < 0)
        return fail(im, "kernel %s has no function symbol", name);
    if (read_kernel_info(im, info, k))
        return -1;
    if (module && read_module_info(im, module, sym, k))
        return -1;
    if ((r = find_section(im, ".nv.shared.", name, &s)) < 0)
        return -1;
    if (r)
        k->shared_bytes = s.size > UINT32_MAX ? UINT32_MAX : (uint32_t)s.size;
    if ((r = find_section(im, ".nv.constant0.", name, &s)) < 0)
        return -1;
    if (r)
        k->param_bytes = s.size > UINT32_MAX ? UINT32_MAX : (uint32_t)s.size;
    return 0;
}

int
kdt_cubin_kernels(const void *data, size_t size, kdt_cubin_kernel *out,
                  int max, int *n_kernels, char *why, size_t why_size)
{
    image im = {data, size, why, why_size, 0, 0, 0, 0};
    section symtab = {0}, strtab = {0}, module = {0}, s;
    int have_symtab = 0, have_module = 0, n = 0;

    if (why && why_size)
        why[0] = '\0';
    *n_kernels = 0;
    if (!data)
        return fail(&im, "no image");
    if (read_header(&im))
        return -1;
    for (uint32_t i = 1; i < im.shnum; i++) {
        if (read_section(&im, i, &s))
            return -1;
        if (s.type == SHT_SYMTAB && !have_symtab) {
            symtab = s;
            have_symtab = 1;
        } else if (strcmp(s.name, ".nv.info") == 0) {
            module = s;
            have_module = 1;
        }
    }
    if (!have_symtab)
        return fail(&im, "no symbol table");
    if (symtab.link == 0 || symtab.link >= im.shnum)
        return fail(&im, "the symbol table names no string table");
    if (read_section(&im, symtab.link, &strtab) || need_bytes(&im, &strtab))
        return -1;
    for (uint32_t i = 1; i < im.shnum; i++) {
        kdt_cubin_kernel k;
        if (read_section(&im, i, &s))
            return -1;
        if (strncmp(s.name, ".nv.info.", 9) != 0 || s.name[9] == '\0')
            continue;
        if (read_kernel(&im, &s, &symtab, &strtab,
                        have_module ? &module : NULL, &k))
            return -1;
        if (n < max)
            out[n] = k;
        n++;
    }
    *n_kernels = n;
    return 0;
}
