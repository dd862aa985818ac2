#!/bin/bash
# attn_emu.sh [--mutants] [KERNEL.cu ...]: verify_attn on the host emulator
# (tools/dev/emu: one pthread per CUDA thread, prep_attn.sh's PTX
# interpreter) against ref/verify_attn.c; no GPU needed.
#
# Default kernel: kernels_src/verify_attn.cu, with its mma.sync body
# kernels_src/verify_attn_mma.cuh and kernels_src/kdt_mma.cuh (a KERNEL.cu
# elsewhere may bring its own of either beside it).  Each
# entry of VARIANTS (default "lib": the kernel as it is; an entry
# NAME=VALUE[,...] adds -DKDT_ATTN_NAME=VALUE for an experiment's
# switches), under both cp.async modes
# (lazy: copies land at wait_group; eager: at issue).  Shapes: H 1..8, rows
# 1..17 (and 33), past 0..200, PAGE 1 and 16, shuffled pages, several
# requests, splits 1..5 (the merge kernel).  QUICK=1: two shapes, lazy only.
#
# --mutants: the test must be able to fail.  Runs QUICK on deliberately
# broken copies (fragment layouts, operand orders, a missing cp.async wait,
# a refill into a stage still being read) and fails unless every one of
# them fails.
#
# It proves nothing about timing, and its memory model is stronger than
# the GPU's (no reordering between barriers).  JOBS: parallel builds and
# runs (default: the CPU count).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
JOBS=${JOBS:-$(nproc)}
MUTANTS=0
if [ "${1:-}" = --mutants ]; then MUTANTS=1; QUICK=1; shift; fi
[ $# -gt 0 ] || set -- "$top/kernels_src/verify_attn.cu"
VARIANTS=${VARIANTS:-lib}
cp "$here"/emu/*.h "$here"/emu/emu_rt.cc "$here"/emu/t_attn.cc "$tmp"/
gcc -O2 -I"$top" -c "$top/ref/verify_attn.c" -o "$tmp/ref.o"
g++ -O1 -std=c++17 -w -c "$tmp/emu_rt.cc" -o "$tmp/emu_rt.o"

# shape H_PAGE_NMAX -> its cases SPLITS:SCALE:SEED:past/nn,...
cases() {
    case $1 in
    8_16_17) echo "1:0.0722:1:40/17 2:0.5:2:200/17,3/5 3:2.0:3:0/17,16/1,17/9 1:8.0:4:15/2 5:0.3:5:100/3";;
    1_1_17) echo "1:0.0722:6:33/17 3:1.0:7:0/1,1/2,63/17 2:4.0:8:100/17";;
    3_16_5) echo "1:0.1:9:0/5,31/4,32/1 4:1.0:10:200/5";;
    8_1_1) echo "1:0.5:11:0/1,64/1,65/1 2:0.5:12:130/1";;
    2_16_33) echo "1:0.2:13:48/33 3:1.5:14:7/20,0/33";;
    esac
}
SHAPES="8_16_17 1_1_17 3_16_5 8_1_1 2_16_33"
MODES="lazy eager"
[ "${QUICK:-0}" = 1 ] && SHAPES="8_16_17 1_1_17" && MODES=lazy

# kernel dirs: $tmp/k<i> holds the prepped kernel.cc, verify_attn_mma.cuh,
# kdt_mma.cuh and kdt_math.cuh
KDIRS=""
# beside KERNEL.cu NAME: KERNEL.cu's own NAME, else the checkout's
beside() {
    f=$(dirname "$1")/$2
    [ -f "$f" ] || f=$top/kernels_src/$2
    echo "$f"
}
prep() { # dir kernel.cu body.cuh mma.cuh
    mkdir -p "$1"
    sh "$here/emu/prep_attn.sh" "$4" "$1/kdt_mma.cuh"
    # kdt_mma.cuh's own include, prepped beside it (its asm too)
    sh "$here/emu/prep_attn.sh" "$top/kernels_src/kdt_math.cuh" \
        "$1/kdt_math.cuh"
    sh "$here/emu/prep_attn.sh" "$3" "$1/verify_attn_mma.cuh"
    sh "$here/emu/prep_attn.sh" "$2" "$1/kernel.cc"
    echo "$(basename "$2" .cu)" > "$1/name"
    KDIRS="$KDIRS $1"
}
i=0
for k in "$@"; do
    prep "$tmp/k$i" "$k" "$(beside "$k" verify_attn_mma.cuh)" \
        "$(beside "$k" kdt_mma.cuh)"
    i=$((i + 1))
done
if [ $MUTANTS = 1 ]; then
    KDIRS=""
    VARIANTS=${VARIANTS%% *}
    k=$1
    body=$(beside "$k" verify_attn_mma.cuh)
    mma=$(beside "$k" kdt_mma.cuh)
    n=0
    # file|sed expression: each must break the kernel
    while IFS='|' read -r f expr; do
        case $f in ""|"#"*) continue;; esac
        n=$((n + 1))
        cp "$k" "$tmp/m.cu"; cp "$body" "$tmp/m.body"; cp "$mma" "$tmp/m.cuh"
        sed -i "$expr" "$tmp/m.$f"
        if cmp -s "$k" "$tmp/m.cu" && cmp -s "$body" "$tmp/m.body" &&
            cmp -s "$mma" "$tmp/m.cuh"; then
            echo "mutant $n ($f: $expr) changed nothing"; exit 1
        fi
        prep "$tmp/m$n" "$tmp/m.cu" "$tmp/m.body" "$tmp/m.cuh"
        echo "mutant$n: $f: $expr" > "$tmp/m$n/name"
    done < "${MUTANT_LIST:-$here/attn_mutants.txt}"
fi

for d in $KDIRS; do
    for v in $VARIANTS; do
        defs=$(echo "$v" | tr , '\n' | grep = | sed 's/^/-DKDT_ATTN_/' | tr '\n' ' ' || true)
        vn=$(echo "$v" | tr ',=' '__')
        for s in $SHAPES; do
            IFS=_ read h pg nm <<< "$s"
            echo "g++ -O1 -std=c++17 -w -I$d -I$tmp -I$top/kernels_src -I$top -DKERNEL='\"kernel.cc\"' $defs -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm $tmp/t_attn.cc $tmp/emu_rt.o $tmp/ref.o -lpthread -o $d/t_${vn}_$s"
        done
    done
done > "$tmp/builds"
xargs -d '\n' -P "$JOBS" -I{} sh -c {} < "$tmp/builds" || true

for d in $KDIRS; do
    for v in $VARIANTS; do
        vn=$(echo "$v" | tr ',=' '__')
        for s in $SHAPES; do
            b=$d/t_${vn}_$s
            for mode in $MODES; do
                # a crash (or a missing binary) prints no "ok" line: a failure
                echo "{ [ -x $b ] && EMU_CPASYNC=$mode timeout 600 $b $(cases $s) || echo 'FAIL (exit status '\$?')'; } 2>&1 | sed 's|^|$(basename $d) $v $mode: |' > $b.$mode.out"
            done
        done
    done
done > "$tmp/runs"
xargs -d '\n' -P "$JOBS" -I{} sh -c {} < "$tmp/runs" || true

if [ $MUTANTS = 0 ]; then
    cat "$tmp"/k*/*.out
    nok=$(cat "$tmp"/k*/*.out | grep -c ' ok$' || true)
    nbad=$(cat "$tmp"/k*/*.out | grep -c 'FAIL' || true)
    echo "attn_emu: $nok cases ok, $nbad failed"
    [ "$nbad" = 0 ] && [ "$nok" -gt 0 ]
else
    caught=0 n=0
    for d in $KDIRS; do
        n=$((n + 1))
        if cat "$d"/*.out | grep -q 'FAIL'; then
            caught=$((caught + 1)); res=caught
        else
            res="NOT CAUGHT"
        fi
        echo "$(cat "$d/name"): $res ($(cat "$d"/*.out | grep -m1 -o 'emu: [^(]*\|maxerr [^,]*, .*FAIL' || true))"
    done
    echo "attn_emu --mutants: $caught of $n caught"
    [ "$caught" = "$n" ]
fi
