#!/bin/bash
# attn_visit3.sh: one GPU-host visit for verify_attn (issue 4), ~3 minutes.
# Builds tools/dev/attn_harness.cu with nvcc for every kernel variant and
# shape, checks each variant against the double CPU reference, times the
# variants side by side at the issue's cases (H=8 R=1 32k, H=64 R=8 32k,
# H=8 R=1 4k, H=128 R=1 32k), and runs compute-sanitizer (memcheck,
# racecheck, synccheck) on small shapes of the library's kernel (last: the rest is in
# $OUT even if the visit's time runs out there).  Results under $OUT:
# build.log (registers/spills from -Xptxas -v), check.log, bench.log,
# sanitizer.log, summary.txt.
#
# Variants (NAME:FLAGS): lib = kernels_src/verify_attn.cu as the library
# builds it (BM 64 / NBUF 1); n32 = the same at BM 32 (two blocks an SM);
# extra ones via VARIANTS_EXTRA, e.g. "b2:-DKDT_ATTN_BM=32,-DKDT_ATTN_NBUF=2"
# (the third session's restructured kernel and its ping-pong / own-quarter
# experiments, measured slower, are kernels_src/verify_attn.cu at 05827e3)
# (commas become spaces).  Usage (repo root on the GPU host):
#   OUT=/tmp/out bash tools/dev/attn_visit3.sh
set -u
OUT=${OUT:-/tmp/out}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
[ -f .gpu/env.sh ] && . .gpu/env.sh
mkdir -p "$OUT" /tmp/ah3
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }
ARCH=${ARCH:-sm_90}

VARIANTS="lib: n32:-DKDT_ATTN_BM=32 ${VARIANTS_EXTRA:-}"
# shapes NAME:H:PAGE:N_MAX
CFGS="A:8:64:65 B:1:1:1 D:16:16:17 E:64:16:65 G:128:64:65 H:8:16:1025"
# variants other than lib only where they are benched (their checks:
# those shapes)
SHORT="A B E G"
for v in $VARIANTS; do
    vn=${v%%:*} vf=$(echo "${v#*:}" | tr , " ")
    for c in $CFGS; do
        IFS=: read n h pg nm <<< "$c"
        case $vn in lib) ;; *) case " $SHORT " in *" $n "*) ;; *) continue;; esac;; esac
        nvcc -std=c++17 -O2 -arch=$ARCH -lineinfo -Xptxas -v -I kernels_src \
            -I tests $vf -DKNAME="\"$vn\"" -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm \
            tools/dev/attn_harness.cu tests/ref_verify_attn.c \
            -o /tmp/ah3/$n.$vn > /tmp/ah3/$n.$vn.build 2>&1 &
    done
done
wait
for f in /tmp/ah3/*.build; do
    echo "== $f"; grep -E "error|registers|spill" "$f" | grep -v "0 bytes spill stores, 0 bytes spill loads" | head -8
done > "$OUT/build.log"
el "built $(ls /tmp/ah3 | grep -vc build) binaries ($(ls /tmp/ah3/*.build | wc -l) builds); kdt_verify_attn registers: $(grep -h -A0 'registers' /tmp/ah3/A.*.build | grep -o 'Used [0-9]* registers' | sort | uniq -c | tr '\n' ' ')"

cat > /tmp/ah3/checks <<'EOF'
A check 0 0.0722 1 4096:65
A check 1 0.0722 2 4096:65
A check 3 2.0 3 1000:65 0:65 63:17 64:2 65:1
A check 0 0.0722 4 0:1 1:2
A check 64 0.5 5 100:33 4096:65
A check 1 4.0 15 4096:65 200:40
A check 5 8.0 17 300:65 17:17
A check 1 0.0722 18 16:1 15:2 17:3
B check 0 0.1 6 0:1 1:1 63:1 64:1 65:1 1000:1
B check 2 0.1 7 4096:1
D check 0 0.3 9 63:17 64:17 65:17 0:1
E check 0 0.0722 10 1000:65
E check 1 0.0722 11 64:65 63:2
G check 0 0.0722 13 1000:65
H check 0 0.0722 14 100:1025 0:300 5:1
EOF
for v in $VARIANTS; do
    vn=${v%%:*}
    while read b args; do
        [ -f /tmp/ah3/$b.$vn.build ] && echo "/tmp/ah3/$b.$vn $args"
    done < /tmp/ah3/checks
done | xargs -d '\n' -P 12 -I{} sh -c '{} 2>&1 || echo "FAIL (exit $?): {}"' > "$OUT/check.log"
for v in $VARIANTS; do
    vn=${v%%:*}
    want=0
    while read b args; do
        [ -f /tmp/ah3/$b.$vn.build ] && want=$((want + 1))
    done < /tmp/ah3/checks
    el "checks $vn: $(grep -c "^check $vn .* ok$" "$OUT/check.log") ok of $want"
done
grep -v " ok$" "$OUT/check.log" | head -20 | tee -a "$OUT/summary.txt"

# the variants alternate case by case, so drift (clocks, heat) hits all
for c in "A 1 32768" "E 8 32768" "A 1 4096" "G 1 32768"; do
    set -- $c
    for v in $VARIANTS; do
        vn=${v%%:*}
        [ -x /tmp/ah3/$1.$vn ] && timeout 60 /tmp/ah3/$1.$vn bench $2 $3 0 2>&1
    done
done | tee "$OUT/bench.log" | grep -o "bench [a-z]* .*H=[0-9]* .*R=[0-9]* past=[0-9]* .*" | \
    sed 's/PAGE=[0-9]* N_MAX=[0-9]* //; s/grid=[0-9x]*: //' | tee -a "$OUT/summary.txt"
el "benched"

{
    for v in $VARIANTS; do
        vn=${v%%:*}
        [ $vn = lib ] || continue
        compute-sanitizer --tool racecheck /tmp/ah3/D.$vn check 2 0.5 24 70:9 3:17
        compute-sanitizer --tool memcheck /tmp/ah3/A.$vn check 3 0.5 21 40:5 17:9
        compute-sanitizer --tool synccheck /tmp/ah3/A.$vn check 2 0.5 27 70:9
    done
} > "$OUT/sanitizer.log" 2>&1
el "sanitizers: $(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer.log") clean of $(grep -cE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log")"
