#!/usr/bin/env python3
"""fp8_acc_model.py: what the FP8 wgmma's accumulation does to P V and
the row sums over a long prefix, in a model of it, not on a GPU.

The model is what tools/dev/fp8_acc.cu measured of `wgmma m64nNk32 e4m3`
on sm_90a (docs/contract.md section 3): each k32 step aligns its 32
products and the accumulator to the largest exponent among them, cuts
each toward zero to a multiple of 2^(E - 13), and adds; the sum goes to
f32.  The model follows verify_attn's wgmma body under MATH=e4m3 for one
query row and DIMS of its 512 value dims: 64-position tiles, P rounded
to e4m3, the lazy maximum (the reference moves when a tile's maximum
passes it by 2^8), each tile's P V and row sums as two k32 steps into
accumulators that carry across the whole range, and compares o = O / l
and l with the same sums taken exactly.

    tools/dev/fp8_acc_model.py [--positions 4096,32768] [--mean 0,0.5]
                               [--sd 1,3] [--dims 64] [--seed 1]
                               [--fold none|tile|half]

--mean is V's mean (its spread 1, rounded to e4m3); --sd the spread of
the logits in log2 units (small: attention spread over many positions).
--fold: where the FP8 accumulators start from zero and f32 adds them to
running sums: none (they carry across the range), tile (every 64
positions: two k32 steps) or half (every k32 step).
Development tool: not installed, not tested.
"""
import argparse

import numpy as np


def e4m3(x):
    """Round to nearest e4m3 (saturating at 448; subnormals below 2^-6)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    e = np.maximum(np.floor(np.log2(np.maximum(a, 2.0 ** -10))), -6)
    step = np.exp2(e - 3)
    return np.sign(x) * np.minimum(np.round(a / step) * step, 448.0)


def wgmma_step(c, terms):
    """One k32 step as measured: c (n,) plus each row of terms (n, 32)."""
    allv = np.concatenate([c[:, None], terms], axis=1)
    mx = np.max(np.abs(allv), axis=1)
    e = np.floor(np.log2(np.where(mx > 0, mx, 1.0)))
    grid = np.exp2(e - 13)[:, None]
    cut = np.trunc(allv / grid) * grid
    return cut.sum(axis=1).astype(np.float32).astype(np.float64)


def run(n, mean, sd, dims, rng, fold):
    v = e4m3(rng.normal(mean, 1.0, (n, dims)))
    x = rng.normal(0.0, sd, n)
    m = x[:64].max()
    o_acc = np.zeros(dims)
    l_acc = np.zeros(1)
    o_ex = np.zeros(dims)
    l_ex = 0.0
    for t in range(0, n, 64):
        tile_max = x[t:t + 64].max()
        if tile_max > m + 8:
            a = 2.0 ** (m - tile_max)
            o_acc *= a
            l_acc *= a
            o_ex *= a
            l_ex *= a
            m = tile_max
        p = e4m3(np.exp2(x[t:t + 64] - m))
        # fold: where the FP8 accumulators start from 0 and are added
        # to f32 ones (none: they carry across the range)
        o_t, l_t = (o_acc, l_acc) if fold == "none" else \
            (np.zeros(dims), np.zeros(1))
        for h in (0, 32):
            ph, vh = p[h:h + 32], v[t + h:t + h + 32]
            if fold == "half" and h:
                o_acc, l_acc = o_acc + o_t, l_acc + l_t
                o_t, l_t = np.zeros(dims), np.zeros(1)
            o_t = wgmma_step(o_t, (ph[:, None] * vh).T)
            l_t = wgmma_step(l_t, ph[None, :])
            o_ex += ph @ vh
            l_ex += ph.sum()
        if fold == "none":
            o_acc, l_acc = o_t, l_t
        else:
            o_acc, l_acc = o_acc + o_t, l_acc + l_t
    o, o_exact = o_acc / l_acc[0], o_ex / l_ex
    return (np.max(np.abs(o - o_exact)) / np.max(np.abs(v)),
            l_acc[0] / l_ex)


def floats(s):
    return [float(t) for t in s.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--positions", default="4096,32768")
    ap.add_argument("--mean", default="0,0.5")
    ap.add_argument("--sd", default="1,3")
    ap.add_argument("--dims", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fold", default="none",
                    help="none (the accumulators carry across the range), "
                    "tile (restart every tile, added to f32 ones) or "
                    "half (every k32 step)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print("positions  mean(v)  sd(logit)  max|o - o_exact| / max|v|"
          "  l / l_exact  lse error")
    for n in (int(t) for t in args.positions.split(",")):
        for mean in floats(args.mean):
            for sd in floats(args.sd):
                err, lr = run(n, mean, sd, args.dims, rng, args.fold)
                print(f"{n:9d}  {mean:7g}  {sd:9g}  {err:25.4f}  "
                      f"{lr:11.4f}  {np.log(lr):+9.3f}")


if __name__ == "__main__":
    main()
