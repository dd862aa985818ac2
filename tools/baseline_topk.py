#!/usr/bin/env python3
"""baseline_topk.py: what a torch user writes for draft_topk, timed on the GPU.

torch.log_softmax(logits.float(), -1) followed by torch.topk(k), for the
sizes of kdtree-bench's draft_topk cases (V = 163840, L = 15 rows per
request, K in {16, 64, 256, 1024}, R in {1, 8, 64}; bf16 logits, and f32
at K = 64).  Times with CUDA events around batches of back-to-back calls
and prints the median microseconds per call as JSON rows whose "config"
strings match the bench's rows.

Usage: baseline_topk.py [--json [FILE]] [--quick] [--configs FILE]
With --json FILE the JSON goes into FILE (kdtree-bench's convention), with
a bare --json to stdout.  With --configs FILE it times the cases named in
FILE, one config string a line (kdtree-bench passes the draft_topk cases
it measured), instead of its own grid.  Exit status 77 when torch or a
CUDA device is missing (the bench notes it), 2 on a config it cannot read.
"""
import json
import re
import statistics
import sys

V, L = 163840, 15
CONFIG = re.compile(r"^R=(\d+),L=(\d+),V=(\d+),K=(\d+),(bf16|f32)$")


def config_text(R, L_, V_, K, dtype):
    return "R=%d,L=%d,V=%d,K=%d,%s" % (R, L_, V_, K, dtype)


def parse_config(text):
    """'R=8,L=15,V=163840,K=64,bf16' -> (dtype, R, L, V, K); ValueError on
    anything else."""
    m = CONFIG.match(text.strip())
    if not m:
        raise ValueError("not a draft_topk config: %r" % text.strip())
    R, L_, V_, K = (int(x) for x in m.groups()[:4])
    if min(R, L_, V_, K) < 1 or K > V_:
        raise ValueError("out of range: %r" % text.strip())
    return m.group(5), R, L_, V_, K


def grid(quick):
    """The cases without --configs: the bench's draft_topk grid."""
    cases = []
    for dtype in ("bf16", "f32"):
        for R in (1, 8, 64):
            for K in (16, 64, 256, 1024):
                if (quick or dtype == "f32") and K != 64:
                    continue
                if quick and R != 1:
                    continue
                cases.append((dtype, R, L, V, K))
    return cases


def arg_value(argv, name):
    """The value after `name` in argv, or None; "" when it has none."""
    if name not in argv:
        return None
    i = argv.index(name)
    if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
        return argv[i + 1]
    return ""


def main(argv):
    quick = "--quick" in argv
    configs = arg_value(argv, "--configs")
    if configs == "":
        print("--configs needs a file", file=sys.stderr)
        return 2
    if configs is not None:
        try:
            with open(configs) as f:
                cases = [parse_config(l) for l in f if l.strip()]
        except (OSError, ValueError) as e:
            print("--configs %s: %s" % (configs, e), file=sys.stderr)
            return 2
    else:
        cases = grid(quick)
    try:
        import torch
    except ImportError:
        print("torch is not installed", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)

    def op(x, k):
        return torch.log_softmax(x.float(), dim=-1).topk(k, dim=-1)

    def time_us(x, k, batch=20, reps=15):
        for _ in range(3):
            op(x, k)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(batch):
                op(x, k)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / batch)
        return statistics.median(times)

    rows = []
    for dtype, R, L_, V_, K in cases:
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        x = (torch.randn(R * L_, V_, device=dev, generator=gen) * 3.0).to(tdt)
        us = time_us(x, K)
        rows.append({
            "kernel": "draft_topk",
            "config": config_text(R, L_, V_, K, dtype),
            "baseline": "torch log_softmax(float)+topk",
            "median_us": round(us, 3),
        })
        del x
    out = arg_value(argv, "--json")
    if out:
        with open(out, "w") as f:
            f.write(json.dumps({"rows": rows}) + "\n")
    elif out == "":
        print(json.dumps({"rows": rows}))
    else:
        for r in rows:
            print("%-40s %10.1f us" % (r["config"], r["median_us"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
