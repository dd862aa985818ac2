#!/bin/bash
# gpu_profile.sh: kernel work on a GPU host: build the tarball (tools/host/gpu-host.sh
# with no stages), then, each step only when its variable is set:
#   CHECK_TESTS  make check TESTS="..." (e.g. "tests/gpu_draft_topk")
#   BENCH        kdtree-bench arguments (e.g. "--kernel draft_topk")
#   TIMES        lines of tools/dev/profile_case.py arguments, timed
#   CASES        lines "name|args|kernel-regex": ncu --set full, with the
#                per-instruction SASS counts (source page) beside it; ncu
#                cannot open NVRTC's sources, so tools/dev/sass_lines.py
#                maps the SASS to source lines from a local -lineinfo cubin
# Output: one tarball $OUT/profile.tgz (the device tool brings back only a
# few files).
set -u
final=${OUT:-/tmp/kdt-out}
out=/tmp/profile-out
rm -rf "$out" && mkdir -p "$out"
trap 'tar czf "$final/profile.tgz" -C "$out" .' EXIT
top=$(pwd)
OUT=$out STAGES="${STAGES:-none}" bash .xfer/gpu-host.sh || exit 1
cd /tmp/kdt/kdtree-jit-*/ || exit 1
. "$top/.gpu/env.sh" >/dev/null 2>&1
export KDTREE_LIBRARY=$(pwd)/.libs/libkdtree.so PYTHONPATH=$(pwd)/python:${PYTHONPATH:-}
export KDTREE_CACHE_DIR=/tmp/kdt-cache
if [ -n "${CHECK_TESTS:-}" ]; then
    make -j4 check TESTS="$CHECK_TESTS" LOG_COMPILER="timeout 300" >"$out/check.log" 2>&1
    grep -E "^(PASS|FAIL|SKIP|ERROR):" "$out/check.log"
    for t in $CHECK_TESTS; do cp "$t.log" "$out/" 2>/dev/null; done
fi
if [ -n "${BENCH:-}" ]; then
    KDTREE_BENCH_TOOLS=$(pwd)/tools timeout 300 ./tools/kdtree-bench $BENCH \
        --json-out "$out/bench.json" >"$out/bench.txt" 2>"$out/bench.err"
    cat "$out/bench.txt"
fi
py=$top/tools/dev/profile_case.py
echo "${TIMES:-}" | while read -r args; do
    [ -n "$args" ] || continue
    REPS=30 timeout 120 python3 "$py" $args 2>&1 | tail -3
done | tee "$out/times.txt"
echo "${CASES:-}" | while IFS='|' read -r name args kre; do
    [ -n "$name" ] || continue
    timeout 200 ncu --clock-control none --set full --import-source yes \
        -k "regex:$kre" -s 2 -c 1 -o "/tmp/ncu-$name" -f \
        python3 "$py" $args >"$out/ncu-$name.log" 2>&1
    ncu -i "/tmp/ncu-$name.ncu-rep" >"$out/ncu-$name.txt" 2>&1
    ncu -i "/tmp/ncu-$name.ncu-rep" --page source --csv --print-source sass \
        >"$out/ncu-$name-sass.csv" 2>&1
    echo "ncu $name: $(grep -E '^\s+Duration' "$out/ncu-$name.txt")"
done
