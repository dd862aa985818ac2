/*
 * ref/verify_attn_heads.h: ref_verify_attn_kv and ref_verify_attn_qe4m3
 * (ref/verify_attn.h) with the heads shared among threads, for the GPU
 * tests' large problems (a 32k prefix takes the one-thread reference tens
 * of seconds a call).  A head's rows are the same arithmetic whatever the
 * other heads are, so each thread runs the reference itself on its heads
 * alone (its own copy of their q rows) and the results are the same bits
 * as one call's (tests/test_ref_verify_attn.c checks).  threads <= 1, or
 * one head: the reference called as it is.  Host only.
 */
#ifndef KDT_REF_VERIFY_ATTN_HEADS_H
#define KDT_REF_VERIFY_ATTN_HEADS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void ref_verify_attn_kv_heads(int threads, float *o, float *lse,
                              const uint16_t *q, const void *kv,
                              int kv_dtype, float kv_scale,
                              const int32_t *block_table,
                              const int32_t *past_len,
                              const int32_t *n_nodes,
                              const uint32_t *anc_mask, int R, int H,
                              int n_max, int page, int max_pages,
                              float scale);

void ref_verify_attn_qe4m3_heads(int threads, float *o, float *lse,
                                 double *stats, const uint16_t *q,
                                 const void *kv, int kv_dtype,
                                 float kv_scale, const int32_t *block_table,
                                 const int32_t *past_len,
                                 const int32_t *n_nodes,
                                 const uint32_t *anc_mask, int R, int H,
                                 int n_max, int page, int max_pages,
                                 float scale);

#ifdef __cplusplus
}
#endif

#endif
