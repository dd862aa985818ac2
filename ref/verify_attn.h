/*
 * ref/verify_attn.h: CPU reference of verify_attn (docs/contract.md §3) and
 * the small helpers its tests and the dev harness share (random data,
 * random trees with their ancestor masks; bf16 conversion is
 * ref/ref_math.h's).  Obviously right, not fast: double accumulation, one
 * row at a time.
 */
#ifndef KDT_REF_VERIFY_ATTN_H
#define KDT_REF_VERIFY_ATTN_H

#include <stdint.h>

/* A q and kv row's dims (512 c_kv + 64 k_pe), and o's (c_kv). */
#define REF_ATTN_D_QK 576
#define REF_ATTN_D_V 512

#ifdef __cplusplus
extern "C" {
#endif

/*
 * o [R][n_max][H][512] and lse [R][n_max][H] (natural log) as f32, from
 * q bf16 [R][n_max][H][576], kv bf16 [pages][page][576], block_table
 * [R][max_pages], past_len [R], n_nodes [R], anc_mask [R][n_max][W].
 * Row i of request r sees positions [0, past_len) and past_len + j for each
 * bit j (< n_nodes) of its mask row; padded rows get o = 0, lse = -inf.
 */
void ref_verify_attn(float *o, float *lse, const uint16_t *q,
                     const uint16_t *kv, const int32_t *block_table,
                     const int32_t *past_len, const int32_t *n_nodes,
                     const uint32_t *anc_mask, int R, int H, int n_max,
                     int page, int max_pages, float scale);

/* The same over a cache of either type: kv_dtype 0 (KDTREE_KV_BF16), kv
 * bf16 [pages][page][576], or 1 (KDTREE_KV_E4M3), kv e4m3 bytes of the
 * same shape, each worth kv_scale x its e4m3 number (kv_scale is not
 * used for bf16).  The attention over the dequantized cache, in double:
 * what either arithmetic of the kernel approximates (docs/contract.md
 * §3). */
void ref_verify_attn_kv(float *o, float *lse, const uint16_t *q,
                        const void *kv, int kv_dtype, float kv_scale,
                        const int32_t *block_table, const int32_t *past_len,
                        const int32_t *n_nodes, const uint32_t *anc_mask,
                        int R, int H, int n_max, int page, int max_pages,
                        float scale);

/* The query side of the e4m3 arithmetic (MATH = e4m3, docs/contract.md
 * §3): out[576] = the bf16 query row q[576] quantized as the kernel does
 * it (a = max |q|, each element e4m3(q * (448 / a)) with the division and
 * the product in f32, rounded to nearest even and saturated), each worth
 * a / 448 times its e4m3 number; zeros for a row of zeros. */
void ref_e4m3_quantize_row(double *out, const uint16_t *q);

/* ref_verify_attn_kv with each query row replaced by its quantized value
 * (ref_e4m3_quantize_row): o_q and lse_q of the contract's error bound of
 * MATH = e4m3.  stats, when not NULL, [R][n_max][H][3]: each row's n (its
 * visible positions), S0 = sum_j 2^(x_j - max x) and sum_j (2^(x_j -
 * max x))^2 over them (x the quantized logits in log2 units; 0 for a
 * padded row), what the bound's beta and the typical error are made of. */
void ref_verify_attn_qe4m3(float *o, float *lse, double *stats,
                           const uint16_t *q, const void *kv, int kv_dtype,
                           float kv_scale, const int32_t *block_table,
                           const int32_t *past_len, const int32_t *n_nodes,
                           const uint32_t *anc_mask, int R, int H, int n_max,
                           int page, int max_pages, float scale);

/* The worst-case bounds of MATH = e4m3's weight rounding
 * (docs/contract.md §3) for a row with n visible positions and S0 (its
 * stats from ref_verify_attn_qe4m3): |o - o_q| <= max|v| * *o_bound and
 * |lse - lse_q| <= *lse_bound.  beta = 2^-4 + 2^-10 n / S0; below 1/2,
 * 2 beta / (1 - beta) and beta / (1 - beta); past that the weights'
 * bound says less than o being a convex combination of V rows (|o - o_q|
 * <= 2 max|v|), and past 1 the sum's bound says nothing of its lower
 * side, which the rounded maximum weight (at least 1, the kernel's
 * weights being 2^(x - m) with m at most the row's maximum) then bounds:
 * S' >= (1 - 2^-4 - 2^-10) S / S0. */
void ref_qe4m3_bounds(double n, double s0, double *o_bound,
                      double *lse_bound);

/* A random tree of n nodes (parent[i] < i, root 0) drawn with `*seed`,
 * written as build_ddtree's anc_mask rows [n_max][W]: rows past n get their
 * own bit only.  parent may be NULL. */
void ref_attn_random_tree(uint32_t *mask, int32_t *parent, int n, int n_max,
                          uint64_t *seed);

/* xorshift64*: deterministic test data. */
uint64_t ref_attn_rand(uint64_t *seed);
/* Uniform in [-1, 1). */
float ref_attn_randf(uint64_t *seed);

#ifdef __cplusplus
}
#endif

#endif /* KDT_REF_VERIFY_ATTN_H */
