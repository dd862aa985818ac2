// build_ddtree_rows.cuh: the rows build_ddtree writes, a tree node's or
// padding's, with their ancestor-mask words.  A part of build_ddtree.cu,
// included after its constants (not a header of its own).

// Row i of the ancestor mask: bit j set iff j is i or an ancestor of i
// (own bit only when !walk).  Ancestors have smaller indices than their
// descendants, so the words fill from the last to the first.
__device__ __forceinline__ void
write_mask_row(unsigned *row, int i, const short *parent, bool walk)
{
    int wcur = i >> 5;
    unsigned bits = 0;
    for (int j = W - 1; j > wcur; j--)
        row[j] = 0u;
    int a = i;
    for (;;) {
        const int wa = a >> 5;
        if (wa != wcur) {
            row[wcur] = bits;
            for (int j = wcur - 1; j > wa; j--)
                row[j] = 0u;
            wcur = wa;
            bits = 0;
        }
        bits |= 1u << (a & 31);
        if (!walk || a == 0)
            break;
        a = parent[a];
    }
    row[wcur] = bits;
    for (int j = wcur - 1; j >= 0; j--)
        row[j] = 0u;
}

__device__ __forceinline__ void
write_padding_row(const kdt_build_ddtree_params &p, long long o, int i,
                  int root, int past, const short *parent, unsigned *mask_row)
{
    p.token[o + i] = root;
    p.parent[o + i] = -1;
    p.depth[o + i] = 0;
    p.position[o + i] = past;
    p.first_child[o + i] = -1;
    p.next_sibling[o + i] = -1;
    if (p.score)
        p.score[o + i] = kdt_neg_inf();
    write_mask_row(mask_row, i, parent, false);
}

// The built tree, for writing its rows.
struct tree_rows {
    const short *parent, *rank, *depth, *first_child, *next_sibling;
    const float *node_score;
    const int *ids_g; // the request's ids
    long long o;      // its first row
    int n, root, past;
};

// Row i: the tree's node i, or padding; its mask into mrow.
__device__ __forceinline__ void
write_row(const kdt_build_ddtree_params &p, const tree_rows &t, int i,
          unsigned *mrow)
{
    const long long o = t.o;
    if (i < t.n) {
        const int d = t.depth[i];
        p.token[o + i] = i == 0 ? t.root : t.ids_g[(d - 1) * K + t.rank[i]];
        p.parent[o + i] = t.parent[i];
        p.depth[o + i] = d;
        p.position[o + i] = t.past + d;
        p.first_child[o + i] = t.first_child[i];
        p.next_sibling[o + i] = t.next_sibling[i];
        if (p.score)
            p.score[o + i] = t.node_score[i];
        write_mask_row(mrow, i, t.parent, true);
    } else {
        write_padding_row(p, o, i, t.root, t.past, t.parent, mrow);
    }
}

// After the threshold path: every row of the tree and its padding (the
// loop path's other warps write the padding only when the loop runs), the
// ancestor masks staged in the free region, MASK_ROWS rows at a time (see
// MASK_ROWS).  Block-wide.
__device__ __forceinline__ void
write_rows_staged(const kdt_build_ddtree_params &p, const tree_rows &t,
                  unsigned *stage, int tid)
{
    unsigned *g = p.anc_mask + t.o * W;
    for (int c0 = 0; c0 < N_MAX; c0 += MASK_ROWS) {
        const int c1 = kdt_imin(c0 + MASK_ROWS, N_MAX);
        for (int i = c0 + tid; i < c1; i += THREADS)
            write_row(p, t, i, stage + (i - c0) * W);
        __syncthreads();
#pragma unroll 4
        for (int w = tid; w < (c1 - c0) * W; w += THREADS)
            g[(long long)c0 * W + w] = stage[w];
        if (c1 < N_MAX)
            __syncthreads(); // the chunk is copied out
    }
}

// Rows 0..B, each thread's mask words straight out (the rows past B are
// padding, written during the loop).
__device__ __forceinline__ void
write_rows_direct(const kdt_build_ddtree_params &p, const tree_rows &t, int B,
                  int tid)
{
    for (int i = tid; i <= B; i += THREADS)
        write_row(p, t, i, p.anc_mask + (t.o + i) * W);
}
