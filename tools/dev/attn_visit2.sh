#!/bin/bash
# attn_visit2.sh: the second GPU-host visit for verify_attn.  Builds the
# nvcc harness for both tile variants (BM = 64, two barriers a tile; BM = 32,
# two blocks an SM and one barrier a tile), checks both against the CPU
# reference, benches both, builds the library from the dist tarball in
# .xfer/attn with the faster variant as default, runs tests/gpu_verify_attn
# and kdtree-bench's verify_attn cases, the sanitizers, and the PyTorch
# baseline.  Logs in $OUT.
set -u
OUT=${OUT:-/tmp/out}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
mkdir -p "$OUT" /tmp/ah /tmp/lib
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# seconds left of a 340 s visit
left() { echo $(( 340 - ($(date +%s) - T0) )); }

# the library: unpack and configure in the background
(
    . .gpu/env.sh
    cd /tmp/lib && tar xzf "$ROOT"/.xfer/attn/kdtree-jit-*.tar.gz &&
        cd kdtree-jit-*/ && ./configure -q
) > /tmp/lib/configure.log 2>&1 &

CFGS="A:8:64:65 B:1:1:1 D:16:16:17 E:64:16:65 G:128:64:65 H:8:16:1025 I:16:64:65"
# variants: BM_NBUF (rows a block, buffers of S/P: 1 = two barriers a tile)
VARS="64_1 32_2 32_1"
for v in $VARS; do
    for c in $CFGS; do
        IFS=: read n h pg nm <<<"$c"
        # the third variant only where it is checked and benched
        [ $v = 32_1 ] && case $n in A|B|E) ;; *) continue;; esac
        nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo -I kernels_src -I tests \
            -DKDT_ATTN_BM=${v%_*} -DKDT_ATTN_NBUF=${v#*_} \
            -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm \
            tools/dev/attn_harness.cu tests/ref_verify_attn.c \
            -o /tmp/ah/$n$v > /tmp/ah/$n$v.build 2>&1 &
    done
done
wait
cat /tmp/ah/*.build /tmp/lib/configure.log > "$OUT/build.log"
el "built: $(ls /tmp/ah | grep -vc build) binaries"

cat > /tmp/ah/checks <<'EOF'
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
I check 2 1.0 16 4096:65 0:1
EOF
for v in $VARS; do
    while read b args; do
        [ -x /tmp/ah/$b$v ] && echo "/tmp/ah/$b$v $args"
    done < /tmp/ah/checks
done | xargs -P 14 -I{} sh -c '{} 2>&1' > "$OUT/check.log"
el "checks: $(grep -c ' ok$' "$OUT/check.log") ok of $(grep -c '^check' "$OUT/check.log")"
grep -v " ok$" "$OUT/check.log" | head -20

for v in $VARS; do
    {
        /tmp/ah/A$v bench 1 32768 0
        /tmp/ah/E$v bench 8 32768 0
        /tmp/ah/A$v bench 8 32768 0
        /tmp/ah/E$v bench 1 32768 0
        [ -x /tmp/ah/G$v ] && /tmp/ah/G$v bench 1 32768 0
        [ -x /tmp/ah/I$v ] && /tmp/ah/I$v bench 1 32768 0
        /tmp/ah/A$v bench 1 4096 0
    } 2>&1 | tee -a "$OUT/bench.log"
done
el "benched"

# the faster variant: summed time of the two target cases
WIN=$(python3 - "$OUT/bench.log" <<'EOF'
import re, sys
t = {}
for line in open(sys.argv[1]):
    m = re.match(r"bench BM=(\d+)/(\d+) H=(\d+) .* R=(\d+) past=(\d+) .*: ([\d.]+) us", line)
    if m:
        bm, nb, h, r, past, us = m.groups()
        bm = bm + "_" + nb
        if (h, r, past) in (("8", "1", "32768"), ("64", "8", "32768")):
            t.setdefault(bm, []).append(float(us) / (95 if h == "8" else 5000))
ok = {bm: sum(v) for bm, v in t.items() if len(v) == 2}
print(min(ok, key=ok.get) if ok else "64_1")
EOF
)
# a variant with any failed (or crashed: no line) check never wins
FAILED=""
for v in $VARS; do
    want=0
    while read b args; do [ -x /tmp/ah/$b$v ] && want=$((want + 1)); done < /tmp/ah/checks
    got=$(grep -c "BM=${v%_*}/${v#*_} .* ok$" "$OUT/check.log")
    [ "$got" -lt "$want" ] && FAILED="$FAILED $v"
done
case " $FAILED " in *" $WIN "*) WIN=64_1;; esac
el "variant: $WIN (failed: $FAILED)"

# the library with that variant, its GPU suite and kdtree-bench
(
    set -o pipefail
    . .gpu/env.sh
    cd /tmp/lib/kdtree-jit-*/ || exit 1
    sed -i "s/^#define KDT_ATTN_BM 64 /#define KDT_ATTN_BM ${WIN%_*} /; s/^#define KDT_ATTN_NBUF (KDT_ATTN_BM == 32 ? 2 : 1)/#define KDT_ATTN_NBUF ${WIN#*_}/" kernels_src/kdt_attn_tiles.h
    grep -n "define KDT_ATTN_BM\|define KDT_ATTN_NBUF" kernels_src/kdt_attn_tiles.h
    make -j16 > make.log 2>&1 || { tail -30 make.log; exit 1; }
    export KDTREE_CACHE_DIR=/tmp/kcache
    make -j16 check TESTS="tests/test_ref_verify_attn tests/gpu_verify_attn" \
        > check.log 2>&1
    grep -E "^(PASS|FAIL|SKIP|ERROR)" check.log
    cat tests/gpu_verify_attn.log | tail -40
    gcc -std=gnu11 -O2 -pthread -I src -I tools -I kernels_src -I . \
        -I/usr/local/cuda/include -DKDT_BENCH_TOOLS_DIR="\"$ROOT/tools\"" \
        -DXXH_INLINE_ALL tools/kdtree-bench.c tools/bench.c \
        tools/bench_tree_accept.c "$ROOT"/tools/bench_verify_attn.c \
        .libs/libkdtcore.a -lm -ldl -o /tmp/kdtree-bench 2>&1 | tail -5
) > "$OUT/lib.log" 2>&1
el "library: $(grep -E '^(PASS|FAIL)' "$OUT/lib.log" | tr '\n' ' ')"
KDTREE_CACHE_DIR=/tmp/kcache timeout $(( $(left) > 150 ? 110 : $(left) - 40 )) /tmp/kdtree-bench --kernel verify_attn \
    --json-out "$OUT/kbench.json" > "$OUT/kbench.txt" 2>&1
el "kdtree-bench done"
grep -A40 "Kernels on the GPU" "$OUT/kbench.txt" | head -30

SW=$WIN
{
    compute-sanitizer --tool memcheck /tmp/ah/A$SW check 3 0.5 21 40:5 17:9
    compute-sanitizer --tool memcheck /tmp/ah/A$SW check 1 0.5 22 40:5 17:9
    compute-sanitizer --tool memcheck /tmp/ah/B$SW check 2 0.5 23 3:1 0:1
    compute-sanitizer --tool racecheck /tmp/ah/A$SW check 2 0.5 24 70:9
    compute-sanitizer --tool racecheck /tmp/ah/A$SW check 1 0.5 25 20:3
    compute-sanitizer --tool racecheck /tmp/ah/E$SW check 1 0.5 26 40:3
    compute-sanitizer --tool synccheck /tmp/ah/A$SW check 2 0.5 27 70:9
} > "$OUT/sanitizer.log" 2>&1
el "harness sanitizers: $(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer.log") clean of 7"

[ "$(left)" -gt 40 ] && PYTHONUNBUFFERED=1 timeout $(( $(left) - 20 )) python3 tools/baseline_attn.py \
    --json "$OUT/baseline.json" > "$OUT/baseline.log" 2>&1
el "baseline: $(grep -c baseline "$OUT/baseline.log") cases"

[ "$(left)" -gt 30 ] && (
    . .gpu/env.sh
    cd /tmp/lib/kdtree-jit-*/ || exit 1
    export KDTREE_CACHE_DIR=/tmp/kcache
    T=tests/gpu_verify_attn
    [ -x tests/.libs/gpu_verify_attn ] && T=tests/.libs/gpu_verify_attn
    timeout $(( $(left) - 10 )) compute-sanitizer --tool memcheck $T 2>&1 | tail -5
) >> "$OUT/sanitizer.log" 2>&1
el "library sanitizers: $(tail -12 "$OUT/sanitizer.log" | grep -E 'SUMMARY|Checks' | tr '\n' ' ')"
