/*
 * cuda/dl.c: what the loader says about a library libkdtree dlopened.
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "cuda/dl.h"

void
kdt_dl_path(void *h, const char *name, char *out, size_t size)
{
    struct link_map *lm = NULL;
    const char *p = name;
    if (!strchr(name, '/') && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm &&
        lm->l_name && lm->l_name[0])
        p = lm->l_name;
    snprintf(out, size, "%s", p);
}
