/*
 * ref/draft_topk.c: the CPU reference of draft_topk (ref/draft_topk.h),
 * following docs/contract.md §1 step by step; nothing here is clever.
 */
#include <math.h>
#include <stdlib.h>

#include "ref/draft_topk.h"
#include "ref/ref_math.h"

void
ref_draft_topk(float *lp, int32_t *ids, const void *logits, int dtype,
               int n_rows, int V, int K)
{
    float *bestv = malloc(sizeof(float) * (size_t)K);
    int32_t *besti = malloc(sizeof(int32_t) * (size_t)K);
    if (!bestv || !besti)
        abort();
    for (int r = 0; r < n_rows; r++) {
        int n = 0; /* entries in best[], sorted: value desc, id asc */
        float m = -INFINITY;
        for (int j = 0; j < V; j++) {
            size_t at = (size_t)r * V + j;
            float x = dtype ? ref_bf16_to_f32(((const uint16_t *)logits)[at])
                            : ((const float *)logits)[at];
            x = ref_canon(x);
            if (x > m)
                m = x;
            /* Ids arrive in increasing order, so an equal value never beats
             * an entry already kept: only a strictly larger one does. */
            if (n == K && !(x > bestv[K - 1]))
                continue;
            int pos = n < K ? n : K - 1;
            while (pos > 0 && x > bestv[pos - 1]) {
                bestv[pos] = bestv[pos - 1];
                besti[pos] = besti[pos - 1];
                pos--;
            }
            bestv[pos] = x;
            besti[pos] = j;
            if (n < K)
                n++;
        }
        double s = 0.0;
        if (m != -INFINITY) {
            for (int j = 0; j < V; j++) {
                size_t at = (size_t)r * V + j;
                float x = dtype
                              ? ref_bf16_to_f32(((const uint16_t *)logits)[at])
                              : ((const float *)logits)[at];
                x = ref_canon(x);
                s += exp((double)x - (double)m);
            }
        }
        for (int k = 0; k < K; k++) {
            ids[(size_t)r * K + k] = besti[k];
            lp[(size_t)r * K + k] =
                m == -INFINITY
                    ? -INFINITY
                    : (float)(((double)bestv[k] - (double)m) - log(s));
        }
    }
    free(bestv);
    free(besti);
}
