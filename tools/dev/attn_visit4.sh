#!/bin/bash
# attn_visit4.sh: one GPU-host visit for verify_attn's wgmma body (sm_90a)
# beside the mma.sync body, through tools/dev/attn_harness.cu (nvcc).
# Checks every variant against the double CPU reference, times them side
# by side at the issue's cases, then runs compute-sanitizer on the wgmma
# body.  Results under $OUT: build.log, check.log, bench.log,
# sanitizer.log, summary.txt.
#
# (It replaced attn_visit3.sh, the mma.sync-only visit of the third
# session, in the history up to 997a8dc.)
#
# Variants NAME:ARCH:FLAGS[:HARNESS] (commas become spaces; HARNESS, the
# harness source to build, defaults to tools/dev/attn_harness.cu: a copy
# that includes an older kernel from its own directory measures that one
# beside the current), VARIANTS to override:
#   wg  = the wgmma body as the library builds it for sm_90a
#   lib = the mma.sync body (sm_90), the old library kernel
# Usage (repo root on the GPU host): OUT=/tmp/out bash tools/dev/attn_visit4.sh
set -u
OUT=${OUT:-/tmp/out}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
[ -f .gpu/env.sh ] && . .gpu/env.sh
mkdir -p "$OUT" /tmp/ah4
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }

VARIANTS=${VARIANTS:-"wg:90a:-DKDT_ATTN_WGMMA=1 lib:90:-DKDT_ATTN_WGMMA=0"}
CASES=${CASES:-"A 1 32768;E 8 32768;A 1 4096;G 1 32768;A 1 131072;F 1 32768"}
# shapes NAME:H:PAGE:N_MAX
CFGS="A:8:64:65 B:1:1:1 D:16:16:17 E:64:16:65 F:16:64:65 G:128:64:65 H:8:16:1025"
for v in $VARIANTS; do
    IFS=: read vn va vf hs <<< "$v"
    vf=$(echo "$vf" | tr , " ")
    hs=${hs:-tools/dev/attn_harness.cu}
    for c in $CFGS; do
        IFS=: read n h pg nm <<< "$c"
        nvcc -std=c++17 -O2 -gencode arch=compute_$va,code=sm_$va -lineinfo \
            -Xptxas -v $vf -I kernels_src -I tests -DKNAME="\"$vn\"" \
            -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm \
            $hs tests/ref_verify_attn.c \
            -o /tmp/ah4/$n.$vn > /tmp/ah4/$n.$vn.build 2>&1 &
    done
done
wait
for f in /tmp/ah4/*.build; do
    echo "== $f"; grep -E "error|registers|spill" "$f" | grep -v "0 bytes spill stores, 0 bytes spill loads" | head -8
done > "$OUT/build.log"
el "built $(ls /tmp/ah4 | grep -vc build) of $(ls /tmp/ah4/*.build | wc -l)"

cat > /tmp/ah4/checks <<'EOT'
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
E check 0 0.0722 10 1000:65
E check 1 0.0722 11 64:65 63:2
F check 0 0.0722 12 129:65 4097:65
G check 0 0.0722 13 1000:65
H check 0 0.0722 14 100:1025 0:300 5:1
EOT
for v in $VARIANTS; do
    vn=${v%%:*}
    while read b args; do
        [ -x /tmp/ah4/$b.$vn ] && echo "/tmp/ah4/$b.$vn $args"
    done < /tmp/ah4/checks
done | xargs -d '\n' -P 8 -I{} sh -c 'timeout 120 {} 2>&1 || echo "FAIL (exit $?): {}"' > "$OUT/check.log"
for v in $VARIANTS; do
    vn=${v%%:*}
    el "checks $vn: $(grep -c "^check $vn .* ok$" "$OUT/check.log") ok of $(grep -c "^check $vn \|/tmp/ah4/[A-Z].$vn " "$OUT/check.log")"
done
grep -v " ok$" "$OUT/check.log" | head -30 | tee -a "$OUT/summary.txt"

# the variants alternate case by case, so drift (clocks, heat) hits all
echo "$CASES" | tr ';' '\n' | while read b R past; do
    for v in $VARIANTS; do
        vn=${v%%:*}
        [ -x /tmp/ah4/$b.$vn ] && timeout 60 /tmp/ah4/$b.$vn bench $R $past 0 2>&1
    done
done | tee "$OUT/bench.log" | grep -o "bench [a-z]* .*H=[0-9]* .*R=[0-9]* past=[0-9]* .*" | \
    sed 's/PAGE=[0-9]* N_MAX=[0-9]* //' | tee -a "$OUT/summary.txt"
el "benched"

if [ -n "${SANITIZE:-1}" ] && [ -x /tmp/ah4/D.wg ]; then
    {
        compute-sanitizer --tool memcheck /tmp/ah4/A.wg check 3 0.5 21 40:5 17:9 200:65
        compute-sanitizer --tool racecheck /tmp/ah4/D.wg check 2 0.5 24 70:9 3:17
        compute-sanitizer --tool synccheck /tmp/ah4/A.wg check 2 0.5 27 70:9
    } > "$OUT/sanitizer.log" 2>&1
    el "sanitizers: $(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer.log") clean of $(grep -cE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log")"
fi
