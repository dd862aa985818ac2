#!/bin/bash
# tools/gpu-host.sh: one visit to a GPU host that lacks libtool and Check
# (see the design notes' gpu-host/README.md).  Expects, in the current
# directory, .gpu/ (from gpu-host/prepare) and .xfer/kdtree-jit-*.tar.gz
# (from make dist); builds the tarball, runs make check (GPU suites
# included), then the bench with its PyTorch baselines.  Logs and JSON go
# to $OUT (default /tmp/kdt-out).  Extra arguments go to kdtree-bench.
set -u
out=${OUT:-/tmp/kdt-out}
mkdir -p "$out"
top=$(pwd)
# shellcheck disable=SC1091
. .gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
rm -rf /tmp/kdt && mkdir -p /tmp/kdt && tar xzf "$top"/.xfer/kdtree-jit-*.tar.gz -C /tmp/kdt
cd /tmp/kdt/kdtree-jit-*/ || exit 1
./configure -q >"$out/configure.log" 2>&1 || { tail -30 config.log; exit 1; }
make -j16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
export KDTREE_CACHE_DIR=/tmp/kdt-cache
make -j4 check >"$out/check.log" 2>&1
check=$?
tar czf "$out/testlogs.tgz" $(find . -name '*.log' -path '*tests*') test-suite.log 2>/dev/null
grep -E "^(PASS|FAIL|SKIP|ERROR):|^# (TOTAL|PASS|FAIL|SKIP|ERROR)" "$out/check.log"
if [ "${KDT_SKIP_BENCH:-0}" != 1 ]; then
    KDTREE_BENCH_TOOLS=$(pwd)/tools ./tools/kdtree-bench --json-out "$out/bench.json" \
        --baseline "$@" >"$out/bench.txt" 2>"$out/bench.err"
    echo "bench exit $?"
    cat "$out/bench.txt"
fi
exit $check
