#!/bin/bash
# One GPU-host visit: build the tarball (tools/gpu-host.sh with no stages),
# then time and ncu-profile single kernel cases (tools/dev/profile_case.py).
# CASES: lines "name|args|kernel-regex".  Output under $OUT.
set -u
out=${OUT:-/tmp/kdt-out}
top=$(pwd)
STAGES="${STAGES:-none}" bash .xfer/gpu-host.sh || exit 1
cd /tmp/kdt/kdtree-jit-*/ || exit 1
. "$top/.gpu/env.sh" >/dev/null 2>&1
export KDTREE_LIBRARY=$(pwd)/.libs/libkdtree.so PYTHONPATH=$(pwd)/python:${PYTHONPATH:-}
export KDTREE_CACHE_DIR=/tmp/kdt-cache
py=$top/tools/dev/profile_case.py
echo "$TIMES" | while read -r args; do
    [ -n "$args" ] || continue
    REPS=30 timeout 120 python3 "$py" $args 2>&1 | tail -3
done | tee "$out/times.txt"
echo "$CASES" | while IFS='|' read -r name args kre; do
    [ -n "$name" ] || continue
    timeout 200 ncu --clock-control none --set full -k "regex:$kre" -s 2 -c 1 \
        python3 "$py" $args >"$out/ncu-$name.txt" 2>&1
    echo "ncu $name: exit $? $(grep -c . "$out/ncu-$name.txt") lines"
done
