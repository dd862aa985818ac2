/*
 * cuda/build_id.h: the GNU build id of a loaded library, which names the
 * exact build of NVRTC in every cache key (docs/cache.md).
 */
#ifndef KDT_BUILD_ID_H
#define KDT_BUILD_ID_H

/* Room for the hex digits of a build id (at most 20 bytes are kept). */
#define KDT_BUILD_ID_HEX 41

/* The build id of the loaded object that holds `addr`, as lowercase hex
 * into `hex`: from the notes of its program headers, else, when `path`
 * (the object's file) is not NULL, from the note sections of that file.
 * Returns 1 if found, else 0 with `hex` empty. */
int kdt_build_id(const void *addr, const char *path,
                 char hex[KDT_BUILD_ID_HEX]);

/* The build id in the note sections of the ELF64 file at `path` (what a
 * linker wrote; some NVRTC builds carry it in no PT_NOTE segment: the
 * 12.8.93 wheel's libnvrtc.so.12).  1 if found, else 0 with `hex` empty;
 * a file that is not a well-formed ELF64 object is not found. */
int kdt_build_id_of_file(const char *path, char hex[KDT_BUILD_ID_HEX]);

#endif /* KDT_BUILD_ID_H */
