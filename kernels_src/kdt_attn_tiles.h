/*
 * kdt_attn_tiles.h: the tile geometry of verify_attn that the host must
 * agree on (grid, block, dynamic shared memory, workspace layout).  Plain
 * macros so that both the C launcher (src/kernels/verify_attn.c) and the
 * kernel (verify_attn.cu, through NVRTC) read the same numbers; each body
 * static_asserts its layout against them.
 *
 * The mma.sync body (every target but sm_90a; within sm_120's 99 KB a
 * block):
 *  - BM = 64 folded rows (node * H + head) per block, 8 warps in two
 *    groups of 32 rows.  Q stays in registers (64 x 576 bf16 = 72
 *    registers a thread: a warp holds its group's 32 rows over a quarter
 *    of the dims), so Q never costs shared-memory bandwidth; the 64 x 512
 *    f32 output accumulator is 128 registers a thread (32 rows x 128
 *    columns a warp).
 *  - BN = 32 tokens per KV tile, NSTAGE = 2 stages (one tile computed, the
 *    next one landing): 2 x 32 rows x 1168 B (576 bf16 + 16 B of padding so
 *    that the 8 row addresses of an ldmatrix hit 8 distinct bank groups).
 *  - A mailbox a warp (BOX = 3 partial S of 32 lanes x 2 halves x 16 B,
 *    later its P and rescale factors), and the row sums: 99,584 B in all.
 */
#ifndef KDT_ATTN_TILES_H
#define KDT_ATTN_TILES_H

#define KDT_ATTN_D_QK 576      /* 512 c_kv + 64 k_pe, fixed by the model */
#define KDT_ATTN_D_V 512
#define KDT_ATTN_BM 64         /* folded rows per block */
#define KDT_ATTN_BN 32         /* tokens per KV tile */
#define KDT_ATTN_NSTAGE 2      /* KV tiles in the ring */
#define KDT_ATTN_THREADS 256   /* 8 warps */
#define KDT_ATTN_ROW_BYTES 1168 /* one padded 576-wide bf16 row in smem */
#define KDT_ATTN_BOX 3072      /* a warp's mailbox */
/* ring + 8 mailboxes + row sums (one line: the source embedder does not
 * keep backslash continuations) */
#define KDT_ATTN_SMEM (KDT_ATTN_NSTAGE * KDT_ATTN_BN * KDT_ATTN_ROW_BYTES + 8 * KDT_ATTN_BOX + KDT_ATTN_BM * 4)
/* The sm_90a body (verify_attn_wgmma.cuh): Hopper's wgmma, two
 * warpgroups, the whole 64-row Q tile and two 64-token KV tiles resident
 * in shared memory: Q 73,728 + KV 2 x 73,728 + P 8,192 + alpha and l
 * 512 + 1,024 of alignment slack = 230,912 B, under Hopper's 232,448-byte
 * per-block limit.  KDT_ATTN_WGMMA is 1 exactly when NVRTC (or nvcc)
 * compiles device code for sm_90a; the host reads both geometries and
 * picks by the runtime's target. */
#ifndef KDT_ATTN_WGMMA /* given only by nvcc harnesses: their host pass
                        * sees no target feature macro */
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
