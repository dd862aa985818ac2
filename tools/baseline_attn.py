#!/usr/bin/env python3
"""baseline_attn.py: verify_attn's problem done the ways others do it.

The problem is kdtree_verify_attn's (docs/contract.md section 3):
absorbed MLA, one 576-wide latent KV head shared by H query heads (V = its
first 512 dims); each of a request's tree rows sees the whole prefix plus
its own ancestors in the tree, over a paged cache of bf16 or of e4m3 with
a scale (the result is attention over kv_scale x e4m3).  kdtree-bench runs
this script with the config strings of the cases it measured (--configs;
tools/bench_verify_attn.c writes them: "H=8 R=1 past_len=4096 rows=65",
then " page=P" where the page is not 64 and " kv=e4m3 kv_scale=S math=M"
for an e4m3 cache) and prints each baseline beside its own figure.  Each
baseline reads the row's own cache: its page size, element type and
scale; the arithmetic (math=) is ours to choose, so the rows of both
arithmetics on one cache get the same baseline figures.

  torch               what a PyTorch user writes, the faster of
                      matmul (bf16 S = Q K^T with the rows and heads of a
                      request folded into M, f32 scale + tree mask +
                      softmax + logsumexp, bf16 O = P V) and SDPA with a
                      boolean mask; the KV of each request contiguous,
                      which leaves out the paged gather and flatters it.
                      bf16 caches only (an e4m3 one widened to bf16 is the
                      same problem after a copy); one figure for every
                      page size.
  flashinfer-bound    FlashInfer's BatchMLAPagedAttentionWrapper (fa3 on
                      sm_90a), causal=False over the prefix and every tree
                      row: the same work minus the tree mask, which no
                      public MLA kernel takes.  A bound, not an answer.
                      On an e4m3 cache FlashInfer widens it to bf16 in
                      shared memory with the scale (ckv_scale, kpe_scale:
                      its only FP8 MLA form on Hopper; q stays bf16).
  flashinfer-cascade  the right answer from the same kernel, as SGLang's
                      Hopper backend verifies trees: every tree row over
                      the prefix (with its LSE), then each tree row over
                      its own ancestors only (a request per row, pages of
                      one token), merged by LSE (flashinfer.merge_state).
  flashinfer-fa2-bound
                      the bound again from FlashInfer's fa2 MLA kernel
                      (mma.sync and cp.async: what it runs on every GPU
                      from sm_80 on that is not Hopper, sm_120 included;
                      its e4m3 cache only on Hopper): the bar for our
                      portable (mma.sync) body.
  sglang-triton       SGLang's Triton MLA kernels, what sm_120 users run:
                      its extend kernel (extend_attention_fwd) as SGLang's
                      Triton backend calls it to verify a draft tree: the
                      prefix read from the paged pool through its token
                      indices, the tree rows' own K from a bf16 tensor
                      (dequantized, as the model hands it over), the tree
                      as a custom mask.  On an e4m3 pool it rounds q and
                      the softmax weights to e4m3 for the prefix (FP8
                      tensor-core math).  The bar for the portable body.
  sglang-triton-bound its decode kernel (decode_attention_fwd) over the
                      prefix and every tree row, no mask: each request one
                      decode step whose query heads are its rows x heads
                      (all share the one latent KV head), KV splits chosen
                      by SGLang's own rule (get_num_kv_splits_triton).

All run on the bench's layout: q [rows][H][576] and the paged KV
[pages][page][576] in shuffled page order, views of the same pages; the KV
is cold in L2 as the bench times ours (copies of it, 256 MB at least,
cycled between launches).  Times, like the bench's, are medians over
batches of back-to-back launches timed by CUDA events behind a GPU sleep
that lets this thread queue the whole batch first (at least 50 launches).
Plan calls and index building are outside the time (a server does them
once per step, for every layer).  Before a baseline is timed on a kind of
cache (page size, element type, scale) it is checked on small cases of
that kind against an f32 reference over the dequantized cache (and kdtree's
own kernel is compared where kdtree_jit imports): its largest error must
stay under its arithmetic's tolerance and under a third of how far the
tree mask moves the answer, so a baseline that got the mask or the layout
wrong is skipped, never timed.  Where a baseline does not import or
cannot run, the JSON's notes say which rows were skipped and why.

    python3 tools/baseline_attn.py [--quick] [--json FILE] [--configs FILE]
        [--no-torch] [--no-flashinfer] [--no-sglang] [--dry-run]
        [--heads L] [--past L] [--requests L] [--rows L] [--page L]
        [--kv L] [--math L]
    python3 tools/baseline_attn.py --flashinfer-prebuild DIR
    python3 tools/baseline_attn.py --sglang-check DIR

--dry-run reads the cases and writes the plan (which baselines each case
would get, grouped as they would be timed) as JSON, importing neither
torch nor anything else: no GPU.  --flashinfer-prebuild builds the
FlashInfer modules this script runs (fa3 and fa2 for a bf16 and an e4m3
cache, the cascade's merge; nvcc, no GPU needed;
FLASHINFER_CUDA_ARCH_LIST, default 9.0a) and copies them to
DIR/<name>/<name>.so, the layout of FlashInfer's AOT directory that
tools/host/gpu-flashinfer.sh installs them into.  SGLang's Triton modules
are loaded from $KDT_SGLANG_DIR (tools/host/gpu-flashinfer.sh sets it),
a directory holding the sglang package tree from SGLang's wheel, without
SGLang's package __init__s or its dependencies: only torch and triton;
--sglang-check DIR proves that on a machine without a GPU (every import
that is not torch's, triton's or the standard library's refused).
$KDT_ATTN_BASELINES, a list of torch, fa3, fa2 and sglang, keeps only
those families (the others are noted as left out): GPU time for a run of
many cases goes where it is wanted.  Exit status 77 when torch or a CUDA device is missing (kdtree-bench notes
it), 2 on a config it cannot read.
"""
import argparse
import json
import math
import os
import random
import re
import struct
import sys
import time
import types

D_QK, D_V = 576, 512
PAGE_DEFAULT = 64
FLOP_PER = 2 * D_QK + 2 * D_V  # 2176 per (row, cached token)
SCALE = 0.1352                 # the bench's
L2_DEFEAT = 256e6              # bytes of KV cycled through, at least
FI_WORKSPACE = 512 << 20       # FlashInfer's float workspace (split-KV)
TORCH_MAX_BYTES = 40e9         # torch's score matrices and mask, at most
DEVICE = "cuda"
TYPES = ("bf16", "e4m3")


def log(msg):
    print(msg, flush=True)


def clear_cuda_error():
    """A kernel that failed to launch (a baseline's invalid argument)
    leaves CUDA's last error set, and PyTorch's next launch check would
    report it as its own: read it away so the next case starts clean."""
    import ctypes
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            ctypes.CDLL(name).cudaGetLastError()
            return
        except (OSError, AttributeError):
            continue


def first_line(e):
    text = "%s: %s" % (type(e).__name__, e)
    return text.strip().splitlines()[0][:300]


# ---- cases ---------------------------------------------------------------

CONFIG = re.compile(r"^H=(\d+) R=(\d+) past_len=(\d+) rows=(\d+)"
                    r"((?: [a-z_]+=[^ ]+)*)$")
EXTRA = ("page", "kv", "kv_scale", "math")


class Case(object):
    """One row of the bench: the shape, the page size, the cache's type
    and scale, the arithmetic, and the config text it came from."""

    def __init__(self, H, R, past, rows, page=PAGE_DEFAULT, kv="bf16",
                 kv_scale=1.0, math_="bf16", text=None):
        self.H, self.R, self.past, self.rows = H, R, past, rows
        self.page, self.kv, self.kv_scale, self.math = page, kv, kv_scale, \
            math_
        self.text = text if text is not None else config_text(self)

    def shape(self):
        return (self.H, self.R, self.past, self.rows)

    def cache(self):
        """What the baselines read, the same for both arithmetics."""
        return self.shape() + (self.page, self.kv, self.kv_scale)

    def kind(self):
        """The kind of cache a check covers: page size, type, scale."""
        return (self.page, self.kv, self.kv_scale)


def f32(x):
    """x rounded to a float32, as the bench holds kv_scale."""
    return struct.unpack("f", struct.pack("f", x))[0]


def bench_scale(kv, page):
    """tools/bench_verify_attn.c's kv_scale for a grid case: 1 in pages of
    one token, 1/448 in larger ones (as a float32); 1 for bf16."""
    if kv != "e4m3":
        return 1.0
    return 1.0 if page == 1 else f32(1.0 / 448.0)


def config_text(c):
    """The config string kdtree-bench writes for case c (the grid's cases
    carry it; --configs lines keep their own text)."""
    t = "H=%d R=%d past_len=%d rows=%d" % c.shape()
    if c.page != PAGE_DEFAULT:
        t += " page=%d" % c.page
    if c.kv == "e4m3":
        t += " kv=e4m3 kv_scale=%.9g math=%s" % (c.kv_scale, c.math)
    return t


def parse_config(text):
    """A verify_attn config string -> Case; ValueError on anything
    else."""
    t = text.strip()
    m = CONFIG.match(t)
    if not m:
        raise ValueError("not a verify_attn config: %r" % t)
    H, R, past, rows = (int(g) for g in m.groups()[:4])
    extra = dict(kv.split("=", 1) for kv in m.group(5).split())
    bad = [k for k in extra if k not in EXTRA]
    if bad:
        raise ValueError("not a verify_attn config (%s=): %r" % (bad[0], t))
    try:
        page = int(extra.get("page", PAGE_DEFAULT))
        kv = extra.get("kv", "bf16")
        math_ = extra.get("math", "bf16")
        scale = float(extra.get("kv_scale", 1))
    except ValueError:
        raise ValueError("not a verify_attn config: %r" % t)
    if kv not in TYPES or math_ not in TYPES:
        raise ValueError("not a verify_attn config (kv or math): %r" % t)
    if math_ == "e4m3" and kv != "e4m3":
        raise ValueError("math=e4m3 needs kv=e4m3: %r" % t)
    if kv == "bf16" and ("kv_scale" in extra or "math" in extra):
        raise ValueError("kv_scale and math name an e4m3 cache: %r" % t)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError("kv_scale is not finite and > 0: %r" % t)
    if min(H, R, past + 1, rows) < 1 or H > 128 or R > 8 or \
            not 1 <= page <= 256:
        raise ValueError("out of range: %r" % t)
    return Case(H, R, past, rows, page, kv, scale, math_, text=t)


def grid(a):
    """The cases without --configs: a grid from the command line, in the
    bench's order (shape, then page, then bf16, e4m3/bf16, e4m3/e4m3)."""
    if a.quick:
        shapes = [(8, 1, 4096, 65)]
    else:
        heads = [int(x) for x in a.heads.split(",")]
        pasts = [int(x) for x in a.past.split(",")]
        reqs = [int(x) for x in a.requests.split(",")]
        rows = [int(x) for x in a.rows.split(",")]
        shapes = [(H, R, p, n) for n in rows for R in reqs for H in heads
                  for p in pasts]
    pages = [int(x) for x in a.page.split(",")]
    kvs, maths = a.kv.split(","), a.math.split(",")
    out = []
    for H, R, past, n in shapes:
        for page in pages:
            for kv, m in (("bf16", "bf16"), ("e4m3", "bf16"),
                          ("e4m3", "e4m3")):
                if kv in kvs and m in maths:
                    out.append(Case(H, R, past, n, page, kv,
                                    bench_scale(kv, page), m))
    return out


class Tree(object):
    """R random trees of n rows (parent[i] < i, as the bench draws them):
    each row's ancestors (itself included) and the boolean mask."""

    def __init__(self, R, n, rng):
        self.R, self.n = R, n
        self.anc = []
        for _ in range(R):
            par = [-1] + [rng.randrange(i) for i in range(1, n)]
            rows = []
            for i in range(n):
                a, j = [], i
                while j >= 0:
                    a.append(j)
                    j = par[j]
                rows.append(a)
            self.anc.append(rows)

    def mask(self, torch, r):
        m = torch.zeros(self.n, self.n, dtype=torch.bool)
        for i, a in enumerate(self.anc[r]):
            m[i, a] = True
        return m


def kv_copies(c):
    """Copies of case c's KV that together pass L2_DEFEAT bytes."""
    elt = 1 if c.kv == "e4m3" else 2
    return max(1, int(math.ceil(L2_DEFEAT /
                                (c.R * (c.past + c.rows) * D_QK * elt))))


# ---- the baselines and what each times -----------------------------------

# label: (family, what it needs of the cache); a family is checked once per
# kind of cache before any of its labels is timed on that kind
LABELS = [
    ("torch", "torch"),
    ("flashinfer-bound", "fa3"),
    ("flashinfer-cascade", "fa3"),
    ("flashinfer-fa2-bound", "fa2"),
    ("sglang-triton", "sglang"),
    ("sglang-triton-bound", "sglang"),
]
FAMILIES = ("torch", "fa3", "fa2", "sglang")


def plan(cases, off):
    """The work in timing order: [(family, key, [cases])], one entry per
    family and cache (torch: per shape, bf16 only), the cases of each entry
    those its figures are reported for.  `off` is the set of families left
    out (--no-torch, ...)."""
    work, index = [], {}
    for c in cases:
        for fam in FAMILIES:
            if fam in off or (fam == "torch" and c.kv != "bf16"):
                continue
            key = (fam, c.shape() if fam == "torch" else c.cache())
            if key not in index:
                index[key] = len(work)
                work.append((fam, key[1], []))
            work[index[key]][2].append(c)
    return work


def labels_of(fam):
    return [lab for lab, f in LABELS if f == fam]


# ---- timing --------------------------------------------------------------

REST_MAX_S = 2.0  # the longest idle before a timing (tools/bench_time.c)


def sm_clock_mhz(torch):
    """The SM clock now (NVML, through torch), or None where it cannot say."""
    try:
        return float(torch.cuda.clock_rate())
    except Exception:
        return None


class Timer(object):
    """Per-launch µs of fn(i), the way kdtree-bench times its kernels: the
    same batches behind a head start, and the same rest first (the GPU
    idles as long as the timing before kept it busy, up to REST_MAX_S), so
    that a power-capped clock left by the cases before does not slow this
    one.  last_mhz: the median SM clock at the ends of the timed batches."""

    def __init__(self, torch, quick):
        self.torch = torch
        self.quick = quick
        self.min_launches = 10 if quick else 50
        self.reps = 5 if quick else 21
        self.want_us = 200 if quick else 1000
        self.e0 = torch.cuda.Event(enable_timing=True)
        self.e1 = torch.cuda.Event(enable_timing=True)
        self.busy_s = 0.0
        self.last_mhz = None
        self.mhz = []

    def batch_us(self, fn, n, start):
        # Head start: long enough for this thread to queue n launches at a
        # pessimistic 150 µs each (the cascade makes three Python calls).
        self.torch.cuda._sleep(int(2000 * (100 + 150 * n)))
        self.e0.record()
        for i in range(n):
            fn(start + i)
        self.e1.record()
        self.e1.synchronize()
        self.mhz.append(sm_clock_mhz(self.torch))
        return self.e0.elapsed_time(self.e1) * 1e3 / n

    def __call__(self, fn):
        if not self.quick and self.busy_s > 0:
            time.sleep(min(self.busy_s, REST_MAX_S))
        t0 = time.time()
        for i in range(3):
            fn(i)
        self.torch.cuda.synchronize()
        n = 1
        while n < 64 and self.batch_us(fn, n, 0) * n < self.want_us:
            n *= 2
        # at least min_launches where batches are short; a launch that
        # fills a batch alone is timed as the bench times its own, reps
        # batches of one
        reps = self.reps if n == 1 else max(self.reps,
                                            -(-self.min_launches // n))
        self.mhz = []
        ts = sorted(self.batch_us(fn, n, r * n) for r in range(reps))
        clocks = sorted(m for m in self.mhz if m is not None)
        self.last_mhz = clocks[len(clocks) // 2] if clocks else None
        self.busy_s = time.time() - t0
        return ts[len(ts) // 2]


def torch_median_us(torch, fn, reps):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ts.append(start.elapsed_time(stop) * 1000.0)
    ts.sort()
    return ts[len(ts) // 2]


# ---- torch ---------------------------------------------------------------

def torch_bytes(H, R, past, nn):
    """torch_case's largest allocations: the visibility mask and one
    request group's f32 scores, softmax and bf16 weights."""
    rows, total = nn * H, past + nn
    return R * rows * total * 1.0 + rows * total * (4 + 4 + 2)


def torch_case(torch, H, R, past, nn, tree, reps):
    import torch.nn.functional as F
    dev = DEVICE
    total = past + nn
    rows = nn * H
    q = torch.empty(R, rows, D_QK, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    kv = torch.empty(R, total, D_QK, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    # [R][rows][total] visibility, row = node * H + head
    vis = torch.ones(R, rows, total, dtype=torch.bool, device=dev)
    for r in range(R):
        vis[r, :, past:] = tree.mask(torch, r).to(dev).repeat_interleave(H, dim=0)
    v = kv[..., :D_V]
    # the f32 score matrix of one request: batch requests only while it fits
    per_req = rows * total * 4
    group = max(1, min(R, int(4e9 // max(per_req, 1))))

    def matmul():
        outs = []
        for r0 in range(0, R, group):
            qs, ks, vs = q[r0:r0 + group], kv[r0:r0 + group], v[r0:r0 + group]
            s = torch.matmul(qs, ks.transpose(1, 2)).float() * SCALE
            s.masked_fill_(~vis[r0:r0 + group], float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            p = torch.softmax(s, dim=-1).to(torch.bfloat16)
            outs.append((torch.matmul(p, vs), lse))
        return outs

    res = {"matmul_us": torch_median_us(torch, matmul, reps)}

    def sdpa():
        outs = []
        for r0 in range(0, R, group):
            outs.append(F.scaled_dot_product_attention(
                q[r0:r0 + group, None], kv[r0:r0 + group, None],
                v[r0:r0 + group, None], attn_mask=vis[r0:r0 + group, None],
                scale=SCALE))
        return outs

    try:
        res["sdpa_us"] = torch_median_us(torch, sdpa, reps)
    except Exception as e:  # shapes SDPA refuses on this PyTorch
        res["sdpa_us"] = None
        res["sdpa_error"] = first_line(e)
    best = min(t for t in (res["matmul_us"], res["sdpa_us"]) if t)
    res["us"] = best
    res["method"] = "matmul" if best == res["matmul_us"] else "sdpa"
    return res


# ---- the paged cache the other baselines read ------------------------------

class Paged(object):
    """One cache's inputs in the bench's layout: `copies` copies of R
    requests' KV, [copies][R * max_pages][page][576] of bf16, or of e4m3
    (torch.float8_e4m3fn) whose values times kv_scale are uniform in
    [-1, 1) like the bf16 ones; each request's pages a shuffled choice
    within its copy (the same block table in every copy); q
    [R * rows][H][576] bf16."""

    def __init__(self, torch, c, tree, copies, gen):
        dev = DEVICE
        self.torch = torch
        self.H, self.R, self.past, self.rows = c.shape()
        self.page, self.kv, self.scale = c.page, c.kv, c.kv_scale
        self.tree = tree
        self.max_pages = (self.past + self.rows + self.page - 1) // self.page
        self.copies = copies
        self.dtype = torch.float8_e4m3fn if c.kv == "e4m3" else torch.bfloat16
        self.pool = torch.empty(copies, self.R * self.max_pages, self.page,
                                D_QK, dtype=self.dtype, device=dev)
        for k in range(copies):  # f32 one copy at a time: less memory
            x = torch.empty(self.pool.shape[1:], dtype=torch.float32,
                            device=dev).uniform_(-1, 1)
            self.pool[k] = (x / self.scale).to(self.dtype)
            del x
        self.bt = torch.randperm(self.R * self.max_pages, generator=gen).to(
            torch.int32).view(self.R, self.max_pages)
        self._bt = self.bt.tolist()
        self.q = torch.empty(self.R * self.rows, self.H, D_QK,
                             dtype=torch.bfloat16, device=dev).uniform_(-1, 1)

    def pages(self, c):
        """ckv, kpe of copy c: views of its [pages][page][576]."""
        p = self.pool[c]
        return p[..., :D_V], p[..., D_V:]

    def tokens(self, c):
        """Copy c as [tokens][1][576]: a token's slot is page * page_size +
        its place in the page."""
        return self.pool[c].view(-1, 1, D_QK)

    def slot(self, r, pos):
        """The slot of request r's token at position pos."""
        return self._bt[r][pos // self.page] * self.page + pos % self.page

    def slots(self, r, lo, hi):
        return [self.slot(r, p) for p in range(lo, hi)]

    def dequant(self, c):
        """Copy c's values as f32: kv_scale x e4m3, or the bf16."""
        return self.pool[c].float() * self.scale


def reference(torch, x, c=0, tree=True):
    """f32 attention over the dequantized cache of case x's copy c: o
    [R * rows][H][512]; with tree=False every row sees the whole prefix
    and tree (the bound's problem)."""
    out = []
    deq = x.dequant(c)
    for r in range(x.R):
        n = x.past + x.rows
        pages = deq[x.bt[r].long().to(deq.device)]
        kv = pages.reshape(-1, D_QK)[:n]
        q = x.q[r * x.rows:(r + 1) * x.rows].float().reshape(-1, D_QK)
        s = (q @ kv.T) * SCALE
        vis = torch.ones(x.rows, n, dtype=torch.bool)
        if tree:
            vis[:, x.past:] = x.tree.mask(torch, r)
        vis = vis.to(s.device).repeat_interleave(x.H, dim=0)
        s.masked_fill_(~vis, float("-inf"))
        out.append((torch.softmax(s, -1) @ kv[:, :D_V]).view(x.rows, x.H, D_V))
    return torch.cat(out)


# ---- FlashInfer ----------------------------------------------------------

# FlashInfer's MLA backends this script times: fa3, Hopper's wgmma kernel
# (the bar for our sm_90a body), and fa2, its mma.sync kernel for every
# other GPU from sm_80 on (the bar for our portable body).
FI_BACKENDS = ("fa3", "fa2")


def fi_kv_dtype(torch, kv):
    return torch.float8_e4m3fn if kv == "e4m3" else torch.bfloat16


def flashinfer_modules(torch, backends=FI_BACKENDS, kvs=TYPES):
    """The JIT specs of what this script runs: the MLA module of each
    backend for bf16 q and o, a bf16 or e4m3 cache, int32 indices, 512 + 64
    dims, and the cascade module (merge_state).  One list for the run and
    for --flashinfer-prebuild."""
    from flashinfer.jit import gen_batch_mla_module
    from flashinfer.jit.cascade import gen_cascade_module
    return [gen_batch_mla_module(b, torch.bfloat16, fi_kv_dtype(torch, kv),
                                 torch.bfloat16, torch.int32, D_V,
                                 D_QK - D_V, False)
            for b in backends for kv in kvs] + [gen_cascade_module()]


def flashinfer_or_reason(torch, kvs):
    """(flashinfer module, {(backend, kv): None if it can run here, else
    why not}); the module is None when flashinfer does not import."""
    keys = [(b, kv) for b in FI_BACKENDS for kv in kvs]
    try:
        import flashinfer
        from flashinfer.mla import MLAPlanMetadata  # noqa: F401 (0.7's API)
    except Exception as e:
        why = "flashinfer does not import (%s)" % first_line(e)
        return None, dict((k, why) for k in keys)
    cc = torch.cuda.get_device_capability()
    why = {}
    for b, kv in keys:
        if b == "fa3" and cc != (9, 0):
            why[(b, kv)] = "fa3 is Hopper's (sm_90a); this GPU is sm_%d%d" % cc
        elif cc < (8, 0):
            why[(b, kv)] = "fa2 needs sm_80 or newer; this GPU is sm_%d%d" % cc
        elif kv == "e4m3" and cc[0] != 9:
            why[(b, kv)] = ("FlashInfer's MLA takes an e4m3 cache on Hopper "
                            "only; this GPU is sm_%d%d" % cc)
        else:
            why[(b, kv)] = None
    for b, kv in keys:
        if why[(b, kv)]:
            continue
        try:
            for spec in flashinfer_modules(torch, (b,), (kv,)):
                if not spec.is_compiled and \
                        os.environ.get("FLASHINFER_DISABLE_JIT"):
                    why[(b, kv)] = ("module %s is not prebuilt and "
                                    "FLASHINFER_DISABLE_JIT is set (see "
                                    "tools/host/gpu-flashinfer.sh)"
                                    % spec.name)
                    break
        except Exception as e:
            why[(b, kv)] = "flashinfer's module specs: %s" % first_line(e)
    return flashinfer, why


def fi_layout(torch, x):
    """FlashInfer's CSR plans of case x: {name: (qo_indptr, kv_indptr,
    kv_indices, kv_lens, page_size)} for the bound (every row over the
    prefix and the whole tree, x's pages), the prefix (every row over the
    prefix, x's pages) and the ancestors (a request per row over its
    ancestors, pages of one token: the slots of x.tokens())."""
    dev = DEVICE
    i32 = dict(dtype=torch.int32, device=dev)
    R, rows, past, P = x.R, x.rows, x.past, x.page
    qo = torch.arange(R + 1, **i32) * rows
    pp = (past + P - 1) // P
    idx, lens = [], []
    for r in range(R):
        for a in x.tree.anc[r]:
            idx += [x.slot(r, past + j) for j in a]
            lens.append(len(a))
    indptr = [0]
    for n in lens:
        indptr.append(indptr[-1] + n)
    return {
        "bound": (qo, torch.arange(R + 1, **i32) * x.max_pages,
                  x.bt.flatten().to(dev),
                  torch.full((R,), past + rows, **i32), P),
        "prefix": (qo, torch.arange(R + 1, **i32) * pp,
                   x.bt[:, :pp].flatten().to(dev),
                   torch.full((R,), past, **i32), P),
        "anc": (torch.arange(R * rows + 1, **i32),
                torch.tensor(indptr, **i32), torch.tensor(idx, **i32),
                torch.tensor(lens, **i32), 1),
    }


class FlashInferCase(object):
    """One cache through one FlashInfer MLA backend, planned once: the
    bound, and (cascade=True) the cascade (fi_layout's plans)."""

    def __init__(self, torch, fi, workspace, x, backend="fa3",
                 cascade=True):
        from flashinfer.mla import MLAPlanMetadata
        dev = DEVICE
        R, rows, H = x.R, x.rows, x.H
        self.torch, self.fi, self.x = torch, fi, x
        self.q_nope, self.q_pe = x.q[..., :D_V], x.q[..., D_V:]
        # an e4m3 cache's scale, for the compressed and the rope dims alike
        self.scales = (dict(ckv_scale=x.scale, kpe_scale=x.scale)
                       if x.kv == "e4m3" else {})
        shape = (R * rows, H)
        self.o = [torch.empty(shape + (D_V,), dtype=torch.bfloat16,
                              device=dev) for _ in range(2)]
        self.lse = [torch.empty(shape, dtype=torch.float32, device=dev)
                    for _ in range(2)]
        layout = fi_layout(torch, x)

        def planned(name):
            qo, kv_indptr, kv_indices, kv_lens, page = layout[name]
            w = fi.BatchMLAPagedAttentionWrapper(workspace, backend=backend)
            w.plan(metadata=MLAPlanMetadata.csr(qo, kv_indptr, kv_indices,
                                                kv_lens),
                   num_heads=H, head_dim_ckv=D_V, head_dim_kpe=D_QK - D_V,
                   page_size=page, causal=False, sm_scale=SCALE,
                   q_data_type=torch.bfloat16,
                   kv_data_type=fi_kv_dtype(torch, x.kv),
                   query_layout="split", kv_cache_layout="split",
                   lse_mode="base2")
            return w
        self.bound = planned("bound")
        if cascade:
            self.prefix = planned("prefix")
            self.anc = planned("anc")

    def _run(self, w, kv, k):
        return w.run(query=(self.q_nope, self.q_pe), kv_cache=kv,
                     out=self.o[k], lse=self.lse[k], return_lse=True,
                     **self.scales)

    def run_bound(self, i):
        return self._run(self.bound, self.x.pages(i % self.x.copies), 0)

    def run_cascade(self, i):
        c = i % self.x.copies
        o1, s1 = self._run(self.prefix, self.x.pages(c), 0)
        t = self.x.tokens(c)
        o2, s2 = self._run(self.anc, (t[..., :D_V], t[..., D_V:]), 1)
        # merge_state gives a block to each row's heads together, which
        # stops launching past 16 heads (64 x 512 / 8 threads); each
        # (row, head) merges alone, so fold the heads into the rows.
        n = self.x.R * self.x.rows * self.x.H
        v, s = self.fi.merge_state(o1.view(n, 1, D_V), s1.view(n, 1),
                                   o2.view(n, 1, D_V), s2.view(n, 1))
        return v.view(o1.shape), s.view(s1.shape)


# ---- SGLang's Triton kernels ---------------------------------------------

# Where SGLang's wheel keeps its Triton attention kernels: the newer
# layout first, then the one before it.
SGLANG_DIRS = ("sglang/kernels/ops/attention",
               "sglang/srt/layers/attention/triton_ops")
SGLANG_MODULES = ("decode_attention", "extend_attention", "metadata")


def sglang_utils_module(torch):
    """What SGLang's Triton modules take from sglang.srt.utils, whose real
    module imports the whole server (zmq, starlette, PIL, ...): the few
    platform queries, answered here for CUDA and ROCm as SGLang answers
    them."""
    m = types.ModuleType("sglang.srt.utils")
    hip = lambda: torch.version.hip is not None

    def arch_has(name):
        return hip() and name in torch.cuda.get_device_properties(0).gcnArchName

    m.is_hip = hip
    m.is_cuda = lambda: torch.cuda.is_available() and \
        torch.version.cuda is not None
    m.get_device_core_count = lambda device_id=0: (
        torch.cuda.get_device_properties(device_id).multi_processor_count
        if torch.cuda.is_available() else 0)
    m.is_gfx95_supported = lambda: arch_has("gfx95")
    m.is_gfx1250_supported = lambda: arch_has("gfx1250")
    return m


def sglang_ops(root):
    """SGLang's Triton attention modules from `root`, a directory holding
    the sglang package tree of its wheel, as a namespace (decode_attention,
    extend_attention, metadata), loaded alone: the packages above them
    stand in empty (their __init__s import the server), sglang.srt.utils
    is sglang_utils_module(), sglang.srt.environ is SGLang's own (the
    standard library only); what else they import is SGLang's file beside
    them.  Needs torch and triton; no GPU to import.  Raises ImportError
    saying what is missing."""
    import importlib
    import torch
    import triton  # noqa: F401 (a clear error before SGLang's)
    base = next((d for d in SGLANG_DIRS
                 if all(os.path.isfile(os.path.join(root, d, m + ".py"))
                        for m in SGLANG_MODULES[:2])), None)
    if base is None:
        raise ImportError("no %s in %s (tools/host/gpu-flashinfer.sh "
                          "unpacks SGLang's wheel there)" %
                          (" or ".join(d + "/decode_attention.py"
                                       for d in SGLANG_DIRS), root))
    pkgs = base.split("/")
    for i in range(1, len(pkgs) + 1):
        name = ".".join(pkgs[:i])
        if name not in sys.modules:
            p = types.ModuleType(name)
            p.__path__ = [os.path.join(root, *pkgs[:i])]
            sys.modules[name] = p
    if "sglang.srt" not in sys.modules:
        p = types.ModuleType("sglang.srt")
        p.__path__ = [os.path.join(root, "sglang", "srt")]
        sys.modules["sglang.srt"] = p
    sys.modules.setdefault("sglang.srt.utils", sglang_utils_module(torch))
    pkg = ".".join(pkgs)
    ns = types.SimpleNamespace(path=base)
    for m in SGLANG_MODULES:
        setattr(ns, m, importlib.import_module(pkg + "." + m))
    return ns


SGLANG_ENTRIES = (("extend_attention", "extend_attention_fwd"),
                  ("decode_attention", "decode_attention_fwd"),
                  ("metadata", "get_num_kv_splits_triton"))


def sglang_check(root):
    """--sglang-check: loads SGLang's Triton modules from root with torch
    and triton imported first and every other import that is not the
    standard library's refused, so that it proves they need nothing of
    SGLang's dependencies; no GPU.  0, or 1 saying what failed."""
    import importlib.abc
    import torch  # noqa: F401
    import triton  # noqa: F401
    have = set(m.split(".")[0] for m in sys.modules)
    std = set(getattr(sys, "stdlib_module_names", ())) or have

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            top = name.split(".")[0]
            if top in have or top in std or top == "sglang":
                return None
            raise ImportError("%s is neither torch's, triton's nor the "
                              "standard library's" % name)

    sys.meta_path.insert(0, Refuse())
    try:
        ns = sglang_ops(root)
        for mod, fn in SGLANG_ENTRIES:
            if not callable(getattr(getattr(ns, mod), fn, None)):
                raise ImportError("%s has no %s" % (mod, fn))
    except Exception as e:
        print("baseline_attn: SGLang's Triton kernels in %s: %s"
              % (root, first_line(e)), file=sys.stderr)
        return 1
    finally:
        sys.meta_path.pop(0)
    print("baseline_attn: %s/%s: %s load with torch %s and triton %s alone"
          % (root, ns.path, ", ".join("%s.%s" % e for e in SGLANG_ENTRIES),
             torch.__version__, triton.__version__))
    return 0


def sglang_root():
    return os.environ.get("KDT_SGLANG_DIR") or "/tmp/kdt-sglang"


def sglang_or_reason():
    try:
        return sglang_ops(sglang_root()), None
    except Exception as e:
        return None, "SGLang's Triton kernels do not load (%s)" % first_line(e)


def next_pow2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def sglang_layout(torch, x):
    """SGLang's view of case x, as its Triton backend builds it for a tree
    verify (extend) and as the decode bound takes it: a namespace of
    qo_indptr, kv_indptr and kv_indices (the prefix's token slots, int64),
    tree_slots (the tree rows' slots, whose K the extend kernel takes as a
    tensor of its own), custom_mask (per request [rows][past + rows],
    flattened, the prefix columns visible: SGLang skips them) and
    mask_indptr, and for the decode bound d_indptr and d_indices (the
    prefix and the whole tree).  A token's slot in x.tokens() is page *
    page_size + its place in the page."""
    dev = DEVICE
    i32 = dict(dtype=torch.int32, device=dev)
    i64 = dict(dtype=torch.int64, device=dev)
    R, rows, past = x.R, x.rows, x.past
    n = past + rows
    mask = torch.ones(R, rows, n, dtype=torch.bool, device=dev)
    for r in range(R):
        mask[r, :, past:] = x.tree.mask(torch, r).to(dev)
    return types.SimpleNamespace(
        qo_indptr=torch.arange(R + 1, **i32) * rows,
        kv_indptr=torch.arange(R + 1, **i32) * past,
        kv_indices=torch.tensor(
            [s for r in range(R) for s in x.slots(r, 0, past)] or [0], **i64),
        tree_slots=torch.tensor(
            [s for r in range(R) for s in x.slots(r, past, n)], **i64),
        custom_mask=mask.flatten(),
        mask_indptr=torch.arange(R + 1, **i64) * (rows * n),
        d_indptr=torch.arange(R + 1, **i32) * n,
        d_indices=torch.tensor(
            [s for r in range(R) for s in x.slots(r, 0, n)], **i64))


class SglangCase(object):
    """One cache through SGLang's Triton kernels, set up once
    (sglang_layout): the tree verify (extend kernel, custom mask) and the
    no-mask bound (decode kernel, a request's rows x heads as the heads of
    one query token).  The pool is SGLang's token-indexed [slots][1][576],
    V its first 512 dims."""

    def __init__(self, torch, ops, x):
        dev = DEVICE
        i32 = dict(dtype=torch.int32, device=dev)
        R, rows, H, past = x.R, x.rows, x.H, x.past
        n = past + rows
        self.torch, self.ops, self.x = torch, ops, x
        self.k_scale = float(x.scale)
        L = self.L = sglang_layout(torch, x)
        # the tree rows' K as the bf16 the model hands over
        self.k_ext = [(x.tokens(c)[L.tree_slots].float() * x.scale).to(
            torch.bfloat16) for c in range(x.copies)]
        self.o = torch.empty(R * rows, H, D_V, dtype=torch.bfloat16,
                             device=dev)
        self.d_q = x.q.view(R, rows * H, D_QK)
        self.d_o = self.o.view(R, rows * H, D_V)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        # SGLang's cap for MLA (triton_backend's _mla_decode_kv_splits_cap
        # of its default 8 splits, 32-token KV blocks) and its split rule
        cap = max(8, min(next_pow2(sms), next_pow2(-(-n // 32))))
        splits = torch.empty(R, **i32)
        ops.metadata.get_num_kv_splits_triton[(1,)](
            splits, torch.full((R,), n, **i32), R, 1, rows * H, 1, cap, sms,
            MAX_NUM_SEQ=256)
        self.splits = splits
        # its buffers hold the cap's splits; these hold as many as the rule
        # chose (the grid's blocks past a request's count return at once)
        self.max_splits = int(splits.max().item())
        self.logits = torch.empty(R, rows * H, self.max_splits, D_V,
                                  dtype=torch.float32, device=dev)
        self.lse = torch.empty(R, rows * H, self.max_splits,
                               dtype=torch.float32, device=dev)

    def run_verify(self, i):
        x, c = self.x, i % self.x.copies
        k_buf = x.tokens(c)
        k = self.k_ext[c].view(-1, 1, D_QK)
        L = self.L
        self.ops.extend_attention.extend_attention_fwd(
            x.q, k, k[..., :D_V], self.o, k_buf, k_buf[..., :D_V],
            L.qo_indptr, L.kv_indptr, L.kv_indices, L.custom_mask, True,
            L.mask_indptr, x.rows, self.k_scale, self.k_scale,
            sm_scale=SCALE, page_size=x.page)
        return self.o

    def run_bound(self, i):
        x, c = self.x, i % self.x.copies
        k_buf = x.tokens(c)
        self.ops.decode_attention.decode_attention_fwd(
            self.d_q, k_buf, k_buf[..., :D_V], self.d_o, self.L.d_indptr,
            self.L.d_indices, self.logits, self.lse, self.splits,
            self.max_splits, SCALE, self.k_scale, self.k_scale,
            has_mla=True, page_size=x.page)
        return self.o


# ---- checks ----------------------------------------------------------------

# The largest |o - f32 reference| a baseline may have on the check cases:
# bf16 arithmetic, and SGLang's on an e4m3 pool (q and the softmax weights
# rounded to e4m3, 2^-4 relative).  Each also under a third of how far the
# tree mask moves the answer there (0.06-0.12 on these cases), so that a
# baseline with the mask or the page layout wrong fails.
TOL = {"bf16": 0.02, "e4m3": 0.04}


def ours(torch, x):
    """kdtree's verify_attn on case x's copy 0 through kdtree_jit, or a
    reason it could not run."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "python"))
    try:
        import kdtree_jit
        rt = kdtree_jit.Runtime()
        W = (x.rows + 31) // 32
        mask = torch.zeros(x.R, x.rows, W, dtype=torch.int64)
        for r in range(x.R):
            for i, a in enumerate(x.tree.anc[r]):
                for j in a:
                    mask[r, i, j // 32] |= 1 << (j % 32)
        mask = torch.where(mask >= 2 ** 31, mask - 2 ** 32, mask).to(
            torch.int32).to(DEVICE)
        i32 = dict(dtype=torch.int32, device=DEVICE)
        tree = types.SimpleNamespace(
            n_nodes=torch.full((x.R,), x.rows, **i32), anc_mask=mask)
        res = rt.verify_attn(x.q.view(x.R, x.rows, x.H, D_QK), x.pool[0],
                             x.bt.to(DEVICE), torch.full((x.R,), x.past, **i32),
                             tree, SCALE, kv_scale=x.scale)
        torch.cuda.synchronize()
        return res.o.reshape(x.R * x.rows, x.H, D_V), None
    except Exception as e:
        return None, first_line(e)


def check(torch, fam, kind, runners, gen, rng):
    """Family fam's labels on small cases of cache kind (page, kv, scale)
    whose prefix ends inside a page, at 8 heads and at 64, against the f32
    reference (with the tree mask for an answer, without for a bound);
    runners(x) gives {label: (fn, is_bound)}.  Returns a note and None, or
    a note and why the family may not be timed on that kind."""
    page, kv, scale = kind
    tol = TOL["e4m3" if fam == "sglang" and kv == "e4m3" else "bf16"]
    notes, bad = [], None
    for H in (8, 64):
        c = Case(H, 2, 1000, 65, page, kv, scale)
        x = Paged(torch, c, Tree(2, 65, rng), 1, gen)
        ref = reference(torch, x)
        nomask = reference(torch, x, tree=False)
        moved = (ref - nomask).abs().max().item()
        parts = []
        for label, (fn, is_bound) in runners(x).items():
            o = fn(0)
            o = (o[0] if isinstance(o, tuple) else o).float()
            want = nomask if is_bound else ref
            err = (o.view_as(want) - want).abs().max().item()
            parts.append("%s %.3g" % (label, err))
            if not (err < tol and err < moved / 3) and not bad:
                bad = ("%s is %.3g from the f32 reference at H=%d (at most "
                       "%.3g: its tolerance %g, a third of the mask's %.3g)"
                       % (label, err, H, min(tol, moved / 3), tol, moved))
        if fam == "fa3":
            o_ours, why = ours(torch, x)
            parts.append("ours not run (%s)" % why if o_ours is None else
                         "ours %.3g" % (o_ours.float() - ref).abs().max())
        notes.append("H=%d: %s (the mask moves it %.3g)"
                     % (H, ", ".join(parts), moved))
        del x
    what = "page=%d kv=%s%s" % (page, kv, " kv_scale=%.9g" % scale
                                if kv == "e4m3" else "")
    return ("%s check (R=2 past_len=1000 rows=65 %s), max |o - f32 "
            "reference|: %s" % (fam, what, "; ".join(notes))), bad


# ---- prebuild --------------------------------------------------------------

def prebuild(out_dir):
    import shutil
    import torch
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    import flashinfer
    log("flashinfer %s, arch %s" % (flashinfer.__version__,
                                    os.environ["FLASHINFER_CUDA_ARCH_LIST"]))
    for spec in flashinfer_modules(torch):
        t0 = time.time()
        spec.build(verbose=False)
        dst = os.path.join(out_dir, spec.name)
        os.makedirs(dst, exist_ok=True)
        shutil.copy2(str(spec.jit_library_path),
                     os.path.join(dst, spec.name + ".so"))
        log("built %s in %.0f s" % (spec.name, time.time() - t0))
    return 0


# ---- main ------------------------------------------------------------------

def read_cases(a):
    if a.configs is None:
        return grid(a)
    with open(a.configs) as f:
        return [parse_config(l) for l in f if l.strip()]


def dry_run(a, cases, off):
    """The plan as JSON: no torch, no GPU."""
    work = []
    for fam, key, cs in plan(cases, off):
        work.append({"family": fam, "labels": labels_of(fam),
                     "configs": [c.text for c in cs]})
    out = {"dry_run": True, "device": None,
           "notes": ["--dry-run: nothing was timed"],
           "plan": work, "cases": []}
    text = json.dumps(out, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--configs", help="a file of config strings, one a line "
                    "(kdtree-bench's cases)")
    ap.add_argument("--heads", default="8,16,64,128")
    ap.add_argument("--past", default="4096,32768,131072")
    ap.add_argument("--requests", default="1,8")
    ap.add_argument("--rows", default="65")
    ap.add_argument("--page", default="64")
    ap.add_argument("--kv", default="bf16")
    ap.add_argument("--math", default="bf16")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--no-sglang", action="store_true")
    ap.add_argument("--dry-run", action="store_true",
                    help="write the plan, time nothing (no GPU)")
    ap.add_argument("--flashinfer-prebuild", metavar="DIR")
    ap.add_argument("--sglang-check", metavar="DIR", help="load SGLang's "
                    "Triton kernels from DIR with torch and triton alone "
                    "(no GPU) and exit")
    a = ap.parse_args()
    if a.flashinfer_prebuild:
        return prebuild(a.flashinfer_prebuild)
    if a.sglang_check:
        return sglang_check(a.sglang_check)
    try:
        cases = read_cases(a)
    except (OSError, ValueError) as e:
        print("baseline_attn: %s" % e, file=sys.stderr)
        return 2
    off = set()
    if a.no_torch:
        off.add("torch")
    if a.no_flashinfer:
        off.update(("fa3", "fa2"))
    if a.no_sglang:
        off.add("sglang")
    only = os.environ.get("KDT_ATTN_BASELINES")
    if only:
        want = set(only.replace(" ", "").split(","))
        if not want <= set(FAMILIES):
            print("baseline_attn: KDT_ATTN_BASELINES wants a list of %s, "
                  "not %r" % (", ".join(FAMILIES), only), file=sys.stderr)
            return 2
        off.update(set(FAMILIES) - want)
    if a.dry_run:
        return dry_run(a, cases, off)
    try:
        import torch
    except ImportError:
        print("torch is not installed", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    notes, rows = [], []
    gen = torch.Generator().manual_seed(1)
    rng = random.Random(1)
    kvs = sorted({c.kv for c in cases})
    # why each family cannot run at all, or on a cache type
    fi, fi_why = None, {}
    if not ("fa3" in off and "fa2" in off):
        fi, fi_why = flashinfer_or_reason(torch, kvs)
    sgl, sgl_why = (None, "--no-sglang") if "sglang" in off else \
        sglang_or_reason()
    if sgl is not None:
        # relative to the directory the bench runs in where it lies
        # below it: a record names no path of the machine that made it
        where = os.path.join(sglang_root(), sgl.path)
        rel = os.path.relpath(where)
        notes.append("SGLang's Triton kernels from %s" %
                     (where if rel.startswith("..") else rel))
    workspace = None
    if fi is not None and any(v is None for v in fi_why.values()):
        workspace = torch.empty(FI_WORKSPACE, dtype=torch.uint8,
                                device=DEVICE)
        notes.append("flashinfer %s (%s)" % (fi.__version__, ", ".join(
            "%s %s %s" % (b, kv, "prebuilt" if all(
                s.is_aot for s in flashinfer_modules(torch, (b,), (kv,)))
                else "JIT")
            for (b, kv), w in sorted(fi_why.items()) if w is None)))

    def runners(fam):
        if fam == "sglang":
            def make(x):
                s = SglangCase(torch, sgl, x)
                return {"sglang-triton": (s.run_verify, False),
                        "sglang-triton-bound": (s.run_bound, True)}
        else:
            def make(x):
                f = FlashInferCase(torch, fi, workspace, x, fam,
                                   fam == "fa3")
                out = {labels_of(fam)[0]: (f.run_bound, True)}
                if fam == "fa3":
                    out["flashinfer-cascade"] = (f.run_cascade, False)
                return out
        return make

    def reason(fam, kind):
        """Why family fam may not be timed on this kind of cache, or
        None; checks it the first time."""
        if fam in off:
            return "left out (--no-%s or KDT_ATTN_BASELINES)" % (
                "flashinfer" if fam in ("fa3", "fa2") else fam)
        if fam == "torch":
            return None
        if fam == "sglang" and sgl is None:
            return sgl_why
        if fam in ("fa3", "fa2") and fi_why.get((fam, kind[1])):
            return fi_why[(fam, kind[1])]
        if (fam, kind) not in checked:
            try:
                note, bad = check(torch, fam, kind, runners(fam), gen, rng)
                log(note)
                notes.append(note)
                checked[(fam, kind)] = bad and "its output is wrong (%s)" % bad
            except Exception as e:
                checked[(fam, kind)] = ("it failed on the check case (%s)"
                                        % first_line(e))
                clear_cuda_error()
            torch.cuda.empty_cache()
        return checked[(fam, kind)]

    checked, skipped = {}, {}
    timer = Timer(torch, a.quick)
    for fam, key, cs in plan(cases, set()):
        c0 = cs[0]
        why = reason(fam, c0.kind())
        if why:
            for lab in labels_of(fam):
                skipped.setdefault((lab, why), []).append(c0.text)
            continue
        base = lambda c: {"kernel": "verify_attn", "config": c.text,
                          "flops": float(c.R) * c.rows * c.H * c.past *
                          FLOP_PER}
        tree = Tree(c0.R, c0.rows, rng)
        try:
            if fam == "torch":
                need = torch_bytes(*c0.shape())
                if need > TORCH_MAX_BYTES:
                    skipped.setdefault(("torch", "needs %.0f GB on the GPU"
                                        % (need / 1e9)), []).append(c0.text)
                    continue
                reps = 10 if c0.R * c0.H * c0.past * c0.rows <= \
                    8 * 16 * 32768 * 65 else 5
                t = torch_case(torch, c0.H, c0.R, c0.past, c0.rows, tree,
                               reps)
                for c in cs:
                    rows.append(dict(base(c), label="torch", **t))
                log("%s: torch %.1f us (%s)" % (c0.text, t["us"],
                                                t["method"]))
                continue
            x = Paged(torch, c0, tree, kv_copies(c0), gen)
            for label, (fn, _) in runners(fam)(x).items():
                us = timer(fn)
                for c in cs:
                    rows.append(dict(base(c), label=label, us=us,
                                     copies=x.copies, sm_mhz=timer.last_mhz))
                log("%s: %s %.1f us" % (c0.text, label, us))
            del x
        except Exception as e:
            notes.append("%s %s: %s" % (fam, c0.text, first_line(e)))
            log(notes[-1])
            clear_cuda_error()
        torch.cuda.empty_cache()
    for (label, why), texts in skipped.items():
        notes.append("%s: skipped on %d case%s (%s%s): %s" % (
            label, len(texts), "" if len(texts) == 1 else "s", texts[0],
            ", ..." if len(texts) > 1 else "", why))
        log(notes[-1])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "torch": torch.__version__,
                       "flashinfer": fi.__version__ if fi else None,
                       "notes": notes, "cases": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
