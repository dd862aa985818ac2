/*
 * tools/kdtree-cache.h: what the parts of tools/kdtree-cache share: the
 * exit codes, the usage error, the entries of a cache as the tool reads
 * them (tools/cache_entries.c) and the explain command
 * (tools/cache_explain.c).
 */
#ifndef KDT_TOOL_KDTREE_CACHE_H
#define KDT_TOOL_KDTREE_CACHE_H

#include <stddef.h>

#include "cache/entry.h"
#include "cache/file.h"
#include "cache/housekeep.h"

enum { EXIT_OK = 0, EXIT_NO = 1, EXIT_USAGE = 2, EXIT_CACHE = 3 };

/* Prints "kdtree-cache: " and fmt (with one %s: `what`), then the usage;
 * returns EXIT_USAGE. */
int kdt_tool_usage_error(const char *fmt, const char *what);

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

/* explain KERNEL [SHAPE] --arch A [--nvrtc V]: would the lookup hit; if
 * not, which preimage fields differ from the nearest entry.  Returns the
 * exit code. */
int kdt_tool_explain(const char *kernel, const char *shape, const char *arch,
                     const char *nvrtc);

#endif /* KDT_TOOL_KDTREE_CACHE_H */
