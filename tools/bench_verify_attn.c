/*
 * bench_verify_attn.c: kdtree-bench's verify_attn cases: absorbed MLA
 * tree attention over a paged KV cache whose pages are in shuffled
 * order.  The shapes: a 65-row tree (64 draft nodes + root) for H = 8, 16,
 * 64, 128 query heads, and the budgets DDTree peaks at (256-512 nodes):
 * 257- and 513-row trees for H = 8, 16, 64; each after prefixes of 4096,
 * 32768 and 131072 tokens, for one and eight requests.
 *
 * Each shape runs in the variants asked for (--page, --kv, --math; by
 * default bf16 in pages of 64): a page size, the cache's element type
 * and the tensor cores' arithmetic, one row each, side by side.  An e4m3
 * cache holds values whose dequantized range (kv_scale x e4m3) is the
 * bf16 cache's; its scale is 1 in pages of one token (SGLang's token
 * pool stores unscaled e4m3) and 1/448 in larger pages (vLLM's paged
 * cache with its k_scale, amax / 448, for values up to 1), so that rows
 * of both kinds run with a scale that is not 1.
 *
 * FLOPs count the prefix as the spec does: 2176 per (row, cached token)
 * (2 * 576 for q.k, 2 * 512 for p.v).  Bytes are the KV read once per
 * request at the cache's element size plus q in and o out (bf16).  When
 * one request's KV would fit in L2, several copies of it (different
 * pages) are cycled between launches so the figure is not an L2-resident
 * one.  tools/baseline_attn.py times the same cases the way others do it
 * (PyTorch, FlashInfer, SGLang's Triton kernels) in the same run, from
 * the config strings this file writes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kdtree.h"
#include "ref/ref_math.h"

#define VA_D_QK 576
#define VA_D_V 512
#define VA_PAGE_DEFAULT 64
#define VA_L2_DEFEAT 256e6 /* bytes of KV cycled through, at least */
#define VA_MAX_SHAPES 64
#define VA_MAX_PAGE 256
/* vLLM's k_scale (amax / 448) for values up to 1 */
#define VA_PAGED_SCALE (1.0f / 448.0f)

/* One case: R requests of H heads, `rows` tree rows after `past` tokens. */
typedef struct va_shape {
    int R, H, past, rows;
} va_shape;

/* How a shape is run: its page size, cache type and arithmetic. */
typedef struct va_variant {
    int page, kv, math;
    float kv_scale;
} va_variant;

/* The KV values of one cache type and scale, on the device: every case of
 * that kind draws its pages from it. */
typedef struct va_pool {
    int kv;
    float scale;
    uint64_t dev;
} va_pool;

typedef struct va_case {
    kdtree_runtime *rt;
    int R, H, past, rows, max_pages, copies, next;
    va_variant v;
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
    /* H = 128 trees of 257 and 513 rows are past what a GPU's share of
     * Kimi-K2's heads (64, or 8 at tensor-parallel 8) asks */
    for (int ni = 0; ni < 2; ni++)
        for (int ri = 0; ri < 2; ri++)
            for (int hi = 0; hi < 3; hi++)
                for (int pi = 0; pi < 3; pi++)
                    out[n++] = (va_shape){reqs[ri], heads[hi], pasts[pi],
                                          ddtree_rows[ni]};
    return n;
}

static int
va_elt_bytes(int kv)
{
    return kv == KDTREE_KV_E4M3 ? 1 : 2;
}

static float
va_scale(int kv, int page)
{
    if (kv != KDTREE_KV_E4M3)
        return 1.0f;
    return page == 1 ? 1.0f : VA_PAGED_SCALE;
}

static int
va_max_pages(const va_shape *s, int page)
{
    return (s->past + s->rows + page - 1) / page;
}

/* Copies of a case's KV that together pass VA_L2_DEFEAT bytes. */
static int
va_copies(const va_shape *s, int elt)
{
    double bytes = (double)s->R * (s->past + s->rows) * VA_D_QK * elt;
    int copies = (int)ceil(VA_L2_DEFEAT / bytes);
    return copies < 1 ? 1 : copies;
}

/* Tokens a pool holds for shape s at any page size up to VA_MAX_PAGE:
 * its copies of R requests, each rounded up past a whole largest page. */
static int64_t
va_pool_need(const va_shape *s, int elt)
{
    int64_t per_req = ((int64_t)s->past + s->rows + 2 * VA_MAX_PAGE - 1) /
                      VA_MAX_PAGE * VA_MAX_PAGE;
    return (int64_t)va_copies(s, elt) * s->R * per_req;
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

/* The e4m3 codes whose values times `scale` are the bf16 data's
 * magnitudes: [e][m] = 2^-(e+1) * (1 + m/8) / scale, rounded to the
 * nearest e4m3 (RNE, as the format's conversion does). */
static void
va_e4m3_table(uint8_t table[8][8], float scale)
{
    for (int e = 0; e < 8; e++)
        for (int m = 0; m < 8; m++)
            table[e][m] =
                ref_f32_to_e4m3(ldexpf(1.0f + m / 8.0f, -(e + 1)) / scale);
}

/* An e4m3 byte of the same distribution as va_bf16 (dequantized): random
 * sign, exponent -1..-8, 3 mantissa bits; never zero or NaN (the table
 * saturates at 448 and its smallest entry is 2^-8 / scale). */
static uint8_t
va_e4m3(uint64_t *s, uint8_t table[8][8])
{
    uint64_t x = va_rand(s);
    return (uint8_t)((x & 1) << 7 | table[(x >> 1) % 8][(x >> 8) & 7]);
}

/* The pool of cache type kv at scale `scale`: `tokens` tokens of random
 * values, uploaded.  0 when the host has no memory for it. */
static uint64_t
va_pool_upload(bench_ctx *b, int kv, float scale, int64_t tokens,
               uint64_t seed)
{
    size_t n = (size_t)tokens * VA_D_QK;
    size_t bytes = n * (size_t)va_elt_bytes(kv);
    void *host = malloc(bytes);
    uint64_t dev;
    if (!host)
        return 0;
    if (kv == KDTREE_KV_E4M3) {
        uint8_t table[8][8], *p = host;
        va_e4m3_table(table, scale);
        for (size_t i = 0; i < n; i++)
            p[i] = va_e4m3(&seed, table);
    } else {
        uint16_t *p = host;
        for (size_t i = 0; i < n; i++)
            p[i] = va_bf16(&seed);
    }
    dev = bench_upload(b, host, bytes);
    free(host);
    return dev;
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
                      .n_heads = c->H, .scale = 0.1352f, .math = c->v.math};
    kdtree_tree tree = {.n_nodes = c->n_nodes, .anc_mask = c->mask,
                        .n_requests = c->R, .n_max = c->rows};
    kdtree_requests req = {.past_len = c->past_len, .n_requests = c->R};
    kdtree_kv_cache kv = {.data = c->kv, .block_table = bt,
                          .page_size = c->v.page, .max_pages = c->max_pages,
                          .dtype = c->v.kv, .scale = c->v.kv_scale};
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

static const char *const va_type_name[] = {"bf16", "e4m3"};

/* The config string of a row: the shape, then what differs from bf16 in
 * pages of 64 (so that rows of that kind keep the strings of every run
 * before the variants): " page=P", and for an e4m3 cache " kv=e4m3
 * kv_scale=S math=M".  tools/baseline_attn.py parses it back. */
static void
va_config(char *out, size_t size, const va_shape *s, const va_variant *v)
{
    int n = snprintf(out, size, "H=%d R=%d past_len=%d rows=%d", s->H, s->R,
                     s->past, s->rows);
    if (v->page != VA_PAGE_DEFAULT && n >= 0 && (size_t)n < size)
        n += snprintf(out + n, size - n, " page=%d", v->page);
    if (v->kv == KDTREE_KV_E4M3 && n >= 0 && (size_t)n < size)
        snprintf(out + n, size - n, " kv=e4m3 kv_scale=%.9g math=%s",
                 (double)v->kv_scale, va_type_name[v->math]);
}

/* The variants asked for, in report order: each page size as given,
 * then bf16, e4m3 read in bf16, e4m3 in e4m3.  Returns how many. */
static int
va_variants(const bench_ctx *b, va_variant *out, int max)
{
    static const int kinds[][2] = {
        {KDTREE_KV_BF16, KDTREE_ATTN_MATH_BF16},
        {KDTREE_KV_E4M3, KDTREE_ATTN_MATH_BF16},
        {KDTREE_KV_E4M3, KDTREE_ATTN_MATH_E4M3},
    };
    int pages[8], n = 0;
    int np = bench_attn_pages(b, pages, 8);
    for (int p = 0; p < np; p++)
        for (int k = 0; k < 3; k++)
            if (bench_attn_wants(b, kinds[k][0], kinds[k][1]) && n < max)
                out[n++] = (va_variant){pages[p], kinds[k][0], kinds[k][1],
                                        va_scale(kinds[k][0], pages[p])};
    return n;
}

/* What a row counts: FLOPs as the spec does, bytes as the KV at its
 * element size read once a request plus q in and o out. */
static double
va_flops(const va_shape *s)
{
    return (double)s->R * s->rows * s->H * s->past * 2176.0;
}

static double
va_bytes(const va_shape *s, const va_variant *v)
{
    return (double)s->R * (s->past + s->rows) * VA_D_QK *
               va_elt_bytes(v->kv) +
           (double)s->R * s->rows * s->H * (VA_D_QK + VA_D_V) * 2;
}

int
bench_verify_attn_list(bench_ctx *b, FILE *out)
{
    va_shape shapes[VA_MAX_SHAPES];
    va_variant vars[24];
    const int n_shapes = va_shapes(shapes, bench_quick(b));
    const int n_vars = va_variants(b, vars, 24);
    int n = 0;
    for (int si = 0; si < n_shapes; si++)
        for (int vi = 0; vi < n_vars; vi++) {
            char config[96];
            va_config(config, sizeof config, &shapes[si], &vars[vi]);
            if (!bench_wants(b, config))
                continue;
            fprintf(out, "verify_attn\t%s\t%s\t%s\t%.0f\t%.0f\n", config,
                    va_type_name[vars[vi].kv], va_type_name[vars[vi].math],
                    va_bytes(&shapes[si], &vars[vi]), va_flops(&shapes[si]));
            n++;
        }
    return n;
}

/* The pool of variant v among the n built. */
static uint64_t
va_pool_of(const va_pool *pools, int n, const va_variant *v)
{
    for (int i = 0; i < n; i++)
        if (pools[i].kv == v->kv && pools[i].scale == v->kv_scale)
            return pools[i].dev;
    return 0;
}

int
bench_verify_attn(bench_ctx *b)
{
    va_shape shapes[VA_MAX_SHAPES];
    va_variant vars[24];
    va_pool pools[4];
    const int n_shapes = va_shapes(shapes, bench_quick(b));
    const int n_vars = va_variants(b, vars, 24);
    kdtree_runtime *rt = bench_runtime(b);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int64_t pool_tokens[2] = {0, 0};
    size_t q_max = 0, o_max = 0;
    int n_pools = 0;

    /* The pools of KV values, one per cache type and scale asked for,
     * each sized for the largest need over every shape, also those
     * --only leaves out, so that a case run alone reads the same pages as
     * in a whole run: 8 requests of 131072 + 513 tokens, or L2-defeating
     * copies of a smaller one. */
    for (int i = 0; i < n_shapes; i++) {
        const va_shape *s = &shapes[i];
        size_t rows = (size_t)s->R * s->rows * s->H;
        for (int kv = 0; kv < 2; kv++) {
            int64_t need = va_pool_need(s, va_elt_bytes(kv));
            if (pool_tokens[kv] < need)
                pool_tokens[kv] = need;
        }
        if (q_max < rows * VA_D_QK)
            q_max = rows * VA_D_QK;
        if (o_max < rows)
            o_max = rows;
    }
    /* q from the values every pool starts from (a bf16 pool's first ones) */
    uint16_t *qh = malloc(2 * q_max);
    if (!qh)
        return KDTREE_ERROR_OUT_OF_MEMORY;
    uint64_t qs = seed;
    for (size_t i = 0; i < q_max; i++)
        qh[i] = va_bf16(&qs);
    uint64_t q = bench_upload(b, qh, 2 * q_max);
    free(qh);
    for (int i = 0; i < n_vars; i++) {
        const va_variant *v = &vars[i];
        if (va_pool_of(pools, n_pools, v))
            continue;
        uint64_t dev = va_pool_upload(b, v->kv, v->kv_scale,
                                      pool_tokens[v->kv], seed);
        if (!dev)
            return KDTREE_ERROR_OUT_OF_MEMORY;
        pools[n_pools++] = (va_pool){v->kv, v->kv_scale, dev};
    }
    uint64_t o = bench_alloc(b, o_max * VA_D_V * 2);
    uint64_t lse = bench_alloc(b, o_max * 4);
    uint64_t ws = 0, ws_have = 0;

    for (int si = 0; si < n_shapes; si++) {
        const va_shape *s = &shapes[si];
        const int R = s->R, H = s->H, past = s->past, rows = s->rows;
        const int W = (rows + 31) / 32;
        for (int vi = 0; vi < n_vars; vi++) {
            const va_variant *v = &vars[vi];
            const int elt = va_elt_bytes(v->kv);
            const int64_t pool_pages = pool_tokens[v->kv] / v->page;
            char config[96];
            va_config(config, sizeof config, s, v);
            if (!bench_wants(b, config))
                continue;
            va_case c = {.rt = rt, .R = R, .H = H, .past = past,
                         .rows = rows, .v = *v, .o = o, .lse = lse, .q = q,
                         .kv = va_pool_of(pools, n_pools, v)};
            c.max_pages = va_max_pages(s, v->page);
            c.copies = va_copies(s, elt);
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
            c.bt = bench_upload(b, bt,
                                4 * (size_t)c.copies * R * c.max_pages);
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
            kdtree_attn at = {.n_heads = H, .math = v->math};
            kdtree_tree tr = {.n_requests = R, .n_max = rows};
            kdtree_kv_cache kvs = {.page_size = v->page,
                                   .max_pages = c.max_pages,
                                   .dtype = v->kv, .scale = v->kv_scale};
            int st = kdtree_verify_attn_workspace_size(&c.ws_bytes, rt, &at,
                                                       &tr, &kvs);
            if (st)
                return st;
            if (c.ws_bytes > ws_have) {
                ws = bench_alloc(b, c.ws_bytes);
                ws_have = c.ws_bytes;
            }
            c.ws = c.ws_bytes ? ws : 0;
            double us = bench_gpu_us(b, va_launch, &c);
            bench_row(b, "verify_attn", config, us, va_bytes(s, v),
                      va_flops(s), NULL, 0);
            bench_row_types(b, va_type_name[v->kv], va_type_name[v->math]);
        }
    }
    return 0;
}
