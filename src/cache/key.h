/*
 * cache/key.h: the cache key, XXH3-128 over a labelled, length-prefixed
 * preimage, and the alias rule.
 *
 * The preimage is text, so an entry can carry it and a miss can be
 * explained field by field.  Each field is one record:
 *
 *     <label> <decimal byte length>\n<bytes>\n
 *
 * Fields are added in a fixed order by src/jit/obtain.c: format, library,
 * kernel, source and headers, constants, options, target, and last the
 * compiler (kdt_preimage_end).  Nothing absolute (no path of this
 * machine, no time) goes in, so keys are stable across machines.
 *
 * Layer 1 of the cache (see cache/cache.h): includes only base/.
 */
#ifndef KDT_KEY_H
#define KDT_KEY_H

#include <stddef.h>
#include <stdint.h>

typedef struct kdt_key {
    uint8_t bytes[16]; /* XXH128 canonical (big-endian) form */
} kdt_key;

typedef struct kdt_preimage {
    char *text;
    size_t len;
    size_t cap;
    int failed; /* an allocation failed; kdt_preimage_add() returns so */
} kdt_preimage;

void kdt_preimage_init(kdt_preimage *p);
/* Appends one record.  Returns 0, or KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_preimage_add(kdt_preimage *p, const char *label, const void *data,
                     size_t len);
/* kdt_preimage_add() of a NUL-terminated string. */
int kdt_preimage_add_str(kdt_preimage *p, const char *label,
                         const char *value);
void kdt_preimage_free(kdt_preimage *p);

/* XXH3-128 of the preimage text. */
kdt_key kdt_key_of(const void *text, size_t len);
/* 32 lowercase hex digits and a NUL. */
void kdt_key_hex(const kdt_key *k, char out[33]);
int kdt_key_equal(const kdt_key *a, const kdt_key *b);

/* The last record, the compiler's.  An entry's preimage ends with
 * "nvrtc <version>"; its alias's (nvrtc_version NULL) with "alias nvrtc",
 * and the alias's payload is that version: a process without NVRTC, which
 * cannot name the version, finds the entry through its alias.  Returns
 * what kdt_preimage_add() does. */
int kdt_preimage_end(kdt_preimage *p, const char *nvrtc_version);

/* The key of the entry an alias names: the alias's preimage with its last
 * record replaced by "nvrtc <version>".  Returns 0, -1 when `preimage` is
 * not an alias's, or KDTREE_ERROR_OUT_OF_MEMORY. */
int kdt_alias_target(const char *preimage, size_t len, const void *version,
                     size_t version_len, kdt_key *entry_key);

/* Walks the records of a preimage: on each call sets *label (not
 * NUL-terminated, *label_len bytes) and *value and *value_len, and returns 1;
 * returns 0 at the end and -1 on malformed text.  *pos starts at 0. */
int kdt_preimage_next(const char *text, size_t len, size_t *pos,
                      const char **label, size_t *label_len,
                      const char **value, size_t *value_len);

#endif /* KDT_KEY_H */
