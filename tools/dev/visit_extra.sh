#!/bin/bash
# After tools/dev/visit_profile.sh: build_ddtree probe and the sanitizers
# on the draft_topk and build_ddtree suites, into $OUT/extra.txt.
top=$(pwd)
. "$top/.gpu/env.sh" >/dev/null 2>&1
cd /tmp/kdt/kdtree-jit-*/ || exit 1
export KDTREE_LIBRARY=$(pwd)/.libs/libkdtree.so PYTHONPATH=$(pwd)/python:${PYTHONPATH:-}
export KDTREE_CACHE_DIR=/tmp/kdt-cache
{
    sh "$top/tools/dev/build_probe.sh"
    for t in ${SAN_SUITES:-gpu_draft_topk gpu_build_ddtree}; do
        for tool in memcheck racecheck; do
            timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 ./tests/$t >/tmp/san.log 2>&1
            echo "compute-sanitizer $tool $t: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Checks:' /tmp/san.log | tr '\n' ' ')"
        done
    done
} 2>&1 | tee "$OUT/extra.txt"
