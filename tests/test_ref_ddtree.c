/*
 * test_ref_ddtree.c: the CPU references of draft_topk, build_ddtree and
 * tree_accept (ref/<kernel>.h) and ref/ref_math.h against brute
 * force, on the edge cases of docs/contract.md.  Host only (no GPU).
 *
 *  - build_ddtree: against a literal simulation of the spec's loop (a list
 *    scanned for its best candidate every step, any input: unsorted,
 *    positive, NaN, inf), and, for well-formed inputs (rows sorted, lp <= 0),
 *    against enumerating every prefix and sorting them by (score desc, rank
 *    path asc): the B best prefixes in order.
 *  - draft_topk: against sorting the whole row.
 *  - tree_accept: against a search over the parent array.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref/build_ddtree.h"
#include "ref/draft_topk.h"
#include "ref/ref_math.h"
#include "ref/tree_accept.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static float
rnd_unit(void)
{
    return (float)(rnd() & 0xffffff) / 16777216.0f;
}

/* ---- build_ddtree: one request's outputs ------------------------------ */

typedef struct out1 {
    int N, W, n;
    int32_t token[REF_N_MAX_LIMIT], parent[REF_N_MAX_LIMIT],
        depth[REF_N_MAX_LIMIT], position[REF_N_MAX_LIMIT],
        first_child[REF_N_MAX_LIMIT], next_sibling[REF_N_MAX_LIMIT];
    float score[REF_N_MAX_LIMIT];
    uint32_t mask[REF_N_MAX_LIMIT * 33];
} out1;

static out1 *
run_ref(const float *lp, const int32_t *ids, int B, int Lr, int root,
        int past, int L, int K, int N)
{
    out1 *o = calloc(1, sizeof *o);
    o->N = N;
    o->W = (N + 31) / 32;
    o->n = ref_build_ddtree_one(o->token, o->parent, o->depth, o->position,
                                o->first_child, o->next_sibling, o->score,
                                o->mask, lp, ids, B, Lr, root, past, L, K, N);
    return o;
}

static float
canon(float x)
{
    return isnan(x) ? -INFINITY : x;
}

/* The spec's loop, literally: a list of candidates, the best taken each
 * step by a full scan; ties by comparing explicit rank paths. */
typedef struct lcand {
    float score;
    int parent, k, depth;
    int path[130]; /* ranks root..node */
} lcand;

static int
lpath_less(const lcand *a, const lcand *b)
{
    for (int i = 0; i < a->depth && i < b->depth; i++)
        if (a->path[i] != b->path[i])
            return a->path[i] < b->path[i];
    return a->depth < b->depth;
}

/* Fills node_* with the nodes in the loop's order; returns their count. */
static int
spec_loop(int *node_parent, int *node_k, int *node_depth, float *node_score,
          const float *lp, int B, int Lr, int K)
{
    static lcand list[4096];
    static int node_path[REF_N_MAX_LIMIT][130];
    int nl = 0, n = 1;
    node_score[0] = 0.0f;
    if (B > 0) {
        list[0] = (lcand){canon(0.0f + canon(lp[0])), 0, 0, 1, {0}};
        nl = 1;
    }
    while (n <= B && nl > 0) {
        int best = 0;
        for (int i = 1; i < nl; i++)
            if (list[i].score > list[best].score ||
                (list[i].score == list[best].score &&
                 lpath_less(&list[i], &list[best])))
                best = i;
        lcand c = list[best];
        list[best] = list[--nl];
        int id = n++;
        node_parent[id] = c.parent;
        node_k[id] = c.k;
        node_depth[id] = c.depth;
        node_score[id] = c.score;
        memcpy(node_path[id], c.path, sizeof c.path);
        if (c.k + 1 < K) {
            lcand s = c;
            s.k = c.k + 1;
            s.path[c.depth - 1] = s.k;
            s.score = canon(node_score[c.parent] +
                            canon(lp[(c.depth - 1) * K + s.k]));
            list[nl++] = s;
        }
        if (c.depth < Lr) {
            lcand ch = c;
            ch.parent = id;
            ch.k = 0;
            ch.depth = c.depth + 1;
            ch.path[c.depth] = 0;
            ch.score = canon(c.score + canon(lp[c.depth * K]));
            list[nl++] = ch;
        }
    }
    return n;
}

/* Checks every output of `o` against the loop's node list and the spec's
 * definitions of links, positions, masks and padding. */
static void
check_against_loop(const out1 *o, const float *lp, const int32_t *ids, int B,
                   int Lr, int root, int past, int K)
{
    static int np[REF_N_MAX_LIMIT], nk[REF_N_MAX_LIMIT], nd[REF_N_MAX_LIMIT];
    static float ns[REF_N_MAX_LIMIT];
    int n = spec_loop(np, nk, nd, ns, lp, B, Lr, K);
    ck_assert_int_eq(o->n, n);
    for (int i = 0; i < o->N; i++) {
        int pad = i >= n;
        if (i == 0 || pad) {
            ck_assert_int_eq(o->token[i], root);
            ck_assert_int_eq(o->parent[i], -1);
            ck_assert_int_eq(o->depth[i], 0);
            ck_assert_int_eq(o->position[i], past);
            if (i == 0)
                ck_assert(o->score[i] == 0.0f && !signbit(o->score[i]));
            else
                ck_assert(o->score[i] == -INFINITY);
        } else {
            ck_assert_int_eq(o->parent[i], np[i]);
            ck_assert_int_eq(o->depth[i], nd[i]);
            ck_assert_int_eq(o->position[i], past + nd[i]);
            ck_assert_int_eq(o->token[i], ids[(nd[i] - 1) * K + nk[i]]);
            ck_assert_msg(memcmp(&o->score[i], &ns[i], 4) == 0,
                          "row %d score %a vs %a", i, o->score[i], ns[i]);
        }
        /* Links: first child = the child of rank 0; next sibling = the
         * sibling of the next rank; -1 when not built. */
        int fc = -1, sib = -1;
        for (int j = 1; j < n && !pad; j++) {
            if (np[j] == i && nk[j] == 0)
                fc = j;
            if (i > 0 && np[j] == np[i] && nk[j] == nk[i] + 1)
                sib = j;
        }
        ck_assert_int_eq(o->first_child[i], fc);
        ck_assert_int_eq(o->next_sibling[i], sib);
        /* Mask: bit j iff j is i or an ancestor of i. */
        for (int j = 0; j < o->N; j++) {
            int anc = 0;
            for (int a = i; a >= 0; a = (a < n && a > 0) ? np[a] : -1) {
                if (a == j)
                    anc = 1;
                if (a >= n)
                    break;
            }
            if (i < n && j == 0)
                anc = 1;
            int bit = (o->mask[i * o->W + j / 32] >> (j % 32)) & 1;
            ck_assert_msg(bit == anc, "mask row %d bit %d: %d", i, j, bit);
        }
    }
}

/* ---- brute force over every prefix (well-formed inputs) --------------- */

typedef struct pfx {
    float score;
    int depth;
    int path[8];
} pfx;

static pfx all_pfx[20000];
static int n_pfx;

static void
enumerate(const float *lp, int K, int Lr, pfx cur)
{
    if (cur.depth == Lr)
        return;
    for (int k = 0; k < K; k++) {
        pfx c = cur;
        c.path[c.depth] = k;
        c.score = canon(cur.score + canon(lp[cur.depth * K + k]));
        c.depth++;
        all_pfx[n_pfx++] = c;
        enumerate(lp, K, Lr, c);
    }
}

static int
pfx_cmp(const void *x, const void *y)
{
    const pfx *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    for (int i = 0; i < a->depth && i < b->depth; i++)
        if (a->path[i] != b->path[i])
            return a->path[i] < b->path[i] ? -1 : 1;
    return a->depth - b->depth;
}

/* The node's rank path, read back from the output through the tokens
 * (ids[d][k] = 1000 d + k in these tests). */
static void
check_against_enumeration(const out1 *o, const float *lp, int B, int Lr,
                          int K)
{
    n_pfx = 0;
    enumerate(lp, K, Lr, (pfx){0.0f, 0, {0}});
    qsort(all_pfx, n_pfx, sizeof(pfx), pfx_cmp);
    int want = B < n_pfx ? B : n_pfx;
    ck_assert_int_eq(o->n, want + 1);
    for (int i = 1; i <= want; i++) {
        const pfx *p = &all_pfx[i - 1];
        ck_assert_int_eq(o->depth[i], p->depth);
        int a = i;
        for (int d = p->depth - 1; d >= 0; d--) {
            ck_assert_int_eq(o->token[a], 1000 * d + p->path[d]);
            a = o->parent[a];
        }
        ck_assert_int_eq(a, 0);
        ck_assert(memcmp(&o->score[i], &p->score, 4) == 0);
    }
}

static void
make_ids(int32_t *ids, int L, int K)
{
    for (int d = 0; d < L; d++)
        for (int k = 0; k < K; k++)
            ids[d * K + k] = 1000 * d + k;
}

static int
fdesc(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

/* Rows sorted descending, <= 0; dyadic (multiples of 2^-6 in [-8, 0],
 * few distinct values so that sums tie) when `dyadic`. */
static void
make_lp(float *lp, int L, int K, int dyadic)
{
    for (int d = 0; d < L; d++) {
        for (int k = 0; k < K; k++)
            lp[d * K + k] = dyadic ? -(float)(rnd() % 9) * 0.25f -
                                         (float)(rnd() % 2) / 64.0f
                                   : logf(rnd_unit() + 1e-7f) * 2.0f;
        qsort(lp + d * K, K, sizeof(float), fdesc);
    }
}

START_TEST(build_vs_enumeration)
{
    float lp[8 * 8];
    int32_t ids[8 * 8];
    for (int it = 0; it < 400; it++) {
        int K = 1 + rnd() % 4, L = 1 + rnd() % 5, Lr = 1 + rnd() % L;
        int N = 1 + rnd() % 200, B = rnd() % N;
        make_lp(lp, L, K, it & 1);
        make_ids(ids, L, K);
        out1 *o = run_ref(lp, ids, B, Lr, 77, 5, L, K, N);
        check_against_enumeration(o, lp, B, Lr, K);
        check_against_loop(o, lp, ids, B, Lr, 77, 5, K);
        free(o);
    }
}
END_TEST

START_TEST(build_vs_loop_any_input)
{
    static float lp[16 * 64];
    static int32_t ids[16 * 64];
    for (int it = 0; it < 300; it++) {
        int K = 1 + rnd() % 12, L = 1 + rnd() % 12, Lr = 1 + rnd() % L;
        int N = 1 + rnd() % 130, B = rnd() % N;
        for (int i = 0; i < L * K; i++) {
            uint32_t c = rnd() % 40;
            lp[i] = c == 0   ? NAN
                    : c == 1 ? -INFINITY
                    : c == 2 ? INFINITY
                    : c == 3 ? 0.0f
                    : c == 4 ? -0.0f
                    : c < 20 ? -(float)(rnd() % 8) / 4.0f
                             : (rnd_unit() - 0.8f) * 5.0f;
            ids[i] = (int32_t)(rnd() % 50);
        }
        out1 *o = run_ref(lp, ids, B, Lr, 3, (int)(rnd() % 100), L, K, N);
        check_against_loop(o, lp, ids, B, Lr, 3, o->position[0], K);
        free(o);
    }
}
END_TEST

START_TEST(build_edge_cases)
{
    float lp[4 * 4];
    int32_t ids[4 * 4];
    make_ids(ids, 4, 4);
    make_lp(lp, 4, 4, 0);
    out1 *o;

    /* B = 0: the root only, every other row padding. */
    o = run_ref(lp, ids, 0, 4, 9, 0, 4, 4, 33);
    ck_assert_int_eq(o->n, 1);
    ck_assert_int_eq(o->first_child[0], -1);
    ck_assert_uint_eq(o->mask[32 * o->W + 1], 1u); /* row 32: own bit */
    ck_assert_uint_eq(o->mask[32 * o->W + 0], 0u);
    check_against_loop(o, lp, ids, 0, 4, 9, 0, 4);
    free(o);

    /* B = 1: the best token at depth 1. */
    o = run_ref(lp, ids, 1, 4, 9, 0, 4, 4, 8);
    ck_assert_int_eq(o->n, 2);
    ck_assert_int_eq(o->token[1], 0);
    ck_assert_int_eq(o->first_child[0], 1);
    free(o);

    /* K = 1: a chain, budget larger than the nodes that exist. */
    o = run_ref(lp, ids, 20, 4, 9, 2, 4, 1, 21);
    ck_assert_int_eq(o->n, 5);
    for (int i = 1; i < 5; i++) {
        ck_assert_int_eq(o->parent[i], i - 1);
        ck_assert_int_eq(o->position[i], 2 + i);
    }
    free(o);

    /* L = 1: a star, in rank order. */
    o = run_ref(lp, ids, 10, 1, 9, 0, 1, 4, 12);
    ck_assert_int_eq(o->n, 5);
    for (int i = 1; i < 5; i++) {
        ck_assert_int_eq(o->parent[i], 0);
        ck_assert_int_eq(o->token[i], i - 1);
        ck_assert_int_eq(o->next_sibling[i], i < 4 ? i + 1 : -1);
    }
    free(o);

    /* lp = 0 everywhere: everything ties; parents before children, the
     * order is the rank paths' (a pre-order walk). */
    for (int i = 0; i < 16; i++)
        lp[i] = 0.0f;
    o = run_ref(lp, ids, 6, 4, 9, 0, 4, 4, 8);
    int want_tok[7] = {9, 0, 1000, 2000, 3000, 3001, 3002};
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(o->token[i], want_tok[i]);
    check_against_enumeration(o, lp, 6, 4, 4);
    free(o);

    /* -inf and NaN: they come last, still in rank order, never NaN. */
    for (int i = 0; i < 16; i++)
        lp[i] = (i % 4 == 0) ? -1.0f : (i % 2 ? NAN : -INFINITY);
    o = run_ref(lp, ids, 12, 2, 9, 0, 4, 4, 13);
    ck_assert_int_eq(o->n, 13);
    ck_assert_int_eq(o->token[1], 0);
    ck_assert_int_eq(o->token[2], 1000);
    ck_assert(o->score[3] == -INFINITY);
    ck_assert_int_eq(o->token[3], 1001); /* rank path (0,1) < (1) */
    ck_assert_int_eq(o->token[4], 1002);
    check_against_loop(o, lp, ids, 12, 2, 9, 0, 4);
    free(o);

    /* Duplicate tokens across depths are fine (tokens are data). */
    for (int i = 0; i < 16; i++)
        ids[i] = 5;
    make_lp(lp, 4, 4, 1);
    o = run_ref(lp, ids, 30, 4, 5, 0, 4, 4, 31);
    for (int i = 0; i < 31; i++)
        ck_assert_int_eq(o->token[i], 5);
    check_against_loop(o, lp, ids, 30, 4, 5, 0, 4);
    free(o);
}
END_TEST

START_TEST(build_batch_mixed)
{
    enum { R = 5, L = 4, K = 3, N = 40 };
    static float lp[R * L * K];
    static int32_t ids[R * L * K];
    int32_t budget[R] = {0, 39, 7, 1, 20}, dl[R] = {4, 2, 1, 4, 3};
    int32_t root[R] = {1, 2, 3, 4, 5}, past[R] = {0, 17, 3, 1000, 64};
    static int32_t n[R], tok[R * N], par[R * N], dep[R * N], pos[R * N],
        fc[R * N], ns[R * N];
    static float sc[R * N];
    static uint32_t mask[R * N * 2];
    for (int r = 0; r < R; r++) {
        make_lp(lp + r * L * K, L, K, r & 1);
        make_ids(ids + r * L * K, L, K);
    }
    ref_build_ddtree(n, tok, par, dep, pos, fc, ns, sc, mask, lp, ids, budget,
                     dl, root, past, R, L, K, N);
    for (int r = 0; r < R; r++) {
        out1 *o = run_ref(lp + r * L * K, ids + r * L * K, budget[r], dl[r],
                          root[r], past[r], L, K, N);
        ck_assert_int_eq(n[r], o->n);
        ck_assert(memcmp(tok + r * N, o->token, 4 * N) == 0);
        ck_assert(memcmp(par + r * N, o->parent, 4 * N) == 0);
        ck_assert(memcmp(pos + r * N, o->position, 4 * N) == 0);
        ck_assert(memcmp(mask + r * N * 2, o->mask, 8 * N) == 0);
        check_against_enumeration(o, lp + r * L * K, budget[r], dl[r], K);
        free(o);
    }
    /* NULL depth_limit = L, NULL past_len = 0. */
    ref_build_ddtree(n, tok, par, dep, pos, fc, ns, NULL, mask, lp, ids,
                     budget, NULL, root, NULL, R, L, K, N);
    ck_assert_int_eq(pos[N + 1], 1);
    ck_assert_int_eq(n[1], 40);
}
END_TEST

/* ---- draft_topk ------------------------------------------------------- */

static const float *sort_vals;

static int
idx_cmp(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    float va = sort_vals[a], vb = sort_vals[b];
    if (va != vb)
        return va > vb ? -1 : 1;
    return a - b;
}

static void
check_topk(const void *logits, int dtype, int rows, int V, int K)
{
    float *lp = malloc(4 * (size_t)rows * K), *v = malloc(4 * (size_t)V);
    int32_t *ids = malloc(4 * (size_t)rows * K);
    int *idx = malloc(sizeof(int) * (size_t)V);
    ref_draft_topk(lp, ids, logits, dtype, rows, V, K);
    for (int r = 0; r < rows; r++) {
        float m = -INFINITY;
        for (int j = 0; j < V; j++) {
            v[j] = dtype ? ref_bf16_to_f32(
                               ((const uint16_t *)logits)[r * V + j])
                         : ((const float *)logits)[r * V + j];
            if (isnan(v[j]))
                v[j] = -INFINITY;
            idx[j] = j;
            if (v[j] > m)
                m = v[j];
        }
        sort_vals = v;
        qsort(idx, V, sizeof(int), idx_cmp);
        double s = 0;
        for (int j = 0; j < V; j++)
            s += m == -INFINITY ? 0 : exp((double)v[j] - m);
        for (int k = 0; k < K; k++) {
            ck_assert_int_eq(ids[r * K + k], idx[k]);
            float want = m == -INFINITY ? -INFINITY
                                        : (float)(v[idx[k]] - m - log(s));
            float got = lp[r * K + k];
            ck_assert_msg(got == want || fabsf(got - want) < 1e-5f,
                          "row %d k %d lp %g vs %g", r, k, got, want);
        }
    }
    free(lp);
    free(v);
    free(ids);
    free(idx);
}

START_TEST(topk_vs_sort)
{
    for (int it = 0; it < 60; it++) {
        int V = 1 + rnd() % 300, K = 1 + rnd() % V, rows = 1 + rnd() % 4;
        int dtype = it & 1;
        float *f = malloc(4 * (size_t)rows * V);
        uint16_t *h = malloc(2 * (size_t)rows * V);
        for (int i = 0; i < rows * V; i++) {
            uint32_t c = rnd() % 30;
            f[i] = c == 0   ? NAN
                   : c == 1 ? -INFINITY
                   : c < 12 ? (float)(int)(rnd() % 5) /* argmax ties */
                            : (rnd_unit() - 0.5f) * 20.0f;
            h[i] = ref_f32_to_bf16(f[i]);
        }
        check_topk(dtype ? (void *)h : (void *)f, dtype, rows, V, K);
        free(f);
        free(h);
    }
}
END_TEST

START_TEST(topk_edge_rows)
{
    enum { V = 16 };
    float f[4 * V];
    for (int j = 0; j < V; j++) {
        f[j] = -INFINITY;          /* all -inf: lp = -inf, ids 0.. */
        f[V + j] = NAN;            /* all NaN: the same */
        f[2 * V + j] = 1.5f;       /* all equal: ids in order */
        f[3 * V + j] = j == 9 ? 3.0f : (j % 2 ? NAN : -INFINITY);
    }
    float lp[4 * V];
    int32_t ids[4 * V];
    ref_draft_topk(lp, ids, f, 0, 4, V, V);
    for (int k = 0; k < V; k++) {
        ck_assert_int_eq(ids[k], k);
        ck_assert(lp[k] == -INFINITY);
        ck_assert_int_eq(ids[V + k], k);
        ck_assert_int_eq(ids[2 * V + k], k);
        ck_assert(fabsf(lp[2 * V + k] + logf(16.0f)) < 1e-6f);
    }
    ck_assert_int_eq(ids[3 * V], 9);
    ck_assert(lp[3 * V] == 0.0f);
    ck_assert_int_eq(ids[3 * V + 1], 0);
    ck_assert(lp[3 * V + 1] == -INFINITY);
    check_topk(f, 0, 4, V, 5);
    /* bf16 round trip of a few values. */
    ck_assert(ref_bf16_to_f32(ref_f32_to_bf16(1.0f)) == 1.0f);
    ck_assert(ref_bf16_to_f32(ref_f32_to_bf16(-INFINITY)) == -INFINITY);
    ck_assert(isnan(ref_bf16_to_f32(ref_f32_to_bf16(NAN))));
    ck_assert(ref_f32_key(-1.0f) < ref_f32_key(-0.5f));
    ck_assert(ref_f32_key(-INFINITY) > 0u);
    /* NaN counts as -inf, everything else is itself. */
    ck_assert(ref_canon(NAN) == -INFINITY);
    ck_assert(ref_canon(-INFINITY) == -INFINITY);
    ck_assert(ref_canon(-0.5f) == -0.5f);
}
END_TEST

/* ---- tree_accept ------------------------------------------------------ */

START_TEST(accept_vs_search)
{
    enum { L = 6, K = 3, N = 30, R = 8 };
    static float lp[R * L * K];
    static int32_t ids[R * L * K], budget[R], root[R], nn[R], tok[R * N],
        par[R * N], dep[R * N], pos[R * N], fc[R * N], ns[R * N],
        tg[R * N], cap[R], alen[R], aidx[R * (L + 1)], atok[R * (L + 1)],
        bonus[R];
    static uint32_t mask[R * N];
    for (int it = 0; it < 200; it++) {
        for (int r = 0; r < R; r++) {
            make_lp(lp + r * L * K, L, K, 1);
            for (int i = 0; i < L * K; i++)
                ids[r * L * K + i] = (int32_t)(rnd() % 3); /* duplicates */
            budget[r] = (int32_t)(rnd() % N);
            root[r] = 7;
            cap[r] = (int32_t)(rnd() % (L + 4)) - 1; /* clamped to 1..L+1 */
        }
        ref_build_ddtree(nn, tok, par, dep, pos, fc, ns, NULL, mask, lp, ids,
                         budget, NULL, root, NULL, R, L, K, N);
        for (int i = 0; i < R * N; i++)
            tg[i] = (int32_t)(rnd() % 3);
        int use_cap = it & 1;
        ref_tree_accept(alen, aidx, atok, bonus, tok, fc, ns, nn, tg,
                        use_cap ? cap : NULL, R, L, N);
        for (int r = 0; r < R; r++) {
            int c = use_cap ? cap[r] : L + 1;
            c = c < 1 ? 1 : c > L + 1 ? L + 1 : c;
            int cur = 0, len = 1, path[L + 1] = {0};
            for (;;) {
                int next = -1;
                for (int j = cur + 1; j < nn[r] && len < c; j++)
                    if (par[r * N + j] == cur &&
                        tok[r * N + j] == tg[r * N + cur]) {
                        next = j;
                        break;
                    }
                if (next < 0)
                    break;
                cur = path[len++] = next;
            }
            ck_assert_int_eq(alen[r], len);
            ck_assert_int_eq(bonus[r], tg[r * N + cur]);
            for (int i = 0; i <= L; i++) {
                ck_assert_int_eq(aidx[r * (L + 1) + i], i < len ? path[i] : -1);
                ck_assert_int_eq(atok[r * (L + 1) + i],
                                 i < len ? tok[r * N + path[i]] : -1);
            }
        }
    }
}
END_TEST

START_TEST(accept_bad_links)
{
    /* Links pointing backwards or out of range end the walk instead of
     * looping or reading out of bounds. */
    int32_t tok[4] = {0, 1, 2, 3}, fc[4] = {2, 0, 9, -1}, ns[4] = {-1, -1, 1, -1};
    int32_t nn = 4, tg[4] = {1, 2, 3, 4}, alen, aidx[4], atok[4], bonus;
    ref_tree_accept(&alen, aidx, atok, &bonus, tok, fc, ns, &nn, tg, NULL, 1,
                    3, 4);
    ck_assert_int_eq(alen, 1); /* 2 is not token 1; its sibling 1 < 2 */
    ck_assert_int_eq(bonus, 1);
    nn = 99;
    fc[0] = 3;
    tg[0] = 3;
    ref_tree_accept(&alen, aidx, atok, &bonus, tok, fc, ns, &nn, tg, NULL, 1,
                    3, 4);
    ck_assert_int_eq(alen, 2);
    ck_assert_int_eq(aidx[1], 3);
    ck_assert_int_eq(bonus, 4);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("ref_ddtree");
    TCase *tc = tcase_create("ref");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, build_vs_enumeration);
    tcase_add_test(tc, build_vs_loop_any_input);
    tcase_add_test(tc, build_edge_cases);
    tcase_add_test(tc, build_batch_mixed);
    tcase_add_test(tc, topk_vs_sort);
    tcase_add_test(tc, topk_edge_rows);
    tcase_add_test(tc, accept_vs_search);
    tcase_add_test(tc, accept_bad_links);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_FORK);
}
