#!/bin/bash
# attn_variants.sh: verify_attn's kernel variants side by side on a GPU
# host, through the standalone harness (tools/dev/attn_harness.cu, nvcc), no library needed.  Builds
# every variant at every shape, checks each against the double CPU
# reference (19 checks, and 11 more of the in-cluster merge for a wgmma
# variant whose kernels have it), times them side by side (variants
# alternate case by case, so drift hits all alike), runs compute-sanitizer
# on one variant and, optionally, ncu on one case.  Results under $OUT:
# summary.txt, build.log, check.log, bench.log, sanitizer.log, ncu.txt,
# ncu-sass.csv.
#
#   OUT=/tmp/out bash tools/dev/attn_variants.sh
#
# VARIANTS  "NAME:ARCH:KDIR[:KV] ..."; ARCH picks the body (90a: wgmma,
#           any other: mma.sync), KDIR the kernel sources (default
#           kernels_src; an older copy measures the kernel of that commit
#           beside this one), KV the cache (0 bf16, the default; 1 e4m3,
#           read in bf16 arithmetic).  Default: "mma:90:kernels_src
#           wg:90a:kernels_src".
# CASES     "SHAPE R PAST;..." to time (SHAPE: a letter of SHAPES below)
# SANITIZE  the variant for memcheck, racecheck and synccheck ("" skips)
# NCU       "VARIANT SHAPE R PAST": ncu's warp-state, scheduler, memory
#           and source counters for one launch ("" skips)
# Run from the repository root (or a copy of kernels_src, ref/
# and tools/dev, as the device tool carries).
set -u
OUT=${OUT:-/tmp/out}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=/tmp/attn-variants
mkdir -p "$OUT" "$B"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }

VARIANTS=${VARIANTS:-"mma:90:kernels_src wg:90a:kernels_src"}
CASES=${CASES:-"A 1 32768;A 1 4096;K 1 32768;G 1 32768;A 8 32768"}
SANITIZE=${SANITIZE-mma}
NCU=${NCU:-}
# shapes NAME:H:PAGE:N_MAX
SHAPES="A:8:64:65 B:1:1:1 D:16:16:17 F:16:64:65 G:128:64:65 H:8:16:1025
K:64:64:65 I:8:64:513 J:16:64:513 L:8:64:257"

for v in $VARIANTS; do
    IFS=: read vn va kd kv <<< "$v"
    for s in $SHAPES; do
        IFS=: read n h pg nm <<< "$s"
        # the host pass must see the body the device pass compiles
        wg=0; [ "$va" = 90a ] && wg=1
        nvcc -std=c++17 -O2 -gencode arch=compute_$va,code=sm_$va -lineinfo \
            -Xptxas -v -I "$kd" -I . -DKNAME="\"$vn\"" -DKDT_ATTN_WGMMA=$wg \
            -DKDT_KV=${kv:-0} \
            -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm \
            tools/dev/attn_harness.cu ref/verify_attn.c \
            -o $B/$n.$vn > $B/$n.$vn.build 2>&1 &
    done
done
wait
for f in $B/*.build; do
    echo "== $f"
    grep -E "error|kdt_verify_attn'" -A2 "$f" | grep -E "error|registers|spill"
done > "$OUT/build.log"
el "built $(ls $B | grep -vc build) of $(ls $B/*.build | wc -l)"

# SHAPE check SPLITS SCALE SEED past:nn ...
cat > $B/checks <<'EOT'
A check 0 0.0722 1 4096:65
A check 1 0.0722 2 4096:65
A check 3 2.0 3 1000:65 0:65 63:17 64:2 65:1
A check 0 0.0722 4 0:1 1:2
A check 64 0.5 5 100:33 4096:65
A check 1 4.0 15 4096:65 200:40
A check 5 8.0 17 300:65 17:17
A check 1 0.0722 18 16:1 15:2 17:3
A check 0 -0.5 19 300:65 17:17
A check 2 -0.2 20 4096:65
B check 0 0.1 6 0:1 1:1 63:1 64:1 65:1 1000:1
B check 2 0.1 7 4096:1
D check 0 0.3 9 63:17 64:17 65:17 0:1
K check 0 0.0722 10 1000:65
K check 1 0.0722 11 64:65 63:2
F check 0 0.0722 12 129:65 4097:65
G check 0 0.0722 13 1000:65
H check 0 0.0722 14 100:1025 0:300 5:1
J check 3 0.0722 16 200:513
EOT
# the in-cluster merge (negative SPLITS): wgmma variants whose kernels
# have it
cat > $B/cchecks <<'EOT'
A check -2 0.0722 1 4096:65
A check -8 0.0722 2 4096:65
A check -3 2.0 3 1000:65 0:65 63:17 64:2 65:1
A check -16 0.5 5 100:33 4096:65
A check -5 8.0 17 300:65 17:17
A check -4 -0.5 19 300:65 17:17
B check -2 0.1 7 4096:1
D check -4 0.3 9 63:17 64:17 65:17 0:1
K check -2 0.0722 11 64:65 63:2
H check -7 0.0722 14 100:1025 0:300 5:1
J check -6 0.0722 16 200:513
EOT
clustered() { # NAME:ARCH:KDIR[:KV]
    IFS=: read _ va kd _ <<< "$1"
    [ "$va" = 90a ] && grep -q cluster_merge "$kd/verify_attn_wgmma.cuh"
}
for v in $VARIANTS; do
    vn=${v%%:*}
    while read s args; do
        [ -x $B/$s.$vn ] && echo "$B/$s.$vn $args"
    done < $B/checks
    clustered "$v" && while read s args; do
        [ -x $B/$s.$vn ] && echo "$B/$s.$vn $args"
    done < $B/cchecks
done | xargs -d '\n' -P 8 -I{} sh -c 'timeout 120 {} 2>&1 || echo "FAIL (exit $?): {}"' > "$OUT/check.log"
for v in $VARIANTS; do
    vn=${v%%:*}
    # one total: a check of SPLITS 0 prints the split it resolved to,
    # which may be a cluster (splits=-8), so the two lists cannot be
    # told apart by their output lines
    n=$(wc -l < $B/checks)
    clustered "$v" && n=$((n + $(wc -l < $B/cchecks)))
    el "checks $vn: $(grep -c "^check $vn .* ok$" "$OUT/check.log") ok of $n"
done
grep -v " ok$" "$OUT/check.log" | head -30 | tee -a "$OUT/summary.txt"

echo "$CASES" | tr ';' '\n' | while read s R past; do
    for v in $VARIANTS; do
        vn=${v%%:*}
        [ -x $B/$s.$vn ] && timeout 60 $B/$s.$vn bench $R $past 0 2>&1
    done
done | tee "$OUT/bench.log" | grep -o "bench [a-z0-9_]* .*" | \
    sed 's/PAGE=[0-9]* //' | tee -a "$OUT/summary.txt"
el "benched"

if [ -n "$SANITIZE" ] && [ -x $B/D.$SANITIZE ]; then
    {
        compute-sanitizer --tool memcheck $B/A.$SANITIZE check 3 0.5 21 40:5 17:9 200:65
        compute-sanitizer --tool racecheck $B/D.$SANITIZE check 2 0.5 24 70:9 3:17
        compute-sanitizer --tool racecheck $B/A.$SANITIZE check 1 0.5 25 90:65
        compute-sanitizer --tool synccheck $B/A.$SANITIZE check 2 0.5 27 70:9
        for v in $VARIANTS; do
            [ "${v%%:*}" = "$SANITIZE" ] && clustered "$v" && {
                compute-sanitizer --tool memcheck $B/A.$SANITIZE check -4 0.5 21 40:5 17:9 200:65
                compute-sanitizer --tool racecheck $B/D.$SANITIZE check -3 0.5 24 70:9 3:17
            }
        done
    } > "$OUT/sanitizer.log" 2>&1
    el "sanitizers ($SANITIZE): $(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer.log") clean of $(grep -cE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log")"
fi

if [ -n "$NCU" ]; then
    read nv ns nr np <<< "$NCU"
    timeout 240 ncu --clock-control none --import-source yes \
        --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section SourceCounters \
        -k regex:'kdt_verify_attn$' -s 3 -c 1 -o $B/ncu -f \
        $B/$ns.$nv bench $nr $np 0 > $B/ncu.log 2>&1
    ncu -i $B/ncu.ncu-rep > "$OUT/ncu.txt" 2>&1
    ncu -i $B/ncu.ncu-rep --page source --csv --print-source sass \
        > "$OUT/ncu-sass.csv" 2>&1
    el "ncu $NCU: $(grep -E '^\s+Duration' "$OUT/ncu.txt" | head -1)"
fi
