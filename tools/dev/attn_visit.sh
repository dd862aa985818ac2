#!/bin/bash
# attn_visit.sh: one GPU-host visit for verify_attn (build the nvcc harness
# for several shapes, check against the CPU reference, sanitizers, bench,
# a profile and the PyTorch baseline).  Logs go to $OUT.
#   tools/dev/attn_visit.sh [phases...]   phases: build check san bench ncu base peak
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/ah
cd "$(dirname "$0")/../.."
PH=${*:-build peak check san bench ncu base}
has() { case " $PH " in *" $1 "*) return 0;; esac; return 1; }
ARCH=${ARCH:-sm_90}
EXTRA=${EXTRA:-}

# name H PAGE N_MAX
CFGS="A:8:64:65 B:1:1:1 C:1:16:65 D:16:16:17 E:64:16:65 F:128:1:65 G:128:64:65 H:8:16:1025 I:16:64:65"

if has build; then
    for c in $CFGS; do
        IFS=: read n h pg nm <<<"$c"
        nvcc -std=c++17 -O2 -arch=$ARCH -lineinfo $EXTRA -I kernels_src -I tests \
            -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm \
            tools/dev/attn_harness.cu tests/ref_verify_attn.c -o /tmp/ah/$n \
            >/tmp/ah/$n.build 2>&1 &
    done
    nvcc -std=c++17 -arch=$ARCH -I kernels_src tools/dev/mma_peak.cu -o /tmp/ah/peak \
        >/tmp/ah/peak.build 2>&1 &
    wait
    cat /tmp/ah/*.build > "$OUT/build.log"
    ls -la /tmp/ah >> "$OUT/build.log"
fi

if has peak; then
    /tmp/ah/peak 2>&1 | tee "$OUT/peak.log"
fi

if has check; then
    cat > /tmp/ah/checks <<'EOF'
A check 0 0.0722 1 4096:65
A check 1 0.0722 2 4096:65
A check 3 2.0 3 1000:65 0:65 63:17 64:2 65:1
A check 0 0.0722 4 0:1 1:2
A check 7 0.5 5 100:33 4096:65
A check 1 4.0 15 4096:65 200:40
B check 0 0.1 6 0:1 1:1 63:1 64:1 65:1 1000:1
B check 2 0.1 7 4096:1
C check 0 0.1 8 0:65 17:2 4096:65
D check 0 0.3 9 63:17 64:17 65:17 0:1
E check 0 0.0722 10 1000:65
E check 1 0.0722 11 64:65 63:2
F check 0 0.0722 12 65:17 1:65
G check 0 0.0722 13 1000:65
H check 0 0.0722 14 100:1025 0:300 5:1
I check 2 1.0 16 4096:65 0:1
EOF
    ( while read b args; do echo "/tmp/ah/$b $args"; done < /tmp/ah/checks ) \
        | xargs -P 8 -I{} sh -c '{} 2>&1' > "$OUT/check.log"
    grep -c " ok$" "$OUT/check.log"; grep -v " ok$" "$OUT/check.log" | head -40
fi

if has san; then
    {
        compute-sanitizer --tool memcheck /tmp/ah/A check 3 0.5 21 40:5 17:9
        compute-sanitizer --tool memcheck /tmp/ah/A check 1 0.5 22 40:5 17:9
        compute-sanitizer --tool memcheck /tmp/ah/B check 2 0.5 23 3:1 0:1
        compute-sanitizer --tool racecheck /tmp/ah/A check 2 0.5 24 70:9
        compute-sanitizer --tool racecheck /tmp/ah/A check 1 0.5 25 20:3
        compute-sanitizer --tool synccheck /tmp/ah/A check 2 0.5 26 70:9
    } > "$OUT/sanitizer.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|check H" "$OUT/sanitizer.log"
fi

if has bench; then
    {
        /tmp/ah/A bench 1 32768 0 7 14 28 42
        /tmp/ah/A bench 1 4096 0
        /tmp/ah/A bench 1 131072 0
        /tmp/ah/A bench 8 32768 0 1 2 3
        /tmp/ah/E bench 8 32768 0 1 2
        /tmp/ah/E bench 1 32768 0 1
        /tmp/ah/E bench 8 131072 0
        /tmp/ah/I bench 1 32768 0
        /tmp/ah/I bench 8 32768 0
        /tmp/ah/G bench 1 32768 0
        /tmp/ah/G bench 8 4096 0
    } 2>&1 | tee "$OUT/bench.log"
fi

if has ncu; then
    timeout 120 ncu --clock-control none --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats --section Occupancy \
        --section LaunchStats -k kdt_verify_attn -s 3 -c 1 \
        /tmp/ah/A bench 1 32768 14 > "$OUT/ncu.txt" 2>&1
    grep -E "Duration|Throughput|Pipe|Issue|Stall|Registers|L2 Hit|Warp Cycles" "$OUT/ncu.txt" | head -40
fi

if has base; then
    PYTHONUNBUFFERED=1 timeout 150 python3 tools/baseline_attn.py --heads 8,64 \
        --past 32768 --requests 1,8 --json "$OUT/baseline.json" 2>&1 \
        | tee "$OUT/baseline.log"
fi
