/*
 * cache/entry.c: the on-disk entry codec (see cache/entry.h).
 *
 * Layout (all integers little-endian, whatever the host):
 *
 *     off  size  field
 *       0     8  magic "KDTCACHE"
 *       8     4  format version (KDT_CACHE_FORMAT)
 *      12     4  header size (KDT_ENTRY_HEADER_SIZE)
 *      16    16  key (XXH3-128 of the preimage, canonical big-endian)
 *      32     4  payload kind (enum kdt_payload_kind)
 *      36     4  reserved, 0
 *      40     8  preimage length
 *      48     8  payload length
 *      56     8  XXH3-64 of preimage || payload
 *      64     8  XXH3-64 of bytes 0..63 (the fields above)
 *      72        preimage text, then payload
 *
 * A file from the cache directory is untrusted input: decode checks every
 * field against the buffer's real size before using it, with arithmetic
 * that cannot overflow, and the file must be exactly as long as the header
 * says (a truncated or extended file is refused, not half-read).
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xxh3.h"
#include "cache/entry.h"

static const char magic[8] = { 'K', 'D', 'T', 'C', 'A', 'C', 'H', 'E' };

static void
put32(unsigned char *p, uint32_t v)
{
    int i;
    for (i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void
put64(unsigned char *p, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t
get32(const unsigned char *p)
{
    uint32_t v = 0;
    int i;
    for (i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
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

static uint64_t
body_sum(const void *pre, size_t pre_len, const void *pay, size_t pay_len)
{
    /* Both pieces read in place: no allocation, so the decode path cannot
     * fail for memory. */
    return kdt_xxh3_64_pair(pre, pre_len, pay, pay_len);
}

static int
kind_valid(uint32_t kind)
{
    return kind == KDT_PAYLOAD_CUBIN || kind == KDT_PAYLOAD_PTX
        || kind == KDT_PAYLOAD_ALIAS;
}

int
kdt_entry_encode(const kdt_key *key, const char *preimage,
                 size_t preimage_len, const kdt_blob *blob, void **out,
                 size_t *out_size)
{
    unsigned char *b;
    size_t total;

    *out = NULL;
    *out_size = 0;
    if (!kind_valid((uint32_t)blob->kind) || blob->kind < 0)
        return kdt_fail(KDTREE_ERROR_INTERNAL,
                        "cache entry: bad payload kind %d", blob->kind);
    if (preimage_len > KDT_ENTRY_MAX_PREIMAGE || blob->size == 0
        || blob->size > KDT_ENTRY_MAX_PAYLOAD)
        return kdt_fail(KDTREE_ERROR_INTERNAL,
                        "cache entry: empty or too large (preimage %zu, payload %zu "
                        "bytes)", preimage_len, blob->size);
    total = KDT_ENTRY_HEADER_SIZE + preimage_len + blob->size;
    b = malloc(total);
    if (!b)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "cache entry: out of memory (%zu bytes)", total);
    memcpy(b, magic, 8);
    put32(b + 8, KDT_CACHE_FORMAT);
    put32(b + 12, KDT_ENTRY_HEADER_SIZE);
    memcpy(b + 16, key->bytes, 16);
    put32(b + 32, (uint32_t)blob->kind);
    put32(b + 36, 0);
    put64(b + 40, preimage_len);
    put64(b + 48, blob->size);
    put64(b + 56, body_sum(preimage, preimage_len, blob->data, blob->size));
    put64(b + 64, kdt_xxh3_64(b, 64));
    if (preimage_len)
        memcpy(b + KDT_ENTRY_HEADER_SIZE, preimage, preimage_len);
    if (blob->size)
        memcpy(b + KDT_ENTRY_HEADER_SIZE + preimage_len, blob->data,
               blob->size);
    *out = b;
    *out_size = total;
    return 0;
}

static int
reject(char *why, size_t why_size, const char *fmt, ...) KDT_PRINTF(3, 4);

static int
reject(char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;

    if (why && why_size) {
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The header's own checks, shared by decode and peek. */
static int
check_head(const unsigned char *b, size_t size, char *why, size_t why_size)
{
    uint32_t format, head_size, kind;

    if (!b || size < KDT_ENTRY_HEADER_SIZE)
        return reject(why, why_size, "truncated header (%zu bytes)", size);
    if (memcmp(b, magic, 8) != 0)
        return reject(why, why_size, "bad magic");
    format = get32(b + 8);
    if (format != KDT_CACHE_FORMAT)
        return reject(why, why_size, "entry format %u, this library reads %d",
                      (unsigned)format, KDT_CACHE_FORMAT);
    head_size = get32(b + 12);
    if (head_size != KDT_ENTRY_HEADER_SIZE)
        return reject(why, why_size, "bad header size %u", (unsigned)head_size);
    if (get64(b + 64) != kdt_xxh3_64(b, 64))
        return reject(why, why_size, "header checksum mismatch");
    kind = get32(b + 32);
    if (!kind_valid(kind))
        return reject(why, why_size, "bad payload kind %u", (unsigned)kind);
    if (get32(b + 36) != 0)
        return reject(why, why_size, "reserved header field set");
    if (get64(b + 40) > KDT_ENTRY_MAX_PREIMAGE
        || get64(b + 48) > KDT_ENTRY_MAX_PAYLOAD)
        return reject(why, why_size, "sizes out of bounds");
    return 0;
}

int
kdt_entry_peek(const void *head, size_t size, int *kind, uint64_t *file_size,
               char *why, size_t why_size)
{
    const unsigned char *b = head;

    if (why && why_size)
        why[0] = '\0';
    if (check_head(b, size, why, why_size) != 0)
        return -1;
    *kind = (int)get32(b + 32);
    *file_size = KDT_ENTRY_HEADER_SIZE + get64(b + 40) + get64(b + 48);
    return 0;
}

int
kdt_entry_decode(const void *buf, size_t size, const kdt_key *expect,
                 kdt_entry_view *out, char *why, size_t why_size)
{
    const unsigned char *b = buf;
    uint32_t kind;
    uint64_t pre_len, pay_len;
    const char *pre;
    const unsigned char *pay;
    size_t pos = 0;
    const char *l, *v;
    size_t ll, vl;
    int r;
    kdt_key k;

    if (why && why_size)
        why[0] = '\0';
    if (check_head(b, size, why, why_size) != 0)
        return -1;
    kind = get32(b + 32);
    pre_len = get64(b + 40);
    pay_len = get64(b + 48);
    /* Both are bounded far below SIZE_MAX / 4, so the sum cannot wrap. */
    if (size - KDT_ENTRY_HEADER_SIZE != pre_len + pay_len)
        return reject(why, why_size,
                      "size mismatch (file %zu bytes, header says %llu)", size,
                      (unsigned long long)(KDT_ENTRY_HEADER_SIZE + pre_len
                                           + pay_len));
    pre = (const char *)b + KDT_ENTRY_HEADER_SIZE;
    pay = b + KDT_ENTRY_HEADER_SIZE + pre_len;
    if (get64(b + 56) != body_sum(pre, (size_t)pre_len, pay, (size_t)pay_len))
        return reject(why, why_size, "preimage/payload checksum mismatch");
    if (pay_len == 0)
        return reject(why, why_size, "empty payload");
    while ((r = kdt_preimage_next(pre, (size_t)pre_len, &pos, &l, &ll, &v,
                                  &vl)) == 1)
        ;
    if (r < 0)
        return reject(why, why_size, "malformed preimage at byte %zu", pos);
    k = kdt_key_of(pre, (size_t)pre_len);
    if (memcmp(k.bytes, b + 16, 16) != 0)
        return reject(why, why_size, "preimage does not hash to the stored key");
    if (expect && !kdt_key_equal(expect, &k))
        return reject(why, why_size, "entry is for another key");
    if (out) {
        out->key = k;
        out->kind = (int)kind;
        out->preimage = pre;
        out->preimage_len = (size_t)pre_len;
        out->payload = pay;
        out->payload_size = (size_t)pay_len;
    }
    return 0;
}
