#!/bin/bash
# A build_ddtree visit: its GPU suite and bench rows (with the C heap),
# then tools/dev/bd_phases.cu at B = 512 and 64.  Race and memory checks
# on single launches: tools/dev/visit_final.sh PART=2.
top=$(pwd)
export CHECK_TESTS="${CHECK_TESTS-tests/gpu_build_ddtree}" BENCH="${BENCH---kernel build_ddtree --baseline}" CASES="${CASES:-}"
OUT=$OUT bash tools/dev/visit_profile.sh
export PATH=/usr/local/cuda/bin:$PATH
for k in 512 64; do
    nvcc -std=c++17 -arch=sm_90 -O3 -I kernels_src -DKDT_L=15 -DKDT_K=$k \
        -DKDT_N_MAX=$((k + 1)) tools/dev/bd_phases.cu -o /tmp/bdp$k &&
        /tmp/bdp$k 3
done 2>&1 | tee "$OUT/phases.txt"
