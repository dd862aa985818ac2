#!/bin/bash
# The session's last GPU visit, in two calls (each within the device
# tool's 10 minutes):
#   PART=1  make check (every suite, the GPU ones included), kdtree-bench
#           for draft_topk, build_ddtree and tree_accept with the torch
#           baseline, python/examples/ddtree_round.py
#   PART=2  compute-sanitizer racecheck and memcheck on single launches of
#           draft_topk (a cluster of 8; one block a row) and build_ddtree
#           (loop path B = 16; threshold path B = 64, 512 and 1024, the
#           last with 512 ranks a row in shared memory), memcheck on
#           gpu_build_ddtree's suite
# Output under $OUT.
top=$(pwd)
if [ "${PART:-1}" = 1 ]; then
    STAGES="check bench round" OUT=$OUT bash .xfer/gpu-host.sh \
        --kernel draft_topk --kernel build_ddtree --kernel tree_accept
    exit $?
fi
STAGES=none OUT=$OUT bash .xfer/gpu-host.sh || exit 1
. "$top/.gpu/env.sh" >/dev/null 2>&1
cd /tmp/kdt/kdtree-jit-*/ || exit 1
export KDTREE_LIBRARY=$(pwd)/.libs/libkdtree.so PYTHONPATH=$(pwd)/python:${PYTHONPATH:-}
export KDTREE_CACHE_DIR=/tmp/kdt-cache
py="python3 $top/tools/dev/profile_case.py"
while read -r tool args; do
    REPS=1 BATCH=1 timeout 100 compute-sanitizer --tool "$tool" $py $args >/tmp/san.log 2>&1
    echo "$tool $args: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log)" | tee -a "$OUT/sanitizer.txt"
    grep -m3 -E "Race|Hazard|Invalid|at .*kdt_" /tmp/san.log >> "$OUT/sanitizer.txt"
done <<'CASES'
racecheck topk 1 64
racecheck topk 10 64
memcheck topk 1 64
memcheck topk 10 64
racecheck build 16 1
racecheck build 64 1 zipf
racecheck build 512 1 zipf
racecheck build 512 1 randn
memcheck build 512 64 zipf
racecheck build 1024 1 zipf
memcheck build 1024 8 randn
CASES
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 ./tests/gpu_build_ddtree >"$OUT/san-memcheck-build.log" 2>&1
echo "memcheck gpu_build_ddtree: exit $? $(grep -E 'ERROR SUMMARY|Checks:' "$OUT/san-memcheck-build.log" | tr '\n' ' ')" | tee -a "$OUT/sanitizer.txt"
