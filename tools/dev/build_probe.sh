#!/bin/sh
# build_probe.sh: build_ddtree timings and race checks for one GPU-host
# visit.  Run from a built tree with the library and Python package set
# up the way tools/dev/visit_profile.sh sets them (KDTREE_LIBRARY,
# PYTHONPATH, KDTREE_CACHE_DIR).  Prints per-launch times (batches of
# BATCH back-to-back launches between two CUDA events, median of REPS)
# for B in 64 512 1024 and R in 1 64, on kdtree-bench's input (zipf) and
# profile_case.py's (randn), then compute-sanitizer racecheck on the loop
# path (B = 16) and on the threshold path (B = 512) when the tool exists.
# Development tool: not installed, not part of the tests.
set -u
here=$(cd "$(dirname "$0")" && pwd)
py="python3 $here/profile_case.py"
export REPS=${REPS:-20} BATCH=${BATCH:-50}
for input in zipf randn; do
    for B in 64 512 1024; do
        for R in 1 64; do
            timeout 300 $py build $B $R $input 2>&1 | tail -1 |
                sed "s/^/$input: /"
        done
    done
done
if command -v compute-sanitizer >/dev/null 2>&1; then
    for B in 16 512; do
        echo "racecheck build $B 1:"
        REPS=1 BATCH=1 timeout 300 compute-sanitizer --tool racecheck \
            --racecheck-report all $py build $B 1 2>&1 | tail -4
    done
fi
