/*
 * ref/tree_accept.c: the CPU reference of tree_accept (ref/tree_accept.h),
 * following docs/contract.md §4 step by step.
 */
#include <stddef.h>

#include "ref/tree_accept.h"

void
ref_tree_accept(int32_t *accept_len, int32_t *accept_idx,
                int32_t *accept_token, int32_t *bonus, const int32_t *token,
                const int32_t *first_child, const int32_t *next_sibling,
                const int32_t *n_nodes, const int32_t *target,
                const int32_t *max_accept, int R, int L, int N_MAX)
{
    for (int r = 0; r < R; r++) {
        const int32_t *tok = token + (size_t)r * N_MAX;
        const int32_t *fc = first_child + (size_t)r * N_MAX;
        const int32_t *ns = next_sibling + (size_t)r * N_MAX;
        const int32_t *tg = target + (size_t)r * N_MAX;
        int32_t *idx = accept_idx + (size_t)r * (L + 1);
        int32_t *at = accept_token + (size_t)r * (L + 1);
        int n = n_nodes[r], cap = max_accept ? max_accept[r] : L + 1;
        if (n < 1)
            n = 1;
        if (n > N_MAX)
            n = N_MAX;
        if (cap < 1 || cap > L + 1)
            cap = cap < 1 ? 1 : L + 1;

        int cur = 0, len = 1;
        idx[0] = 0;
        at[0] = tok[0];
        while (len < cap) {
            int c = fc[cur], found = -1;
            /* Links point forward (a child after its parent, a sibling
             * after its elder): anything else ends the scan. */
            if (c <= cur || c >= n)
                c = -1;
            while (c >= 0) {
                if (tok[c] == tg[cur]) {
                    found = c;
                    break;
                }
                int s = ns[c];
                c = (s > c && s < n) ? s : -1;
            }
            if (found < 0)
                break;
            cur = found;
            idx[len] = cur;
            at[len] = tok[cur];
            len++;
        }
        accept_len[r] = len;
        bonus[r] = tg[cur];
        for (int i = len; i < L + 1; i++)
            idx[i] = at[i] = -1;
    }
}
