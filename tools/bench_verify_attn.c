/*
 * bench_verify_attn.c: kdtree-bench's verify_attn cases: absorbed MLA
 * tree attention, pages of 64 tokens in shuffled order.  The usual
 * shapes: a 65-row tree (64 draft nodes + root) for H = 8, 16, 64, 128
 * query heads, prefixes of 4096, 32768 and 131072 tokens, one and eight
 * requests.  The budgets DDTree peaks at (256-512 nodes): 257-
 * and 513-row trees for H = 8 and 16, prefixes of 4096 and 32768, one and
 * eight requests.
 *
 * FLOPs count the prefix as the spec does: 2176 per (row, cached token)
 * (2 * 576 for q.k, 2 * 512 for p.v).  Bytes are the KV read once per
 * request plus q in and o out.  When one request's KV would fit in L2,
 * several copies of it (different pages) are cycled between launches so
 * the figure is not an L2-resident one.  tools/baseline_attn.py times the
 * same cases the way others do it (PyTorch, FlashInfer) in the same run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kdtree.h"

#define VA_D_QK 576
#define VA_D_V 512
#define VA_PAGE 64
#define VA_L2_DEFEAT 256e6 /* bytes of KV cycled through, at least */
#define VA_MAX_SHAPES 48

/* One case: R requests of H heads, `rows` tree rows after `past` tokens. */
typedef struct va_shape {
    int R, H, past, rows;
} va_shape;

typedef struct va_case {
    kdtree_runtime *rt;
    int R, H, past, rows, max_pages, copies, next;
    uint64_t o, lse, q, kv, bt, past_len, n_nodes, mask, ws, ws_bytes;
} va_case;

/* The cases, in report order; with quick only H = 8, R = 1, past 4096,
 * 65 rows.  Returns how many. */
static int
va_shapes(va_shape *out, int quick)
{
    static const int heads[] = {8, 16, 64, 128};
    static const int pasts[] = {4096, 32768, 131072};
    static const int reqs[] = {1, 8};
    static const int ddtree_rows[] = {257, 513};
    int n = 0;
    if (quick) {
        out[n++] = (va_shape){1, 8, 4096, 65};
        return n;
    }
    for (int ri = 0; ri < 2; ri++)
        for (int hi = 0; hi < 4; hi++)
            for (int pi = 0; pi < 3; pi++)
                out[n++] = (va_shape){reqs[ri], heads[hi], pasts[pi], 65};
    for (int ni = 0; ni < 2; ni++)
        for (int ri = 0; ri < 2; ri++)
            for (int hi = 0; hi < 2; hi++)
                for (int pi = 0; pi < 2; pi++)
                    out[n++] = (va_shape){reqs[ri], heads[hi], pasts[pi],
                                          ddtree_rows[ni]};
    return n;
}

static int
va_max_pages(const va_shape *s)
{
    return (s->past + s->rows + VA_PAGE - 1) / VA_PAGE;
}

/* Copies of a case's KV that together pass VA_L2_DEFEAT bytes. */
static int
va_copies(const va_shape *s)
{
    double bytes = (double)s->R * va_max_pages(s) * VA_PAGE * VA_D_QK * 2;
    int copies = (int)ceil(VA_L2_DEFEAT / bytes);
    return copies < 1 ? 1 : copies;
}

static uint64_t
va_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* bf16 of a uniform value in [-1, 1): random sign, exponent -1..-8, and
 * mantissa bits (real-looking data, never zeros, NaN or Inf). */
static uint16_t
va_bf16(uint64_t *s)
{
    uint64_t x = va_rand(s);
    uint16_t sign = (uint16_t)((x & 1) << 15);
    uint16_t exp = (uint16_t)(126 - (x >> 1) % 8);
    uint16_t man = (uint16_t)((x >> 8) & 0x7f);
    return (uint16_t)(sign | exp << 7 | man);
}

static int
va_launch(void *arg, void *stream)
{
    va_case *c = arg;
    /* cycle through the copies of the KV (each its own block table) */
    uint64_t bt = c->bt + (uint64_t)c->next * c->R * c->max_pages * 4;
    c->next = (c->next + 1) % c->copies;
    kdtree_attn at = {.q = c->q, .o = c->o, .lse = c->lse,
                      .workspace = c->ws, .workspace_bytes = c->ws_bytes,
                      .n_heads = c->H, .scale = 0.1352f};
    kdtree_tree tree = {.n_nodes = c->n_nodes, .anc_mask = c->mask,
                        .n_requests = c->R, .n_max = c->rows};
    kdtree_requests req = {.past_len = c->past_len, .n_requests = c->R};
    kdtree_kv_cache kv = {.data = c->kv, .block_table = bt,
                          .page_size = VA_PAGE, .max_pages = c->max_pages};
    return kdtree_verify_attn(c->rt, &at, &tree, &req, &kv, stream);
}

/* A random tree per request (parent[i] < i) as ancestor masks, W words a
 * row; malloc'ed. */
static uint32_t *
va_masks(int R, int rows, int W, uint64_t *seed)
{
    uint32_t *mask = calloc((size_t)R * rows * W, sizeof *mask);
    if (!mask)
        return NULL;
    for (int r = 0; r < R; r++) {
        uint32_t *m = mask + (size_t)r * rows * W;
        for (int i = 0; i < rows; i++) {
            m[(size_t)i * W + i / 32] |= 1u << (i % 32);
            if (i) {
                int par = (int)(va_rand(seed) % (uint64_t)i);
                for (int w = 0; w < W; w++)
                    m[(size_t)i * W + w] |= m[(size_t)par * W + w];
            }
        }
    }
    return mask;
}

int
bench_verify_attn(bench_ctx *b)
{
    va_shape shapes[VA_MAX_SHAPES];
    const int n_shapes = va_shapes(shapes, bench_quick(b));
    kdtree_runtime *rt = bench_runtime(b);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int64_t pool_pages = 0;
    size_t q_max = 0, o_max = 0;

    /* One pool of KV pages for every case: the largest need is 8 requests
     * of 131072 + 65 tokens, or L2-defeating copies of a smaller one.
     * Sized over every shape, also those --only leaves out, so that a
     * case run alone reads the same pages as in a whole run. */
    for (int i = 0; i < n_shapes; i++) {
        const va_shape *s = &shapes[i];
        int64_t need = (int64_t)va_copies(s) * s->R * va_max_pages(s);
        size_t rows = (size_t)s->R * s->rows * s->H;
        if (pool_pages < need)
            pool_pages = need;
        if (q_max < rows * VA_D_QK)
            q_max = rows * VA_D_QK;
        if (o_max < rows)
            o_max = rows;
    }
    size_t kv_elems = (size_t)pool_pages * VA_PAGE * VA_D_QK;
    uint16_t *host = malloc(2 * kv_elems);
    if (!host)
        return KDTREE_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < kv_elems; i++)
        host[i] = va_bf16(&seed);
    uint64_t kv = bench_upload(b, host, 2 * kv_elems);
    /* q for the largest case comes from the same random values */
    if (q_max > kv_elems)
        q_max = kv_elems;
    uint64_t q = bench_upload(b, host, 2 * q_max);
    free(host);
    uint64_t o = bench_alloc(b, o_max * VA_D_V * 2);
    uint64_t lse = bench_alloc(b, o_max * 4);
    uint64_t ws = 0, ws_have = 0;

    for (int si = 0; si < n_shapes; si++) {
        const va_shape *s = &shapes[si];
        const int R = s->R, H = s->H, past = s->past, rows = s->rows;
        const int W = (rows + 31) / 32;
        char config[96];
        snprintf(config, sizeof config, "H=%d R=%d past_len=%d rows=%d", H,
                 R, past, rows);
        if ((size_t)R * rows * H * VA_D_QK > q_max || !bench_wants(b, config))
            continue;
        va_case c = {.rt = rt, .R = R, .H = H, .past = past, .rows = rows,
                     .o = o, .lse = lse, .q = q, .kv = kv};
        c.max_pages = va_max_pages(s);
        c.copies = va_copies(s);
        int64_t need = (int64_t)c.copies * R * c.max_pages;
        if (need > pool_pages)
            c.copies = (int)(pool_pages / ((int64_t)R * c.max_pages));
        /* a shuffled choice of pages for each copy */
        int32_t *bt = malloc(sizeof(int32_t) * (size_t)pool_pages);
        if (!bt)
            return KDTREE_ERROR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < pool_pages; i++)
            bt[i] = (int32_t)i;
        for (int64_t i = pool_pages - 1; i > 0; i--) {
            int64_t j = (int64_t)(va_rand(&seed) % (uint64_t)(i + 1));
            int32_t t = bt[i];
            bt[i] = bt[j];
            bt[j] = t;
        }
        c.bt = bench_upload(b, bt, 4 * (size_t)c.copies * R * c.max_pages);
        free(bt);
        int32_t pl[8], nn[8];
        for (int r = 0; r < R; r++) {
            pl[r] = past;
            nn[r] = rows;
        }
        uint32_t *mask = va_masks(R, rows, W, &seed);
        if (!mask)
            return KDTREE_ERROR_OUT_OF_MEMORY;
        c.past_len = bench_upload(b, pl, 4 * (size_t)R);
        c.n_nodes = bench_upload(b, nn, 4 * (size_t)R);
        c.mask = bench_upload(b, mask, 4 * (size_t)R * rows * W);
        free(mask);
        kdtree_attn at = {.n_heads = H};
        kdtree_tree tr = {.n_requests = R, .n_max = rows};
        kdtree_kv_cache kvs = {.page_size = VA_PAGE, .max_pages = c.max_pages};
        int st = kdtree_verify_attn_workspace_size(&c.ws_bytes, rt, &at, &tr,
                                                   &kvs);
        if (st)
            return st;
        if (c.ws_bytes > ws_have) {
            ws = bench_alloc(b, c.ws_bytes);
            ws_have = c.ws_bytes;
        }
        c.ws = c.ws_bytes ? ws : 0;
        double us = bench_gpu_us(b, va_launch, &c);
        double flops = (double)R * rows * H * past * 2176.0;
        double bytes = (double)R * (past + rows) * VA_D_QK * 2 +
                       (double)R * rows * H * (VA_D_QK + VA_D_V) * 2;
        bench_row(b, "verify_attn", config, us, bytes, flops, NULL, 0);
    }
    return 0;
}
