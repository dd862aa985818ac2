/*
 * cache/entry.h: the on-disk entry codec.  Pure functions (no I/O, no
 * globals), so the fuzz target can drive kdt_entry_decode() alone.
 *
 * One entry is one file: a fixed header (magic, format version, key,
 * payload kind, the preimage's and the payload's sizes, XXH3-64 checksums),
 * the preimage text, then the payload (cubin, PTX, or an alias's NVRTC
 * version).  The layout is in cache/entry.c.
 *
 * Layer 2 of the cache (see cache/cache.h): includes cache/key.h and
 * base/ only.
 */
#ifndef KDT_CACHE_ENTRY_H
#define KDT_CACHE_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "base/blob.h"
#include "cache/key.h"

/* Entry format version: part of every key and of the directory name.
 * Bump it when the entry layout or the preimage's fields change. */
#define KDT_CACHE_FORMAT 1

/* The fixed header of an entry. */
#define KDT_ENTRY_HEADER_SIZE 72
/* Bounds a decoder accepts: far above any real kernel, far below sizes
 * whose sum could overflow. */
#define KDT_ENTRY_MAX_PREIMAGE ((uint64_t)16 << 20)
#define KDT_ENTRY_MAX_PAYLOAD ((uint64_t)512 << 20)
/* The largest file that can be an entry. */
#define KDT_ENTRY_MAX_SIZE \
    (KDT_ENTRY_HEADER_SIZE + KDT_ENTRY_MAX_PREIMAGE + KDT_ENTRY_MAX_PAYLOAD)

/* Serialises one entry into a malloc'ed buffer.  Returns 0,
 * KDTREE_ERROR_INTERNAL for a blob no entry can hold (bad kind, empty, too
 * large), or KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_entry_encode(const kdt_key *key, const char *preimage,
                     size_t preimage_len, const kdt_blob *blob, void **out,
                     size_t *out_size);

/* A decoded entry: pointers into the buffer given to kdt_entry_decode. */
typedef struct kdt_entry_view {
    kdt_key key;
    int kind;
    const char *preimage;
    size_t preimage_len;
    const void *payload;
    size_t payload_size;
} kdt_entry_view;

/* Verifies and decodes `buf`: magic, format, sizes against `size`, both
 * checksums, the payload kind, and that the preimage hashes to the stored
 * key.  When `expect` is not NULL the stored key must equal it.  Returns 0,
 * or -1 with a short reason in `why` ("bad magic", "payload checksum
 * mismatch", ...). */
int kdt_entry_decode(const void *buf, size_t size, const kdt_key *expect,
                     kdt_entry_view *out, char *why, size_t why_size);

/* Checks only the header (its first KDT_ENTRY_HEADER_SIZE bytes: magic,
 * format, header checksum, kind) and gives the payload kind and the size
 * the whole file must have.  Returns 0 or -1 (why as above).  For
 * housekeeping, which must not read whole cubins to tell an alias. */
int kdt_entry_peek(const void *head, size_t size, int *kind,
                   uint64_t *file_size, char *why, size_t why_size);

#endif /* KDT_CACHE_ENTRY_H */
