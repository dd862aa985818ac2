// va_phases.cu: where the wgmma body's KV loop spends a tile.  Includes
// tools/dev/attn_harness.cu (and so the kernel) with KDT_VA_PHASE
// recording, for the first thread of WG0 and of WG1 of the first
// VA_BLOCKS blocks, clock64() at each of the loop's timing points in its
// first VA_TILES tiles.  After the harness's `bench` of a split count it
// launches once more with the points recorded and prints, per warpgroup
// and point, the median over blocks and tiles of the cycles since the
// point before (point 0: since the tile before's last), and the median
// cycles a tile ("-": a point that path does not pass); a block's first
// tile and its last are left out (phase 1's tile, the loop's end).  The
// points (verify_attn_wgmma.cuh):
//   WG0: 0 tile start, 1 the tile published (BAR_KFULL), 2 S done,
//        3 P free (BAR_PEMPTY), 4 the row maxima and rescale factors
//        (BAR_ALPHA under MATH=e4m3), 5 and 6 each half's P published
//        and its P V issued, 7 P V done
//   WG1: 0 tile start, 1 the stage handed back (BAR_KEMPTY), 2 the next
//        tile's copies issued, 3 P's first half (BAR_PFULL), 4 its P V
//        issued and the next tile published (BAR_KFULL), 5 P's second
//        half, 6 its P V issued, 7 P V done
// Build for sm_90a, with the harness's shape constants, e.g. an e4m3
// cache in FP8 arithmetic at H=64 R=8, 65 rows, past 32k:
//   nvcc -std=c++17 -O2 -lineinfo -gencode arch=compute_90a,code=sm_90a \
//        -I kernels_src -I . -DKDT_H=64 -DKDT_PAGE=64 -DKDT_N_MAX=65 \
//        -DKDT_KV=1 -DKDT_MATH=1 tools/dev/va_phases.cu ref/verify_attn.c \
//        -o vap && H_DATA=bench ./vap bench 8 32768 0
// The points cost a clock read and a store each; compare the harness's
// time with and without them (attn_harness.cu alone) before reading the
// breakdown.  Development tool: not installed, not tested.
#include <cstdint>

constexpr int VA_BLOCKS = 528; // four waves of 132 SMs
constexpr int VA_TILES = 64;
constexpr int VA_POINTS = 8;
__device__ long long g_va[VA_BLOCKS][2][VA_TILES][VA_POINTS];

#define KDT_VA_PHASE(wg, it, i)                                             \
    do {                                                                    \
        const unsigned b_ =                                                 \
            blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); \
        if ((threadIdx.x & 127) == 0 && b_ < VA_BLOCKS && (it) < VA_TILES)  \
            g_va[b_][(wg)][(it)][(i)] = clock64();                          \
    } while (0)

template <class D_, class P_>
static void va_after_bench(D_ &, P_ &, int, float, cudaStream_t);
#define KDT_HARNESS_AFTER_BENCH va_after_bench

#include "attn_harness.cu"

static long long
median(std::vector<long long> &v)
{
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class D_, class P_>
static void
va_after_bench(D_ &D, P_ &P, int splits, float scale, cudaStream_t st)
{
    static long long h[VA_BLOCKS][2][VA_TILES][VA_POINTS];
    memset(h, 0, sizeof h);
    CK(cudaMemcpyToSymbol(g_va, h, sizeof h));
    launch(D, P, splits, 0, scale, st);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpyFromSymbol(h, g_va, sizeof h));
    /* MATH = e4m3: WG0 writes both halves of P, then runs each half's
     * PV to its end (pv8_tile) */
    static const char *names[2][VA_POINTS] = {
        {"tile start", "tile published", "S done", "P free",
         "maxima, rescale", KDT_MATH ? "P, PV half 0" : "P half 0 + PV",
         KDT_MATH ? "PV half 1" : "P half 1 + PV", "PV done"},
        {"tile start", "stage back", "copies issued", "P half 0",
         "PV 0, next published", "P half 1",
         KDT_MATH ? "PV 1" : "PV 1 issued", "PV done"}};
    for (int wg = 0; wg < 2; ++wg) {
        std::vector<long long> d[VA_POINTS], tile;
        for (int b = 0; b < VA_BLOCKS; ++b) {
            /* tiles 1 .. n-2 of the n this block recorded, each with the
             * next tile's start */
            int n = 0;
            while (n < VA_TILES && h[b][wg][n][0] != 0)
                ++n;
            for (int it = 1; it + 1 < n; ++it) {
                const long long *x = h[b][wg][it];
                const long long *px = h[b][wg][it - 1];
                /* a point a path does not pass (WG1's stage hand-back
                 * with the producer) is 0: the next one counts from the
                 * last one passed */
                long long last = 0;
                for (int i = VA_POINTS - 1; i >= 0 && !last; --i)
                    last = px[i];
                for (int i = 0; i < VA_POINTS; ++i)
                    if (x[i] != 0) {
                        d[i].push_back(x[i] - last);
                        last = x[i];
                    }
                tile.push_back(h[b][wg][it + 1][0] - x[0]);
            }
        }
        printf("WG%d (%zu tiles): median cycles since the point before\n",
               wg, tile.size());
        for (int i = 0; i < VA_POINTS; ++i) {
            if (d[i].empty())
                printf("  %d %-22s %8s\n", i, names[wg][i], "-");
            else
                printf("  %d %-22s %8lld\n", i, names[wg][i], median(d[i]));
        }
        printf("  a tile                   %8lld\n", median(tile));
    }
    fflush(stdout);
}
