/*
 * gpu_verify_attn.c: kdtree_verify_attn() on the GPU against the CPU
 * reference (ref/verify_attn.c, double accumulation): every head
 * count and tree size class of the bench, prefixes that end mid-page and on
 * page edges, shuffled pages, mixed batches, random trees and trees built
 * by the reference build_ddtree, the split and unsplit paths (and more
 * splits than KV tiles), padded rows, lse = NULL, a non-default stream,
 * and the workspace checks; and an FP8 (e4m3) cache in both arithmetics
 * (MATH = bf16 and e4m3) at PAGE = 1 (SGLang's token pool) and other
 * pages, scaled and unscaled, over the same classes.  Exits 77 without a
 * GPU.
 *
 * Tolerance, per output element:
 *     |o - o_ref| <= 2^-7 (|o_ref| + max|v|)
 * The inputs are bf16 and exact in both; the kernel's logits, sums and
 * accumulators are f32 (error ~1e-6 relative, negligible).  The kernel
 * rounds P to bf16 for the tensor cores (bf16 keeps 8 significant bits:
 * relative error <= 2^-8 per weight, so <= 2^-8 max|v| on o, since o is a
 * weighted mean of V rows) and rounds o to bf16 (<= 2^-8 |o|): at most
 * 2^-8 (|o| + max|v|) in the worst case, which a peaked softmax (few
 * weights, errors of one sign) nearly reaches; the test allows twice that.
 * Padded rows must be exactly 0 (o) and -inf (lse).  lse (natural log)
 * must be within 1e-3 (1 + |lse_ref|): only f32 rounding and ex2.approx
 * enter it (P's bf16 rounding does not: the sum uses the f32 weights).
 * Outputs are poisoned with NaN first, so an element never written fails.
 *
 * An e4m3 cache (docs/contract.md §3), against ref_verify_attn_kv over
 * the dequantized cache (kv_scale x e4m3 value; its codes include
 * subnormals and zeros), with max|v| the largest dequantized |v|:
 *  - MATH = bf16: the bf16 cache's tolerance above, with that max|v|.
 *  - MATH = e4m3: the contract's bound, per element
 *        |o - o_ref| <= |o_q - o_ref| + max|v| 2 beta / (1 - beta)
 *                       + 2^-8 (|o_ref| + max|v|)
 *    (o_q: ref_verify_attn_qe4m3, each query row quantized as the kernel
 *    does it; beta = 2^-4 + 2^-10 n / S0 from the row's n visible
 *    positions and S0 = sum 2^(x_j - max x)), and lse within |lse_q -
 *    lse_ref| + beta / (1 - beta) + 1e-3 (1 + |lse_ref|); where beta is
 *    too large for those (many positions, one weight dominating: a large
 *    scale over a long prefix), ref_qe4m3_bounds' limits.  That bound is
 *    a worst case (about 0.13 max|v|); each row's root-mean-square error
 *    over its 512 columns is also held to the typical error of P's
 *    rounding, derived here.  A weight p_j <= 256 rounds to p_j + e_j,
 *    |e_j| at most half an e4m3 step: 2^-4 p_j (normal range) or 2^-10
 *    (subnormal).  Rounding to nearest makes e_j spread over that
 *    interval with no preferred sign, so E e_j^2 <= (2^-8 p_j^2 +
 *    2^-20) / 3 (a uniform spread's variance), independently for
 *    different j.  o is sum (p_j + e_j) v_j / sum (p_j + e_j), so o - o_q
 *    = sum e_j (v_j - o_q) / S' (S' the rounded sum, >= S (1 - beta)):
 *    each column's error has mean ~0 and variance <= (2 max|v|)^2 sum E
 *    e_j^2 / S^2.  With p_j = c 2^(x_j - max x), c >= 1 (the lazy
 *    maximum never exceeds the row's), sum p_j^2 / S^2 = S2 / S0^2 (S2 =
 *    sum 2^(2 (x_j - max x))) and n / S^2 <= n / S0^2, so
 *        sigma = 2 max|v| sqrt((2^-8 S2 + 2^-20 n) / 3) / S0
 *    bounds each column's standard deviation, and the mean square over
 *    512 columns has expectation <= sigma^2.  The test allows an RMS of
 *        rms(o_q - o_ref) + 4 sigma + 2^-8 (rms(o_ref) + max|v|)
 *    (4 sigma: 16 times the expected mean square; when one weight
 *    dominates, |e| <= sqrt(3) sigma already).  ref_verify_attn_qe4m3
 *    gives each row's n, S0 and S2.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "harness.h"
#include "kdt_attn_tiles.h"
#include "kdtree.h"
#include "jit/registry.h"
#include "runtime/runtime.h"
#include "kernels/verify_attn_splits.h"
#include "ref/build_ddtree.h"
#include "ref/ref_math.h"
#include "ref/verify_attn.h"
#include "ref/verify_attn_heads.h"

/* src/kernels/verify_attn.c's test hook: > 0 forces the split count. */
extern int kdt_verify_attn_splits_override;

#define D_QK REF_ATTN_D_QK
#define D_V REF_ATTN_D_V

enum { TREE_RANDOM = 0, TREE_DDTREE = 1, TREE_CHAIN = 2 };

typedef struct prob {
    int R, H, N, page, max_pages, n_pages;
    float scale;
    int32_t *past, *nn, *bt;
    uint16_t *q, *kv;
    uint32_t *mask;
    float *ro, *rl; /* the reference, computed once */
    /* an e4m3 cache (prob_e4m3): its codes, scale and arithmetic, its
     * largest |dequantized value|, and for MATH = e4m3 o_q, lse_q and
     * each row's n, S0, S2 (ref_verify_attn_qe4m3) */
    int32_t kv_dtype, math;
    float kv_scale;
    uint8_t *kv8;
    double vmax;
    float *rq, *rlq;
    double *st;
} prob;

static uint64_t seed = 0x1234567887654321ull;

/* A DDTree-shaped tree from the reference build_ddtree (dyadic log-probs
 * over L = 15 depths, K = 4 candidates); returns its n_nodes. */
static int
ddtree_mask(uint32_t *mask, int budget, int n_max)
{
    enum { L = 15, K = 4 };
    float lp[L * K];
    int32_t ids[L * K];
    int32_t *tok = malloc(sizeof(int32_t) * 7 * (size_t)n_max);
    for (int d = 0; d < L; d++) {
        float v = 0.f;
        for (int k = 0; k < K; k++) {
            v -= (float)(ref_attn_rand(&seed) % 5) / 8.f;
            lp[d * K + k] = v;
            ids[d * K + k] = (int32_t)(ref_attn_rand(&seed) % 100);
        }
    }
    int n = ref_build_ddtree_one(tok, tok + n_max, tok + 2 * n_max,
                                 tok + 3 * n_max, tok + 4 * n_max,
                                 tok + 5 * n_max, NULL, mask, lp, ids, budget,
                                 L, 7, 0, L, K, n_max);
    free(tok);
    return n;
}

static void
prob_init(prob *p, int R, int H, int N, int page, const int *past,
          const int *nn, int tree, float scale)
{
    int W = (N + 31) / 32, cap = 1;
    memset(p, 0, sizeof *p);
    p->R = R;
    p->H = H;
    p->N = N;
    p->page = page;
    p->scale = scale;
    p->past = malloc(sizeof(int32_t) * R);
    p->nn = malloc(sizeof(int32_t) * R);
    p->mask = malloc(sizeof(uint32_t) * (size_t)R * N * W);
    for (int r = 0; r < R; r++) {
        p->past[r] = past[r];
        uint32_t *m = p->mask + (size_t)r * N * W;
        if (tree == TREE_DDTREE) {
            p->nn[r] = ddtree_mask(m, nn[r] - 1, N);
        } else if (tree == TREE_CHAIN) {
            /* a chain (K = 1): row i sees rows 0..i */
            p->nn[r] = nn[r];
            memset(m, 0, sizeof(uint32_t) * (size_t)N * W);
            for (int i = 0; i < N; i++)
                for (int j = 0; j <= (i < nn[r] ? i : -1); j++)
                    m[(size_t)i * W + j / 32] |= 1u << (j % 32);
            for (int i = nn[r]; i < N; i++)
                m[(size_t)i * W + i / 32] |= 1u << (i % 32);
        } else {
            p->nn[r] = nn[r];
            ref_attn_random_tree(m, NULL, nn[r], N, &seed);
        }
        if (past[r] + p->nn[r] > cap)
            cap = past[r] + p->nn[r];
    }
    /* one spare block-table entry past the need, and pages no request
     * uses, all in shuffled order */
    p->max_pages = (cap + page - 1) / page + 1;
    p->n_pages = R * p->max_pages + 3;
    p->bt = malloc(sizeof(int32_t) * (size_t)p->n_pages);
    for (int i = 0; i < p->n_pages; i++)
        p->bt[i] = i;
    for (int i = p->n_pages - 1; i > 0; i--) {
        int j = (int)(ref_attn_rand(&seed) % (uint64_t)(i + 1));
        int32_t t = p->bt[i];
        p->bt[i] = p->bt[j];
        p->bt[j] = t;
    }
    size_t nkv = (size_t)p->n_pages * page * D_QK;
    size_t nq = (size_t)R * N * H * D_QK;
    p->kv = malloc(2 * nkv);
    p->q = malloc(2 * nq);
    for (size_t i = 0; i < nkv; i++)
        p->kv[i] = ref_f32_to_bf16(ref_attn_randf(&seed));
    for (size_t i = 0; i < nq; i++)
        p->q[i] = ref_f32_to_bf16(ref_attn_randf(&seed));
    p->vmax = 1.0; /* the bf16 values lie in [-1, 1) */
}

/* Turns p's cache into e4m3 codes of values in [-1, 1) worth kv_scale
 * times each (one code in 64 zero, one in 8 of the rest 2^-8 smaller:
 * subnormal codes), read through the arithmetic `math`. */
static void
prob_e4m3(prob *p, int math, float kv_scale)
{
    size_t nkv = (size_t)p->n_pages * p->page * D_QK;
    p->kv_dtype = KDTREE_KV_E4M3;
    p->math = math;
    p->kv_scale = kv_scale;
    p->kv8 = malloc(nkv);
    p->vmax = 0.0;
    for (size_t i = 0; i < nkv; i++) {
        float x = ref_attn_randf(&seed);
        uint64_t k = ref_attn_rand(&seed) % 64;
        p->kv8[i] = k == 0 ? 0 : ref_f32_to_e4m3(k % 8 == 1 ? x * 0x1p-8f : x);
        double v = fabs((double)kv_scale * ref_e4m3_to_f32(p->kv8[i]));
        if (v > p->vmax)
            p->vmax = v;
    }
}

static void
prob_free(prob *p)
{
    free(p->past);
    free(p->nn);
    free(p->bt);
    free(p->q);
    free(p->kv);
    free(p->mask);
    free(p->ro);
    free(p->rl);
    free(p->kv8);
    free(p->rq);
    free(p->rlq);
    free(p->st);
}

/* When set, run_check's next launch is captured in a CUDA graph on its
 * stream (a gpu_stream()) and runs as the graph's replay. */
static int capture_next;

/* Threads for the references: the host's online cores (at least 1). */
static int
ref_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* Runs the kernel with `splits` (0 = the library's choice; < 0: -splits
 * ways as one cluster a row tile where the body merges in clusters,
 * through the workspace elsewhere) and compares with the references
 * (computed on p's first call that needs them).
 * Returns the number of bad elements. */
static long
run_check(prob *p, int splits, int with_lse, void *stream, const char *what)
{
    int R = p->R, H = p->H, N = p->N, W = (N + 31) / 32;
    size_t rows = (size_t)R * N * H;
    const int e4m3 = p->kv_dtype == KDTREE_KV_E4M3;
    const int qe4m3 = p->math == KDTREE_ATTN_MATH_E4M3;
    const void *kvh = e4m3 ? (const void *)p->kv8 : (const void *)p->kv;
    const size_t kv_bytes =
        (e4m3 ? 1 : 2) * (size_t)p->n_pages * p->page * D_QK;
    if (!p->ro) {
        p->ro = malloc(sizeof(float) * rows * D_V);
        p->rl = malloc(sizeof(float) * rows);
        /* the heads among the host's cores (ref_threads): a 32k prefix
         * takes one thread tens of seconds */
        ref_verify_attn_kv_heads(ref_threads(), p->ro, p->rl, p->q, kvh,
                                 p->kv_dtype, e4m3 ? p->kv_scale : 1.f,
                                 p->bt, p->past, p->nn, p->mask, R, H, N,
                                 p->page, p->max_pages, p->scale);
    }
    if (qe4m3 && !p->rq) {
        p->rq = malloc(sizeof(float) * rows * D_V);
        p->rlq = malloc(sizeof(float) * rows);
        p->st = malloc(sizeof(double) * 3 * rows);
        ref_verify_attn_qe4m3_heads(ref_threads(), p->rq, p->rlq, p->st,
                                    p->q, kvh, p->kv_dtype, p->kv_scale,
                                    p->bt, p->past, p->nn, p->mask, R, H, N,
                                    p->page, p->max_pages, p->scale);
    }
    kdtree_runtime *rt = gpu_runtime();
    kdt_verify_attn_splits_override = splits;
    uint64_t ws_bytes = 0;
    kdtree_attn at = {.n_heads = H, .scale = p->scale, .math = p->math};
    kdtree_tree tree = {.n_requests = R, .n_max = N};
    kdtree_kv_cache kvc = {.page_size = p->page, .max_pages = p->max_pages,
                           .dtype = p->kv_dtype,
                           .scale = e4m3 ? p->kv_scale : 0.f};
    int st = kdtree_verify_attn_workspace_size(&ws_bytes, rt, &at, &tree,
                                               &kvc);
    ck_assert_msg(st == 0, "%s: workspace_size: %s", what,
                  kdtree_last_error());
    uint64_t q = gpu_upload(p->q, 2 * (size_t)R * N * H * D_QK);
    uint64_t kv = gpu_upload(kvh, kv_bytes);
    uint64_t bt = gpu_upload(p->bt, 4 * (size_t)R * p->max_pages);
    uint64_t pl = gpu_upload(p->past, 4 * (size_t)R);
    uint64_t nn = gpu_upload(p->nn, 4 * (size_t)R);
    uint64_t am = gpu_upload(p->mask, 4 * (size_t)R * N * W);
    uint16_t *o = malloc(2 * rows * D_V);
    float *lse = malloc(4 * rows);
    memset(o, 0xff, 2 * rows * D_V); /* NaN poison */
    memset(lse, 0xff, 4 * rows);
    uint64_t od = gpu_upload(o, 2 * rows * D_V);
    uint64_t ld = with_lse ? gpu_upload(lse, 4 * rows) : 0;
    uint64_t ws = ws_bytes ? gpu_alloc(ws_bytes) : 0;
    /* A synchronous cuMemcpyHtoD from pageable memory may return before its
     * DMA lands, and a non-blocking stream does not wait for it: without
     * this, the poison could land after the kernel's writes. */
    gpu_sync();
    at.q = q;
    at.o = od;
    at.lse = ld;
    at.workspace = ws;
    at.workspace_bytes = ws_bytes;
    tree.n_nodes = nn;
    tree.anc_mask = am;
    kvc.data = kv;
    kvc.block_table = bt;
    kdtree_requests req = {.past_len = pl, .n_requests = R};
    if (capture_next)
        gpu_capture_begin(stream);
    st = kdtree_verify_attn(rt, &at, &tree, &req, &kvc, stream);
    kdt_verify_attn_splits_override = 0;
    if (capture_next) {
        /* end the capture whatever the call said, then judge it */
        gpu_capture_replay(stream);
        capture_next = 0;
    }
    ck_assert_msg(st == 0, "%s: %s: %s", what, kdtree_status_name(st),
                  kdtree_last_error());
    gpu_sync();
    gpu_download(o, od, 2 * rows * D_V);
    if (with_lse)
        gpu_download(lse, ld, 4 * rows);

    long bad = 0;
    double maxerr = 0, maxrms = 0; /* maxrms: of RMS / its bound */
    const double vmax = p->vmax;
    for (size_t i = 0; i < rows; i++) {
        int node = (int)(i / H % N), r = (int)(i / ((size_t)N * H));
        int padded = node >= p->nn[r];
        /* MATH = e4m3: the row's worst-case bounds (ref_qe4m3_bounds)
         * and sigma (the header) */
        double ob = 0, lb = 0, sigma = 0, se = 0, sq = 0, sr = 0;
        if (qe4m3 && !padded) {
            const double n = p->st[3 * i], s0 = p->st[3 * i + 1],
                         s2 = p->st[3 * i + 2];
            ref_qe4m3_bounds(n, s0, &ob, &lb);
            sigma = 2 * vmax * sqrt((0x1p-8 * s2 + 0x1p-20 * n) / 3) / s0;
        }
        for (int c = 0; c < D_V; c++) {
            double g = ref_bf16_to_f32(o[i * D_V + c]);
            double ref = p->ro[i * D_V + c];
            double e = fabs(g - ref);
            double tol = (fabs(ref) + vmax) / 128.0;
            if (qe4m3 && !padded) {
                double eq = fabs((double)p->rq[i * D_V + c] - ref);
                tol = eq + vmax * ob +
                      (fabs(ref) + vmax) / 256.0;
                se += e * e;
                sq += eq * eq;
                sr += ref * ref;
            }
            int ok = padded ? g == 0.0 : e <= tol;
            if (!ok && bad++ < 5)
                fprintf(stderr, "%s: o r=%d node=%d head=%d col=%d: got %g "
                        "want %g\n", what, r, node, (int)(i % H), c, g, ref);
            if (!padded && (e > maxerr || e != e))
                maxerr = e;
        }
        if (qe4m3 && !padded) {
            double rms = sqrt(se / D_V);
            double lim = sqrt(sq / D_V) + 4 * sigma +
                         (sqrt(sr / D_V) + vmax) / 256.0;
            if (!(rms <= lim) && bad++ < 5)
                fprintf(stderr, "%s: o r=%d node=%d head=%d: RMS error %g "
                        "over its typical bound %g\n", what, r, node,
                        (int)(i % H), rms, lim);
            if (!(rms / lim <= maxrms))
                maxrms = rms / lim;
        }
        if (with_lse) {
            double g = lse[i], ref = p->rl[i];
            double ltol = 1e-3 * (1 + fabs(ref));
            if (qe4m3 && !padded)
                ltol += fabs((double)p->rlq[i] - ref) + lb;
            int ok = padded ? (isinf(g) && g < 0) : fabs(g - ref) <= ltol;
            if (!ok && bad++ < 5)
                fprintf(stderr, "%s: lse r=%d node=%d head=%d: got %g want "
                        "%g\n", what, r, node, (int)(i % H), g, ref);
        }
    }
    fprintf(stderr, "%s: H=%d PAGE=%d N_MAX=%d R=%d KV=%s MATH=%s "
            "kv_scale=%g splits=%d: max |err| %.3g (max|v| %.3g)", what, H,
            p->page, N, R, e4m3 ? "e4m3" : "bf16", qe4m3 ? "e4m3" : "bf16",
            e4m3 ? p->kv_scale : 1.0, splits, maxerr, vmax);
    if (qe4m3)
        fprintf(stderr, ", worst row RMS at %.2f of its bound", maxrms);
    fprintf(stderr, ", %ld bad\n", bad);
    gpu_free(q);
    gpu_free(kv);
    gpu_free(bt);
    gpu_free(pl);
    gpu_free(nn);
    gpu_free(am);
    gpu_free(od);
    if (ld)
        gpu_free(ld);
    if (ws)
        gpu_free(ws);
    free(o);
    free(lse);
    return bad;
}

static void
check_case(int R, int H, int N, int page, const int *past, const int *nn,
           int tree, float scale, int splits, const char *what)
{
    prob p;
    prob_init(&p, R, H, N, page, past, nn, tree, scale);
    long bad = run_check(&p, splits, 1, NULL, what);
    prob_free(&p);
    ck_assert_msg(bad == 0, "%s: %ld elements out of tolerance", what, bad);
}

/* ---- cases -------------------------------------------------------------- */

/* Root only (B = 0), one head, page size 1: every prefix edge. */
START_TEST(root_only_page1)
{
    int past[] = {0, 1, 63, 64, 65, 1000};
    int nn[] = {1, 1, 1, 1, 1, 1};
    check_case(6, 1, 1, 1, past, nn, TREE_RANDOM, 0.1f, 0, "root_only_page1");
}
END_TEST

/* rows 1, 2, 17, 65 in one batch, 8 heads, pages of 16, prefixes that end
 * mid-page and on page edges. */
START_TEST(rows_mixed_h8)
{
    int past[] = {4096, 0, 63, 65};
    int nn[] = {1, 2, 17, 65};
    check_case(4, 8, 65, 16, past, nn, TREE_RANDOM, 0.0722f, 0,
               "rows_mixed_h8");
}
END_TEST

/* 16 heads, N_MAX = 17, pages of 64: prefixes 63, 64, 65 and 0. */
START_TEST(h16_page64)
{
    int past[] = {63, 64, 65, 0};
    int nn[] = {17, 17, 2, 1};
    check_case(4, 16, 17, 64, past, nn, TREE_RANDOM, 0.3f, 0, "h16_page64");
}
END_TEST

START_TEST(h64_page16)
{
    int past[] = {1000, 64};
    int nn[] = {17, 65};
    check_case(2, 64, 65, 16, past, nn, TREE_RANDOM, 0.0722f, 0,
               "h64_page16");
}
END_TEST

START_TEST(h128_page1)
{
    int past[] = {65, 1};
    int nn[] = {17, 65};
    check_case(2, 128, 65, 1, past, nn, TREE_RANDOM, 0.0722f, 0,
               "h128_page1");
}
END_TEST

/* DDTree-shaped trees from the reference build_ddtree, and chains. */
START_TEST(ddtree_trees)
{
    int past[] = {4096, 1000, 0};
    int nn[] = {65, 40, 65};
    check_case(3, 8, 65, 64, past, nn, TREE_DDTREE, 0.0722f, 0,
               "ddtree_trees");
    int past2[] = {100, 3};
    int nn2[] = {65, 9};
    check_case(2, 8, 65, 16, past2, nn2, TREE_CHAIN, 0.5f, 0, "chains");
}
END_TEST

/* The biggest tree (N_MAX = 1025, 33 mask words). */
START_TEST(big_tree)
{
    int past[] = {100, 5};
    int nn[] = {1025, 300};
    check_case(2, 2, 1025, 16, past, nn, TREE_RANDOM, 0.1f, 0, "big_tree");
}
END_TEST

/* One problem through the unsplit path, several split counts (64 splits
 * leave most of them empty) and the library's choice; large scales make
 * the running maximum move often (the rescale path). */
START_TEST(splits)
{
    int past[] = {4096, 200};
    int nn[] = {65, 40};
    prob p;
    prob_init(&p, 2, 8, 65, 64, past, nn, TREE_RANDOM, 4.0f);
    long bad = 0;
    bad += run_check(&p, 1, 1, NULL, "splits=1");
    bad += run_check(&p, 3, 1, NULL, "splits=3");
    bad += run_check(&p, 64, 1, NULL, "splits=64");
    bad += run_check(&p, 0, 1, NULL, "splits=auto");
    bad += run_check(&p, -2, 1, NULL, "cluster=2");
    bad += run_check(&p, -3, 1, NULL, "cluster=3");
    bad += run_check(&p, -6, 1, NULL, "cluster=6");
    bad += run_check(&p, -8, 1, NULL, "cluster=8");
    prob_free(&p);
    ck_assert_msg(bad == 0, "splits: %ld elements out of tolerance", bad);
}
END_TEST

/* How many clusters of each size the device runs at once, as the split
 * rule asks (kdt_cluster_fit): at most the SMs' worth, nothing past the
 * runtime's limit, the same answer twice; and the library's own choice
 * at 17 row tiles over 4k tokens, which on the H200 is 6 ways as one
 * cluster (docs/contract.md, "Workspace and splits"). */
START_TEST(cluster_fit)
{
    int past[] = {4096};
    int nn[] = {65};
    prob p;
    prob_init(&p, 1, 16, 65, 64, past, nn, TREE_RANDOM, 0.0722f);
    long bad = run_check(&p, 0, 1, NULL, "17 row tiles, auto");
    prob_free(&p);
    ck_assert_msg(bad == 0, "cluster_fit: %ld elements out of tolerance",
                  bad);

    kdtree_runtime *rt = gpu_runtime();
    const int64_t vals[5] = {16, 64, 65, KDTREE_KV_BF16,
                             KDTREE_ATTN_MATH_BF16};
    kdt_loaded *m;
    ck_assert_int_eq(kdt_runtime_get(&m, rt, KDT_KERNEL_VERIFY_ATTN, vals),
                     KDTREE_OK);
    const int wg = !strcmp(kdtree_runtime_target(rt), "sm_90a");
    const unsigned threads = wg ? KDT_ATTN_WG_THREADS : KDT_ATTN_THREADS;
    const unsigned smem = wg ? KDT_ATTN_WG_SMEM : KDT_ATTN_SMEM;
    for (unsigned n = 1; n <= KDT_MAX_CLUSTER + 1; n++) {
        int f = kdt_cluster_fit(rt, m, n, threads, smem);
        ck_assert_int_eq(kdt_cluster_fit(rt, m, n, threads, smem), f);
        if (n < 2 || (int)n > rt->max_cluster) {
            ck_assert_int_eq(f, 0);
            continue;
        }
        fprintf(stderr, "cluster_fit: %u blocks: %d at once\n", n, f);
        ck_assert_int_ge(f, 1);
        ck_assert_int_le((int64_t)f * n, rt->sm_count);
    }
}
END_TEST

/* A shape prepared ahead (kdtree_prepare) whose first launch is inside
 * a CUDA-graph capture, in the global mode, where calls that are unsafe
 * during capture fail: the launch may ask the driver only what capture
 * allows.  On the wgmma body the library's choice here is a cluster of
 * 8 (9 row tiles over 4k tokens, on the H200), so the first launch asks
 * the device how many clusters fit (kdt_cluster_fit) inside the capture;
 * the answers must come, and the replay must be right. */
START_TEST(first_launch_captured)
{
    kdtree_runtime *rt = gpu_runtime();
    ck_assert_int_eq(kdtree_prepare(rt, "verify_attn", "H=8,PAGE=32,N_MAX=65"),
                     KDTREE_OK);
    const int64_t vals[5] = {8, 32, 65, KDTREE_KV_BF16,
                             KDTREE_ATTN_MATH_BF16};
    kdt_loaded *m;
    ck_assert_int_eq(kdt_runtime_get(&m, rt, KDT_KERNEL_VERIFY_ATTN, vals),
                     KDTREE_OK);
    for (int n = 0; n <= KDT_MAX_CLUSTER; n++)
        ck_assert_msg(m->cluster_fit[n] == 0,
                      "the shape's clusters were asked about before its "
                      "first launch (size %d)", n);
    int past[] = {4096};
    int nn[] = {65};
    prob p;
    prob_init(&p, 1, 8, 65, 32, past, nn, TREE_RANDOM, 0.0722f);
    capture_next = 1;
    long bad = run_check(&p, 0, 1, gpu_stream(), "first launch captured");
    prob_free(&p);
    ck_assert_msg(bad == 0, "first_launch_captured: %ld elements out of "
                  "tolerance", bad);
    if (strcmp(kdtree_runtime_target(rt), "sm_90a") || rt->max_cluster < 2)
        return; /* no clusters on this body: nothing was asked */
    for (int n = KDT_VA_CLUSTER_STEP; n <= rt->max_cluster;
         n += KDT_VA_CLUSTER_STEP)
        ck_assert_msg(m->cluster_fit[n] > 0,
                      "clusters of %d: the driver gave no answer inside "
                      "the capture (%d)", n, (int)m->cluster_fit[n]);
}
END_TEST

/* A negative scale (the contract allows any finite one): the row maximum
 * of scale * S is then the minimum of S, which the kernel picks by the
 * scale's sign. */
START_TEST(negative_scale)
{
    int past[] = {700, 64};
    int nn[] = {65, 17};
    prob p;
    prob_init(&p, 2, 8, 65, 16, past, nn, TREE_RANDOM, -0.3f);
    long bad = run_check(&p, 1, 1, NULL, "negative unsplit");
    bad += run_check(&p, 3, 1, NULL, "negative split");
    bad += run_check(&p, -4, 1, NULL, "negative cluster");
    prob_free(&p);
    ck_assert_msg(bad == 0, "negative_scale: %ld elements out of tolerance",
                  bad);
}
END_TEST

/* lse = NULL on a non-default stream: split, unsplit, clustered. */
START_TEST(no_lse_stream)
{
    int past[] = {1000};
    int nn[] = {33};
    prob p;
    prob_init(&p, 1, 16, 65, 16, past, nn, TREE_RANDOM, 0.2f);
    long bad = run_check(&p, 5, 0, gpu_stream(), "no_lse split");
    bad += run_check(&p, 1, 0, gpu_stream(), "no_lse unsplit");
    bad += run_check(&p, -5, 0, gpu_stream(), "no_lse cluster");
    prob_free(&p);
    ck_assert_msg(bad == 0, "no_lse: %ld elements out of tolerance", bad);
}
END_TEST

/* ---- an e4m3 cache, both arithmetics ------------------------------------ */

static const int maths[] = {KDTREE_ATTN_MATH_BF16, KDTREE_ATTN_MATH_E4M3};

/* One problem over an e4m3 cache of scale kv_scale, run in each
 * arithmetic with each split count of `splits` (n of them).  Both
 * arithmetics read the same problem, so the dequantized-cache reference
 * is computed once; MATH = e4m3 adds its own. */
static void
check_e4m3(int R, int H, int N, int page, const int *past, const int *nn,
           int tree, float scale, float kv_scale, const int *splits, int n,
           const char *what)
{
    long bad = 0;
    prob p;
    prob_init(&p, R, H, N, page, past, nn, tree, scale);
    prob_e4m3(&p, maths[0], kv_scale);
    for (int m = 0; m < 2; m++) {
        p.math = maths[m];
        for (int i = 0; i < n; i++)
            bad += run_check(&p, splits[i], 1, NULL, what);
    }
    prob_free(&p);
    ck_assert_msg(bad == 0, "%s: %ld elements out of tolerance", what, bad);
}

static const int auto_split[] = {0};

/* SGLang's token pool: PAGE = 1, its unscaled cache (kv_scale = 1), a
 * long prefix, a root alone and a prefix that ends mid-tile. */
START_TEST(e4m3_token_pool)
{
    int past[] = {4096, 0, 63};
    int nn[] = {65, 1, 17};
    check_e4m3(3, 8, 65, 1, past, nn, TREE_RANDOM, 0.0722f, 1.f, auto_split,
               1, "e4m3 token pool");
}
END_TEST

/* 32k positions (PAGE = 1), split as the runtime picks and unsplit:
 * unsplit, every position goes through one row tile's sums, as at the
 * shapes with blocks enough to need no split.  The FP8 wgmma's sums keep
 * 13 bits (docs/contract.md section 3): carried across the range they
 * leave this case's lse 0.8 low on sm_90a; restarted every step and
 * added in f32 they hold the bound. */
START_TEST(e4m3_long_prefix)
{
    static const int auto_and_unsplit[] = {0, 1};
    int past[] = {32768};
    int nn[] = {65};
    check_e4m3(1, 8, 65, 1, past, nn, TREE_DDTREE, 0.0722f, 0.5f,
               auto_and_unsplit, 2, "e4m3 32k");
}
END_TEST

/* vLLM's scaled cache at 16, 64 and 128 heads, pages of 64, 16 and 1. */
START_TEST(e4m3_scaled_heads)
{
    int past[] = {63, 1000}, nn[] = {17, 2};
    check_e4m3(2, 16, 17, 64, past, nn, TREE_RANDOM, 0.3f, 0.37f, auto_split,
               1, "e4m3 H=16");
    int past2[] = {1000, 64}, nn2[] = {17, 65};
    check_e4m3(2, 64, 65, 16, past2, nn2, TREE_RANDOM, 0.0722f, 0.05f,
               auto_split, 1, "e4m3 H=64");
    int past3[] = {65, 1}, nn3[] = {17, 9};
    check_e4m3(2, 128, 17, 1, past3, nn3, TREE_RANDOM, 0.0722f, 2.5f,
               auto_split, 1, "e4m3 H=128");
}
END_TEST

/* Every prefix edge with a root alone, one head, PAGE = 1; the biggest
 * tree; DDTree-shaped trees and chains. */
START_TEST(e4m3_trees)
{
    int past[] = {0, 1, 63, 64, 65, 1000}, nn[] = {1, 1, 1, 1, 1, 1};
    check_e4m3(6, 1, 1, 1, past, nn, TREE_RANDOM, 0.1f, 1.f, auto_split, 1,
               "e4m3 root only");
    int past2[] = {100, 5}, nn2[] = {1025, 300};
    check_e4m3(2, 2, 1025, 16, past2, nn2, TREE_RANDOM, 0.1f, 1.5f,
               auto_split, 1, "e4m3 N_MAX=1025");
    int past3[] = {4096, 1000, 0}, nn3[] = {65, 40, 65};
    check_e4m3(3, 8, 65, 1, past3, nn3, TREE_DDTREE, 0.0722f, 1.f,
               auto_split, 1, "e4m3 ddtree");
    int past4[] = {100, 3}, nn4[] = {65, 9};
    check_e4m3(2, 8, 65, 16, past4, nn4, TREE_CHAIN, 0.5f, 0.8f, auto_split,
               1, "e4m3 chains");
}
END_TEST

/* The unsplit path, split counts up to more splits than tiles, the
 * library's choice and clusters where the body has them; a large scale
 * moves the running maximum often (the rescale path, and for MATH = e4m3
 * the rescaled row sums), and a negative one. */
START_TEST(e4m3_splits)
{
    static const int sp[] = {1, 3, 64, 0, -4};
    int past[] = {4096, 200}, nn[] = {65, 40};
    check_e4m3(2, 8, 65, 64, past, nn, TREE_RANDOM, 4.0f, 0.8f, sp, 5,
               "e4m3 splits");
    static const int sp2[] = {1, 3};
    int past2[] = {700, 64}, nn2[] = {65, 17};
    check_e4m3(2, 8, 65, 16, past2, nn2, TREE_RANDOM, -0.3f, 1.f, sp2, 2,
               "e4m3 negative scale");
}
END_TEST

/* Arguments only a real runtime can judge: the workspace. */
START_TEST(workspace_checks)
{
    kdtree_runtime *rt = gpu_runtime();
    uint64_t need = 0, a = gpu_alloc(1 << 20);
    kdtree_attn at = {.q = a, .o = a, .n_heads = 8, .scale = 0.1f};
    kdtree_tree tree = {.n_nodes = a, .anc_mask = a, .n_requests = 1,
                        .n_max = 65};
    kdtree_requests req = {.past_len = a, .n_requests = 1};
    kdtree_kv_cache kv = {.data = a, .block_table = a, .page_size = 64,
                          .max_pages = 16};
    kdt_verify_attn_splits_override = 4;
    ck_assert_int_eq(kdtree_verify_attn_workspace_size(&need, rt, &at, &tree,
                                                       &kv), 0);
    ck_assert_uint_eq(need, 4ull * 65 * 8 * 513 * 4);
    int st = kdtree_verify_attn(rt, &at, &tree, &req, &kv, NULL);
    ck_assert_int_eq(st, KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "workspace"));
    at.workspace = a;
    at.workspace_bytes = need - 1;
    st = kdtree_verify_attn(rt, &at, &tree, &req, &kv, NULL);
    ck_assert_int_eq(st, KDTREE_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kdtree_last_error(), "workspace_bytes"));
    at.workspace = a + 8;
    at.workspace_bytes = need;
    st = kdtree_verify_attn(rt, &at, &tree, &req, &kv, NULL);
    ck_assert_int_eq(st, KDTREE_ERROR_MISALIGNED);
    kdt_verify_attn_splits_override = 1;
    ck_assert_int_eq(kdtree_verify_attn_workspace_size(&need, rt, &at, &tree,
                                                       &kv), 0);
    ck_assert_uint_eq(need, 0);
    kdt_verify_attn_splits_override = 0;
    /* the library's own choice is a pure function of the shape */
    uint64_t n1 = 0, n2 = 0;
    kv.max_pages = 600;
    ck_assert_int_eq(kdtree_verify_attn_workspace_size(&n1, rt, &at, &tree,
                                                       &kv), 0);
    ck_assert_int_eq(kdtree_verify_attn_workspace_size(&n2, rt, &at, &tree,
                                                       &kv), 0);
    ck_assert_uint_eq(n1, n2);
    ck_assert_int_eq(n1 % 16, 0);
    gpu_free(a);
}
END_TEST

static Suite *
suite(void)
{
    gpu_runtime(); /* the device the tests use (the harness checked) */
    Suite *s = suite_create("gpu_verify_attn");
    TCase *tc = tcase_create("verify_attn");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, workspace_checks);
    tcase_add_test(tc, root_only_page1);
    tcase_add_test(tc, rows_mixed_h8);
    tcase_add_test(tc, h16_page64);
    tcase_add_test(tc, h64_page16);
    tcase_add_test(tc, h128_page1);
    tcase_add_test(tc, ddtree_trees);
    tcase_add_test(tc, big_tree);
    tcase_add_test(tc, splits);
    tcase_add_test(tc, cluster_fit);
    tcase_add_test(tc, first_launch_captured);
    tcase_add_test(tc, negative_scale);
    tcase_add_test(tc, no_lse_stream);
    suite_add_tcase(s, tc);
    /* its own case, so that CK_RUN_CASE=e4m3 runs the e4m3 tests alone;
     * the slowest (N_MAX = 1025's references) last */
    TCase *t8 = tcase_create("e4m3");
    tcase_set_timeout(t8, 600);
    tcase_add_test(t8, e4m3_token_pool);
    tcase_add_test(t8, e4m3_long_prefix);
    tcase_add_test(t8, e4m3_scaled_heads);
    tcase_add_test(t8, e4m3_splits);
    tcase_add_test(t8, e4m3_trees);
    suite_add_tcase(s, t8);
    return s;
}

int
main(void)
{
    return kdt_test_main(suite, KDT_TEST_GPU);
}
