#!/bin/sh
# test_bench_gpu.sh: kdtree-bench on a GPU, quick, one kernel and --only
# one of its cases: the report is of the documented shape, holds only the
# cases whose config contains the --only text, and each GPU row says the
# SM clock its batches ran at (counted by the spin kernel; or a note says
# there is no spin kernel); a device the bench knows (H200, H100, RTX PRO
# 6000 Blackwell) has its limits named, another none.  Times and clocks
# are printed, never judged.
# Skips (77) without a GPU or python3.
set -u
bench=${KDTREE_BENCH:-./tools/kdtree-bench}
if [ ! -x "$bench" ]; then
    echo "test_bench_gpu: $bench is not built" >&2
    exit 99
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "test_bench_gpu: no python3 to check the JSON with" >&2
    exit 77
fi
out=${TMPDIR:-/tmp}/test_bench_gpu.$$.json
trap 'rm -f "$out"' EXIT
"$bench" --quick --json --kernel tree_accept --only 'R=8 ' >"$out"
rc=$?
cat "$out"
python3 -B - "$out" "$rc" "${srcdir:-.}/tests" <<'PY'
import math, os, sys
sys.path.insert(0, sys.argv[3])
import bench_json

rep = bench_json.Report("test_bench_gpu", sys.argv[1], int(sys.argv[2]))
d, need = rep.d, rep.need
if d.get("mode") != "gpu":
    rep.skip("no GPU (%s)" % d.get("no_gpu_reason"))
rows = d.get("kernels") or []
need(len(rows) >= 1, "no GPU rows")
no_spin = any("no spin kernel" in str(n) for n in d.get("notes") or [])
for r in rows:
    name = "%s %s" % (r.get("kernel"), r.get("config"))
    need(r.get("kernel") == "tree_accept", name + ": not the kernel asked")
    need("R=8 " in str(r.get("config")), name + ": not what --only asked")
    need(isinstance(r.get("us"), (int, float)) and r["us"] > 0,
         name + ": us")
    mhz = r.get("sm_mhz")
    if no_spin:
        need(mhz is None, name + ": a clock without a spin kernel")
    else:
        need(isinstance(mhz, (int, float)) and math.isfinite(mhz)
             and 50 < mhz < 10000, name + ": sm_mhz %r" % (mhz,))
need(d.get("overhead") == [], "the overhead case ran though --only left it out")
# what the kernels were built for: KDTREE_TARGET when set, else what the
# runtime chose for the device (sm_90a on Hopper)
arch, target = d.get("arch"), d.get("target")
asked = os.environ.get("KDTREE_TARGET")
need(isinstance(arch, str) and arch.startswith("sm_"), "arch %r" % (arch,))
if asked:
    need(target == asked, "target %r, KDTREE_TARGET %r" % (target, asked))
else:
    need(isinstance(target, str) and target != "", "target %r" % (target,))
lim, dev = d.get("limits"), str(d.get("device"))
# the names tools/bench_peaks.c knows
known = ("H200", "H100 NVL", "H100 PCIe", "H100 80GB HBM3", "H100 SXM",
         "RTX PRO 6000 Blackwell")
if any(n in dev for n in known):
    need(isinstance(lim, dict) and lim.get("source"),
         "%s: no limits named (%r)" % (dev, lim))
else:
    need(lim is None, "%s: limits %r of another device" % (dev, lim))
rep.done("%d rows: ok" % len(rows))
PY
