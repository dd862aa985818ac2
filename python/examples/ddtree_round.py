#!/usr/bin/env python3
"""One whole DDTree round on synthetic data, three ways, in the same run.

    drafter logits [R, L, V]
      -> draft_topk -> build_ddtree            (the draft tree, on the GPU)
      -> verify_attn                           (one MLA layer, Kimi-K2 at TP8:
                                                H = 8 heads, 576/512 latent)
      -> target argmax (torch)
      -> tree_accept                           (accepted path + bonus token)

1. kdtree_jit, eager: four library calls and a few torch ops, no host sync.
2. kdtree_jit, captured once in a torch.cuda.CUDAGraph and replayed.
3. The torch path: torch top-k, copy to the host, the Python heap
   (kdtree_jit.reference), the mask built on the host and copied back,
   torch attention with that mask over the gathered KV, target argmax,
   copy to the host and the Python walk.

It checks that the graph's round equals the eager one, prints the median
time per round of each path and the host time per kernel call through
Python.  The "model" after attention is a stand-in: target logits are the
drafter's logits at each row's depth plus a projection of head 0's
attention output, so the target agrees with the drafter often enough for
walks of several tokens.

    python3 python/examples/ddtree_round.py [--requests 1] [--past 32768]
        [--vocab 163840] [--rounds 50] [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import kdtree_jit  # noqa: F401  (installed: run that one)
except ImportError:
    sys.path.insert(0, os.path.dirname(HERE))  # python/ of a checkout

import torch  # noqa: E402

import kdtree_jit  # noqa: E402
from kdtree_jit import reference as ref  # noqa: E402

H, D_QK, D_V = 8, 576, 512  # Kimi-K2 MLA at tensor-parallel 8
YARN_F = 32.0  # Kimi-K2's YaRN factor
SCALE = 192 ** -0.5 * (0.1 * __import__("math").log(YARN_F) + 1) ** 2


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


class Problem(object):
    """The static inputs of a round: drafter logits, the paged MLA cache,
    query rows, the stand-in output projection."""

    def __init__(self, R, L, K, N, V, past, page, seed=0):
        self.R, self.L, self.K, self.N, self.V = R, L, K, N, V
        self.past, self.page = past, page
        dev = torch.device("cuda")
        g = torch.Generator(device=dev).manual_seed(seed)
        self.logits = (torch.randn(R, L, V, device=dev, generator=g) * 3).to(
            torch.bfloat16)
        self.budget = torch.full((R,), N - 1, dtype=torch.int32, device=dev)
        self.root = torch.full((R,), 3, dtype=torch.int32, device=dev)
        self.past_len = torch.full((R,), past, dtype=torch.int32, device=dev)
        pages = (past + N + page - 1) // page
        self.max_pages = pages
        # Pages of each request in a shuffled physical order.
        perm = torch.randperm(R * pages, generator=torch.Generator().manual_seed(seed))
        self.block_table = perm.to(torch.int32).view(R, pages).to(dev)
        self.kv = ((torch.rand(R * pages, page, D_QK, device=dev, generator=g)
                    - 0.5)).to(torch.bfloat16)
        self.q = (torch.rand(R, N, H, D_QK, device=dev, generator=g) -
                  0.5).to(torch.bfloat16)
        self.wo = ((torch.rand(D_V, V, device=dev, generator=g) - 0.5) *
                   0.05).to(torch.bfloat16)

    def target_logits(self, o, depth):
        """[R, N, V] f32: the drafter's logits at the row's depth (clamped
        to L-1) plus head 0's output projected to the vocabulary."""
        d = depth.clamp(max=self.L - 1).long()
        r = torch.arange(self.R, device=d.device).unsqueeze(-1)
        return self.logits[r, d].float() + (o[:, :, 0, :] @ self.wo).float()


class KdtreeRound(object):
    """Our round: buffers allocated once, every call writes into them."""

    def __init__(self, rt, p):
        self.rt, self.p = rt, p
        dev = torch.device("cuda")
        self.draft = kdtree_jit.Draft(
            torch.empty(p.R, p.L, p.K, dtype=torch.float32, device=dev),
            torch.empty(p.R, p.L, p.K, dtype=torch.int32, device=dev))
        self.tree = self.attn = self.acc = None
        rt.prepare("draft_topk", V=p.V, K=p.K, DTYPE="bf16")
        rt.prepare("build_ddtree", L=p.L, K=p.K, N_MAX=p.N)
        rt.prepare("verify_attn", H=H, PAGE=p.page, N_MAX=p.N)
        rt.prepare("tree_accept", N_MAX=p.N, L=p.L)
        self.ws = rt.verify_attn_workspace(p.q, p.kv, p.block_table)

    def __call__(self):
        p, rt = self.p, self.rt
        rt.draft_topk(p.logits, p.K, out=self.draft)
        self.tree = rt.build_ddtree(self.draft, p.budget, p.root, p.N,
                                    past_len=p.past_len, out=self.tree)
        self.attn = rt.verify_attn(p.q, p.kv, p.block_table, p.past_len,
                                   self.tree, SCALE, workspace=self.ws,
                                   out=self.attn)
        target = p.target_logits(self.attn.o, self.tree.depth).argmax(-1).to(
            torch.int32)
        self.acc = rt.tree_accept(self.tree, target, L=p.L, out=self.acc)
        return self.acc


def torch_round(p):
    """The path a torch user has without this library: top-k on the GPU,
    the tree on the host in Python, the mask copied back, torch attention,
    the walk on the host.
    Returns [(accept_len, accepted tokens, bonus)] per request."""
    dev = torch.device("cuda")
    lp, ids = torch.log_softmax(p.logits.float(), -1).topk(p.K, dim=-1)
    lp_h, ids_h = lp.cpu().tolist(), ids.cpu().tolist()  # sync + copy
    trees = [ref.build_ddtree_one(lp_h[r], ids_h[r], p.N - 1, 3, p.N,
                                  past_len=p.past) for r in range(p.R)]
    n = [t["n_nodes"] for t in trees]
    # Visibility over [prefix | tree rows] for each request, on the host.
    vis = [[[False] * p.N for _ in range(p.N)] for _ in range(p.R)]
    for r, t in enumerate(trees):
        for i in range(n[r]):
            j = i
            while j >= 0:
                vis[r][i][j] = True
                j = t["parent"][j]
    vis = torch.tensor(vis, dtype=torch.bool).to(dev)
    depth = torch.tensor([t["depth"] for t in trees], dtype=torch.int32,
                         device=dev)
    # Gather each request's KV from its pages, then masked attention.
    total = p.past + p.N
    outs = []
    for r in range(p.R):
        kv = p.kv[p.block_table[r].long()].reshape(-1, D_QK)[:total]
        q = p.q[r].reshape(p.N * H, D_QK)
        s = (q @ kv.T).float() * SCALE  # [N*H, total]
        mask = torch.ones(p.N, total, dtype=torch.bool, device=dev)
        mask[:, p.past:] = vis[r]
        s.masked_fill_(~mask.repeat_interleave(H, 0), float("-inf"))
        pr = torch.softmax(s, -1).to(torch.bfloat16)
        outs.append((pr @ kv[:, :D_V]).view(p.N, H, D_V))
    o = torch.stack(outs)
    target = p.target_logits(o, depth).argmax(-1).to(torch.int32)
    target_h = target.cpu().tolist()  # sync + copy
    res = []
    for r, t in enumerate(trees):
        ln, idx, tok, bonus = ref.tree_accept_one(
            t["token"], t["first_child"], t["next_sibling"], n[r],
            target_h[r], p.L)
        res.append((ln, tok[:ln], bonus))
    return res


def time_rounds(fn, rounds):
    """Median wall time of one round, from its start to its results being
    usable on the host side (a sync at the end of each)."""
    ts = []
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e6)
    return median(ts)


def host_overhead():
    """Host us per kernel call through Python: python/examples/overhead.py
    measures it (raw cffi, methods, bound, torch ops), in its own process."""
    out = subprocess.run([sys.executable, os.path.join(HERE, "overhead.py"),
                          "--json", "/dev/stdout"], stdout=subprocess.PIPE,
                         universal_newlines=True)
    if out.returncode != 0:
        return {}
    text = out.stdout
    return json.loads(text[text.index("{"):])["us_per_call"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1)
    ap.add_argument("--depth", type=int, default=15, help="L")
    ap.add_argument("--topk", type=int, default=8, help="K")
    ap.add_argument("--budget", type=int, default=64, help="B (N_MAX = B+1)")
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--past", type=int, default=32768)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("ddtree_round: needs a CUDA device", file=sys.stderr)
        return 77
    p = Problem(a.requests, a.depth, a.topk, a.budget + 1, a.vocab, a.past,
                a.page)
    rt = kdtree_jit.Runtime()
    print("ddtree_round: %s (%s), kdtree_jit %s; R=%d L=%d K=%d B=%d V=%d "
          "past=%d H=%d PAGE=%d" % (torch.cuda.get_device_name(), rt.arch,
                                     kdtree_jit.version, p.R, p.L, p.K,
                                     p.N - 1, p.V, p.past, H, p.page))
    t0 = time.perf_counter()
    rnd = KdtreeRound(rt, p)
    print("prepare (compile or cache, load): %.1f ms" %
          ((time.perf_counter() - t0) * 1e3))

    # Eager.
    acc = rnd()
    torch.cuda.synchronize()
    eager = [x.clone() for x in acc]
    eager_tree = [x.clone() for x in rnd.tree if x is not None]

    # Captured once, replayed.  Warm-up on a side stream first, as
    # torch.cuda.graphs asks.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rnd()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rnd()
    for x in rnd.acc:
        x.fill_(-9)
    graph.replay()
    torch.cuda.synchronize()
    same = all(torch.equal(x, y) for x, y in zip(eager, rnd.acc)) and all(
        torch.equal(x, y) for x, y in
        zip(eager_tree, [x for x in rnd.tree if x is not None]))
    print("graph replay equals eager: %s" % ("yes" if same else "NO"))

    # The torch path, and whether it accepts what ours accepts.
    torch_acc = torch_round(p)
    ours = [(int(eager[0][r]), eager[2][r, :int(eager[0][r])].tolist(),
             int(eager[3][r])) for r in range(p.R)]
    print("accepted per request (ours): %s; the torch path: %s%s" % (
        [x[0] for x in ours], [x[0] for x in torch_acc],
        "" if ours == torch_acc else "  (differ: f32 top-k ties or attention "
                                 "rounding can pick another target token)"))

    t_graph = time_rounds(graph.replay, a.rounds)
    t_eager = time_rounds(rnd, a.rounds)
    t_torch = time_rounds(lambda: torch_round(p), max(5, a.rounds // 5))
    print("\nper-round time (median, wall, start to results ready):")
    print("  kdtree_jit, CUDA graph replay : %10.1f us" % t_graph)
    print("  kdtree_jit, eager             : %10.1f us" % t_eager)
    print("  the torch path (+ Python)     : %10.1f us  (%.1fx the graph)"
          % (t_torch, t_torch / t_graph))
    ov = host_overhead()
    print("\nhost us per kernel call (python/examples/overhead.py):")
    for k, v in ov.items():
        print("  %-13s " % k + "  ".join("%s %.2f" % kv for kv in v.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "arch": rt.arch, "R": p.R, "L": p.L, "K": p.K,
                       "B": p.N - 1, "V": p.V, "past": p.past, "H": H,
                       "page": p.page, "graph_equals_eager": same,
                       "round_us": {"graph": t_graph, "eager": t_eager,
                                    "torch": t_torch},
                       "host_us_per_call": ov,
                       "accept_len": [x[0] for x in ours],
                       "accept_len_torch": [x[0] for x in torch_acc]}, f,
                      indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
