/*
 * base/xxh3.h: XXH3-64 and XXH3-128 (seed 0, the default secret), written
 * from the xxHash specification (doc/xxhash_spec.md of the xxHash
 * project), so the library needs no xxHash package to build.
 *
 * The cache key is XXH3-128 and the entry checksums are XXH3-64: their
 * values are part of the cache format, so this must give bit for bit what
 * libxxhash gives (tests/test_xxh3 compares the two over every length
 * class; tests/test_key's golden key pins the key).  Scalar and written
 * for clarity: the cache hashes a few hundred kilobytes per load.
 */
#ifndef KDT_XXH3_H
#define KDT_XXH3_H

#include <stddef.h>
#include <stdint.h>

/* XXH128_hash_t's two halves. */
typedef struct kdt_xxh128 {
    uint64_t low;
    uint64_t high;
} kdt_xxh128;

/* XXH3_64bits(data, len). */
uint64_t kdt_xxh3_64(const void *data, size_t len);

/* XXH3-64 of the concatenation a || b, read in place (what
 * XXH3_64bits_update(a), update(b), digest() gives). */
uint64_t kdt_xxh3_64_pair(const void *a, size_t a_len, const void *b,
                          size_t b_len);

/* XXH3_128bits(data, len). */
kdt_xxh128 kdt_xxh3_128(const void *data, size_t len);

#endif /* KDT_XXH3_H */
