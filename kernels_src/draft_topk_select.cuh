// draft_topk_select.cuh: the selection of draft_topk: from the keys (or
// staged slots) pass 1 left to the chunk's KC largest, sorted, in buf,
// phase by phase.  A part of draft_topk.cu, included after
// draft_topk_pass1.cuh (not a header of its own).

// Compare-exchange pair i of a bitonic step (distance j, block size k,
// both powers of two): descending where the block's k bit is 0.
__device__ __forceinline__ void
bitonic_step(u64 *buf, int i, int j, int k)
{
    const int lo = ((i & ~(j - 1)) << 1) | (i & (j - 1)), hi = lo + j;
    const u64 a = buf[lo], b = buf[hi];
    const bool desc = (lo & k) == 0;
    if (desc ? (a < b) : (a > b)) {
        buf[lo] = b;
        buf[hi] = a;
    }
}

// The RB bits of key c below its digit.
__device__ __forceinline__ int
sub_digit(u64 c)
{
    return (int)(c >> (DSHIFT - RB)) & ((1 << RB) - 1);
}

// Slot mode: the staged slots a thread holds after pass 1 (slot tid +
// THREADS k in w[k], its first id and valid bits in meta[k]: id0 | valid
// << 24, 0 when there is none) and how many were staged in all (n; more
// than SCAP: the buffer overflowed and w, meta are not loaded).
struct staged_slots {
    uint4 w[SLOTS ? SPT : 1];
    int meta[SLOTS ? SPT : 1];
    int n;
};

// Slot mode: each thread takes its staged slots into registers (few are
// staged, ~KC ln(steps): whole warps past them skip the work).
__device__ __forceinline__ void
load_staged(const topk_smem &sm, staged_slots &sl, int tid)
{
    sl.n = sm.cnt;
    if (SLOTS && sl.n <= SCAP) {
        const uint4 *slots = reinterpret_cast<const uint4 *>(sm.buf);
        const int *meta = reinterpret_cast<const int *>(slots + SCAP);
#pragma unroll
        for (int k = 0; k < SPT; k++) {
            const int e = tid + THREADS * k;
            sl.meta[k] = 0; // no valid logit
            if (e < sl.n) {
                sl.w[k] = slots[e];
                sl.meta[k] = meta[e];
            }
        }
    }
}

// This thread's staged logits of digit >= d, a bit each; their count.
// The whole warp must call it.
__device__ __forceinline__ int
slot_bits(const staged_slots &sl, int d, unsigned *bits, int tid)
{
    int c = 0;
#pragma unroll
    for (int k = 0; k < SPT; k++) {
        bits[k] = 0;
        if (__any_sync(0xffffffffu, tid + THREADS * k < sl.n)) {
#pragma unroll
            for (int i = 0; i < PER; i++)
                if (((sl.meta[k] >> (24 + i)) & 1) && digit(slot_logit(sl.w[k], i)) >= d)
                    bits[k] |= 1u << i;
            c += __popc(bits[k]);
        }
    }
    return c;
}

// Those logits as keys, from buf[at] on.
__device__ __forceinline__ void
slot_write(topk_smem &sm, const staged_slots &sl, const unsigned *bits, int at)
{
#pragma unroll
    for (int k = 0; k < SPT; k++)
        if (bits[k])
#pragma unroll
            for (int i = 0; i < PER; i++)
                if ((bits[k] >> i) & 1)
                    sm.buf[at++] = ckey(slot_logit(sl.w[k], i), (sl.meta[k] & 0xffffff) + i);
}

// The candidates as the selection narrows them: buf[0..n) holds them, the
// chunk's KC largest among them.
struct candidates {
    int n;
    int from;  // buf holds exactly the chunk's keys of digit >= from (-1: not yet)
    bool fast; // from = lb, taken without the exact histogram
};

// ---- the phases of the selection ---------------------------------------

// Slot mode, the common case: every logit of digit >= lb is in a staged
// slot, and lb is usually the threshold digit itself (the KC-th largest
// slot maximum's digit), so the staged logits of digit >= lb are the
// candidates, with no exact recount: ~KC of them.  Leaves c.from < 0 when
// they do not fit buf.
__device__ __forceinline__ void
take_staged_at_lb(topk_smem &sm, const staged_slots &sl, int kc,
                  candidates &c, int tid)
{
    if (SLOTS && sl.n <= SCAP && kc > 0) {
        const int lb = sm.lb;
        unsigned bits[SPT];
        const int at = warp_append(slot_bits(sl, lb, bits, tid), &sm.nlb);
        __syncthreads(); // every slot is in registers; nlb is final
        c.n = sm.nlb;
        if (c.n <= CAP) { // block-uniform
            slot_write(sm, sl, bits, at);
            c.from = lb;
            c.fast = true;
        }
    }
}

// The threshold digit tb from the exact histogram at digits >= lb, into
// sel (tb, A keys above it, E in it).  In slot mode the histogram counted
// slots: the staged slots' logits of digit >= lb are counted instead, or
// the chunk's, from L2, when more slots were staged than the buffer holds.
__device__ __forceinline__ void
exact_threshold_digit(topk_smem &sm, const staged_slots &sl,
                      row_layout L, int kc, int tid)
{
    if (SLOTS) {
        const int lb = sm.lb, top = sm.maxd;
        for (int i = lb + tid; i <= top; i += THREADS)
            sm.hist[i] = 0;
        __syncthreads();
        if (sl.n <= SCAP) {
#pragma unroll
            for (int k = 0; k < SPT; k++)
                if (tid + THREADS * k < sl.n)
#pragma unroll
                    for (int i = 0; i < PER; i++)
                        if ((sl.meta[k] >> (24 + i)) & 1) {
                            const int d = digit(slot_logit(sl.w[k], i));
                            if (d >= lb)
                                atomicAdd(&sm.hist[d], 1u);
                        }
        } else {
            for_row(L, [&](const float *x, int id0, unsigned valid) {
#pragma unroll
                for (int i = 0; i < PER; i++)
                    if (((valid >> i) & 1u) && digit(x[i]) >= lb)
                        atomicAdd(&sm.hist[digit(x[i])], 1u);
            });
        }
        __syncthreads();
    }
    // tb is exact: every logit of digit >= lb (and tb >= lb) was
    // counted.
    select_bin(sm, sm.maxd, sm.lb, (unsigned)kc);
    __syncthreads();
}

// Key mode, no overflow: keep the buffered keys of digit >= tb (A + E of
// them).
__device__ __forceinline__ void
keep_buffered_at_tb(topk_smem &sm, candidates &c, int tid)
{
    const int tb = sm.sel[0], cnt = sm.cnt;
    c.n = sm.sel[1] + sm.sel[2];
    c.from = tb;
    u64 v[PT];
#pragma unroll
    for (int e = 0; e < PT; e++) {
        const int i = tid + THREADS * e;
        v[e] = i < cnt ? sm.buf[i] : 0ull;
    }
    __syncthreads();
    int n = 0;
#pragma unroll
    for (int e = 0; e < PT; e++)
        n += tid + THREADS * e < cnt && (int)(v[e] >> DSHIFT) >= tb;
    int at = warp_append(n, &sm.kept);
#pragma unroll
    for (int e = 0; e < PT; e++)
        if (tid + THREADS * e < cnt && (int)(v[e] >> DSHIFT) >= tb)
            sm.buf[at++] = v[e];
}

// Overflow (ties or flat rows): narrow the threshold over the chunk, read
// again (12 bits of c per pass), until at most CAP keys reach it, then
// collect them.
__device__ __forceinline__ void
collect_from_chunk(topk_smem &sm, row_layout L, int kc, candidates &c,
                   int tid)
{
    int bits = DBITS;                 // resolved top bits of c
    u64 prefix = (u64)sm.sel[0];      // their value
    int need = kc - sm.sel[1];        // still needed among the prefix
    c.n = kc - need + sm.sel[2];      // keys with top bits >= prefix
    while (c.n > CAP) {
        const int d = W - bits < DBITS ? W - bits : DBITS;
        const int hi = W - bits, lo = hi - d;
        __syncthreads(); // hist and sel are rewritten
        for (int i = tid; i < NBINS; i += THREADS)
            sm.hist[i] = 0;
        __syncthreads();
        for_row(L, [&](const float *x, int id0, unsigned valid) {
#pragma unroll
            for (int i = 0; i < PER; i++)
                if ((valid >> i) & 1u) {
                    const u64 key = ckey(x[i], id0 + i);
                    if ((key >> hi) == prefix)
                        atomicAdd(&sm.hist[(int)(key >> lo) & ((1 << d) - 1)], 1u);
                }
        });
        __syncthreads();
        select_bin(sm, (1 << d) - 1, 0, (unsigned)need);
        __syncthreads();
        prefix = (prefix << d) | (u64)sm.sel[0];
        bits += d;
        need -= sm.sel[1];
        c.n = kc - need + sm.sel[2];
    }
    const u64 thr = prefix << (W - bits);
    for_row(L, [&](const float *x, int id0, unsigned valid) {
        unsigned m = 0;
#pragma unroll
        for (int i = 0; i < PER; i++)
            if (((valid >> i) & 1u) && ckey(x[i], id0 + i) >= thr)
                m |= 1u << i;
        if (__any_sync(0xffffffffu, m != 0u)) {
            int at = warp_append(__popc(m), &sm.kept);
#pragma unroll
            for (int i = 0; i < PER; i++)
                if ((m >> i) & 1u)
                    sm.buf[at++] = ckey(x[i], id0 + i);
        }
    });
}

// The candidates at the exact threshold digit tb, unless take_staged_at_lb
// found them already (or kc = 0: none): the staged logits or the buffered
// keys of digit >= tb when they fit, else the chunk read again.
__device__ __forceinline__ void
collect_candidates(topk_smem &sm, const staged_slots &sl, row_layout L,
                   int kc, candidates &c, int tid)
{
    if (c.from >= 0 || kc == 0) {
        // done above (kc = 0: no candidates)
    } else if (SLOTS && sl.n <= SCAP && sm.sel[1] + sm.sel[2] <= CAP) {
        // Keep the staged logits of digit >= tb (A + E of them) as keys.
        unsigned bits[SPT];
        const int at = warp_append(slot_bits(sl, sm.sel[0], bits, tid), &sm.kept);
        slot_write(sm, sl, bits, at);
        c.n = sm.sel[1] + sm.sel[2];
        c.from = sm.sel[0];
    } else if (!SLOTS && sm.cnt <= CAP) {
        keep_buffered_at_tb(sm, c, tid);
    } else {
        collect_from_chunk(sm, L, kc, c, tid);
    }
}

// Too many candidates for the rank sort, and more than twice KC (a coarse
// bin, or a long chunk): narrow them in shared memory, no re-read.  tb and
// A (the keys above tb) come from the keys' digit histogram when buf holds
// the digits >= lb; then the E keys of digit tb are narrowed by their next
// RB bits (an RB-bit histogram), leaving ~KC keys to sort.
__device__ __forceinline__ void
narrow_candidates(topk_smem &sm, int kc, candidates &c, int tid)
{
    const int n = c.n;
    if (RB > 0 && c.from >= 0 && n > RANK_SORT_MAX && n > 2 * kc) { // uniform
        __syncthreads(); // the compaction's keys are in buf
        u64 v[PT];
#pragma unroll
        for (int e = 0; e < PT; e++) {
            const int i = tid + THREADS * e;
            v[e] = i < n ? sm.buf[i] : 0ull;
        }
        if (c.fast) {
            // tb and A of the keys in buf.
            const int top = sm.maxd;
            for (int i = c.from + tid; i <= top; i += THREADS)
                sm.hist[i] = 0;
            __syncthreads();
#pragma unroll
            for (int e = 0; e < PT; e++)
                if (tid + THREADS * e < n)
                    atomicAdd(&sm.hist[(int)(v[e] >> DSHIFT)], 1u);
            __syncthreads();
            select_bin(sm, top, c.from, (unsigned)kc);
        }
        __syncthreads(); // sel is final; the digit histogram is read
        const int tb = sm.sel[0], A = sm.sel[1];
        for (int i = tid; i < (1 << RB); i += THREADS)
            sm.hist[i] = 0;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < PT; e++)
            if (tid + THREADS * e < n && (int)(v[e] >> DSHIFT) == tb)
                atomicAdd(&sm.hist[sub_digit(v[e])], 1u);
        __syncthreads();
        select_bin(sm, (1 << RB) - 1, 0, (unsigned)(kc - A));
        __syncthreads();
        const int b2 = sm.sel[0];
        const int n2 = A + sm.sel[1] + sm.sel[2];
        int m = 0;
#pragma unroll
        for (int e = 0; e < PT; e++) {
            const int d = (int)(v[e] >> DSHIFT);
            m += tid + THREADS * e < n && (d > tb || (d == tb && sub_digit(v[e]) >= b2));
        }
        int at = warp_append(m, &sm.kept2);
#pragma unroll
        for (int e = 0; e < PT; e++) {
            const int d = (int)(v[e] >> DSHIFT);
            if (tid + THREADS * e < n && (d > tb || (d == tb && sub_digit(v[e]) >= b2)))
                sm.buf[at++] = v[e];
        }
        c.n = n2;
    }
}

// Few candidates (the drafter's case), sorted by rank: each key's place
// is the number of keys above it (keys are unique), G threads a key; a
// handful of loads and compares a thread and two barriers, against
// ~log2(n)^2/2 dependent steps of a bitonic sort run by the few warps
// that n keys give work.
__device__ __forceinline__ void
rank_sort(topk_smem &sm, int n, int tid)
{
    int g = 1;
    while (g < 32 && g * 2 * n <= THREADS)
        g <<= 1;
    const int i = tid / g, sub = tid & (g - 1); // n <= THREADS / g
    u64 key = 0;
    int above = 0;
    if (i < n) {
        key = sm.buf[i];
#pragma unroll 4
        for (int j = sub; j < n; j += g)
            above += sm.buf[j] > key;
    }
    for (int o = 1; o < g; o <<= 1) // the g lanes of a key: one warp
        above += __shfl_xor_sync(0xffffffffu, above, o);
    __syncthreads();
    if (i < n && sub == 0)
        sm.buf[above] = key;
    __syncthreads();
}

// Many candidates: a bitonic sort, padded with 0 (below every key: the
// smallest real one, -inf at id V-1, is 0x007f... << IB).  A step of
// distance j >= 64 touches the whole buffer (block barrier); the steps of
// distance <= 32 that follow stay inside 64-key segments, one per warp
// (pairs i..i+31 of a 32-aligned run), so they need only __syncwarp: a
// sort of P keys has about log2(P)^2/2 steps but only ~log2(P/64)^2/2
// block barriers.  Up to k = 64 every step stays in its warp's segment,
// so the block barrier comes only before a step of distance >= 64 and at
// the end.
__device__ __forceinline__ void
bitonic_sort(topk_smem &sm, int n, int tid, int lane, int warp)
{
    int P = 1;
    while (P < n)
        P <<= 1;
    for (int i = n + tid; i < P; i += THREADS)
        sm.buf[i] = 0ull;
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1) {
        int j = k >> 1;
        for (; j >= 64; j >>= 1) {
            for (int i = tid; i < P / 2; i += THREADS)
                bitonic_step(sm.buf, i, j, k);
            __syncthreads();
        }
        for (int base = warp * 32; base < P / 2; base += THREADS) {
            const int i = base + lane;
            for (int jj = j; jj > 0; jj >>= 1) {
                if (i < P / 2)
                    bitonic_step(sm.buf, i, jj, k);
                __syncwarp();
            }
        }
        if (k >= 64 || k == P)
            __syncthreads();
    }
}

// buf[0..n) sorted, descending.
__device__ __forceinline__ void
sort_candidates(topk_smem &sm, int n, int tid, int lane, int warp)
{
    __syncthreads();
    if (n <= RANK_SORT_MAX) // block-uniform
        rank_sort(sm, n, tid);
    else
        bitonic_sort(sm, n, tid, lane, warp);
}
