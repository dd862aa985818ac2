/*
 * kdt_attn_tiles.h: the tile geometry of verify_attn that the host must
 * agree on (grid, block, dynamic shared memory, workspace layout).  Plain
 * macros so that both the C launcher (src/kernels/verify_attn.c) and the
 * kernel (verify_attn.cu, through NVRTC) read the same numbers.
 *
 * Why these numbers (H200/H100 and the 99 KB per-block limit of sm_120):
 *  - BM = 64 folded rows (node * H + head) per block.  A block's 8 warps
 *    keep its Q tile in registers (64 x 576 bf16 = 72 registers a thread),
 *    so Q never costs shared-memory bandwidth; the 64 x 512 f32 output
 *    accumulator is split by V columns, 64 per warp (128 registers).
 *  - BN = 16 tokens per KV tile, NSTAGE = 4 tiles in flight through
 *    cp.async: 4 x 16 rows x 1168 B (576 bf16 + 16 B of padding so that
 *    the 8 row addresses of an ldmatrix hit 8 distinct bank groups).
 *  - Total shared memory 94,720 B (BM 64, NBUF 1): under 99 KB.
 */
#ifndef KDT_ATTN_TILES_H
#define KDT_ATTN_TILES_H

#define KDT_ATTN_D_QK 576      /* 512 c_kv + 64 k_pe, fixed by the model */
#define KDT_ATTN_D_V 512
#ifndef KDT_ATTN_BM
#define KDT_ATTN_BM 64         /* folded rows per block: 64 or 32 */
#endif
#define KDT_ATTN_BN 16         /* tokens per KV tile */
#ifndef KDT_ATTN_NSTAGE
#define KDT_ATTN_NSTAGE 4      /* KV tiles in flight */
#endif
#define KDT_ATTN_THREADS (KDT_ATTN_BM * 4) /* one warp per 8 rows */
#define KDT_ATTN_ROW_BYTES 1168 /* one padded 576-wide bf16 row in smem */
/* Buffers of partial S, P and rescale factors.  1: two barriers a tile,
 * the KV prefetched two tiles ahead.  2 (BM = 32 only; BM = 64 has no room
 * under 99 KB): softmax(t-1) runs beside the MMAs of tiles t and t-2 with
 * one barrier a tile, but the prefetch is only one tile ahead.  Measured
 * on an H200 (tools/dev/ATTN_NOTES.md): BM 64/NBUF 1, 32/1 and 32/2 within
 * 5% of each other; 64/1 is the default because it halves the L2 re-reads
 * of the KV and keeps 8 warps an SM on sm_120, where one block fits. */
#ifndef KDT_ATTN_NBUF
#define KDT_ATTN_NBUF 1
#endif
/* ring (also the Q staging area) + partial-S slots + P + alpha + row sums
 * (one line: the source embedder does not keep backslash continuations) */
#define KDT_ATTN_SMEM (KDT_ATTN_NSTAGE * KDT_ATTN_BN * KDT_ATTN_ROW_BYTES + KDT_ATTN_NBUF * (4 * KDT_ATTN_BM * KDT_ATTN_BN * 4 + KDT_ATTN_BM * 48 + KDT_ATTN_BM * 4) + KDT_ATTN_BM * 4)
/* The sm_90a body (verify_attn_wgmma.cuh): Hopper's wgmma, two
 * warpgroups, the whole 64-row Q tile and two 64-token KV tiles resident
 * in shared memory: Q 73,728 + KV 2 x 73,728 + P 8,192 + alpha and l
 * 512 + 1,024 of alignment slack = 230,912 B, under Hopper's 232,448-byte
 * per-block limit.  KDT_ATTN_WGMMA is 1 exactly when NVRTC (or nvcc)
 * compiles device code for sm_90a; the host reads both geometries and
 * picks by the runtime's target. */
#ifndef KDT_ATTN_WGMMA
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KDT_ATTN_WGMMA 1
#else
#define KDT_ATTN_WGMMA 0
#endif
#endif
#define KDT_ATTN_WG_BM 64
#define KDT_ATTN_WG_BN 64
#define KDT_ATTN_WG_THREADS 256
#define KDT_ATTN_WG_SMEM (KDT_ATTN_WG_BM * KDT_ATTN_D_QK * 2 + 2 * KDT_ATTN_WG_BN * KDT_ATTN_D_QK * 2 + KDT_ATTN_WG_BM * KDT_ATTN_WG_BN * 2 + 2 * KDT_ATTN_WG_BM * 4 + 1024)
/* V's descriptor (MN-major, 128-byte swizzle): the leading offset steps
 * 64 V columns (one 64-column block of a KV tile), the stride offset 8
 * tokens. */
#define KDT_ATTN_WG_V_LBO (KDT_ATTN_WG_BN * 128)
#define KDT_ATTN_WG_V_SBO 1024
/* The merge kernel: a block per output row, a thread per 4 columns. */
#define KDT_ATTN_MERGE_THREADS 128
#define KDT_ATTN_MAX_SPLITS 64

#endif /* KDT_ATTN_TILES_H */
