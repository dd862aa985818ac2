/*
 * cuda/build_id.c: the GNU build id of a loaded library.  Two builds of
 * one NVRTC version can compile differently, and nvrtcVersion() says the
 * major and minor alone (12.8.61 and 12.8.93 both answer 12.8), so the
 * cache key names the build id.  The loader's view (the PT_NOTE segments
 * of the mapped object) serves most libraries; a library whose note lies
 * in no PT_NOTE segment is read from its file's section headers.
 */
#define _GNU_SOURCE
#include "config.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/build_id.h"

/* The largest note section read from a file: build-id sections are 36
 * bytes; a bigger one is some other note (or a corrupt header). */
#define NOTE_SECTION_MAX 65536

/* Scans the notes in `p` .. `end` for NT_GNU_BUILD_ID; 1 and `hex` if
 * found.  `align` (4 or 8) is the notes' alignment: a note's description
 * starts at its header and name rounded up to it, the next note at its
 * description's end rounded up (as glibc reads them; with 4 this is the
 * padding of name and description each). */
static int
scan_notes(const unsigned char *p, const unsigned char *end, size_t align,
           char hex[KDT_BUILD_ID_HEX])
{
    while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
        ElfW(Nhdr) nh;
        memcpy(&nh, p, sizeof nh);
        size_t left = (size_t)(end - p);
        size_t desc_at = (sizeof nh + (size_t)nh.n_namesz + align - 1)
                         & ~(align - 1);
        if (desc_at > left || nh.n_descsz > left - desc_at)
            return 0;
        const unsigned char *name = p + sizeof nh, *desc = p + desc_at;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
            memcmp(name, "GNU", 4) == 0 && nh.n_descsz > 0) {
            size_t n = nh.n_descsz > 20 ? 20 : nh.n_descsz;
            for (size_t j = 0; j < n; j++)
                snprintf(hex + 2 * j, 3, "%02x", desc[j]);
            return 1;
        }
        size_t next = (desc_at + (size_t)nh.n_descsz + align - 1)
                      & ~(align - 1);
        if (next >= left)
            return 0;
        p += next;
    }
    return 0;
}

struct phdr_search {
    const void *addr;
    char *hex;
    int found;
};

static int
search_object(struct dl_phdr_info *info, size_t size, void *data)
{
    struct phdr_search *s = data;
    int holds = 0;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (uintptr_t)s->addr >= lo &&
            (uintptr_t)s->addr - lo < ph->p_memsz)
            holds = 1;
    }
    if (!holds)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && !s->found; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const unsigned char *p =
            (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        s->found = scan_notes(p, p + ph->p_memsz, ph->p_align == 8 ? 8 : 4,
                              s->hex);
    }
    return 1; /* the object that holds addr: no other is searched */
}

/* Reads `n` bytes at `off` of `fd`; 1 if all were read. */
static int
read_at(int fd, void *buf, size_t n, uint64_t off)
{
    if (off > (uint64_t)INT64_MAX)
        return 0;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r <= 0)
            return 0;
        got += (size_t)r;
    }
    return 1;
}

static int
file_notes(int fd, char hex[KDT_BUILD_ID_HEX])
{
    Elf64_Ehdr eh;
    if (!read_at(fd, &eh, sizeof eh, 0) ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shoff == 0 ||
        eh.e_shentsize != sizeof(Elf64_Shdr))
        return 0;
    uint64_t shnum = eh.e_shnum;
    if (shnum == 0) { /* extended numbering: section 0's size holds it */
        Elf64_Shdr sh0;
        if (!read_at(fd, &sh0, sizeof sh0, eh.e_shoff))
            return 0;
        shnum = sh0.sh_size;
    }
    if (shnum > 1u << 20)
        return 0;
    for (uint64_t i = 0; i < shnum; i++) {
        Elf64_Shdr sh;
        if (!read_at(fd, &sh, sizeof sh, eh.e_shoff + i * sizeof sh))
            return 0;
        if (sh.sh_type != SHT_NOTE || sh.sh_size == 0 ||
            sh.sh_size > NOTE_SECTION_MAX)
            continue;
        unsigned char *buf = malloc(sh.sh_size);
        if (!buf)
            return 0;
        int found = read_at(fd, buf, sh.sh_size, sh.sh_offset) &&
                    scan_notes(buf, buf + sh.sh_size,
                               sh.sh_addralign == 8 ? 8 : 4, hex);
        free(buf);
        if (found)
            return 1;
    }
    return 0;
}

int
kdt_build_id_of_file(const char *path, char hex[KDT_BUILD_ID_HEX])
{
    hex[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int found = file_notes(fd, hex); /* hex is written only if found */
    close(fd);
    return found;
}

int
kdt_build_id(const void *addr, const char *path, char hex[KDT_BUILD_ID_HEX])
{
    struct phdr_search s = {addr, hex, 0};
    hex[0] = '\0';
    dl_iterate_phdr(search_object, &s);
    if (s.found)
        return 1;
    return path && path[0] ? kdt_build_id_of_file(path, hex) : 0;
}
