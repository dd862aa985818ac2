/*
 * test_build_id.c: the build id that names NVRTC in the cache key
 * (cuda/build_id.c).
 *
 *  - ELF64 files written here, a note section holding the id: found with
 *    4- and 8-byte note padding, after another note of the section;
 *  - files that hold none or are not well formed (no note section, a
 *    truncated file, section headers past its end, a note longer than its
 *    section, not ELF, missing): not found, the text left empty;
 *  - an address that no loaded object holds, with a file named: the
 *    file's id (how an NVRTC whose note lies in no PT_NOTE segment, the
 *    12.8.93 wheel's, is named);
 *  - this program: the loader's notes and the file's sections agree.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/build_id.h"
#include "harness.h"

static const unsigned char id_bytes[20] = {
    0x31, 0xf5, 0x0d, 0x4d, 0x7c, 0x1c, 0x47, 0x5a, 0x14, 0xb8,
    0x16, 0x72, 0x37, 0xb9, 0x69, 0xac, 0x50, 0x27, 0x1f, 0xe5};
static const char id_hex[] = "31f50d4d7c1c475a14b8167237b969ac50271fe5";

static char path[64];

/* Appends a note at `at` (a multiple of `align`): name "GNU", `type`,
 * `desc` of `n` bytes, laid out as a linker does (the description at the
 * header and name rounded up to `align`, the next note at its end rounded
 * up); returns the new length. */
static size_t
put_note(unsigned char *b, size_t at, uint32_t type, const unsigned char *desc,
         uint32_t n, size_t align)
{
    Elf64_Nhdr nh = {4, n, type};
    memcpy(b + at, &nh, sizeof nh);
    memcpy(b + at + sizeof nh, "GNU", 4);
    size_t d = at + ((sizeof nh + 4 + align - 1) & ~(align - 1));
    memcpy(b + d, desc, n);
    return at + ((d - at + n + align - 1) & ~(align - 1));
}

enum shape { WHOLE, NO_NOTE, SHOFF_PAST_END, DESC_PAST_SECTION };

/* Writes an ELF64 object to `path`: a header, a note section (another
 * note first when `other`), a section of program bits, then the section
 * headers (null, the notes, the bits). */
static void
write_elf(size_t align, int other, enum shape shape)
{
    unsigned char b[1024];
    memset(b, 0, sizeof b);
    size_t at = sizeof(Elf64_Ehdr), notes = at;
    if (other) {
        static const unsigned char abi[12] = {0, 0, 0, 0, 3, 0, 0, 0, 2};
        at = put_note(b, at, NT_GNU_ABI_TAG, abi, sizeof abi, align);
    }
    size_t id_note = at;
    at = put_note(b, at, NT_GNU_BUILD_ID, id_bytes, sizeof id_bytes, align);
    if (shape == DESC_PAST_SECTION)
        ((Elf64_Nhdr *)(b + id_note))->n_descsz = 400;
    size_t notes_size = at - notes, bits = at;
    memcpy(b + at, "bits", 4);
    at += 8;
    Elf64_Shdr sh[3];
    memset(sh, 0, sizeof sh);
    sh[1].sh_type = shape == NO_NOTE ? SHT_PROGBITS : SHT_NOTE;
    sh[1].sh_offset = notes;
    sh[1].sh_size = notes_size;
    sh[1].sh_addralign = align;
    sh[2].sh_type = SHT_PROGBITS;
    sh[2].sh_offset = bits;
    sh[2].sh_size = 4;
    size_t shoff = at;
    memcpy(b + at, sh, sizeof sh);
    at += sizeof sh;
    Elf64_Ehdr eh;
    memset(&eh, 0, sizeof eh);
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_DYN;
    eh.e_machine = EM_X86_64;
    eh.e_version = EV_CURRENT;
    eh.e_shoff = shape == SHOFF_PAST_END ? 4096 : shoff;
    eh.e_ehsize = sizeof eh;
    eh.e_shentsize = sizeof(Elf64_Shdr);
    eh.e_shnum = 3;
    memcpy(b, &eh, sizeof eh);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, at, f), at);
    ck_assert_int_eq(fclose(f), 0);
}

static void
setup(void)
{
    snprintf(path, sizeof path, "/tmp/kdt-build-id.XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void
teardown(void)
{
    unlink(path);
}

/* The file's id is `want` ("" for none), and the text says so. */
static void
file_gives(const char *want)
{
    char hex[KDT_BUILD_ID_HEX];
    memset(hex, 'x', sizeof hex);
    ck_assert_int_eq(kdt_build_id_of_file(path, hex), want[0] != '\0');
    ck_assert_str_eq(hex, want);
}

START_TEST(test_note_section)
{
    /* alone, then after a note of 12 bytes of description: the next
     * note 28 bytes on with 4-byte notes, 32 with 8-byte ones, so the
     * wrong rounding misreads it */
    for (int other = 0; other < 2; other++)
        for (size_t align = 4; align <= 8; align += 4) {
            write_elf(align, other, WHOLE);
            file_gives(id_hex);
        }
}
END_TEST

START_TEST(test_not_found)
{
    write_elf(4, 0, NO_NOTE);
    file_gives("");
    write_elf(4, 0, SHOFF_PAST_END);
    file_gives("");
    write_elf(4, 1, DESC_PAST_SECTION);
    file_gives("");
    write_elf(4, 0, WHOLE);
    ck_assert_int_eq(truncate(path, 40), 0);
    file_gives("");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not an ELF file, but long enough to hold a header of one..."
          "................................................\n", f);
    ck_assert_int_eq(fclose(f), 0);
    file_gives("");
    unlink(path);
    file_gives("");
}
END_TEST

START_TEST(test_file_when_no_object_holds_it)
{
    /* a stack address: in no loaded object's PT_LOAD segments */
    int on_stack = 0;
    char hex[KDT_BUILD_ID_HEX];
    write_elf(8, 1, WHOLE);
    ck_assert_int_eq(kdt_build_id(&on_stack, path, hex), 1);
    ck_assert_str_eq(hex, id_hex);
    ck_assert_int_eq(kdt_build_id(&on_stack, NULL, hex), 0);
    ck_assert_str_eq(hex, "");
}
END_TEST

START_TEST(test_this_program)
{
    char loaded[KDT_BUILD_ID_HEX], file[KDT_BUILD_ID_HEX];
    int a = kdt_build_id((const void *)file_gives, NULL, loaded);
    int b = kdt_build_id_of_file("/proc/self/exe", file);
    ck_assert_int_eq(a, b);
    ck_assert_str_eq(loaded, file);
    ck_assert(strlen(file) == 0 || strlen(file) % 2 == 0);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("build_id");
    TCase *tc = tcase_create("build_id");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_note_section);
    tcase_add_test(tc, test_not_found);
    tcase_add_test(tc, test_file_when_no_object_holds_it);
    tcase_add_test(tc, test_this_program);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
