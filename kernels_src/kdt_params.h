/*
 * kdt_params.h: the launch parameters of every kernel, one struct per
 * kernel, passed by value as the kernel's only argument.
 *
 * This one file is compiled both by the host C compiler
 * (src/kernels/<name>.c fill the structs) and by NVRTC (the kernels read
 * them), so host and device can never disagree on a layout.  Only fixed-width types and
 * pointers; every field is naturally aligned, so the layout is the same
 * under the x86-64 and nvptx64 ABIs.
 *
 * Shapes that a kernel is specialised on are not here: they reach NVRTC as
 * -DKDT_<NAME>=<value> options (see src/jit/obtain.c) and are compile-time
 * constants in the kernel.
 */
#ifndef KDT_PARAMS_H
#define KDT_PARAMS_H

#ifdef __CUDACC_RTC__
/* NVRTC has no system headers; these match <stdint.h> on every CUDA host. */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

/* §1 draft_topk.  logits is bf16 or f32 as DTYPE says. */
typedef struct kdt_draft_topk_params {
    const void *logits; /* [n_rows][V] */
    float *lp;          /* [n_rows][K] */
    int32_t *ids;       /* [n_rows][K] */
    int32_t n_rows;
    int32_t pad0;
} kdt_draft_topk_params;

/* §2 build_ddtree.  Optional inputs and outputs are NULL when absent. */
typedef struct kdt_build_ddtree_params {
    const float *lp;            /* [R][L][K] */
    const int32_t *ids;         /* [R][L][K] */
    const int32_t *budget;      /* [R] */
    const int32_t *depth_limit; /* [R] or NULL (= L) */
    const int32_t *root_token;  /* [R] */
    const int32_t *past_len;    /* [R] or NULL (= 0) */
    int32_t *n_nodes;           /* [R] */
    int32_t *token;             /* [R][N_MAX] */
    int32_t *parent;            /* [R][N_MAX] */
    int32_t *depth;             /* [R][N_MAX] */
    int32_t *position;          /* [R][N_MAX] */
    int32_t *first_child;       /* [R][N_MAX] */
    int32_t *next_sibling;      /* [R][N_MAX] */
    float *score;               /* [R][N_MAX] or NULL */
    uint32_t *anc_mask;         /* [R][N_MAX][W] */
    int32_t n_requests;
    int32_t pad0;
} kdt_build_ddtree_params;

/* §3 verify_attn.  One struct serves the attention kernel and the kernel
 * that merges its KV splits. */
typedef struct kdt_verify_attn_params {
    const uint16_t *q;           /* bf16 [R][N_MAX][H][576] */
    const uint16_t *kv_cache;    /* [pages][PAGE][576]: bf16, or e4m3
                                  * bytes (KV), which a body reads
                                  * through a uint8_t pointer (typed as
                                  * bf16's: the bf16 SASS is what it was) */
    const int32_t *block_table;  /* [R][max_pages] */
    const int32_t *past_len;     /* [R] */
    const int32_t *n_nodes;      /* [R] */
    const uint32_t *anc_mask;    /* [R][N_MAX][W] */
    uint16_t *o;                 /* bf16 [R][N_MAX][H][512] */
    float *lse;                  /* [R][N_MAX][H] or NULL */
    float *workspace;            /* split partials, or NULL (no split) */
    int32_t n_requests;
    int32_t max_pages;
    int32_t num_splits;          /* >= 1; 1 = no merge kernel */
    float scale;
    float kv_scale;              /* an e4m3 cache's scale; 1 for bf16 */
    int32_t pad0;
} kdt_verify_attn_params;

/* §4 tree_accept. */
typedef struct kdt_tree_accept_params {
    const int32_t *token;        /* [R][N_MAX] */
    const int32_t *first_child;  /* [R][N_MAX] */
    const int32_t *next_sibling; /* [R][N_MAX] */
    const int32_t *n_nodes;      /* [R] */
    const int32_t *target;       /* [R][N_MAX] */
    const int32_t *max_accept;   /* [R] or NULL (no cap) */
    int32_t *accept_len;         /* [R] */
    int32_t *accept_idx;         /* [R][L+1] */
    int32_t *accept_token;       /* [R][L+1] */
    int32_t *bonus;              /* [R] */
    int32_t n_requests;
    int32_t pad0;
} kdt_tree_accept_params;

#endif /* KDT_PARAMS_H */
