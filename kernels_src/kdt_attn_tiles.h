/*
 * kdt_attn_tiles.h: what verify_attn's launcher and kernel must agree on:
 * the tile geometry (grid, block, workspace layout) and each body's
 * shared-memory plan.  Plain C, macros and structs of fixed-size arrays,
 * so that the C launcher (src/kernels/verify_attn.c) and the kernel
 * (verify_attn.cu and its two bodies, through NVRTC) compile the same
 * definitions: a body takes its shared-memory offsets and sizes from its
 * plan's members, and the launcher asks for the plan's size
 * (KDT_ATTN_MMA_SMEM(KV) for the mma.sync body, KDT_ATTN_WG_SMEM for the
 * wgmma one; the KDT_ATTN_ names without WG_ are the mma.sync body's).
 *
 * Alignment is C11's alignas (<stdalign.h>), C++'s keyword; offsets are
 * KDT_OFFSETOF (offsetof, or its NVRTC spelling), constants under both;
 * the layouts' rules are static_asserts that both compilers evaluate.
 * Every member is naturally aligned, as in kdt_params.h, so the host and
 * nvptx64 lay the structs out alike.
 */
#ifndef KDT_ATTN_TILES_H
#define KDT_ATTN_TILES_H

#include "kdt_params.h" /* the fixed-width types, under NVRTC too */

#ifndef __cplusplus
#include <assert.h>   /* static_assert */
#include <stdalign.h> /* alignas */
#endif
/* A member's byte offset, a constant expression under both compilers.
 * NVRTC has neither <stddef.h> nor __builtin_offsetof; its front end's
 * __INTADDR__ gives the same constant (NVRTC 12.0, 12.9, 13.0 and 13.2
 * checked). */
#ifdef __CUDACC_RTC__
#define KDT_OFFSETOF(type, member) ((int)__INTADDR__(&((type *)0)->member))
#else
#include <stddef.h>
#define KDT_OFFSETOF(type, member) ((int)offsetof(type, member))
#endif

#define KDT_ATTN_D_QK 576      /* 512 c_kv + 64 k_pe, fixed by the model */
#define KDT_ATTN_D_V 512

/*
 * The mma.sync body (verify_attn_mma.cuh: every target but sm_90a;
 * within sm_120's 99 KB a block):
 *  - BM = 64 folded rows (node * H + head) per block, 8 warps in two
 *    groups of 32 rows.  Q stays in registers (64 x 576 bf16 = 72
 *    registers a thread: a warp holds its group's 32 rows over a quarter
 *    of the dims), so Q never costs shared-memory bandwidth; the 64 x 512
 *    f32 output accumulator is 128 registers a thread (32 rows x 128
 *    columns a warp).
 *  - BN = 32 tokens per KV tile, NSTAGE = 2 stages (one tile computed, the
 *    next one landing), rows padded by 16 B so that the 8 row addresses
 *    of an ldmatrix hit 8 distinct bank groups.
 *  - A mailbox a warp (the S exchange, then P), and the row sums.
 */
#define KDT_ATTN_BM 64         /* folded rows per block */
#define KDT_ATTN_BN 32         /* tokens per KV tile */
#define KDT_ATTN_NSTAGE 2      /* KV tiles in the ring */
#define KDT_ATTN_THREADS 256   /* 8 warps */
#define KDT_ATTN_ROW_PAD 8     /* bf16 after a row's 576 in shared memory */

/* One KV (or Q) row in shared memory, and one KV tile of them. */
typedef uint16_t kdt_attn_mma_row[KDT_ATTN_D_QK + KDT_ATTN_ROW_PAD];
typedef kdt_attn_mma_row kdt_attn_mma_stage[KDT_ATTN_BN];

/* A warp's mailbox.  The three other warps of its group put their partial
 * S of its octet (8 rows) there, [source][half tile of 16 tokens][n8
 * tile][lane] as float2 (the accumulator's register pairs); once it has
 * added them it reuses the first bytes for its P, PV's B fragments
 * ([k16 step][lane] as uint2), and its rows' rescale factors. */
typedef union kdt_attn_mma_box {
    float part[3][KDT_ATTN_BN / 16][2][32][2];
    struct {
        uint32_t p[KDT_ATTN_BN / 16][32][2];
        float alpha[8];
    } pv;
} kdt_attn_mma_box;

typedef struct kdt_attn_mma_smem {
    /* The KV ring; the block's Q tile passes through it first, on its
     * way to the registers. */
    union {
        alignas(16) kdt_attn_mma_stage kv[KDT_ATTN_NSTAGE];
        alignas(16) kdt_attn_mma_row q[KDT_ATTN_BM];
    } ring;
    alignas(16) kdt_attn_mma_box box[KDT_ATTN_THREADS / 32];
    float l[KDT_ATTN_BM]; /* the row sums, for the epilogue */
} kdt_attn_mma_smem;

#define KDT_ATTN_SMEM ((int)sizeof(kdt_attn_mma_smem))

static_assert(sizeof(((kdt_attn_mma_smem *)0)->ring) ==
                  sizeof(((kdt_attn_mma_smem *)0)->ring.kv),
              "the Q tile is staged in the ring at no cost");
static_assert(KDT_ATTN_SMEM <= 99 * 1024,
              "sm_120 allows 99 KB of shared memory a block");

/*
 * The mma.sync body over an e4m3 cache (KV = e4m3, either arithmetic):
 * the same block, warps, mailboxes and 32-token tiles, its KV rows 576
 * bytes.  A tile is half a bf16 one, so the ring holds four and the loads
 * run three tiles ahead (more bytes in flight than the bf16 ring's one
 * tile ahead); the bf16 Q tile still passes through the ring, which is
 * about its size.  Rows are padded by 16 B: 592 = 4 x 128 + 80, so the 8
 * rows of an ldmatrix (8 consecutive tokens) fall on 8 distinct 16-byte
 * bank groups.
 */
#define KDT_ATTN_KV8_NSTAGE 4     /* e4m3 KV tiles in the ring */
#define KDT_ATTN_KV8_ROW_PAD 16   /* bytes after a row's 576 */

typedef uint8_t kdt_attn_mma_kv8_row[KDT_ATTN_D_QK + KDT_ATTN_KV8_ROW_PAD];
typedef kdt_attn_mma_kv8_row kdt_attn_mma_kv8_stage[KDT_ATTN_BN];

typedef struct kdt_attn_mma_kv8_smem {
    union {
        alignas(16) kdt_attn_mma_kv8_stage kv[KDT_ATTN_KV8_NSTAGE];
        alignas(16) kdt_attn_mma_row q[KDT_ATTN_BM];
    } ring;
    alignas(16) kdt_attn_mma_box box[KDT_ATTN_THREADS / 32];
    /* each row's max |q| while Q is converted, then the row sums */
    float l[KDT_ATTN_BM];
} kdt_attn_mma_kv8_smem;

#define KDT_ATTN_KV8_SMEM ((int)sizeof(kdt_attn_mma_kv8_smem))

/* The mma.sync body's plan for the cache type KV (kdtree_kv_dtype: 0
 * bf16, 1 e4m3): what the launcher asks for. */
#define KDT_ATTN_MMA_SMEM(kv) ((kv) == 1 ? KDT_ATTN_KV8_SMEM : KDT_ATTN_SMEM)

static_assert(KDT_ATTN_KV8_SMEM <= 99 * 1024,
              "sm_120 allows 99 KB of shared memory a block");

/*
 * The sm_90a body (verify_attn_wgmma.cuh): Hopper's wgmma, two
 * warpgroups, the whole 64-row Q tile and two 64-token KV tiles resident
 * in shared memory, under Hopper's 232,448-byte per-block limit with the
 * alignment slack.  KDT_ATTN_WGMMA is 1 exactly when NVRTC (or nvcc)
 * compiles device code for sm_90a; the host reads both geometries and
 * picks by the runtime's target.
 */
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
/* Over an e4m3 cache in bf16 arithmetic (KV 1, MATH 0) a third
 * warpgroup, the producer, fetches the tiles and widens them to f16 on
 * few registers (setmaxnreg), so that the two math warpgroups do only
 * math: the block has 384 threads there, 256 elsewhere.  The host and
 * the kernel both take the count from here. */
#define KDT_ATTN_WG_PRODUCER(kv, math) ((kv) == 1 && (math) == 0)
#define KDT_ATTN_WG_LAUNCH_THREADS(kv, math) \
    (KDT_ATTN_WG_THREADS + 128 * KDT_ATTN_WG_PRODUCER(kv, math))
/* wgmma's 128-byte swizzle is a pattern of 8 rows of 128 B: every operand
 * tile starts at a multiple of this from the plan's base, which the
 * kernel rounds up to it (the launch promises 16 bytes), so a block asks
 * for this much beyond its plan.  Not an alignas on the struct: that
 * would round the plan's size up too, by 512 bytes of tail. */
#define KDT_ATTN_WG_ALIGN 1024
/* Elements (f32 or bf16) a row of O staged by the epilogue spans: 512
 * and 8 more, so that a warp's 8 rows of stores hit distinct banks. */
#define KDT_ATTN_WG_O_LD (KDT_ATTN_D_V + 8)

/* One operand tile as wgmma reads it: 128-byte-swizzled K-major, its 576
 * columns in nine 64-column blocks, each [rows][64 bf16], the 16-byte
 * piece c of row r at piece c ^ (r % 8).  The same bytes of a KV tile
 * serve V as an MN-major operand (a token's V columns are its row's
 * first 512 entries). */
typedef uint16_t kdt_attn_wg_qtile[KDT_ATTN_D_QK / 64][KDT_ATTN_WG_BM][64];
typedef uint16_t kdt_attn_wg_kvtile[KDT_ATTN_D_QK / 64][KDT_ATTN_WG_BN][64];

/* The FP8 arithmetic (MATH = e4m3, mode b) on the same plan: wgmma's
 * e4m3 form reads a shared-memory operand K-major, 32 bytes a k step.  Q
 * and each KV tile are their e4m3 bytes (576 a row) in the
 * 128-byte-swizzled K-major layout, five 128-byte column blocks
 * [rows][128 B] of which the fifth holds k_pe's 64 bytes a row in its
 * first half (the other half is never written or read).  An e4m3 tile
 * sits at the start of a bf16 stage, which keeps its stride (the bf16 Q
 * tile is staged in the second before it is quantized); the rest of the
 * stage is spare. */
#define KDT_ATTN_WG8_KBLK 5
typedef uint8_t kdt_attn_wg8_tile[KDT_ATTN_WG8_KBLK][KDT_ATTN_WG_BN][128];

/* Under MATH = e4m3, where a page holds less than a tile (PAGE % BN !=
 * 0): the cache rows (page x PAGE + slot) of a tile's 64 tokens, read
 * from the block table once a token and staged for the warpgroup that
 * copies the tile, two tiles' at a time.  Token i's row is at i + 2 (i /
 * 32): a warp's 8-byte reads of tokens i and i + 32 then fall on other
 * banks. */
#define KDT_ATTN_WG8_ROWS_LD (KDT_ATTN_WG_BN + 4)
typedef int32_t kdt_attn_wg8_rows[2][KDT_ATTN_WG8_ROWS_LD];

/* A cluster's share of the merge: a block's normalised partial rows (f32)
 * and their log2-sum-exp, which the cluster's other blocks read. */
typedef struct kdt_attn_wg_merge {
    alignas(16) float o[KDT_ATTN_WG_BM][KDT_ATTN_WG_O_LD];
    float lse[KDT_ATTN_WG_BM];
} kdt_attn_wg_merge;

typedef struct kdt_attn_wg_smem {
    /* bf16 (f16 over an e4m3 cache), or e4m3 under MATH = e4m3 */
    union {
        alignas(16) kdt_attn_wg_qtile q16;
        alignas(16) kdt_attn_wg8_tile q8;
    } q;
    /* The two KV stages (under MATH = e4m3 an e4m3 tile at the start of
     * each); once the loop is done, the epilogue's staging of O: an
     * unsplit block's rows as bf16 (store_o), or its share of a cluster's
     * merge (cluster_merge). */
    union {
        alignas(16) kdt_attn_wg_kvtile kv[2];
        /* MATH = e4m3: the first stage's e4m3 tile, and in its spare
         * bytes the staged cache rows */
        struct {
            alignas(16) kdt_attn_wg8_tile tile;
            alignas(16) kdt_attn_wg8_rows rows;
        } e4m3;
        alignas(16) uint16_t o[KDT_ATTN_WG_BM][KDT_ATTN_WG_O_LD];
        kdt_attn_wg_merge merge;
    } stages;
    /* P (bf16, or f16 over an e4m3 cache; 64 tokens: one swizzled
     * 64-column block; under MATH = e4m3, e4m3 bytes [64][64 B] under
     * the 64-byte swizzle), each row's rescale factor, the
     * row sums for the epilogue, and, over an e4m3 cache, what each
     * row's logits are multiplied by to undo its Q row's scaling (the
     * power of two of f16 Q; max |q| / 448 of e4m3 Q) */
    union {
        alignas(16) uint16_t p16[KDT_ATTN_WG_BM][KDT_ATTN_WG_BN];
        struct {
            alignas(16) uint8_t p[KDT_ATTN_WG_BM][KDT_ATTN_WG_BN];
        } e4m3;
    } p;
    float alpha[KDT_ATTN_WG_BM];
    float l[KDT_ATTN_WG_BM];
    float q_unscale[KDT_ATTN_WG_BM];
} kdt_attn_wg_smem;

#define KDT_ATTN_WG_SMEM ((int)sizeof(kdt_attn_wg_smem) + KDT_ATTN_WG_ALIGN)

static_assert(sizeof(((kdt_attn_wg_smem *)0)->stages) ==
                  sizeof(((kdt_attn_wg_smem *)0)->stages.kv) &&
                  sizeof(kdt_attn_wg8_tile) <= sizeof(kdt_attn_wg_kvtile),
              "the epilogue's O is staged in the KV stages at no cost, "
              "and an e4m3 tile fits in a bf16 stage");
static_assert(sizeof(((kdt_attn_wg_smem *)0)->stages.e4m3) <=
                  sizeof(kdt_attn_wg_kvtile),
              "the staged rows lie in the first stage's spare bytes");
static_assert(sizeof(((kdt_attn_wg_smem *)0)->q) == sizeof(kdt_attn_wg_qtile)
                  && sizeof(((kdt_attn_wg_smem *)0)->p) ==
                  sizeof(((kdt_attn_wg_smem *)0)->p.p16),
              "the e4m3 Q tile and P take no room of their own");
static_assert(sizeof(kdt_attn_wg_qtile) % KDT_ATTN_WG_ALIGN == 0 &&
                  sizeof(kdt_attn_wg_kvtile) % KDT_ATTN_WG_ALIGN == 0,
              "swizzled tiles are whole 1024-byte patterns");
static_assert(KDT_ATTN_WG_SMEM <= 232448,
              "Hopper allows 227 KB of shared memory a block");
static_assert(KDT_OFFSETOF(kdt_attn_wg_smem, stages) % KDT_ATTN_WG_ALIGN == 0,
              "the KV stages start on a swizzle pattern");
static_assert(KDT_OFFSETOF(kdt_attn_wg_smem, p) % KDT_ATTN_WG_ALIGN == 0,
              "P starts on a swizzle pattern");

/* V's descriptor (MN-major, 128-byte swizzle): the leading offset steps
 * 64 V columns (one 64-column block of a KV tile), the stride offset 8
 * tokens. */
#define KDT_ATTN_WG_V_LBO (KDT_ATTN_WG_BN * 128)
#define KDT_ATTN_WG_V_SBO 1024
/* The merge kernel: a block per output row, a thread per 4 columns. */
#define KDT_ATTN_MERGE_THREADS 128
#define KDT_ATTN_MAX_SPLITS 64

#endif /* KDT_ATTN_TILES_H */
