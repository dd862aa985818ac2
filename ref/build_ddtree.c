/*
 * ref/build_ddtree.c: the CPU reference of build_ddtree
 * (ref/build_ddtree.h), following docs/contract.md §2 step by step: a
 * binary heap of candidates, at most one pending a built node.
 */
#include <math.h>
#include <string.h>

#include "ref/build_ddtree.h"
#include "ref/ref_math.h"

/* A candidate: node (depth, rank k) under parent p, with its score. */
typedef struct cand {
    float score;
    int parent, k, depth;
} cand;

/* The tree being built: what the tie-break's path walk needs. */
typedef struct tree {
    int32_t *parent, *rank, *depth;
} tree;

/* Rank path of (p, k) (a node of depth d = depth(p) + 1 under p with rank
 * k) lexicographically before that of (q, l)?  A prefix comes before its
 * extensions.  Walks both paths up to where they meet. */
static int
path_less(const tree *t, int p, int k, int d, int q, int l, int e)
{
    int ap = p, ak = k, ad = d, bp = q, bk = l, bd = e;
    while (ad > bd) {
        ak = t->rank[ap];
        ap = t->parent[ap];
        ad--;
    }
    while (bd > ad) {
        bk = t->rank[bp];
        bp = t->parent[bp];
        bd--;
    }
    if (ap == bp && ak == bk) /* one path is a prefix of the other */
        return d < e;
    while (ap != bp) {
        ak = t->rank[ap];
        ap = t->parent[ap];
        bk = t->rank[bp];
        bp = t->parent[bp];
    }
    return ak < bk;
}

/* a comes out of the loop before b. */
static int
better(const tree *t, const cand *a, const cand *b)
{
    if (a->score != b->score)
        return a->score > b->score;
    return path_less(t, a->parent, a->k, a->depth, b->parent, b->k,
                     b->depth);
}

static void
heap_push(const tree *t, cand *h, int *n, cand c)
{
    int i = (*n)++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (!better(t, &c, &h[up]))
            break;
        h[i] = h[up];
        i = up;
    }
    h[i] = c;
}

static cand
heap_pop(const tree *t, cand *h, int *n)
{
    cand top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && better(t, &h[c + 1], &h[c]))
            c++;
        if (!better(t, &h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static float
add_score(float a, float b)
{
    return ref_canon(a + ref_canon(b));
}

int
ref_build_ddtree_one(int32_t *token, int32_t *parent, int32_t *depth,
                     int32_t *position, int32_t *first_child,
                     int32_t *next_sibling, float *score, uint32_t *anc_mask,
                     const float *lp, const int32_t *ids, int budget,
                     int depth_limit, int root_token, int past_len, int L,
                     int K, int N_MAX)
{
    /* At most one candidate per built node is pending (its next child), so
     * the heap never holds more than N_MAX entries. */
    cand heap[REF_N_MAX_LIMIT];
    int32_t rank[REF_N_MAX_LIMIT], last_child[REF_N_MAX_LIMIT];
    float sc[REF_N_MAX_LIMIT];
    int W = (N_MAX + 31) / 32, nh = 0, n = 1;
    tree t = {parent, rank, depth};

    if (budget < 0)
        budget = 0;
    if (budget > N_MAX - 1)
        budget = N_MAX - 1;
    if (depth_limit < 1 || depth_limit > L)
        depth_limit = depth_limit < 1 ? 1 : L;

    for (int i = 0; i < N_MAX; i++) {
        token[i] = root_token;
        parent[i] = -1;
        depth[i] = 0;
        position[i] = past_len;
        first_child[i] = next_sibling[i] = last_child[i] = -1;
        rank[i] = 0;
        sc[i] = -INFINITY;
    }
    sc[0] = 0.0f;

    if (budget > 0)
        heap_push(&t, heap, &nh,
                  (cand){add_score(0.0f, lp[0]), 0, 0, 1});
    while (n <= budget && nh > 0) {
        cand c = heap_pop(&t, heap, &nh);
        int id = n++;
        parent[id] = c.parent;
        rank[id] = c.k;
        depth[id] = c.depth;
        sc[id] = c.score;
        token[id] = ids[(size_t)(c.depth - 1) * K + c.k];
        position[id] = past_len + c.depth;
        if (last_child[c.parent] < 0)
            first_child[c.parent] = id;
        else
            next_sibling[last_child[c.parent]] = id;
        last_child[c.parent] = id;
        if (c.k + 1 < K)
            heap_push(&t, heap, &nh,
                      (cand){add_score(sc[c.parent],
                                       lp[(size_t)(c.depth - 1) * K + c.k + 1]),
                             c.parent, c.k + 1, c.depth});
        if (c.depth < depth_limit)
            heap_push(&t, heap, &nh,
                      (cand){add_score(c.score, lp[(size_t)c.depth * K]), id,
                             0, c.depth + 1});
    }

    /* Mask rows: a node's row is its parent's plus its own bit (parents
     * come first); padded rows have their own bit only. */
    memset(anc_mask, 0, sizeof(uint32_t) * (size_t)N_MAX * W);
    for (int i = 0; i < N_MAX; i++) {
        uint32_t *row = anc_mask + (size_t)i * W;
        if (i < n && parent[i] >= 0)
            memcpy(row, anc_mask + (size_t)parent[i] * W,
                   sizeof(uint32_t) * W);
        row[i / 32] |= 1u << (i % 32);
    }
    if (score)
        memcpy(score, sc, sizeof(float) * N_MAX);
    return n;
}

void
ref_build_ddtree(int32_t *n_nodes, int32_t *token, int32_t *parent,
                 int32_t *depth, int32_t *position, int32_t *first_child,
                 int32_t *next_sibling, float *score, uint32_t *anc_mask,
                 const float *lp, const int32_t *ids, const int32_t *budget,
                 const int32_t *depth_limit, const int32_t *root_token,
                 const int32_t *past_len, int R, int L, int K, int N_MAX)
{
    int W = (N_MAX + 31) / 32;
    for (int r = 0; r < R; r++) {
        size_t o = (size_t)r * N_MAX;
        n_nodes[r] = ref_build_ddtree_one(
            token + o, parent + o, depth + o, position + o, first_child + o,
            next_sibling + o, score ? score + o : NULL,
            anc_mask + o * W, lp + (size_t)r * L * K, ids + (size_t)r * L * K,
            budget[r], depth_limit ? depth_limit[r] : L, root_token[r],
            past_len ? past_len[r] : 0, L, K, N_MAX);
    }
}
