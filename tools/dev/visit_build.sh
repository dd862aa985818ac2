#!/bin/bash
# A short visit for build_ddtree: its GPU suite, its bench rows, and
# racecheck on one loop-path (B = 16) and one threshold-path (B = 512)
# launch.
top=$(pwd)
export CHECK_TESTS="tests/gpu_build_ddtree" BENCH="--kernel build_ddtree" CASES=""
OUT=$OUT bash tools/dev/visit_profile.sh
. "$top/.gpu/env.sh" >/dev/null 2>&1
cd /tmp/kdt/kdtree-jit-*/ || exit 1
export KDTREE_LIBRARY=$(pwd)/.libs/libkdtree.so PYTHONPATH=$(pwd)/python:${PYTHONPATH:-}
export KDTREE_CACHE_DIR=/tmp/kdt-cache
for B in 16 512; do
    REPS=1 BATCH=1 timeout 60 compute-sanitizer --tool racecheck python3 "$top/tools/dev/profile_case.py" build $B 1 >/tmp/rc.log 2>&1
    echo "racecheck build $B 1: exit $? $(grep -E 'RACECHECK SUMMARY' /tmp/rc.log)" | tee -a "$OUT/racecheck.txt"
done
