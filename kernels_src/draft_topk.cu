// draft_topk.cu: docs/contract.md §1.  Per row of logits: the K largest
// (descending, ties to the lower token id, NaN as -inf) and their
// log-probabilities logit - logsumexp(row).
//
// Blocks of 512 threads; a row is split over a thread-block cluster of S
// blocks (S = 1, 2, 4 or 8, chosen by the host at launch: enough blocks to
// fill the GPU when there are few rows, one block per row when there are
// many).  Block `rank` of the cluster takes the rank-th chunk of the row,
// finds the chunk's K largest (sorted) and its (max, sum of exp(x - max)),
// and the blocks merge through distributed shared memory (below).  No
// workspace, one launch.
//
// Keys.  A logit x (NaN -> -inf, -0 -> +0) has the order-preserving key
// vkey(x) (32 bits; a bf16 logit only uses the top 16).  Its candidate key
// is c = (value bits << IB) | (V-1-id): unique per element, and c order is
// exactly "larger logit first, then lower id".  The top 12 bits of c (the
// top 12 of vkey: sign, exponent, 3 mantissa bits) are its "digit".
//
// Pass 1 (the only DRAM read).  Each thread streams its 8-logit slots
// (16-byte loads, PREFETCH slots in flight).  The common slot costs about
// five instructions a logit: the slot's maximum (packed bf16x2 max, NaN
// propagating), two compares, and per logit the exp-sum (unpack, FFMA,
// MUFU.EX2, FADD) against the thread's reference (a lazy maximum: see
// LAZY).  Two rare paths:
//  - the slot's maximum is over the reference's limit, or is NaN: the
//    slot is sanitised (NaN -> -inf) and folded, moving the reference;
//  - the slot's maximum reaches the block's threshold `thr` (the smallest
//    logit of digit `lb`): its logits of digit >= lb are counted in a
//    shared 4096-bin digit histogram and their keys appended to a shared
//    buffer, by the lanes that hold them (two shared atomics a key).
// lb is raised as the histogram fills: every RESCAN steps a warp that
// finds at least KC/8 keys appended since the last raise began scans the
// histogram down from the top digit and sets lb to the highest bin b with
// at least KC counted logits at digits >= b (KC = min(K, chunk length)).
// That is always a valid lower bound for the KC-th largest digit (counts
// only grow; a stale read only undercounts), and every logit of digit >=
// the final lb has been counted and appended, because lb never exceeded the
// final value.  The first slot of every thread seeds lb: the KC-th largest
// slot maximum is at most the KC-th largest logit, so a histogram of the
// 512 slot maxima gives a valid lb before anything is appended.
//
// Slot mode (SLOTS: bf16 and K <= 64, the drafter's case).  A candidate
// slot is appended whole (its 16 bytes and its first id, SCAP = 1536
// slots in the candidate buffer) and counted once, at the digit of its
// maximum: ~40 instructions a warp for a candidate step against ~120 for
// appending keys one by one.  The histogram then counts slots, and the
// same argument holds: KC slots whose maxima have digit >= b hold KC
// distinct logits of digit >= b, and a slot holding a logit of digit >=
// the final lb has a maximum that passed every thr, so it was staged.
// After pass 1, each thread takes its staged slots into registers.  The
// final lb is usually the threshold digit itself (the KC-th largest slot
// maximum's digit is the KC-th largest logit's, unless a slot holds two
// of the top), so the staged logits of digit >= lb, at least KC of them
// and all of the chunk's, are the candidates: no exact count.  Only when
// they overflow the buffer (flat rows) are the bins [lb, maxd] recounted
// exactly from the staged slots' logits (or, when more than SCAP slots
// were staged, from the chunk read again), and the selection below goes
// on as in key mode.
//
// Then: the exact histogram at digits >= lb gives the threshold digit tb
// (A logits above it, E in it, A < KC <= A + E).  If the buffer did not
// overflow, its keys (or staged logits) of digit >= tb (A + E of them) are
// the candidates.
// Otherwise (ties or flat rows) the chunk is read again (L2): while A + E
// exceeds the buffer, a histogram pass narrows the threshold by the next
// 12 bits of c (value bits, then id bits), and a last pass collects the
// keys >= the threshold.  When the candidates are many (> 256 and > 2
// KC: a coarse bin, or a long chunk), the exact histogram of their digits
// gives tb (in slot mode) and the E keys of digit tb are narrowed by
// their next 8 bits (a 256-bin histogram in shared memory), leaving ~KC
// keys.  The <= CAP candidates are sorted, descending: up to 256 by rank
// (each key's place is the number of keys above it, counted by a few
// threads a key), more by a bitonic sort.  The first KC are the chunk's
// top.
//
// Merge (S > 1).  Each block publishes its top (K keys, zero-padded; 0 is
// below every real key) and its (max, sum) in its shared memory; after a
// cluster barrier every block copies the S lists into its own buffer
// (S * K <= CAP: kdt_dt_split's rule, kdt_draft_topk_plan.h) and ranks
// its own keys: the global rank of key c is its index in its list plus,
// for every other list, the number of keys above c (binary search; keys
// are unique).  Keys of rank < K are written by the block that owns
// them, so every output is written once.  Every block computes the row's
// logsumexp from the same S pairs in the same order, so all write the
// same value.  A second cluster barrier keeps every block's shared
// memory alive until the others have read it.
//
// Slots past the chunk's end read as -inf (no per-logit validity test).
//
// Cost (SASS, sm_90, V = 163840, K = 64, bf16): the common step is 73
// instructions a warp for 8 logits a lane (26 of them the exp-sum), a
// candidate step ~40 more in slot mode; MUFU (16 exp/clk/SM) is not the
// bound.  R = 1 (15 rows, S = 8: 120 blocks) is latency-bound (prologue,
// barriers, merge); R = 64 (960 rows, S = 1: 3.6 waves of 264 blocks)
// is issue-bound at 2 blocks an SM.  K = 1024 usually overflows the
// buffer (~7k keys pass lb) and pays one more read of the chunk (from L2)
// and a 2048-key sort.
#include "kdt_draft_topk_plan.h"
#include "kdt_limits.h"
#include "kdt_math.cuh"
#include "kdt_params.h"

#ifndef KDT_V
#error "draft_topk needs -DKDT_V"
#endif
#ifndef KDT_K
#error "draft_topk needs -DKDT_K"
#endif
#ifndef KDT_DTYPE
#error "draft_topk needs -DKDT_DTYPE (0 = f32, 1 = bf16)"
#endif

constexpr int V = KDT_V;          // vocabulary (row length)
constexpr int K = KDT_K;          // kept per row
constexpr int DTYPE = KDT_DTYPE;  // 0 f32, 1 bf16
constexpr int ESZ = DTYPE ? 2 : 4;            // bytes per logit
constexpr int THREADS = KDT_DT_THREADS;
constexpr int WARPS = THREADS / 32;
constexpr int PER = 8;                        // logits per slot
constexpr int CHUNKS = PER * ESZ / 16;        // 16-byte loads per slot
// Slots in flight per thread: 48 KB (bf16) / 64 KB (f32) per block; 8
// bf16 slots spill at the 64 registers that two blocks per SM allow.
constexpr int PREFETCH = DTYPE ? 6 : 4;
constexpr int DBITS = KDT_DT_DIGIT_BITS;      // digit width
constexpr int NBINS = 1 << DBITS;
constexpr int CAP = KDT_DT_CAP;               // candidate buffer (power of 2)
constexpr int PT = CAP / THREADS;             // buffer entries per thread
constexpr int RESCAN = 4;                     // a warp raises lb every 4th step
// Slot mode (bf16, K <= 64): pass 1 appends whole candidate slots, not
// keys (see the top of the file); SCAP slots of 16 bytes and their
// metadata fill the candidate buffer, SPT per thread at the selection.
constexpr bool SLOTS = DTYPE == 1 && K <= 64;
constexpr int SCAP = 1536;
constexpr int SPT = SCAP / THREADS;
// Candidates sorted by rank (n^2 compares over the block) up to this many;
// a bitonic sort above.
constexpr int RANK_SORT_MAX = 256;
static_assert(RANK_SORT_MAX <= THREADS, "a thread (at least) a key");

__host__ __device__ constexpr int bits_for(int x) { int b = 0; while ((1LL << b) <= x) b++; return b; }
constexpr int VB = DTYPE ? 16 : 32;           // value bits of a key
constexpr int IB = bits_for(V - 1);           // id bits (V-1-id)
constexpr int W = VB + IB;                    // candidate key width
constexpr int DSHIFT = W - DBITS;             // digit = c >> DSHIFT
constexpr int RB = DSHIFT < 8 ? DSHIFT : 8;   // bits of the narrowing below tb

static_assert(K >= 1 && K <= KDT_LIMIT_K && K <= V, "1 <= K <= min(V, K's limit)");
static_assert(V <= KDT_LIMIT_V, "ids fit 24 bits (slot mode's metadata)");
static_assert(K <= CAP && W <= 64, "candidate buffer and key width");

typedef unsigned long long u64;

// A hook for the development tools, empty in the library: phase marks for
// tools/dev/dt_phases.cu (thread 0 of each block records the time at each
// numbered point).
#ifndef KDT_DT_PHASE
#define KDT_DT_PHASE(i) ((void)0)
#endif

struct topk_smem {
    u64 buf[CAP];          // candidate keys; at the merge, every block's top
    unsigned hist[NBINS];  // digit histogram; after selection, this block's
                           // top K keys (u64, K <= 1024: 8 KB of its 16)
    int cnt;               // appends to buf (may exceed CAP: overflow)
    int lb;                // lower bound on the KC-th largest digit
    float thr;             // a logit below it has digit < lb (see thr_of)
    int maxd;              // >= every counted digit
    int nlb, kept, kept2;  // compaction counters
    int rdone;             // cnt when the last lb raise began
    int sel[4];            // threshold search result: bin, above, at
    float red_m[WARPS], red_s[WARPS];
    float part_m, part_s;  // this block's chunk: max, sum of exp(x - max)
};
// The dynamic shared memory the launcher gives a block.
constexpr int SMEM_BYTES = KDT_DT_SMEM;
static_assert(sizeof(topk_smem) <= SMEM_BYTES, "the plan holds topk_smem");
static_assert(K * 8 <= NBINS * 4, "the top K keys fit in the histogram");
static_assert(SCAP * 20 <= CAP * 8 && SCAP % THREADS == 0,
              "slot mode: the staged slots and their metadata fill buf");
// The most blocks the launcher's split (kdt_dt_split) gives a row of this
// shape, on any device: their tops fit buf at the merge, and every chunk
// holds a logit.
constexpr int S_MOST = (int)kdt_dt_split(KDT_DT_MAX_SPLIT, 1ll << 40, 1, V, K);
static_assert(S_MOST * K <= CAP &&
                  (S_MOST - 1) * ((((V + S_MOST - 1) / S_MOST) + 7) & ~7) < V,
              "the split keeps S * K <= CAP and no chunk empty");

#include "draft_topk_keys.cuh"
#include "draft_topk_pass1.cuh"
#include "draft_topk_select.cuh"
#include "draft_topk_merge.cuh"

// The phases in order (see the top of the file); KDT_DT_PHASE(i) marks
// the points tools/dev/dt_phases.cu times.  How the phases take their
// arguments keeps sm_90a's code what it was when this was one function:
// the thread's tid, lane and warp come from here (read again from
// threadIdx, seed_step alone costs 45 instructions and a spilled
// register), and the chunk's layout by value (start_pass1 takes its slot
// count apart).
extern "C" __global__ void __launch_bounds__(THREADS, 2)
kdt_draft_topk(kdt_draft_topk_params p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    topk_smem &sm = *reinterpret_cast<topk_smem *>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned S = cluster_size() ? cluster_size() : 1u;
    const unsigned rank = S > 1 ? cluster_rank() : 0u;
    const int lg_s = __ffs((int)S) - 1; // S is a power of two
    const int r = (int)(blockIdx.x >> lg_s);
    KDT_DT_PHASE(0);

    // Pass 1: the chunk streamed once.
    row_layout L;
    chunk_layout(L, p.logits, r, rank, S, lg_s);
    const int kc = kdt_imin(K, L.n); // this chunk's top: KC keys
    uint4 first[CHUNKS];
    uint4 ring[PREFETCH][CHUNKS];
    start_pass1(sm, L, L.nslots, first, ring, tid);
    KDT_DT_PHASE(1);
    row_state st = {kdt_neg_inf(), 0.0f, __int_as_float(0x7fffffff)};
    seed_step(sm, st, L, first, kc, tid, lane, warp);
    KDT_DT_PHASE(2);
    stream_steps(sm, st, L, ring, kc, tid, lane, warp);
    KDT_DT_PHASE(3);
    edge_step(sm, st, L);
    warp_exp_sum(sm, st, lane, warp);
    __syncthreads();
    KDT_DT_PHASE(4);
    chunk_exp_sum(sm, lane, warp);

    // The selection: the chunk's KC largest keys, sorted, in buf.
    staged_slots sl;
    load_staged(sm, sl, tid);
    candidates c = {0, -1, false};
    take_staged_at_lb(sm, sl, kc, c, tid);
    KDT_DT_PHASE(5);
    if (c.from < 0) // block-uniform
        exact_threshold_digit(sm, sl, L, kc, tid);
    KDT_DT_PHASE(6);
    collect_candidates(sm, sl, L, kc, c, tid);
    KDT_DT_PHASE(7);
    narrow_candidates(sm, kc, c, tid);
    KDT_DT_PHASE(8);
    sort_candidates(sm, c.n, tid, lane, warp);
    KDT_DT_PHASE(9);

    // The output: the block's top is the row's, or the cluster's S tops
    // are merged.
    if (S == 1) {
        write_row_top(p, sm, r, tid);
        KDT_DT_PHASE(14);
        return;
    }
    merge_cluster_tops(p, sm, r, rank, S, lg_s, kc, tid, lane, warp);
    KDT_DT_PHASE(14);
}
