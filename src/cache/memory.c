/*
 * cache/memory.c: the in-process memory layer (see cache/memory.h).
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cache/memory.h"

/* A small chained hash table: a process holds tens of shapes, not
 * millions, and the key is already a good hash. */
#define MEM_BUCKETS 64

struct mem_entry {
    struct mem_entry *next;
    kdt_key key;
    int kind;
    size_t size;
    unsigned char data[];
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_entry *mem_table[MEM_BUCKETS];
static pthread_once_t mem_once = PTHREAD_ONCE_INIT;

/* A process that forks while another thread holds mem_lock would leave
 * the child a lock nobody can release: hold it across fork() instead.  It
 * is a leaf (nothing else is locked while it is held), so taking it here
 * cannot deadlock.  (glibc drops these handlers if the library is
 * dlclose'd.) */
static void
mem_prefork(void)
{
    pthread_mutex_lock(&mem_lock);
}

static void
mem_postfork(void)
{
    pthread_mutex_unlock(&mem_lock);
}

static void
mem_init(void)
{
    pthread_atfork(mem_prefork, mem_postfork, mem_postfork);
}

static void
mem_enter(void)
{
    pthread_once(&mem_once, mem_init);
    pthread_mutex_lock(&mem_lock);
}

static unsigned
mem_bucket(const kdt_key *key)
{
    return key->bytes[15] % MEM_BUCKETS;
}

int
kdt_mem_get(const kdt_key *key, kdt_blob *out)
{
    struct mem_entry *e;
    int r = 0;

    mem_enter();
    for (e = mem_table[mem_bucket(key)]; e; e = e->next) {
        if (!kdt_key_equal(&e->key, key))
            continue;
        out->data = malloc(e->size);
        if (!out->data) {
            r = kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                         "cache: out of memory (%zu bytes)", e->size);
            break;
        }
        memcpy(out->data, e->data, e->size);
        out->size = e->size;
        out->kind = e->kind;
        r = 1;
        break;
    }
    pthread_mutex_unlock(&mem_lock);
    return r;
}

int
kdt_mem_has(const kdt_key *key)
{
    struct mem_entry *e;
    int r = 0;

    mem_enter();
    for (e = mem_table[mem_bucket(key)]; e && !r; e = e->next)
        r = kdt_key_equal(&e->key, key);
    pthread_mutex_unlock(&mem_lock);
    return r;
}

int
kdt_mem_put(const kdt_key *key, const kdt_blob *blob)
{
    struct mem_entry *e, **pp;
    unsigned b = mem_bucket(key);

    if (blob->size > SIZE_MAX - sizeof *e)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY, "cache: blob too large");
    e = malloc(sizeof *e + blob->size);
    if (!e)
        return kdt_fail(KDTREE_ERROR_OUT_OF_MEMORY,
                        "cache: out of memory (%zu bytes)", blob->size);
    e->key = *key;
    e->kind = blob->kind;
    e->size = blob->size;
    memcpy(e->data, blob->data, blob->size);
    mem_enter();
    for (pp = &mem_table[b]; *pp; pp = &(*pp)->next) {
        if (kdt_key_equal(&(*pp)->key, key)) {
            struct mem_entry *old = *pp;
            e->next = old->next;
            *pp = e;
            pthread_mutex_unlock(&mem_lock);
            free(old);
            return 0;
        }
    }
    e->next = mem_table[b];
    mem_table[b] = e;
    pthread_mutex_unlock(&mem_lock);
    return 0;
}

void
kdt_mem_clear(void)
{
    struct mem_entry *e, *next;

    mem_enter();
    for (int i = 0; i < MEM_BUCKETS; i++) {
        for (e = mem_table[i]; e; e = next) {
            next = e->next;
            free(e);
        }
        mem_table[i] = NULL;
    }
    pthread_mutex_unlock(&mem_lock);
}
