/*
 * ref/verify_attn.c: the CPU oracle for verify_attn.  Written straight
 * from docs/contract.md §3 with no tiling and no tricks, in double.
 */
#include "ref/verify_attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref_math.h"

#define D_QK REF_ATTN_D_QK
#define D_V REF_ATTN_D_V

uint64_t
ref_attn_rand(uint64_t *seed)
{
    uint64_t x = *seed ? *seed : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *seed = x;
    return x * 0x2545f4914f6cdd1dull;
}

float
ref_attn_randf(uint64_t *seed)
{
    return (float)((ref_attn_rand(seed) >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

void
ref_attn_random_tree(uint32_t *mask, int32_t *parent, int n, int n_max,
                     uint64_t *seed)
{
    int W = (n_max + 31) / 32;
    int32_t *par = malloc(sizeof(int32_t) * (size_t)(n_max > 0 ? n_max : 1));
    memset(mask, 0, sizeof(uint32_t) * (size_t)n_max * (size_t)W);
    for (int i = 0; i < n_max; ++i) {
        par[i] = (i == 0 || i >= n) ? -1 : (int)(ref_attn_rand(seed) % (uint64_t)i);
        uint32_t *row = mask + (size_t)i * W;
        /* own bit, then the parent's row (already complete: parent < i) */
        row[i / 32] |= 1u << (i % 32);
        if (par[i] >= 0)
            for (int w = 0; w < W; ++w)
                row[w] |= mask[(size_t)par[i] * W + w];
    }
    if (parent)
        memcpy(parent, par, sizeof(int32_t) * (size_t)n_max);
    free(par);
}

void
ref_verify_attn(float *o, float *lse, const uint16_t *q, const uint16_t *kv,
                const int32_t *block_table, const int32_t *past_len,
                const int32_t *n_nodes, const uint32_t *anc_mask, int R,
                int H, int n_max, int page, int max_pages, float scale)
{
    ref_verify_attn_kv(o, lse, q, kv, 0, 1.f, block_table, past_len,
                       n_nodes, anc_mask, R, H, n_max, page, max_pages,
                       scale);
}

/* One cached element as the contract reads it: exact in double. */
static double
kv_value(const void *kv, int kv_dtype, float kv_scale, size_t i)
{
    if (kv_dtype == 1)
        return (double)kv_scale
               * (double)ref_e4m3_to_f32(((const uint8_t *)kv)[i]);
    return (double)ref_bf16_to_f32(((const uint16_t *)kv)[i]);
}

/* x rounded to e4m3 as cvt.rn.satfinite does (to nearest even, past 448
 * to 448), as its value: the quantum of x's binade (2^-9 in the
 * subnormal range) times a rounded integer, all exact in double.
 * test_ref_verify_attn checks it against ref_f32_to_e4m3, the
 * definition. */
static double
e4m3_round(float x)
{
    if (isnan(x))
        return NAN;
    double a = fabs((double)x);
    if (a > 448.0)
        return x < 0 ? -448.0 : 448.0;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    double quantum = ldexp(1.0, (e - 1 < -6 ? -6 : e - 1) - 3);
    double r = nearbyint(a / quantum) * quantum;
    if (r > 448.0)
        r = 448.0;
    return x < 0 ? -r : r;
}

void
ref_e4m3_quantize_row(double *out, const uint16_t *q)
{
    float a = 0.f;
    for (int k = 0; k < D_QK; ++k) {
        float v = fabsf(ref_bf16_to_f32(q[k]));
        if (isnan(v) || v > a) /* a NaN wins, as in the kernel */
            a = isnan(a) ? a : v;
    }
    float s = a > 0.f ? 448.f / a : 0.f;
    for (int k = 0; k < D_QK; ++k)
        out[k] = e4m3_round(ref_bf16_to_f32(q[k]) * s) * ((double)a / 448.0);
}

/* The reference in one piece: q_e4m3 replaces each query row by its
 * quantized value; stats (optional) gets each row's n, S0 and sum p^2. */
static void
attn(float *o, float *lse, double *stats, const uint16_t *q, int q_e4m3,
     const void *kv, int kv_dtype, float kv_scale,
     const int32_t *block_table, const int32_t *past_len,
     const int32_t *n_nodes, const uint32_t *anc_mask, int R, int H,
     int n_max, int page, int max_pages, float scale);

void
ref_verify_attn_kv(float *o, float *lse, const uint16_t *q, const void *kv,
                   int kv_dtype, float kv_scale, const int32_t *block_table,
                   const int32_t *past_len, const int32_t *n_nodes,
                   const uint32_t *anc_mask, int R, int H, int n_max,
                   int page, int max_pages, float scale)
{
    attn(o, lse, NULL, q, 0, kv, kv_dtype, kv_scale, block_table, past_len,
         n_nodes, anc_mask, R, H, n_max, page, max_pages, scale);
}

void
ref_verify_attn_qe4m3(float *o, float *lse, double *stats,
                      const uint16_t *q, const void *kv, int kv_dtype,
                      float kv_scale, const int32_t *block_table,
                      const int32_t *past_len, const int32_t *n_nodes,
                      const uint32_t *anc_mask, int R, int H, int n_max,
                      int page, int max_pages, float scale)
{
    attn(o, lse, stats, q, 1, kv, kv_dtype, kv_scale, block_table, past_len,
         n_nodes, anc_mask, R, H, n_max, page, max_pages, scale);
}

static void
attn(float *o, float *lse, double *stats, const uint16_t *q, int q_e4m3,
     const void *kv, int kv_dtype, float kv_scale,
     const int32_t *block_table, const int32_t *past_len,
     const int32_t *n_nodes, const uint32_t *anc_mask, int R, int H,
     int n_max, int page, int max_pages, float scale)
{
    int W = (n_max + 31) / 32;
    for (int r = 0; r < R; ++r) {
        int past = past_len[r], nn = n_nodes[r];
        int total = past + nn;
        double *logit = malloc(sizeof(double) * (size_t)(total > 0 ? total : 1));
        char *vis = malloc((size_t)(total > 0 ? total : 1));
        /* the request's KV rows in logical order, dequantized */
        double *c_all = malloc(sizeof(double)
                               * (size_t)(total > 0 ? total : 1) * D_QK);
        for (int pos = 0; pos < total; ++pos) {
            int pg = block_table[(size_t)r * max_pages + pos / page];
            size_t c = ((size_t)pg * page + pos % page) * D_QK;
            for (int k = 0; k < D_QK; ++k)
                c_all[(size_t)pos * D_QK + k] =
                    kv_value(kv, kv_dtype, kv_scale, c + k);
        }
        double qf[D_QK];
        for (int i = 0; i < n_max; ++i) {
            for (int h = 0; h < H; ++h) {
                size_t row = ((size_t)r * n_max + i) * H + h;
                float *orow = o + row * D_V;
                if (stats)
                    stats[3 * row] = stats[3 * row + 1] =
                        stats[3 * row + 2] = 0.0;
                if (i >= nn) {
                    memset(orow, 0, sizeof(float) * D_V);
                    if (lse)
                        lse[row] = -INFINITY;
                    continue;
                }
                if (q_e4m3)
                    ref_e4m3_quantize_row(qf, q + row * D_QK);
                else
                    for (int k = 0; k < D_QK; ++k)
                        qf[k] = ref_bf16_to_f32(q[row * D_QK + k]);
                const uint32_t *mrow = anc_mask + ((size_t)r * n_max + i) * W;
                double mx = -INFINITY;
                for (int pos = 0; pos < total; ++pos) {
                    int j = pos - past;
                    vis[pos] = pos < past || ((mrow[j / 32] >> (j % 32)) & 1u);
                    if (!vis[pos])
                        continue;
                    const double *c = c_all + (size_t)pos * D_QK;
                    double d = 0;
                    for (int k = 0; k < D_QK; ++k)
                        d += qf[k] * c[k];
                    logit[pos] = (double)scale * d;
                    if (logit[pos] > mx)
                        mx = logit[pos];
                }
                double acc[D_V] = {0}, sum = 0, sum2 = 0;
                int n = 0;
                for (int pos = 0; pos < total; ++pos) {
                    if (!vis[pos])
                        continue;
                    const double *c = c_all + (size_t)pos * D_QK;
                    double w = exp(logit[pos] - mx);
                    sum += w;
                    sum2 += w * w;
                    n++;
                    for (int k = 0; k < D_V; ++k)
                        acc[k] += w * c[k];
                }
                for (int k = 0; k < D_V; ++k)
                    orow[k] = sum > 0 ? (float)(acc[k] / sum) : 0.f;
                if (lse)
                    lse[row] = sum > 0 ? (float)(mx + log(sum)) : -INFINITY;
                if (stats) {
                    stats[3 * row] = n;
                    stats[3 * row + 1] = sum;
                    stats[3 * row + 2] = sum2;
                }
            }
        }
        free(logit);
        free(vis);
        free(c_all);
    }
}

void
ref_qe4m3_bounds(double n, double s0, double *o_bound, double *lse_bound)
{
    const double s = s0 > 1.0 ? s0 : 1.0; /* >= 1 but for a padded row */
    const double beta = 0x1p-4 + 0x1p-10 * n / s;
    *o_bound = beta < 0.5 ? 2 * beta / (1 - beta) : 2.0;
    if (beta < 1) {
        *lse_bound = beta / (1 - beta);
    } else {
        const double up = log1p(beta), down = log(s / (1 - 0x1p-4 - 0x1p-10));
        *lse_bound = up > down ? up : down;
    }
}
