#!/usr/bin/env python3
"""cubin/coldstart.py: what a cold start of N ranks on one node costs in
compiles, with and without a warm read-only layer (docs/cluster.md).

    python3 cubin/coldstart.py --tool tools/kdtree-cache --layer DIR [--ranks 8]

Each rank is one `kdtree-cache populate` process asking, through
kdtree_compile() (compile-only: no GPU, no cuModuleLoadData), for the
kernels one serving process needs at cold start: a Kimi-K2 rank's
verify_attn (H=8, PAGE=64, N_MAX=65), DDTree's draft_topk and
build_ddtree, and tree_accept, for --arch (default sm_90a).  The ranks
start together; the script reports, per scenario, the wall time until the
last rank is done, the CPU time of all ranks (user + system), and how many
kernels were compiled and how many found in a cache:

  1 rank, empty cache       the first process of a node
  N ranks, one cache        a node whose ranks share the user's cache
                            (the per-key lock: one compile per kernel)
  N ranks, N caches         ranks that each have a cache of their own
                            (containers with their own HOME)
  N ranks, layer, no NVRTC  --layer in KDTREE_CACHE_PATH, NVRTC unreachable
  N ranks, layer, NVRTC     --layer in KDTREE_CACHE_PATH, the NVRTC that
                            built it (KDTREE_NVRTC_LIBRARY, if set)

NVRTC is the library's usual choice, or KDTREE_NVRTC_LIBRARY; the layer
must have been built by the same one (cubin/build.py records it).  Every
scenario gets fresh, empty caches under a temporary directory.
"""

import argparse
import os
import resource
import shutil
import subprocess
import tempfile
import time

RANK_KERNELS = ["verify_attn:H=8,PAGE=64,N_MAX=65",
                "draft_topk:V=163840,K=8,DTYPE=bf16",
                "build_ddtree:L=15,K=8,N_MAX=65",
                "tree_accept:N_MAX=65,L=15"]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(tool, arch, envs):
    """Starts one populate per environment at once; returns (wall s, CPU
    s, compiled, cached)."""
    cmd = [tool, "populate", "--arch", arch] + RANK_KERNELS
    cpu0, t0 = children_cpu(), time.monotonic()
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for env in envs]
    outs = [p.communicate()[0].decode() for p in procs]
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    for p, out in zip(procs, outs):
        if p.returncode:
            raise SystemExit("coldstart.py: a rank failed:\n" + out)
    text = "".join(outs)
    return (wall, cpu, text.count(" compiled in "),
            text.count(" already cached in "))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="tools/kdtree-cache")
    ap.add_argument("--layer", required=True,
                    help="a read-only layer holding the rank's kernels")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args()
    tool, n = os.path.abspath(args.tool), args.ranks
    base = dict(os.environ, KDTREE_CACHE="readwrite", KDTREE_CACHE_PATH="",
                KDTREE_CACHE_PREBUILT_DIR="", KDTREE_CACHE_MAX_BYTES="0")
    tmp = tempfile.mkdtemp(prefix="kdt-coldstart.")

    def env(name, **kw):
        e = dict(base, KDTREE_CACHE_DIR=os.path.join(tmp, name))
        e.update(kw)
        return e

    layer = os.path.abspath(args.layer)
    scenarios = [
        ("1 rank, empty cache", [env("one")]),
        ("%d ranks, one cache" % n, [env("shared")] * n),
        ("%d ranks, %d caches" % (n, n),
         [env("own%d" % i) for i in range(n)]),
        ("%d ranks, layer, no NVRTC" % n,
         [env("nonv%d" % i, KDTREE_CACHE_PATH=layer,
              KDTREE_NVRTC_LIBRARY="/nonexistent/libnvrtc.so")
          for i in range(n)]),
        ("%d ranks, layer, NVRTC" % n,
         [env("nv%d" % i, KDTREE_CACHE_PATH=layer) for i in range(n)]),
    ]
    try:
        print("%d kernels a rank (%s), %s; %d CPUs, load %.1f"
              % (len(RANK_KERNELS), ", ".join(RANK_KERNELS), args.arch,
                 os.cpu_count(), os.getloadavg()[0]))
        print("%-28s %8s %8s %9s %7s" % ("scenario", "wall s", "CPU s",
                                         "compiled", "cached"))
        for name, envs in scenarios:
            wall, cpu, compiled, cached = run(tool, args.arch, envs)
            print("%-28s %8.2f %8.2f %9d %7d" % (name, wall, cpu, compiled,
                                                  cached))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
