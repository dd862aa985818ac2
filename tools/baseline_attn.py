#!/usr/bin/env python3
"""baseline_attn.py: verify_attn's problem done the ways others do it.

The problem is kdtree_verify_attn's (docs/contract.md section 3):
absorbed MLA, one 576-wide latent KV head shared by H query heads (V = its
first 512 dims); each of a request's tree rows sees the whole prefix plus
its own ancestors in the tree.  kdtree-bench runs this script with the
config strings of the cases it measured (--configs) and prints each
baseline beside its own figure:

  torch               what a PyTorch user writes, the faster of
                      matmul (bf16 S = Q K^T with the rows and heads of a
                      request folded into M, f32 scale + tree mask +
                      softmax + logsumexp, bf16 O = P V) and SDPA with a
                      boolean mask; the KV of each request contiguous,
                      which leaves out the paged gather and flatters it.
  flashinfer-bound    FlashInfer's BatchMLAPagedAttentionWrapper (fa3 on
                      sm_90a), causal=False over the prefix and every tree
                      row: the same work minus the tree mask, which no
                      public MLA kernel takes.  A bound, not an answer.
  flashinfer-cascade  the right answer from the same kernel, as SGLang's
                      Hopper backend verifies trees: every tree row over
                      the prefix (with its LSE), then each tree row over
                      its own ancestors only (a request per row, pages of
                      one token), merged by LSE (flashinfer.merge_state).
  flashinfer-fa2-bound
                      the bound again from FlashInfer's fa2 MLA kernel
                      (mma.sync and cp.async: what it runs on every GPU
                      from sm_80 on that is not Hopper, sm_120 included):
                      the bar for our portable (mma.sync) body.  It picks
                      its tiles by the device's shared memory a
                      multiprocessor: on Hopper (228 KB) two stages of
                      64-token tiles, on sm_120 (100 KB) one stage of 16.

FlashInfer runs on the bench's layout: q [rows][H][576] and the paged KV
[pages][64][576] in shuffled page order, its ckv and kpe views of the same
pages; the KV is cold in L2 as the bench times ours (copies of it, 256 MB
at least, cycled between launches).  Its times, like the bench's, are
medians over batches of back-to-back launches timed by CUDA events behind
a GPU sleep that lets this thread queue the whole batch first (at least
50 launches).  Plan calls are outside the time (a server plans once per
step, for every layer).  A small case checks the cascade against an f32
reference (and against kdtree's own kernel when kdtree_jit imports) and
reports the largest error; the fa2 bound is checked against the f32
reference without the tree mask.  Where flashinfer does not import or
cannot run a backend here, the JSON's notes say which rows were skipped
and why.

    python3 tools/baseline_attn.py [--quick] [--json FILE] [--configs FILE]
        [--no-torch] [--no-flashinfer]
    python3 tools/baseline_attn.py --flashinfer-prebuild DIR

--flashinfer-prebuild builds the FlashInfer modules this script runs (fa3,
fa2, the cascade's merge; nvcc, no GPU needed; FLASHINFER_CUDA_ARCH_LIST,
default 9.0a) and copies them to DIR/<name>/<name>.so, the layout of
FlashInfer's AOT directory that tools/host/gpu-flashinfer.sh installs them
into.  Exit status 77 when torch or a CUDA device is missing
(kdtree-bench notes it).
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time

D_QK, D_V = 576, 512
PAGE = 64
FLOP_PER = 2 * D_QK + 2 * D_V  # 2176 per (row, cached token)
SCALE = 0.1352                 # the bench's
L2_DEFEAT = 256e6              # bytes of KV cycled through, at least
FI_WORKSPACE = 512 << 20       # FlashInfer's float workspace (split-KV)
DEVICE = "cuda"


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

def parse_config(text):
    """'H=8 R=1 past_len=4096 rows=65' -> (H, R, past, rows)."""
    kv = dict(re.findall(r"(\w+)=(\d+)", text))
    return int(kv["H"]), int(kv["R"]), int(kv["past_len"]), int(kv["rows"])


def config_text(H, R, past, rows):
    return "H=%d R=%d past_len=%d rows=%d" % (H, R, past, rows)


def grid(a):
    """The cases without --configs: a grid from the command line."""
    if a.quick:
        return [(8, 1, 4096, 65)]
    heads = [int(x) for x in a.heads.split(",")]
    pasts = [int(x) for x in a.past.split(",")]
    reqs = [int(x) for x in a.requests.split(",")]
    rows = [int(x) for x in a.rows.split(",")]
    return [(H, R, p, n) for n in rows for R in reqs for H in heads
            for p in pasts]


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


def kv_copies(R, max_pages):
    return max(1, int(math.ceil(L2_DEFEAT / (R * max_pages * PAGE * D_QK * 2))))


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
        reps = max(self.reps, -(-self.min_launches // n))
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


# ---- FlashInfer ----------------------------------------------------------

# FlashInfer's MLA backends this script times: fa3, Hopper's wgmma kernel
# (the bar for our sm_90a body), and fa2, its mma.sync kernel for every
# other GPU from sm_80 on (the bar for our portable body).
FI_BACKENDS = ("fa3", "fa2")


def flashinfer_modules(torch, backends=FI_BACKENDS):
    """The JIT specs of what this script runs: the MLA module of each
    backend for bf16 q/kv/o, int32 indices, 512 + 64 dims, and the cascade
    module (merge_state).  One list for the run and for
    --flashinfer-prebuild."""
    from flashinfer.jit import gen_batch_mla_module
    from flashinfer.jit.cascade import gen_cascade_module
    return [gen_batch_mla_module(b, torch.bfloat16, torch.bfloat16,
                                 torch.bfloat16, torch.int32, D_V,
                                 D_QK - D_V, False) for b in backends] + \
        [gen_cascade_module()]


def flashinfer_or_reason(torch):
    """(flashinfer module, {backend: None if it can run here, else why
    not}); the module is None when flashinfer does not import."""
    try:
        import flashinfer
    except Exception as e:
        why = "flashinfer does not import (%s)" % first_line(e)
        return None, dict((b, why) for b in FI_BACKENDS)
    cc = torch.cuda.get_device_capability()
    why = {"fa3": None if cc == (9, 0) else
           "fa3 is Hopper's (sm_90a); this GPU is sm_%d%d" % cc,
           "fa2": None if cc >= (8, 0) else
           "fa2 needs sm_80 or newer; this GPU is sm_%d%d" % cc}
    for b in FI_BACKENDS:
        if why[b]:
            continue
        try:
            for spec in flashinfer_modules(torch, (b,)):
                if not spec.is_compiled and \
                        os.environ.get("FLASHINFER_DISABLE_JIT"):
                    why[b] = ("module %s is not prebuilt and "
                              "FLASHINFER_DISABLE_JIT is set (see "
                              "tools/host/gpu-flashinfer.sh)" % spec.name)
                    break
        except Exception as e:
            why[b] = "flashinfer's module specs: %s" % first_line(e)
    return flashinfer, why


class Paged(object):
    """One case's inputs in the bench's layout: `copies` copies of R
    requests' KV, [copies][R * max_pages][64][576], each request's pages a
    shuffled choice within its copy (the same block table in every copy);
    q [R * rows][H][576]."""

    def __init__(self, torch, H, R, past, rows, tree, copies, gen):
        dev = DEVICE
        self.H, self.R, self.past, self.rows, self.tree = H, R, past, rows, tree
        self.max_pages = (past + rows + PAGE - 1) // PAGE
        self.copies = copies
        self.pool = torch.empty(copies, R * self.max_pages, PAGE, D_QK,
                                dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
        self.bt = torch.randperm(R * self.max_pages, generator=gen).to(
            torch.int32).view(R, self.max_pages)
        self._bt = self.bt.tolist()
        self.q = torch.empty(R * rows, H, D_QK, dtype=torch.bfloat16,
                             device=dev).uniform_(-1, 1)

    def pages(self, c):
        """ckv, kpe of copy c: views of its [pages][64][576]."""
        p = self.pool[c]
        return p[..., :D_V], p[..., D_V:]

    def tokens(self, c):
        """ckv, kpe of copy c as pages of one token."""
        p = self.pool[c].view(-1, 1, D_QK)
        return p[..., :D_V], p[..., D_V:]

    def slot(self, r, pos):
        """The one-token page of request r's token at position pos."""
        return self._bt[r][pos // PAGE] * PAGE + pos % PAGE


class FlashInferCase(object):
    """One case through one FlashInfer MLA backend, planned once: the
    bound, and (cascade=True) the cascade."""

    def __init__(self, torch, fi, workspace, x, backend="fa3",
                 cascade=True):
        dev = DEVICE
        i32 = dict(dtype=torch.int32, device=dev)
        R, rows, H, past = x.R, x.rows, x.H, x.past
        self.torch, self.fi, self.x = torch, fi, x
        self.q_nope, self.q_pe = x.q[..., :D_V], x.q[..., D_V:]
        qo_indptr = torch.arange(R + 1, **i32) * rows
        mk = lambda: fi.BatchMLAPagedAttentionWrapper(workspace,
                                                      backend=backend)
        shape = (R * rows, H)
        self.o = [torch.empty(shape + (D_V,), dtype=torch.bfloat16,
                              device=dev) for _ in range(2)]
        self.lse = [torch.empty(shape, dtype=torch.float32, device=dev)
                    for _ in range(2)]
        # the bound: every row over prefix + tree, no mask
        self.bound = mk()
        self.bound.plan(qo_indptr, torch.arange(R + 1, **i32) * x.max_pages,
                        x.bt.flatten().to(dev),
                        torch.full((R,), past + rows, **i32), H, D_V,
                        D_QK - D_V, PAGE, False, SCALE, torch.bfloat16,
                        torch.bfloat16)
        if not cascade:
            return
        # the cascade: the prefix, then each row's ancestors, then merge
        pp = (past + PAGE - 1) // PAGE
        self.prefix = mk()
        self.prefix.plan(qo_indptr, torch.arange(R + 1, **i32) * pp,
                         x.bt[:, :pp].flatten().to(dev),
                         torch.full((R,), past, **i32), H, D_V, D_QK - D_V,
                         PAGE, False, SCALE, torch.bfloat16, torch.bfloat16)
        idx, lens = [], []
        for r in range(R):
            for a in x.tree.anc[r]:
                idx += [x.slot(r, past + j) for j in a]
                lens.append(len(a))
        indptr = [0]
        for n in lens:
            indptr.append(indptr[-1] + n)
        self.anc = mk()
        self.anc.plan(torch.arange(R * rows + 1, **i32),
                      torch.tensor(indptr, **i32), torch.tensor(idx, **i32),
                      torch.tensor(lens, **i32), H, D_V, D_QK - D_V, 1,
                      False, SCALE, torch.bfloat16, torch.bfloat16)

    def run_bound(self, i):
        ckv, kpe = self.x.pages(i % self.x.copies)
        return self.bound.run(self.q_nope, self.q_pe, ckv, kpe, out=self.o[0],
                              lse=self.lse[0], return_lse=True)

    def run_cascade(self, i):
        c = i % self.x.copies
        ckv, kpe = self.x.pages(c)
        o1, s1 = self.prefix.run(self.q_nope, self.q_pe, ckv, kpe,
                                 out=self.o[0], lse=self.lse[0],
                                 return_lse=True)
        ckv, kpe = self.x.tokens(c)
        o2, s2 = self.anc.run(self.q_nope, self.q_pe, ckv, kpe, out=self.o[1],
                              lse=self.lse[1], return_lse=True)
        # merge_state gives a block to each row's heads together, which
        # stops launching past 16 heads (64 x 512 / 8 threads); each
        # (row, head) merges alone, so fold the heads into the rows.
        n = self.x.R * self.x.rows * self.x.H
        v, s = self.fi.merge_state(o1.view(n, 1, D_V), s1.view(n, 1),
                                   o2.view(n, 1, D_V), s2.view(n, 1))
        return v.view(o1.shape), s.view(s1.shape)


def reference(torch, x, c=0, tree=True):
    """f32 attention of case x's copy c: o [R * rows][H][512]; with
    tree=False every row sees the whole prefix and tree (the bound's
    problem)."""
    out = []
    for r in range(x.R):
        n = x.past + x.rows
        pages = x.pool[c][x.bt[r].long().to(x.pool.device)]
        kv = pages.reshape(-1, D_QK)[:n].float()
        q = x.q[r * x.rows:(r + 1) * x.rows].float().reshape(-1, D_QK)
        s = (q @ kv.T) * SCALE
        vis = torch.ones(x.rows, n, dtype=torch.bool)
        if tree:
            vis[:, x.past:] = x.tree.mask(torch, r)
        vis = vis.to(s.device).repeat_interleave(x.H, dim=0)
        s.masked_fill_(~vis, float("-inf"))
        out.append((torch.softmax(s, -1) @ kv[:, :D_V]).view(x.rows, x.H, D_V))
    return torch.cat(out)


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
        import types
        tree = types.SimpleNamespace(
            n_nodes=torch.full((x.R,), x.rows, **i32), anc_mask=mask)
        res = rt.verify_attn(x.q.view(x.R, x.rows, x.H, D_QK), x.pool[0],
                             x.bt.to(DEVICE), torch.full((x.R,), x.past, **i32),
                             tree, SCALE)
        torch.cuda.synchronize()
        return res.o.reshape(x.R * x.rows, x.H, D_V), None
    except Exception as e:
        return None, first_line(e)


def check_cascade(torch, fi, workspace, gen, rng):
    """The cascade against the f32 reference (and ours) on small cases
    whose prefix ends inside a page, at 8 heads and at 64 (where the merge
    runs folded, see run_cascade); returns a note and the larger error."""
    notes, worst = [], 0.0
    for H in (8, 64):
        x = Paged(torch, H, 2, 1000, 65, Tree(2, 65, rng), 1, gen)
        case = FlashInferCase(torch, fi, workspace, x)
        o_fi, _ = case.run_cascade(0)
        ref = reference(torch, x)
        err = (o_fi.float() - ref).abs().max().item()
        worst = max(worst, err)
        o_ours, why = ours(torch, x)
        if o_ours is None:
            tail = "; ours not run (%s)" % why
        else:
            tail = ("; ours %.3g from the reference, %.3g from the cascade"
                    % ((o_ours.float() - ref).abs().max().item(),
                       (o_ours.float() - o_fi.float()).abs().max().item()))
        notes.append("H=%d: max |o - f32 reference| = %.3g%s" % (H, err,
                                                                tail))
        del case, x
    return ("flashinfer-cascade check (R=2 past_len=1000 rows=65): "
            + "; ".join(notes)), worst


def check_bound(torch, fi, workspace, gen, rng, backend):
    """A backend's bound against the f32 reference without the tree mask,
    on the cases check_cascade uses; returns a note and the larger
    error."""
    notes, worst = [], 0.0
    for H in (8, 64):
        x = Paged(torch, H, 2, 1000, 65, Tree(2, 65, rng), 1, gen)
        case = FlashInferCase(torch, fi, workspace, x, backend, False)
        o_fi, _ = case.run_bound(0)
        err = (o_fi.float() - reference(torch, x, tree=False)).abs().max()
        worst = max(worst, err.item())
        notes.append("H=%d: max |o - f32 reference| = %.3g" % (H, err))
        del case, x
    return ("flashinfer-%s-bound check (R=2 past_len=1000 rows=65, no "
            "mask): %s" % (backend, "; ".join(notes))), worst


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
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--flashinfer-prebuild", metavar="DIR")
    a = ap.parse_args()
    if a.flashinfer_prebuild:
        return prebuild(a.flashinfer_prebuild)
    try:
        import torch
    except ImportError:
        print("torch is not installed", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    if a.configs:
        with open(a.configs) as f:
            cases = [parse_config(l) for l in f if l.strip()]
    else:
        cases = grid(a)
    notes, rows = [], []
    gen = torch.Generator().manual_seed(1)
    rng = random.Random(1)
    if a.no_flashinfer:
        fi, why = None, dict((b, "--no-flashinfer") for b in FI_BACKENDS)
    else:
        fi, why = flashinfer_or_reason(torch)
    # what each backend is timed as, once it has passed its check
    labels = {"fa3": ("flashinfer-bound", "flashinfer-cascade"),
              "fa2": ("flashinfer-fa2-bound",)}
    workspace = None
    if fi is not None and not all(why.values()):
        workspace = torch.empty(FI_WORKSPACE, dtype=torch.uint8,
                                device=DEVICE)
    for b in FI_BACKENDS:
        if why[b]:
            continue
        try:
            if b == "fa3":
                note, err = check_cascade(torch, fi, workspace, gen, rng)
            else:
                note, err = check_bound(torch, fi, workspace, gen, rng, b)
            log(note)
            notes.append(note)
            if not err < 0.02:
                why[b] = "its output is wrong (see its check)"
        except Exception as e:
            why[b] = "it failed on the check case (%s)" % first_line(e)
            clear_cuda_error()
    backends = [b for b in FI_BACKENDS if not why[b]]
    for b in FI_BACKENDS:
        if why[b]:
            notes.append("%s: skipped: %s" % (", ".join(labels[b]), why[b]))
            log(notes[-1])
    if backends:
        specs = flashinfer_modules(torch, backends)
        names = ["%s MLA" % b for b in backends] + ["cascade"]
        notes.append("flashinfer %s, backend%s %s (%s)" % (
            fi.__version__, "s" if len(backends) > 1 else "",
            " and ".join(backends), ", ".join(
                "%s %s" % (n, "prebuilt" if s.is_aot else "JIT")
                for n, s in zip(names, specs))))
    timer = Timer(torch, a.quick)
    for H, R, past, nn in cases:
        cfg = config_text(H, R, past, nn)
        tree = Tree(R, nn, rng)
        base = {"kernel": "verify_attn", "config": cfg,
                "flops": float(R) * nn * H * past * FLOP_PER}
        if not a.no_torch:
            reps = 10 if R * H * past * nn <= 8 * 16 * 32768 * 65 else 5
            try:
                t = torch_case(torch, H, R, past, nn, tree, reps)
                rows.append(dict(base, label="torch", **t))
                log("%s: torch %.1f us (%s)" % (cfg, t["us"], t["method"]))
            except Exception as e:
                notes.append("torch %s: %s" % (cfg, first_line(e)))
                clear_cuda_error()
            torch.cuda.empty_cache()
        if not backends:
            continue
        try:
            x = Paged(torch, H, R, past, nn, tree,
                      kv_copies(R, (past + nn + PAGE - 1) // PAGE), gen)
            for b in backends:
                # a backend's labels say what it times: the bound, and
                # the cascade where it has a second label
                cascade = len(labels[b]) > 1
                case = FlashInferCase(torch, fi, workspace, x, b, cascade)
                runs = [case.run_bound] + ([case.run_cascade] if cascade
                                           else [])
                for label, fn in zip(labels[b], runs):
                    us = timer(fn)
                    rows.append(dict(base, label=label, us=us,
                                     copies=x.copies, sm_mhz=timer.last_mhz))
                    log("%s: %s %.1f us" % (cfg, label, us))
                del case
            del x
        except Exception as e:
            notes.append("flashinfer %s: %s" % (cfg, first_line(e)))
            log(notes[-1])
            clear_cuda_error()
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "torch": torch.__version__,
                       "flashinfer": fi.__version__ if backends else None,
                       "notes": notes, "cases": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
