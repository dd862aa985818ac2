/*
 * ref/verify_attn_heads.c: the verify_attn references with the heads
 * shared among threads (ref/verify_attn_heads.h).  Each thread copies
 * its heads' q rows into an array of its own, calls the reference with
 * that many heads, and writes its rows of o, lse (and the stats) back
 * into their places: nothing of the reference's arithmetic changes.
 */
#include "ref/verify_attn_heads.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ref/verify_attn.h"

#define D_QK REF_ATTN_D_QK
#define D_V REF_ATTN_D_V

typedef struct {
    int qe4m3;
    float *o, *lse;
    double *stats;
    const uint16_t *q;
    const void *kv;
    int kv_dtype;
    float kv_scale;
    const int32_t *block_table, *past_len, *n_nodes;
    const uint32_t *anc_mask;
    int R, H, n_max, page, max_pages;
    float scale;
} heads_call;

/* The reference c names over heads arrays of H heads (c's own, or one
 * thread's copies). */
static void
heads_ref(const heads_call *c, float *o, float *lse, double *stats,
          const uint16_t *q, int H)
{
    if (c->qe4m3)
        ref_verify_attn_qe4m3(o, lse, stats, q, c->kv, c->kv_dtype,
                              c->kv_scale, c->block_table, c->past_len,
                              c->n_nodes, c->anc_mask, c->R, H, c->n_max,
                              c->page, c->max_pages, c->scale);
    else
        ref_verify_attn_kv(o, lse, q, c->kv, c->kv_dtype, c->kv_scale,
                           c->block_table, c->past_len, c->n_nodes,
                           c->anc_mask, c->R, H, c->n_max, c->page,
                           c->max_pages, c->scale);
}

typedef struct {
    const heads_call *c;
    int h0, h1;
    pthread_t tid;
    int started, failed;
} heads_job;

/* This job's heads [h0, h1) through the reference, then into place. */
static void *
heads_run(void *arg)
{
    heads_job *j = arg;
    const heads_call *c = j->c;
    const int hs = j->h1 - j->h0;
    const size_t rows = (size_t)c->R * c->n_max; /* (request, tree row) */
    /* calloc: GCC cannot tell the copy below fills it */
    uint16_t *q = calloc(rows * hs * D_QK, 2);
    float *o = malloc(4 * rows * hs * D_V);
    float *lse = malloc(4 * rows * hs);
    double *st = c->stats ? malloc(8 * 3 * rows * hs) : NULL;
    if (!q || !o || !lse || (c->stats && !st)) {
        j->failed = 1;
        free(q), free(o), free(lse), free(st);
        return NULL;
    }
    for (size_t r = 0; r < rows; r++)
        memcpy(q + r * hs * D_QK, c->q + (r * c->H + j->h0) * D_QK,
               2 * (size_t)hs * D_QK);
    heads_ref(c, o, lse, st, q, hs);
    for (size_t r = 0; r < rows; r++) {
        const size_t at = r * c->H + j->h0;
        memcpy(c->o + at * D_V, o + r * hs * D_V, 4 * (size_t)hs * D_V);
        memcpy(c->lse + at, lse + r * hs, 4 * (size_t)hs);
        if (st)
            memcpy(c->stats + 3 * at, st + 3 * r * hs, 8 * 3 * (size_t)hs);
    }
    free(q), free(o), free(lse), free(st);
    return NULL;
}

/* Runs c over up to `threads` threads, a contiguous range of heads each;
 * a range whose thread cannot be started runs here, and where memory for
 * the copies cannot be had (or one thread would do) the reference runs
 * once over all heads. */
static void
heads_split(int threads, const heads_call *c)
{
    const int n = threads < c->H ? threads : c->H;
    heads_job *jobs = n > 1 ? calloc((size_t)n, sizeof *jobs) : NULL;
    if (!jobs) {
        heads_ref(c, c->o, c->lse, c->stats, c->q, c->H);
        return;
    }
    for (int i = 0; i < n; i++) {
        jobs[i] = (heads_job){.c = c, .h0 = c->H * i / n,
                              .h1 = c->H * (i + 1) / n};
        jobs[i].started =
            pthread_create(&jobs[i].tid, NULL, heads_run, &jobs[i]) == 0;
    }
    int failed = 0;
    for (int i = 0; i < n; i++) {
        if (jobs[i].started)
            pthread_join(jobs[i].tid, NULL);
        else
            heads_run(&jobs[i]);
        failed |= jobs[i].failed;
    }
    free(jobs);
    if (failed)
        heads_ref(c, c->o, c->lse, c->stats, c->q, c->H);
}

void
ref_verify_attn_kv_heads(int threads, float *o, float *lse,
                         const uint16_t *q, const void *kv, int kv_dtype,
                         float kv_scale, const int32_t *block_table,
                         const int32_t *past_len, const int32_t *n_nodes,
                         const uint32_t *anc_mask, int R, int H, int n_max,
                         int page, int max_pages, float scale)
{
    const heads_call c = {0, o, lse, NULL, q, kv, kv_dtype, kv_scale,
                          block_table, past_len, n_nodes, anc_mask,
                          R, H, n_max, page, max_pages, scale};
    heads_split(threads, &c);
}

void
ref_verify_attn_qe4m3_heads(int threads, float *o, float *lse,
                            double *stats, const uint16_t *q, const void *kv,
                            int kv_dtype, float kv_scale,
                            const int32_t *block_table,
                            const int32_t *past_len, const int32_t *n_nodes,
                            const uint32_t *anc_mask, int R, int H,
                            int n_max, int page, int max_pages, float scale)
{
    const heads_call c = {1, o, lse, stats, q, kv, kv_dtype, kv_scale,
                          block_table, past_len, n_nodes, anc_mask,
                          R, H, n_max, page, max_pages, scale};
    heads_split(threads, &c);
}
