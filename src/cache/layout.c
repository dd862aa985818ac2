/*
 * cache/layout.c: the names of things in a cache directory (see
 * cache/layout.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/layout.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static const char subdir[] = "v" STR(KDT_CACHE_FORMAT);

const char *
kdt_layout_subdir(void)
{
    return subdir;
}

char *
kdt_layout_entry_dir(const char *base)
{
    size_t lb = strlen(base);
    char *s = malloc(lb + sizeof subdir + 1);

    if (!s)
        return NULL;
    memcpy(s, base, lb);
    s[lb] = '/';
    memcpy(s + lb + 1, subdir, sizeof subdir);
    return s;
}

void
kdt_layout_entry_name(const kdt_key *key, char out[KDT_NAME_SIZE])
{
    kdt_key_hex(key, out);
    memcpy(out + 32, ".kdt", 5);
}

static int
hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* 1 when s[0..32) are lowercase hex digits; fills *key when not NULL. */
static int
parse_hex32(const char *s, kdt_key *key)
{
    for (int i = 0; i < 32; i++)
        if (hex_digit(s[i]) < 0)
            return 0;
    if (key)
        for (int i = 0; i < 16; i++)
            key->bytes[i] = (unsigned char)(hex_digit(s[2 * i]) << 4
                                            | hex_digit(s[2 * i + 1]));
    return 1;
}

int
kdt_layout_parse_entry_name(const char *name, kdt_key *key)
{
    return strlen(name) == 36 && strcmp(name + 32, ".kdt") == 0
           && parse_hex32(name, key);
}

void
kdt_layout_host_tag(char *out, size_t size)
{
    char h[256];
    size_t i, j = 0;

    if (gethostname(h, sizeof h) != 0)
        h[0] = '\0';
    h[sizeof h - 1] = '\0';
    for (i = 0; h[i] && j + 1 < size && j < 40; i++) {
        char c = h[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '-')
            out[j++] = c;
    }
    if (j == 0 && size > 4) {
        memcpy(out, "host", 4);
        j = 4;
    }
    out[j] = '\0';
}

void
kdt_layout_temp_name(const kdt_key *key, unsigned long n,
                     char out[KDT_NAME_SIZE])
{
    char hex[33], host[48];

    kdt_key_hex(key, hex);
    kdt_layout_host_tag(host, sizeof host);
    snprintf(out, KDT_NAME_SIZE, ".%s.%ld.%lu.%s.tmp", hex, (long)getpid(),
             n, host);
}

/* Skips one run of decimal digits followed by '.'; NULL if there is none. */
static const char *
skip_number(const char *p)
{
    const char *q = p;

    while (*q >= '0' && *q <= '9')
        q++;
    return q > p && *q == '.' ? q + 1 : NULL;
}

int
kdt_layout_parse_temp_name(const char *name, const char **host,
                           size_t *host_len)
{
    size_t len = strlen(name);
    const char *p;

    if (len < 1 + 32 + 1 + 2 + 2 + 1 + 4 || name[0] != '.'
        || !parse_hex32(name + 1, NULL) || name[33] != '.'
        || strcmp(name + len - 4, ".tmp") != 0)
        return 0;
    p = skip_number(name + 34); /* the pid */
    if (p)
        p = skip_number(p); /* the counter */
    if (!p || p >= name + len - 4)
        return 0;
    *host = p;
    *host_len = (size_t)(name + len - 4 - p);
    return 1;
}
