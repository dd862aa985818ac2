/*
 * base/blob.h: a compiled kernel as the compiler makes it and the cache keeps
 * it: a malloc'ed payload and what kind of payload it is.
 */
#ifndef KDT_BLOB_H
#define KDT_BLOB_H

#include <stddef.h>
#include <stdlib.h>

enum kdt_payload_kind {
    KDT_PAYLOAD_CUBIN = 1,
    KDT_PAYLOAD_PTX = 2,
    /* An alias entry: its preimage is a kernel's preimage without the
     * NVRTC field, its payload the NVRTC version text of the newest entry
     * compiled for it.  It lets a process without NVRTC find the entry
     * whose full key it cannot compute (src/jit/obtain.c). */
    KDT_PAYLOAD_ALIAS = 3
};

/* A compiled kernel: a malloc'ed payload. */
typedef struct kdt_blob {
    void *data;
    size_t size;
    int kind; /* enum kdt_payload_kind */
} kdt_blob;

/* Frees the payload and empties the blob; NULL is fine. */
static inline void
kdt_blob_free(kdt_blob *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->size = 0;
}

#endif /* KDT_BLOB_H */
