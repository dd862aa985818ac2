// tree_accept.cu: docs/contract.md §4.  Walks each request's draft tree
// from the root, following the child whose token equals the target's token
// at the current node, and writes the accepted path and the bonus token.
//
// One thread per request: the walk is a chain of dependent loads (a child,
// then its siblings), so there is nothing to share between threads, and a
// round has few requests.  Links that do not point forward inside
// [0, n_nodes) end the walk (build_ddtree's always do), so garbage input
// can neither loop nor read out of bounds.
#include "kdt_limits.h"
#include "kdt_math.cuh"
#include "kdt_params.h"
#include "kdt_tree_accept_plan.h"

#ifndef KDT_N_MAX
#error "tree_accept needs -DKDT_N_MAX"
#endif
#ifndef KDT_L
#error "tree_accept needs -DKDT_L"
#endif

constexpr int N_MAX = KDT_N_MAX;   // rows per request's tree, root included
constexpr int L = KDT_L;           // draft depth: a path has at most L+1 rows
constexpr int PATH = L + 1;
constexpr int THREADS = KDT_TA_THREADS; // requests per block
static_assert(N_MAX >= 1 && N_MAX <= KDT_LIMIT_N_MAX && L >= 1 &&
                  L <= KDT_LIMIT_L,
              "the registry's ranges");

extern "C" __global__ void __launch_bounds__(THREADS)
kdt_tree_accept(kdt_tree_accept_params p)
{
    const int r = blockIdx.x * THREADS + threadIdx.x;
    if (r >= p.n_requests)
        return;
    const long long base = (long long)r * N_MAX;
    const int *tok = p.token + base;
    const int *fc = p.first_child + base;
    const int *ns = p.next_sibling + base;
    const int *tg = p.target + base;
    int *idx = p.accept_idx + (long long)r * PATH;
    int *at = p.accept_token + (long long)r * PATH;

    const int n = kdt_clamp(p.n_nodes[r], 1, N_MAX);
    const int cap = kdt_clamp(p.max_accept ? p.max_accept[r] : PATH, 1, PATH);

    int cur = 0, len = 1;
    idx[0] = 0;
    at[0] = tok[0];
    while (len < cap) {
        const int want = tg[cur];
        int c = fc[cur];
        if (c <= cur || c >= n)
            c = -1;
        int found = -1, found_tok = 0;
        while (c >= 0) {
            const int t = tok[c];
            if (t == want) {
                found = c;
                found_tok = t;
                break;
            }
            const int s = ns[c];
            c = (s > c && s < n) ? s : -1;
        }
        if (found < 0)
            break;
        cur = found;
        idx[len] = cur;
        at[len] = found_tok;
        len++;
    }
    p.accept_len[r] = len;
    p.bonus[r] = tg[cur];
    for (int i = len; i < PATH; i++) {
        idx[i] = -1;
        at[i] = -1;
    }
}
