/*
 * cache/layout.h: the names of things in a cache directory.  Pure string
 * functions.
 *
 *     <base>/v<FORMAT>/<32 hex of the key>.kdt          an entry
 *     <base>/v<FORMAT>/.<32 hex>.<pid>.<n>.<host>.tmp   a publish in flight
 *
 * A temp name carries the writer's host, so that a sweep judges only
 * writers of its own host by their lock (cache/housekeep.c), and its pid
 * and a counter, so that names of one host's writers differ; the pid is
 * never used to tell whether the writer lives.
 *
 * Layer 3 of the cache (see cache/cache.h): includes cache/entry.h and
 * cache/key.h.
 */
#ifndef KDT_CACHE_LAYOUT_H
#define KDT_CACHE_LAYOUT_H

#include <stddef.h>

#include "cache/key.h"

/* Room for an entry's or a temp file's name and its NUL. */
#define KDT_NAME_SIZE 128

/* "v<FORMAT>": the entry directory's name inside a base directory. */
const char *kdt_layout_subdir(void);

/* "<base>/v<FORMAT>", malloc'ed, or NULL. */
char *kdt_layout_entry_dir(const char *base);

/* "<32 hex>.kdt" of `key`. */
void kdt_layout_entry_name(const kdt_key *key, char out[KDT_NAME_SIZE]);

/* 1 when `name` is an entry's name ("<32 lowercase hex>.kdt"); with `key`
 * not NULL also sets the key it names. */
int kdt_layout_parse_entry_name(const char *name, kdt_key *key);

/* The temp name of the `n`th publish of `key` by this process. */
void kdt_layout_temp_name(const kdt_key *key, unsigned long n,
                          char out[KDT_NAME_SIZE]);

/* 1 when `name` is a temp name, with *host pointing at its host part
 * (*host_len bytes, not NUL-terminated); 0 for any other name. */
int kdt_layout_parse_temp_name(const char *name, const char **host,
                               size_t *host_len);

/* This host's name reduced to [A-Za-z0-9-] (at most 40 characters; "host"
 * when that leaves nothing), as temp names carry it. */
void kdt_layout_host_tag(char *out, size_t size);

#endif /* KDT_CACHE_LAYOUT_H */
