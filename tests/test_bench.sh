#!/bin/sh
# test_bench.sh: kdtree-bench --quick --json --compile-only runs on a
# machine without a GPU and prints one JSON object of the documented
# shape: a cold and a warm compile of every registered kernel for sm_90a and
# sm_120, each compiled when cold and served from disk when warm, with the
# registers and memory of each kernel function of its cubin, each phase
# with its repetitions and their spread; no device's limits are claimed
# without a device.  Times are printed, never judged.  Skips (77) without
# NVRTC or python3.
set -u
bench=${KDTREE_BENCH:-./tools/kdtree-bench}
if [ ! -x "$bench" ]; then
    echo "test_bench: $bench is not built" >&2
    exit 99
fi
out=${TMPDIR:-/tmp}/test_bench.$$.json
trap 'rm -f "$out"' EXIT
"$bench" --quick --json --compile-only >"$out"
rc=$?
cat "$out"
if ! command -v python3 >/dev/null 2>&1; then
    echo "test_bench: no python3 to check the JSON with" >&2
    exit 77
fi
python3 -B - "$out" "$rc" "${srcdir:-.}/tests" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import bench_json

rep = bench_json.Report("test_bench", sys.argv[1], int(sys.argv[2]))
d, need = rep.d, rep.need
if d.get("nvrtc") == "unavailable":
    rep.skip("NVRTC unavailable")
need(d.get("tool") == "kdtree-bench", "tool is not kdtree-bench")
need(d.get("mode") == "compile-only", "mode is %r" % d.get("mode"))
need(d.get("quick") is True, "quick is not true")
# no runtime, so nothing was built for a device
need("arch" in d and d.get("arch") is None, "arch %r" % d.get("arch"))
need("target" in d and d.get("target") is None, "target %r" % d.get("target"))
for key in ("version", "nvrtc", "limits", "load", "kernels", "cases",
            "overhead", "baselines", "targets", "notes"):
    need(key in d, "no %r" % key)
load = d.get("load") or []
kernels = {r.get("kernel") for r in load}
need(len(kernels) >= 1, "no load rows")
for arch in ("sm_90a", "sm_120"):
    got = {r.get("kernel") for r in load if r.get("target") == arch}
    need(got == kernels, "%s rows for %s, expected %s" % (arch, sorted(got), sorted(kernels)))
num = (int, float)
for r in load:
    name = "%s/%s" % (r.get("kernel"), r.get("target"))
    need(r.get("path") == "compile-only", name + ": path")
    need(r.get("problem") is None, name + ": " + str(r.get("problem")))
    for k in ("cold_ms", "warm_ms", "bare_nvrtc_ms", "cold_over_bare"):
        need(isinstance(r.get(k), num) and r[k] > 0, "%s: %s = %r" % (name, k, r.get(k)))
    for k in ("reps_cold", "reps_bare", "reps_warm"):
        need(isinstance(r.get(k), int) and r[k] >= 1, "%s: %s = %r" % (name, k, r.get(k)))
    for k in ("cold_ms", "bare_nvrtc_ms", "warm_ms"):
        lo, hi = r.get(k[:-3] + "_min_ms"), r.get(k[:-3] + "_max_ms")
        need(isinstance(lo, num) and isinstance(hi, num)
             and lo <= r.get(k, 0) <= hi,
             "%s: %s %r not within its min %r and max %r" % (name, k, r.get(k), lo, hi))
    need(r.get("hot_find_us") is None, name + ": hot lookup without a GPU")
    need(isinstance(r.get("shape"), str) and "=" in r["shape"], name + ": shape")
    fns = r.get("functions")
    need(isinstance(fns, list) and len(fns) >= 1, name + ": functions %r" % fns)
    for f in fns or []:
        need(str(f.get("name", "")).startswith("kdt_"), name + ": function name")
        need(isinstance(f.get("registers"), int) and 0 < f["registers"] <= 255,
             name + ": registers %r" % f.get("registers"))
        for k in ("stack_bytes", "shared_bytes", "param_bytes", "max_threads"):
            need(isinstance(f.get(k), int) and f[k] >= 0, "%s: %s" % (name, k))
need(d.get("kernels") == [] and d.get("overhead") == [], "GPU rows in compile-only mode")
need(d.get("limits") is None, "limits %r claimed without a device" % (d.get("limits"),))
rep.done("%d load rows, %d kernels x sm_90a, sm_120: ok" % (len(load), len(kernels)))
PY
