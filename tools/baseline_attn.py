#!/usr/bin/env python3
"""baseline_attn.py: what a PyTorch user would write today for verify_attn.

The same problem as kdtree_verify_attn (docs/contract.md section 3): absorbed
MLA (one 576-wide latent KV head shared by H query heads; V = its first 512
dims), each of a request's n_nodes tree rows sees the whole prefix plus its
ancestors in the tree.  No public MLA kernel takes a tree mask, so the user
composes it from PyTorch ops.  Two compositions are timed and the faster is
the baseline:

  matmul: bf16 S = Q K^T (the n_nodes*H rows of a request folded into M),
          f32 scale + tree mask + softmax + logsumexp, bf16 O = P V;
  sdpa:   torch.nn.functional.scaled_dot_product_attention with a boolean
          mask (when the installed PyTorch accepts a 576-wide q/k with a
          512-wide v).

Both read the KV from a contiguous [R][past + n_nodes][576] tensor: the
gather from the paged cache is left out, which only flatters the baseline.
Times are medians of CUDA-event-timed runs after warm-up.

    python3 tools/baseline_attn.py [--quick] [--json out.json]
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

D_QK, D_V = 576, 512
FLOP_PER = 2 * D_QK + 2 * D_V  # 2176 per (row, cached token)


def tree_mask(n, gen):
    """Ancestor mask [n][n] (bool) of a random tree with parent[i] < i."""
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        m[i, i] = True
        if i:
            par = int(torch.randint(0, i, (1,), generator=gen))
            m[i] |= m[par]
    return m


def median_us(fn, reps):
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


def case(H, R, past, nn, reps, gen):
    dev = "cuda"
    total = past + nn
    rows = nn * H
    scale = 192 ** -0.5
    q = torch.empty(R, rows, D_QK, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    kv = torch.empty(R, total, D_QK, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    anc = tree_mask(nn, gen).to(dev)
    # [rows][total] visibility, row = node * H + head
    vis = torch.ones(rows, total, dtype=torch.bool, device=dev)
    vis[:, past:] = anc.repeat_interleave(H, dim=0)
    v = kv[..., :D_V]
    # the f32 score matrix of one request: batch requests only while it fits
    per_req = rows * total * 4
    group = max(1, min(R, int(4e9 // max(per_req, 1))))

    def matmul():
        outs = []
        for r0 in range(0, R, group):
            qs, ks, vs = q[r0:r0 + group], kv[r0:r0 + group], v[r0:r0 + group]
            s = torch.matmul(qs, ks.transpose(1, 2)).float() * scale
            s.masked_fill_(~vis, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            p = torch.softmax(s, dim=-1).to(torch.bfloat16)
            outs.append((torch.matmul(p, vs), lse))
        return outs

    res = {"kernel": "verify_attn", "H": H, "R": R, "past_len": past,
           "rows": nn, "flops": float(R) * rows * past * FLOP_PER}
    res["matmul_us"] = median_us(matmul, reps)

    def sdpa():
        outs = []
        for r0 in range(0, R, group):
            outs.append(F.scaled_dot_product_attention(
                q[r0:r0 + group, None], kv[r0:r0 + group, None],
                v[r0:r0 + group, None], attn_mask=vis, scale=scale))
        return outs

    try:
        res["sdpa_us"] = median_us(sdpa, reps)
    except Exception as e:  # shapes SDPA refuses on this PyTorch
        res["sdpa_us"] = None
        res["sdpa_error"] = str(e).splitlines()[0][:200]
    best = min(t for t in (res["matmul_us"], res["sdpa_us"]) if t)
    res["baseline_us"] = best
    res["baseline"] = "matmul" if best == res["matmul_us"] else "sdpa"
    res["tflops"] = res["flops"] / best * 1e-6
    del q, kv, vis
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--heads", default="8,16,64,128")
    ap.add_argument("--past", default="4096,32768,131072")
    ap.add_argument("--requests", default="1,8")
    ap.add_argument("--rows", type=int, default=65)
    a = ap.parse_args()
    heads = [int(x) for x in a.heads.split(",")]
    pasts = [int(x) for x in a.past.split(",")]
    reqs = [int(x) for x in a.requests.split(",")]
    if a.quick:
        heads, pasts, reqs = [8], [4096], [1]
    gen = torch.Generator().manual_seed(1)
    out = []
    for R in reqs:
        for H in heads:
            for past in pasts:
                reps = 10 if R * H * past <= 8 * 16 * 32768 else 5
                r = case(H, R, past, a.rows, reps, gen)
                out.append(r)
                print("baseline H=%d R=%d past=%d rows=%d: matmul %.1f us, "
                      "sdpa %s, best %.1f us = %.1f TFLOP/s"
                      % (H, R, past, a.rows, r["matmul_us"],
                         "%.1f us" % r["sdpa_us"] if r["sdpa_us"] else "n/a",
                         r["baseline_us"], r["tflops"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "cases": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
