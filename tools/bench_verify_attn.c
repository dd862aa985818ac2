/*
 * bench_verify_attn.c: kdtree-bench's verify_attn cases (issue 4): absorbed
 * MLA tree attention for H = 8, 16, 64, 128 query heads, a 65-row tree
 * (64 draft nodes + root), prefixes of 4096, 32768 and 131072 tokens, one
 * and eight requests, pages of 64 tokens in shuffled order.
 *
 * FLOPs count the prefix as the spec does: 2176 per (row, cached token)
 * (2 * 576 for q.k, 2 * 512 for p.v).  Bytes are the KV read once per
 * request plus q in and o out.  When one request's KV would fit in L2,
 * several copies of it (different pages) are cycled between launches so
 * the figure is not an L2-resident one.  The PyTorch composition of the
 * same problem is tools/baseline_attn.py (same configs, same run).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kdtree.h"

#define VA_D_QK 576
#define VA_D_V 512
#define VA_ROWS 65  /* tree rows per request */
#define VA_PAGE 64
#define VA_L2_DEFEAT 256e6 /* bytes of KV cycled through, at least */

typedef struct va_case {
    kdtree_runtime *rt;
    int R, H, past, max_pages, copies, next;
    uint64_t o, lse, q, kv, bt, past_len, n_nodes, mask, ws, ws_bytes;
} va_case;

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
                        .n_requests = c->R, .n_max = VA_ROWS};
    kdtree_requests req = {.past_len = c->past_len, .n_requests = c->R};
    kdtree_kv_cache kv = {.data = c->kv, .block_table = bt,
                          .page_size = VA_PAGE, .max_pages = c->max_pages};
    return kdtree_verify_attn(c->rt, &at, &tree, &req, &kv, stream);
}

int
bench_verify_attn(bench_ctx *b)
{
    static const int heads[] = {8, 16, 64, 128};
    static const int pasts[] = {4096, 32768, 131072};
    static const int reqs[] = {1, 8};
    const int quick = bench_quick(b);
    kdtree_runtime *rt = bench_runtime(b);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const int W = (VA_ROWS + 31) / 32;

    /* One pool of KV pages for every case: the largest need is 8 requests
     * of 131072 + 65 tokens, or L2-defeating copies of a smaller one. */
    int64_t pool_pages = 0;
    for (unsigned ri = 0; ri < 2; ri++)
        for (unsigned pi = 0; pi < 3; pi++) {
            int64_t mp = (pasts[pi] + VA_ROWS + VA_PAGE - 1) / VA_PAGE;
            double bytes = (double)reqs[ri] * mp * VA_PAGE * VA_D_QK * 2;
            int copies = (int)ceil(VA_L2_DEFEAT / bytes);
            if (copies < 1)
                copies = 1;
            if (pool_pages < reqs[ri] * mp * copies)
                pool_pages = reqs[ri] * mp * copies;
        }
    if (quick)
        pool_pages = 2 * 4200; /* R = 1, past 4096, L2-defeating copies */
    size_t kv_elems = (size_t)pool_pages * VA_PAGE * VA_D_QK;
    uint16_t *host = malloc(2 * kv_elems);
    if (!host)
        return KDTREE_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < kv_elems; i++)
        host[i] = va_bf16(&seed);
    uint64_t kv = bench_upload(b, host, 2 * kv_elems);
    /* q for the largest case comes from the same random values */
    size_t q_max = (size_t)8 * VA_ROWS * 128 * VA_D_QK;
    if (q_max > kv_elems)
        q_max = kv_elems;
    uint64_t q = bench_upload(b, host, 2 * q_max);
    free(host);
    uint64_t o = bench_alloc(b, (size_t)8 * VA_ROWS * 128 * VA_D_V * 2);
    uint64_t lse = bench_alloc(b, (size_t)8 * VA_ROWS * 128 * 4);
    uint64_t ws = 0, ws_have = 0;

    for (unsigned ri = 0; ri < 2; ri++) {
        for (unsigned hi = 0; hi < 4; hi++) {
            for (unsigned pi = 0; pi < 3; pi++) {
                int R = reqs[ri], H = heads[hi], past = pasts[pi];
                if (quick && (R != 1 || H != 8 || past != 4096))
                    continue;
                if ((size_t)R * VA_ROWS * H * VA_D_QK > q_max)
                    continue;
                va_case c = {.rt = rt, .R = R, .H = H, .past = past, .o = o,
                             .lse = lse, .q = q, .kv = kv};
                c.max_pages = (past + VA_ROWS + VA_PAGE - 1) / VA_PAGE;
                double kv_bytes =
                    (double)R * c.max_pages * VA_PAGE * VA_D_QK * 2;
                c.copies = (int)ceil(VA_L2_DEFEAT / kv_bytes);
                if (c.copies < 1)
                    c.copies = 1;
                int64_t need = (int64_t)c.copies * R * c.max_pages;
                if (need > pool_pages)
                    c.copies = (int)(pool_pages / ((int64_t)R * c.max_pages));
                /* a shuffled choice of pages for each copy */
                int32_t *bt = malloc(sizeof(int32_t) * (size_t)pool_pages);
                for (int64_t i = 0; i < pool_pages; i++)
                    bt[i] = (int32_t)i;
                for (int64_t i = pool_pages - 1; i > 0; i--) {
                    int64_t j = (int64_t)(va_rand(&seed) % (uint64_t)(i + 1));
                    int32_t t = bt[i];
                    bt[i] = bt[j];
                    bt[j] = t;
                }
                c.bt = bench_upload(b, bt, 4 * (size_t)c.copies * R *
                                               c.max_pages);
                free(bt);
                int32_t pl[8], nn[8];
                uint32_t mask[8 * VA_ROWS * 3];
                for (int r = 0; r < R; r++) {
                    pl[r] = past;
                    nn[r] = VA_ROWS;
                    /* a random tree: parent[i] < i, mask = ancestors */
                    uint32_t *m = mask + r * VA_ROWS * W;
                    memset(m, 0, 4 * VA_ROWS * W);
                    for (int i = 0; i < VA_ROWS; i++) {
                        m[i * W + i / 32] |= 1u << (i % 32);
                        if (i) {
                            int par = (int)(va_rand(&seed) % (uint64_t)i);
                            for (int w = 0; w < W; w++)
                                m[i * W + w] |= m[par * W + w];
                        }
                    }
                }
                c.past_len = bench_upload(b, pl, 4 * (size_t)R);
                c.n_nodes = bench_upload(b, nn, 4 * (size_t)R);
                c.mask = bench_upload(b, mask, 4 * (size_t)R * VA_ROWS * W);
                kdtree_attn at = {.n_heads = H};
                kdtree_tree tr = {.n_requests = R, .n_max = VA_ROWS};
                kdtree_kv_cache kvs = {.page_size = VA_PAGE,
                                       .max_pages = c.max_pages};
                int st = kdtree_verify_attn_workspace_size(&c.ws_bytes, rt,
                                                           &at, &tr, &kvs);
                if (st)
                    return st;
                if (c.ws_bytes > ws_have) {
                    ws = bench_alloc(b, c.ws_bytes);
                    ws_have = c.ws_bytes;
                }
                c.ws = c.ws_bytes ? ws : 0;
                double us = bench_gpu_us(b, va_launch, &c);
                double flops = (double)R * VA_ROWS * H * past * 2176.0;
                double bytes = (double)R * (past + VA_ROWS) * VA_D_QK * 2 +
                               (double)R * VA_ROWS * H * (VA_D_QK + VA_D_V) * 2;
                char config[96];
                snprintf(config, sizeof config,
                         "H=%d R=%d past_len=%d rows=%d", H, R, past,
                         VA_ROWS);
                bench_row(b, "verify_attn", config, us, bytes, flops, NULL,
                          0);
            }
        }
    }
    return 0;
}
