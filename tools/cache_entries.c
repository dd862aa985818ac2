/*
 * tools/cache_entries.c: the entries of a cache as kdtree-cache reads
 * them: by the library's own rules (src/cache/file.h), so what the
 * library would refuse is reported as bad, and never opened in a way
 * that could block.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/housekeep.h"
#include "cache/settings.h"
#include "cache/key.h"
#include "cache/layout.h"
#include "cache_entries.h"
#include "kdtree.h"

void
kdt_tool_parse_fields(const char *pre, size_t len, field *fields, int *n)
{
    size_t pos = 0;

    *n = 0;
    while (*n < 64
           && kdt_preimage_next(pre, len, &pos, &fields[*n].label,
                                &fields[*n].label_len, &fields[*n].value,
                                &fields[*n].value_len) == 1)
        (*n)++;
}

void
kdt_tool_load_entry(entry *e, int allow_root)
{
    kdt_key want;
    int r;

    e->ok = 0;
    e->n_fields = 0;
    if (!S_ISREG(e->file.mode)) {
        snprintf(e->why, sizeof e->why, "not a regular file (%s)",
                 kdt_cache_type_name(e->file.mode));
        return;
    }
    kdt_layout_parse_entry_name(e->file.name, &want);
    r = kdt_cache_read_entry(e->dir_fd, e->file.name, allow_root, &e->buf,
                             &e->size, e->why, sizeof e->why);
    if (r == 1) {
        snprintf(e->why, sizeof e->why, "vanished");
        return;
    }
    if (r != 0) {
        if (r != -1)
            snprintf(e->why, sizeof e->why, "%s", kdtree_last_error());
        return;
    }
    if (kdt_entry_decode(e->buf, e->size, &want, &e->view, e->why,
                         sizeof e->why) != 0
        || kdt_cache_alias_orphan(e->dir_fd, &e->view, e->why,
                                  sizeof e->why) != 0)
        return;
    e->ok = 1;
    kdt_tool_parse_fields(e->view.preimage, e->view.preimage_len, e->fields,
                 &e->n_fields);
}

void
kdt_tool_entries_free(collection *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].buf);
        free(c->v[i].path);
    }
    free(c->v);
    for (int i = 0; i < c->n_fds; i++)
        close(c->fds[i]);
    kdt_cache_free_dirs(c->layers, c->n_layers);
    memset(c, 0, sizeof *c);
}

/* Opens one base directory by the library's rules.  Returns its entry
 * directory's fd, or -1 (absent: quietly; refused: said on stderr). */
static int
open_base(const char *base, int allow_root, collection *c)
{
    char why[KDT_WHY_SIZE];
    int fd, r;

    r = kdt_cache_dir_open(base, allow_root ? KDT_DIR_ALLOW_ROOT : 0, &fd,
                           why, sizeof why);
    if (r == 0)
        return fd;
    if (r < 0) {
        fprintf(stderr, "kdtree-cache: %s is not used by the library: %s\n",
                base, why);
        c->refused++;
    }
    return -1;
}

/* Appends the entries of one base directory (user or layer). */
static int
collect(const char *base, const char *layer, int allow_root, collection *c)
{
    kdt_cache_file *f;
    size_t nf, i;
    char *dir;
    int fd;

    if (c->n_fds == 64 || (fd = open_base(base, allow_root, c)) < 0)
        return 0;
    c->fds[c->n_fds++] = fd;
    dir = kdt_layout_entry_dir(base);
    if (!dir || kdt_cache_scan(fd, &f, &nf) != 0) {
        free(dir);
        return -1;
    }
    entry *t = nf ? realloc(c->v, (c->n + nf) * sizeof *c->v) : c->v;
    if (nf && !t) {
        free(f);
        free(dir);
        return -1;
    }
    c->v = t;
    for (i = 0; i < nf; i++) {
        entry *e = &c->v[c->n + i];
        memset(e, 0, sizeof *e);
        e->file = f[i];
        e->layer = layer;
        e->dir_fd = fd;
        e->path = malloc(strlen(dir) + strlen(f[i].name) + 2);
        if (e->path)
            sprintf(e->path, "%s/%s", dir, f[i].name);
        kdt_tool_load_entry(e, allow_root);
    }
    c->n += nf;
    free(f);
    free(dir);
    return 0;
}

/* Every entry: the user's directory, and with all, the layers first. */
int
kdt_tool_collect(int all, collection *c)
{
    char *user = kdt_cache_user_dir();
    int r = 0;

    memset(c, 0, sizeof *c);
    if (all) {
        c->layers = kdt_cache_layer_dirs(&c->n_layers);
        for (size_t i = 0; r == 0 && i < c->n_layers; i++)
            r = collect(c->layers[i], c->layers[i], 1, c);
    }
    if (r == 0 && user)
        r = collect(user, "user", 0, c);
    free(user);
    if (r != 0) {
        fprintf(stderr, "kdtree-cache: out of memory\n");
        kdt_tool_entries_free(c);
    }
    return r;
}

const field *
kdt_tool_find_field(const entry *e, const char *label, size_t label_len)
{
    for (int i = 0; i < e->n_fields; i++)
        if (e->fields[i].label_len == label_len
            && memcmp(e->fields[i].label, label, label_len) == 0)
            return &e->fields[i];
    return NULL;
}

void
kdt_tool_field_text(const entry *e, const char *label, char *out, size_t size)
{
    const field *f = kdt_tool_find_field(e, label, strlen(label));
    size_t n;

    if (!f) {
        snprintf(out, size, "-");
        return;
    }
    n = f->value_len < size - 1 ? f->value_len : size - 1;
    memcpy(out, f->value, n);
    out[n] = '\0';
}

const char *
kdt_tool_kind_name(int kind)
{
    switch (kind) {
    case KDT_PAYLOAD_CUBIN: return "cubin";
    case KDT_PAYLOAD_PTX: return "ptx";
    case KDT_PAYLOAD_ALIAS: return "alias";
    default: return "?";
    }
}
