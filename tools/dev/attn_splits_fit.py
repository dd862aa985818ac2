#!/usr/bin/env python3
"""attn_splits_fit.py BENCH_LOG [--wgmma|--mma]: fits the split rule's
constants (src/kernels/verify_attn_splits.h) to a sweep of
tools/dev/attn_splits_sweep.sh, and prints, for every case, the split
count the sweep's build of the rule picked (its SPLITS 0 line) against
the fastest.  To judge new constants, put them in the header and sweep
again: the rule itself lives there only.

The model, in units of one KV tile of one block:
    time = tile * (waves * tiles_per_split + r * partial_rows + k * [S > 1])
with waves = ceil(row_tiles * R * S / 132) and partial_rows = S * R *
row_tiles * 64.  It is linear in (tile, tile*r, tile*k), so this is a
least-squares fit weighted by 1/time (relative error), numpy only."""
import math
import re
import sys

import numpy as np

SMS = 132
wg = "--mma" not in sys.argv
BM, BN = (64, 64) if wg else (64, 32)

cases = {}
for line in open(sys.argv[1]):
    m = re.search(r"bench \S+ BM=\d+ H=(\d+) PAGE=\d+ N_MAX=(\d+) "
                  r"(?:KV=\S+ )?(?:MATH=\S+ )?R=(\d+) "
                  r"past=(\d+) splits=(\d+) .*: ([\d.]+) us", line)
    if m:
        h, n, r, past, s = map(int, m.groups()[:5])
        cases.setdefault((h, n, r, past), []).append((s, float(m.group(6))))


def terms(h, n, r, past, s):
    row_tiles = -(-n * h // BM)
    tiles = -(-(past + n) // BN)
    waves = -(-row_tiles * r * s // SMS)
    return (waves * -(-tiles // s), s * r * row_tiles * BM if s > 1 else 0,
            1.0 if s > 1 else 0.0)


rows, times = [], []
for key, pts in cases.items():
    for s, us in pts[1:]:            # pts[0] is the rule's own pick
        rows.append(terms(*key, s))
        times.append(us)
A = np.array(rows, dtype=float) / np.array(times)[:, None]
coef, *_ = np.linalg.lstsq(A, np.ones(len(times)), rcond=None)
tile, rt, kt = coef
r, k = rt / tile, kt / tile
err = np.array(rows) @ coef / np.array(times) - 1
print("tile %.3f us  r %.2e tiles a partial row  k %.2f tiles  "
      "rms rel err %.3f" % (tile, r, k, math.sqrt(np.mean(err ** 2))))
for (h, n, rq, past), pts in cases.items():
    meas = dict(pts[1:])
    fast = min(meas, key=meas.get)
    print("H=%d N=%d R=%d past=%d: the rule picked %d (%.1f us), fastest %d "
          "(%.1f us)" % (h, n, rq, past, pts[0][0], pts[0][1], fast,
                         meas[fast]))
