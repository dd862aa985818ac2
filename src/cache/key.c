/*
 * cache/key.c: the cache key's preimage (labelled, length-prefixed records) and
 * its XXH3-128 hash in canonical big-endian form.
 *
 * The preimage is built as text so that it can be stored in an entry and
 * compared field by field when a lookup misses; the length prefix makes the
 * encoding unambiguous whatever bytes a field holds (a source file may
 * contain anything, including text that looks like a record header).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xxh3.h"
#include "cache/key.h"

void
kdt_preimage_init(kdt_preimage *p)
{
    p->text = NULL;
    p->len = 0;
    p->cap = 0;
    p->failed = 0;
}

void
kdt_preimage_free(kdt_preimage *p)
{
    if (!p)
        return;
    free(p->text);
    kdt_preimage_init(p);
}

/* Makes room for `extra` more bytes plus a NUL (kept so the text can be
 * printed as a string in logs). */
static int
preimage_reserve(kdt_preimage *p, size_t extra)
{
    size_t need, cap;
    char *t;

    if (extra > SIZE_MAX - p->len - 1)
        return -1;
    need = p->len + extra + 1;
    if (need <= p->cap)
        return 0;
    cap = p->cap ? p->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    t = realloc(p->text, cap);
    if (!t)
        return -1;
    p->text = t;
    p->cap = cap;
    return 0;
}

int
kdt_preimage_add(kdt_preimage *p, const char *label, const void *data,
                 size_t len)
{
    char head[96];
    size_t label_len;
    int n;

    if (p->failed)
        return KDTREE_ERROR_OUT_OF_MEMORY;
    label_len = strlen(label);
    /* A label is a short word: a space or newline in it would make the
     * record header ambiguous for kdt_preimage_next(). */
    if (label_len == 0 || label_len > 64 || strpbrk(label, " \n")) {
        p->failed = 1;
        return kdt_fail(KDTREE_ERROR_INTERNAL, "bad preimage label '%s'",
                        label);
    }
    n = snprintf(head, sizeof head, "%s %zu\n", label, len);
    if (n < 0 || (size_t)n >= sizeof head
        || preimage_reserve(p, (size_t)n) != 0
        || len > SIZE_MAX - 1 - (size_t)n - p->len
        || preimage_reserve(p, (size_t)n + len + 1) != 0) {
        p->failed = 1;
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "out of memory building the cache key (%zu bytes)",
                        p->len + len);
    }
    memcpy(p->text + p->len, head, (size_t)n);
    p->len += (size_t)n;
    if (len)
        memcpy(p->text + p->len, data, len);
    p->len += len;
    p->text[p->len++] = '\n';
    p->text[p->len] = '\0';
    return 0;
}

int
kdt_preimage_add_str(kdt_preimage *p, const char *label, const char *value)
{
    return kdt_preimage_add(p, label, value, strlen(value));
}

/* The compiler's record: its label, and the value that marks an alias. */
static const char nvrtc_label[] = "nvrtc";
static const char alias_label[] = "alias";

int
kdt_preimage_end(kdt_preimage *p, const char *nvrtc_version)
{
    if (nvrtc_version)
        return kdt_preimage_add_str(p, nvrtc_label, nvrtc_version);
    return kdt_preimage_add_str(p, alias_label, nvrtc_label);
}

int
kdt_alias_target(const char *preimage, size_t len, const void *version,
                 size_t version_len, kdt_key *entry_key)
{
    size_t pos = 0, last = 0, ll = 0, vl = 0;
    const char *l = NULL, *v = NULL;
    kdt_preimage p;
    int r;

    for (;;) {
        size_t at = pos;
        r = kdt_preimage_next(preimage, len, &pos, &l, &ll, &v, &vl);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        last = at;
    }
    /* l, v: the last record. */
    if (!l || ll != sizeof alias_label - 1
        || memcmp(l, alias_label, ll) != 0 || vl != sizeof nvrtc_label - 1
        || memcmp(v, nvrtc_label, vl) != 0)
        return -1;
    kdt_preimage_init(&p);
    if (preimage_reserve(&p, last) != 0)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "out of memory reading an alias");
    memcpy(p.text, preimage, last);
    p.len = last;
    r = kdt_preimage_add(&p, nvrtc_label, version, version_len);
    if (r == 0)
        *entry_key = kdt_key_of(p.text, p.len);
    kdt_preimage_free(&p);
    return r;
}

kdt_key
kdt_key_of(const void *text, size_t len)
{
    kdt_xxh128 h = kdt_xxh3_128(text, len);
    kdt_key k;
    int i;

    /* XXH128's canonical form: high64 then low64, each big-endian. */
    for (i = 0; i < 8; i++) {
        k.bytes[i] = (uint8_t)(h.high >> (56 - 8 * i));
        k.bytes[8 + i] = (uint8_t)(h.low >> (56 - 8 * i));
    }
    return k;
}

void
kdt_key_hex(const kdt_key *k, char out[33])
{
    static const char digits[] = "0123456789abcdef";
    int i;

    for (i = 0; i < 16; i++) {
        out[2 * i] = digits[k->bytes[i] >> 4];
        out[2 * i + 1] = digits[k->bytes[i] & 15];
    }
    out[32] = '\0';
}

int
kdt_key_equal(const kdt_key *a, const kdt_key *b)
{
    return memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

/* The walker reads text that came from a cache file, so it trusts nothing:
 * every length is checked against what is left before it is used. */
int
kdt_preimage_next(const char *text, size_t len, size_t *pos,
                  const char **label, size_t *label_len, const char **value,
                  size_t *value_len)
{
    size_t i = *pos, start, n = 0, digits = 0;

    if (i >= len)
        return i == len ? 0 : -1;
    start = i;
    while (i < len && text[i] != ' ' && text[i] != '\n')
        i++;
    if (i >= len || text[i] != ' ' || i == start || i - start > 64)
        return -1;
    *label = text + start;
    *label_len = i - start;
    i++; /* the space */
    while (i < len && text[i] >= '0' && text[i] <= '9') {
        unsigned d = (unsigned)(text[i] - '0');
        /* No leading zeros, so each length has one spelling. */
        if (digits == 1 && n == 0)
            return -1;
        if (n > (SIZE_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
        digits++;
        i++;
    }
    if (digits == 0 || i >= len || text[i] != '\n')
        return -1;
    i++;
    if (n > len - i || len - i - n < 1 || text[i + n] != '\n')
        return -1;
    *value = text + i;
    *value_len = n;
    *pos = i + n + 1;
    return 1;
}
