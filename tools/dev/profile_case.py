#!/usr/bin/env python3
"""One kernel case, launched a few times, for ncu or quick timing.

    python3 tools/dev/profile_case.py topk R K [bf16|f32]
    python3 tools/dev/profile_case.py build B R [randn|zipf]
    python3 tools/dev/profile_case.py attn H R PAST [bf16|e4m3 [bf16|e4m3]]

Prepares (compiles) first, launches twice to warm up, then REPS times
(default 5) a batch of BATCH back-to-back launches (default 50) between
two CUDA events, and prints the median per launch: the host's per-call
overhead hides behind the GPU's queue, so the figure is the kernel's own
time (plus the launch gap).  BATCH=1 times single calls as before.  Under
ncu, profile with `-k regex:kdt_<kernel> -s 2 -c 1` (and BATCH=1 REPS=1)
to skip the warm-up launches.
attn's optional words are the cache and the arithmetic (default bf16;
e4m3 arithmetic reads an e4m3 cache).
Development tool: not installed, not part of the tests.
"""
import os
import sys

import torch

import kdtree_jit

V, L = 163840, 15
REPS = int(os.environ.get("REPS", "5"))
BATCH = int(os.environ.get("BATCH", "50"))


def timed(fn):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record()
        for _ in range(BATCH):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / BATCH)
    ts.sort()
    return ts[len(ts) // 2]


def logits(R, dtype):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(R, L, V, device="cuda", generator=g) * 3
    return x.to(dtype)


def zipf_rows(R, K):
    """kdtree-bench's build_ddtree input: per depth, logits -a ln(rank+1)
    plus noise over 4096 tokens (a in [1, 2.43]), log-softmaxed, sorted,
    the top K: peaked rows that make deep trees."""
    g = torch.Generator(device="cuda").manual_seed(2)
    a = 1.0 + torch.rand(R, L, 1, device="cuda", generator=g) * 1.43
    j = torch.arange(4096, device="cuda", dtype=torch.float32) + 1.0
    x = -a * j.log() + 0.3 * (torch.rand(R, L, 4096, device="cuda",
                                         generator=g) * 2 - 1)
    lp = torch.log_softmax(x, -1).sort(-1, descending=True).values
    lp = lp[..., :K].contiguous()
    ids = torch.randint(0, 163840, (R, L, K), device="cuda", generator=g,
                        dtype=torch.int32)
    return lp, ids


def main():
    rt = kdtree_jit.Runtime()
    what = sys.argv[1]
    if what == "topk":
        R, K = int(sys.argv[2]), int(sys.argv[3])
        dt = torch.float32 if sys.argv[4:] == ["f32"] else torch.bfloat16
        x = logits(R, dt)
        out = (torch.empty(R, L, K, device="cuda"),
               torch.empty(R, L, K, dtype=torch.int32, device="cuda"))
        us = timed(lambda: rt.draft_topk(x, K, out=out))
    elif what == "build":
        B, R = int(sys.argv[2]), int(sys.argv[3])
        if sys.argv[4:] == ["zipf"]:
            lp, ids = zipf_rows(R, B)
        else:
            lp, ids = rt.draft_topk(logits(R, torch.bfloat16), B)
        budget = torch.full((R,), B, dtype=torch.int32, device="cuda")
        root = torch.full((R,), 3, dtype=torch.int32, device="cuda")
        tree = rt.build_ddtree(lp, ids, budget, root, B + 1)
        us = timed(lambda: rt.build_ddtree(lp, ids, budget, root, B + 1,
                                           out=tree))
    elif what == "attn":
        H, R, past = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        N, page = 65, 64
        pages = (past + N + page - 1) // page
        kv_dtype = (torch.float8_e4m3fn if sys.argv[5:6] == ["e4m3"]
                    else torch.bfloat16)
        math = sys.argv[6] if len(sys.argv) > 6 else "bf16"
        kv = (torch.rand(R * pages, page, 576, device="cuda") - 0.5).to(
            kv_dtype)
        bt = torch.randperm(R * pages, device="cuda").to(torch.int32).view(
            R, pages)
        q = (torch.rand(R, N, H, 576, device="cuda") - 0.5).to(torch.bfloat16)
        pl = torch.full((R,), past, dtype=torch.int32, device="cuda")
        nn = torch.full((R,), N, dtype=torch.int32, device="cuda")
        W = (N + 31) // 32
        words = [[0] * W for _ in range(N)]
        for i in range(N):  # a chain: every earlier row is an ancestor
            for j in range(i + 1):
                words[i][j // 32] |= 1 << (j % 32)
        m = torch.tensor(words, dtype=torch.int64)
        m = torch.where(m >= 2 ** 31, m - 2 ** 32, m).to(torch.int32)
        mask = m.unsqueeze(0).repeat(R, 1, 1).to("cuda")
        # verify_attn reads the tree's n_nodes and anc_mask alone
        tree = kdtree_jit.Tree(nn, *[None] * 7, mask)
        ws = rt.verify_attn_workspace(q, kv, bt, math=math)
        res = rt.verify_attn(q, kv, bt, pl, tree, 0.07, workspace=ws,
                             math=math)
        us = timed(lambda: rt.verify_attn(q, kv, bt, pl, tree, 0.07,
                                          workspace=ws, out=res, math=math))
    else:
        sys.exit(__doc__)
    print("%s %s: %.2f us per launch (median of %d batches of %d)" %
          (what, " ".join(sys.argv[2:]), us, REPS, BATCH))


if __name__ == "__main__":
    main()
