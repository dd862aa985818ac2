#!/bin/bash
# The session's last GPU visit: every GPU suite, racecheck on single
# draft_topk launches (a cluster of 8 and one block a row), and
# kdtree-bench for draft_topk and build_ddtree with the torch baseline.
top=$(pwd)
export CHECK_TESTS="tests/gpu_runtime tests/gpu_multi tests/gpu_tree_accept tests/gpu_draft_topk tests/gpu_build_ddtree tests/gpu_verify_attn"
export BENCH="--kernel draft_topk --kernel build_ddtree --kernel tree_accept --baseline" CASES=""
OUT=$OUT bash tools/dev/visit_profile.sh
. "$top/.gpu/env.sh" >/dev/null 2>&1
cd /tmp/kdt/kdtree-jit-*/ || exit 1
export KDTREE_LIBRARY=$(pwd)/.libs/libkdtree.so PYTHONPATH=$(pwd)/python:${PYTHONPATH:-}
export KDTREE_CACHE_DIR=/tmp/kdt-cache
for c in "1 64" "10 64"; do
    REPS=1 BATCH=1 timeout 100 compute-sanitizer --tool racecheck python3 "$top/tools/dev/profile_case.py" topk $c >/tmp/rc.log 2>&1
    echo "racecheck topk $c: exit $? $(grep -E 'RACECHECK SUMMARY' /tmp/rc.log)" | tee -a "$OUT/racecheck.txt"
    grep -m3 -E "Race|Hazard|at .*draft_topk" /tmp/rc.log >> "$OUT/racecheck.txt"
done
