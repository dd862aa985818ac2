/*
 * tools/cache_entries.h: the entries of a cache as kdtree-cache reads
 * them (tools/cache_entries.c): each entry file read and decoded by the
 * library's own rules, with its preimage's fields, and the collection of
 * the user's directory and the read-only layers.
 */
#ifndef KDT_TOOL_CACHE_ENTRIES_H
#define KDT_TOOL_CACHE_ENTRIES_H

#include <stddef.h>

#include "cache/entry.h"
#include "cache/file.h"
#include "cache/housekeep.h"

typedef struct field {
    const char *label;
    size_t label_len;
    const char *value;
    size_t value_len;
} field;

/* One entry file, read and decoded (or not). */
typedef struct entry {
    char *path;        /* for messages */
    const char *layer; /* "user" or the layer's directory */
    int dir_fd;        /* its entry directory (owned by the collection) */
    kdt_cache_file file;
    void *buf;
    size_t size;
    int ok;
    char why[512];
    kdt_entry_view view;
    field fields[64];
    int n_fields;
} entry;

/* Everything collected: the entries and the directories they are in. */
typedef struct collection {
    entry *v;
    size_t n;
    char **layers;
    size_t n_layers;
    int fds[64];
    int n_fds;
    int refused; /* directories the library would refuse */
} collection;

/* The fields of a preimage (at most 64). */
void kdt_tool_parse_fields(const char *pre, size_t len, field *fields,
                           int *n);
/* Reads and decodes e->file by the library's rules (allow_root: a
 * layer); e->ok says whether it is a valid entry, e->why why not. */
void kdt_tool_load_entry(entry *e, int allow_root);
/* Every entry of the user's directory and, with `all`, of the layers
 * first.  Returns 0, or -1 (out of memory, said on stderr). */
int kdt_tool_collect(int all, collection *c);
void kdt_tool_entries_free(collection *c);
/* The field `label` of an entry, or NULL. */
const field *kdt_tool_find_field(const entry *e, const char *label,
                                 size_t label_len);
/* Its value as a string ("-" when absent), cut to `size`. */
void kdt_tool_field_text(const entry *e, const char *label, char *out,
                         size_t size);
/* "cubin", "ptx", "alias". */
const char *kdt_tool_kind_name(int kind);

#endif /* KDT_TOOL_CACHE_ENTRIES_H */
