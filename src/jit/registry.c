/*
 * jit/registry.c: the kernel registry (each kernel's definition comes from
 * src/kernels/<name>.c) and shapes: parse, check, format.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "jit/registry.h"

static const kdt_kernel_def *const defs[KDT_KERNEL_COUNT] = {
    [KDT_KERNEL_DRAFT_TOPK] = &kdt_def_draft_topk,
    [KDT_KERNEL_BUILD_DDTREE] = &kdt_def_build_ddtree,
    [KDT_KERNEL_VERIFY_ATTN] = &kdt_def_verify_attn,
    [KDT_KERNEL_TREE_ACCEPT] = &kdt_def_tree_accept,
};

const kdt_kernel_def *
kdt_kernel_def_get(int id)
{
    return id >= 0 && id < KDT_KERNEL_COUNT ? defs[id] : NULL;
}

int
kdt_kernel_find(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < KDT_KERNEL_COUNT; i++)
        if (strcmp(defs[i]->name, name) == 0)
            return i;
    return -1;
}

/* "V=1..16777216, K=1..1024, DTYPE=f32|bf16" */
static void
format_ranges(const kdt_kernel_def *d, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < d->n_consts && used < size; i++) {
        const kdt_const_def *c = &d->consts[i];
        int m;
        if (c->names) {
            m = snprintf(out + used, size - used, "%s%s=", i ? ", " : "",
                         c->name);
            for (int j = 0; c->names[j] && m >= 0 && used + (size_t)m < size;
                 j++)
                m += snprintf(out + used + m, size - used - m, "%s%s",
                              j ? "|" : "", c->names[j]);
        } else {
            m = snprintf(out + used, size - used,
                         "%s%s=%" PRId64 "..%" PRId64, i ? ", " : "", c->name,
                         c->min, c->max);
        }
        if (m < 0)
            break;
        used += (size_t)m;
    }
}

int
kdt_kernel_check(int id, const int64_t *vals)
{
    const kdt_kernel_def *d = defs[id];
    for (int i = 0; i < d->n_consts; i++) {
        const kdt_const_def *c = &d->consts[i];
        if (vals[i] < c->min || vals[i] > c->max)
            return kdt_fail(KDTREE_ERROR_SHAPE,
                            "%s: constant %s = %" PRId64
                            " is outside its range %" PRId64 "..%" PRId64,
                            d->name, c->name, vals[i], c->min, c->max);
    }
    return d->check ? d->check(vals) : KDTREE_OK;
}

/* The separator a value ends in when the next pair follows with something
 * other than a comma ("65;L=15": ';'), or 0: a value is a number or a
 * name, so a character outside those that has a '=' after it is where
 * the writer meant a comma (a blank only when nothing else is there:
 * "65 | L=15" is '|'). */
static char
stray_separator(const char *v, size_t len)
{
    const char *eq = memchr(v, '=', len);
    char blank = 0;
    for (const char *p = v; eq && p < eq; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == ' ' || c == '\t')
            blank = blank ? blank : (char)c;
        else if (!isalnum(c) && c != '_' && c != '-' && c != '+')
            return (char)c;
    }
    return blank;
}

int
kdt_shape_parse(int id, const char *shape, int64_t *vals)
{
    const kdt_kernel_def *d = defs[id];
    int seen[KDT_MAX_CONSTS] = {0};
    char ranges[256];
    format_ranges(d, ranges, sizeof ranges);
    if (!shape)
        return kdt_fail(KDTREE_ERROR_INVALID_ARGUMENT,
                        "%s: shape is NULL (expected e.g. \"%s\")", d->name,
                        d->default_shape);
    const char *p = shape;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *eq = strchr(p, '=');
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (!eq || eq > end)
            return kdt_fail(KDTREE_ERROR_SHAPE_STRING,
                            "%s: shape \"%s\": expected NAME=VALUE pairs "
                            "separated by commas (%s)",
                            d->name, shape, ranges);
        size_t nlen = (size_t)(eq - p);
        while (nlen && p[nlen - 1] == ' ')
            nlen--;
        int which = -1;
        for (int i = 0; i < d->n_consts; i++)
            if (strlen(d->consts[i].name) == nlen &&
                strncmp(d->consts[i].name, p, nlen) == 0)
                which = i;
        if (which < 0)
            return kdt_fail(KDTREE_ERROR_SHAPE_STRING,
                            "%s: shape \"%s\": unknown constant \"%.*s\"; "
                            "the kernel takes %s",
                            d->name, shape, (int)nlen, p, ranges);
        if (seen[which]++)
            return kdt_fail(KDTREE_ERROR_SHAPE_STRING,
                            "%s: shape \"%s\": %s given twice", d->name,
                            shape, d->consts[which].name);
        const char *v = eq + 1;
        while (*v == ' ')
            v++;
        size_t vlen = (size_t)(end - v);
        while (vlen && v[vlen - 1] == ' ')
            vlen--;
        const kdt_const_def *c = &d->consts[which];
        int found = 0;
        for (int j = 0; c->names && c->names[j]; j++)
            if (strlen(c->names[j]) == vlen &&
                strncmp(c->names[j], v, vlen) == 0) {
                vals[which] = j;
                found = 1;
            }
        if (!found) {
            char buf[32];
            char *tail;
            if (vlen == 0 || vlen >= sizeof buf)
                goto bad_value;
            memcpy(buf, v, vlen);
            buf[vlen] = '\0';
            errno = 0;
            long long x = strtoll(buf, &tail, 10);
            if (errno || *tail)
                goto bad_value;
            vals[which] = x;
        }
        p = end;
        continue;
    bad_value:
        if (stray_separator(v, vlen))
            return kdt_fail(KDTREE_ERROR_SHAPE_STRING,
                            "%s: shape \"%s\": '%c' after %s's value: "
                            "pairs are separated by commas (%s)",
                            d->name, shape, stray_separator(v, vlen),
                            c->name, ranges);
        return kdt_fail(KDTREE_ERROR_SHAPE_STRING,
                        "%s: shape \"%s\": %s has no valid value (%s)",
                        d->name, shape, c->name, ranges);
    }
    for (int i = 0; i < d->n_consts; i++)
        if (!seen[i] && d->consts[i].optional)
            vals[i] = d->consts[i].def;
        else if (!seen[i])
            return kdt_fail(KDTREE_ERROR_SHAPE_STRING,
                            "%s: shape \"%s\" lacks %s (%s)", d->name, shape,
                            d->consts[i].name, ranges);
    return kdt_kernel_check(id, vals);
}

void
kdt_shape_format(int id, const int64_t *vals, char *out, size_t size)
{
    const kdt_kernel_def *d = defs[id];
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < d->n_consts && used < size; i++) {
        const kdt_const_def *c = &d->consts[i];
        int m;
        if (c->names && vals[i] >= 0 && vals[i] <= c->max)
            m = snprintf(out + used, size - used, "%s%s=%s", i ? "," : "",
                         c->name, c->names[vals[i]]);
        else
            m = snprintf(out + used, size - used, "%s%s=%" PRId64,
                         i ? "," : "", c->name, vals[i]);
        if (m < 0)
            break;
        used += (size_t)m;
    }
}

/* ---- public registry queries -------------------------------------------- */

KDT_EXPORT int32_t
kdtree_kernel_count(void)
{
    return KDT_KERNEL_COUNT;
}

KDT_EXPORT const char *
kdtree_kernel_name(int32_t index)
{
    const kdt_kernel_def *d = kdt_kernel_def_get(index);
    return d ? d->name : NULL;
}

static char constants_text[KDT_KERNEL_COUNT][256];
static pthread_once_t constants_once = PTHREAD_ONCE_INIT;

static void
format_all_constants(void)
{
    for (int i = 0; i < KDT_KERNEL_COUNT; i++)
        format_ranges(defs[i], constants_text[i], sizeof constants_text[i]);
}

KDT_EXPORT const char *
kdtree_kernel_constants(const char *kernel)
{
    int id = kdt_kernel_find(kernel);
    if (id < 0)
        return NULL;
    pthread_once(&constants_once, format_all_constants);
    return constants_text[id];
}

KDT_EXPORT const char *
kdtree_kernel_default_shape(const char *kernel)
{
    int id = kdt_kernel_find(kernel);
    return id < 0 ? NULL : defs[id]->default_shape;
}
