#!/bin/bash
# attn_emu.sh [--mutants] [KERNEL.cu ...]: verify_attn on the host emulator
# (tools/dev/emu: one pthread per CUDA thread, prep_attn.sh's PTX
# interpreter) against ref/verify_attn.c; no GPU needed.
#
# Both bodies (BODIES, default "mma wgmma"): the mma.sync one, and the
# wgmma one that verify_attn.cu includes when KDT_ATTN_WGMMA is 1
# (built with -DKDT_ATTN_WGMMA=1, as NVRTC's sm_90a target selects it),
# launched with kdt_attn_tiles.h's geometry of each.  A shape is
# H_PAGE_NMAX, or H_PAGE_NMAX_e4m3_MATH for an e4m3 cache (-DKDT_KV=1)
# in either arithmetic (MATH bf16 or e4m3: -DKDT_MATH=0 or 1), its cases
# with the cache's scale after an @; the bodies of E4M3_BODIES (default
# "mma wgmma": a body joins when it reads an e4m3 cache) run those,
# the shapes of SHAPES_e4m3_<body> where it has its own (the wgmma body:
# both arithmetics, clusters, H up to 128 and N_MAX up to 1025, one at a
# time: the emulator runs all N_MAX x H rows' tiles of a request)
# (E4M3_SHAPES, when set, replaces the shared list and the wgmma body's;
# SHAPES, when set, replaces every list: e.g. SHAPES=8_16_17_e4m3_e4m3).
#
# Default kernel: kernels_src/verify_attn.cu with the headers beside it
# (a KERNEL.cu elsewhere may bring its own .cuh and .h files; the rest
# come from kernels_src).  Each entry of VARIANTS (default "lib": the
# kernel as it is; an entry NAME=VALUE[,...] adds -DKDT_ATTN_NAME=VALUE
# for an experiment's switches), under both cp.async modes (lazy: copies
# land at wait_group; eager: at issue) and, for wgmma, both wgmma modes
# (lazy: a thread's accumulators are computed at its wait_group, from
# shared memory as it is then; eager: at issue), paired.  Shapes: mma.sync
# H 1..8, rows 1..17 (and 33), past 0..200, PAGE 1 and 16; wgmma H 1..16,
# rows 1..65, past 0..300, PAGE 1, 16 and 64, negative scales, and splits
# as clusters (merged in the cluster); an e4m3 cache H 1..128, rows 1..513,
# past 0..300, PAGE 1, 16 and 64 (and 48 and 128 in FP8 arithmetic),
# cache scales 0.25..3; shuffled pages, several requests, splits 1..5 (the
# merge kernel).  QUICK=1: two shapes
# a body and two e4m3 ones (the wgmma body four: both arithmetics, PAGE
# 1, 16 and 128), lazy only.
# The race checker (tools/dev/emu/emu_race.h) is on in every run.
#
# --mutants: the test must be able to fail.  Runs QUICK on deliberately
# broken copies of each body (attn_mutants.txt for mma.sync, and
# attn_wgmma_mutants.txt: fragment layouts, operand orders, swizzles and
# descriptors, missing waits, barriers and fences, ...) and fails unless
# every one of them fails.
#
# --fp8-long: the FP8 arithmetic's sums over a long range.  With
# EMU_FP8_ACC=13 (the emulator's FP8 MMA steps add as the FP8 wgmma of
# sm_90a was measured to, tools/dev/emu/emu_types.h), each body of
# BODIES over an e4m3 cache in FP8 arithmetic, H=8, one node, 32,768
# positions unsplit, softmax scale 0.0722, cache scale 0.5 (the GPU
# suite's e4m3_long_prefix): a body that carries its P V or row sums in
# the tensor cores' accumulators across the range is out of the bound
# (527757e's wgmma body and 6ee361f's mma.sync body: o off by 0.012 and
# 0.013), one that restarts them is not (0.0003).  About four minutes a
# body on one core.
#
# EMU_CASES, when set, replaces every shape's cases (SPLITS:SCALE:SEED:
# past/nodes,...[@kv_scale], as in cases() below).
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
if [ "${1:-}" = --fp8-long ]; then
    shift
    export EMU_FP8_ACC=13
    EMU_CASES="1:0.0722:92:32768/1@0.5" SHAPES=8_1_1_e4m3_e4m3 QUICK=1
    E4M3_BODIES=${BODIES:-mma wgmma}
fi
[ $# -gt 0 ] || set -- "$top/kernels_src/verify_attn.cu"
VARIANTS=${VARIANTS:-lib}
BODIES=${BODIES:-mma wgmma}
cp "$here"/emu/*.h "$here"/emu/emu_rt.cc "$here"/emu/t_attn.cc "$tmp"/
gcc -O2 -I"$top" -c "$top/ref/verify_attn.c" -o "$tmp/ref.o"
g++ -O1 -std=c++17 -w -c "$tmp/emu_rt.cc" -o "$tmp/emu_rt.o"

# body shape -> its cases SPLITS:SCALE:SEED:past/nn,... (-S: S splits as
# one cluster)
cases() {
    if [ -n "${EMU_CASES:-}" ]; then echo "$EMU_CASES"; return; fi
    case $1_$2 in
    mma_8_16_17) echo "1:0.0722:1:40/17 2:0.5:2:200/17,3/5 3:2.0:3:0/17,16/1,17/9 1:8.0:4:15/2 5:0.3:5:100/3";;
    mma_1_1_17) echo "1:0.0722:6:33/17 3:1.0:7:0/1,1/2,63/17 2:4.0:8:100/17";;
    mma_3_16_5) echo "1:0.1:9:0/5,31/4,32/1 4:1.0:10:200/5";;
    mma_8_1_1) echo "1:0.5:11:0/1,64/1,65/1 2:0.5:12:130/1";;
    mma_2_16_33) echo "1:0.2:13:48/33 3:1.5:14:7/20,0/33";;
    *_8_16_17_e4m3_bf16) echo "1:0.0722:31:40/17 2:0.5:32:200/17,3/5@0.37 3:2.0:33:0/17,16/1,17/9@2.5 1:8.0:34:15/2 5:-0.3:35:300/3@0.5 1:4.0:36:300/9@2";;
    *_8_16_17_e4m3_e4m3) echo "1:0.0722:41:40/17 2:0.5:42:200/17,3/5@0.37 3:2.0:43:0/17,16/1,17/9@2.5 1:8.0:44:15/2 5:-0.3:45:300/3@0.5 1:4.0:46:300/9@2";;
    wgmma_8_16_17_e4m3_*) echo "1:0.0722:61:40/17 2:0.5:62:200/17,3/5@0.37 3:2.0:63:0/17,16/1,17/9@2.5 -2:-0.7:64:300/17@0.5 -4:1.0:65:300/17,5/3@1.75 5:-0.3:66:300/3@0.5";;
    wgmma_1_1_65_e4m3_*) echo "1:0.1:67:0/65,63/65,64/1@0.25 1:1.0:68:300/65@3 -3:0.5:69:230/64@1.5";;
    wgmma_16_64_33_e4m3_*) echo "1:0.0722:70:64/33,127/1@2 -2:-0.3:71:200/33@0.6 3:0.3:72:5/20,0/0";;
    wgmma_8_1_1_e4m3_*) echo "1:0.5:73:0/1,64/1,65/1@0.8 -2:0.5:74:130/1 -8:0.5:75:600/1@1.25";;
    wgmma_64_16_5_e4m3_*) echo "1:0.05:76:30/3,0/5@0.7 -2:0.3:77:200/2@1.5";;
    wgmma_128_1_1_e4m3_*) echo "1:0.05:78:70/1,5/1@1.25 -3:0.2:79:300/1@0.5";;
    wgmma_1_64_513_e4m3_*) echo "1:0.1:80:100/513@0.5 2:0.3:81:0/300,190/129@2";;
    wgmma_1_16_1025_e4m3_*) echo "-2:0.1:82:40/1025@0.75";;
    wgmma_2_1_257_e4m3_*) echo "1:0.2:83:20/257,64/100@0.4";;
    wgmma_3_48_33_e4m3_*) echo "1:0.1:84:100/33,47/20@0.6 -2:0.3:85:250/33@1.5";;
    wgmma_2_128_65_e4m3_*) echo "1:0.2:86:300/65,130/7@0.9 3:0.5:87:200/65";;
    *_1_1_17_e4m3_bf16) echo "1:0.0722:36:33/17 3:1.0:37:0/1,1/2,63/17@0.25 2:4.0:38:100/17@3";;
    *_1_1_17_e4m3_e4m3) echo "1:0.0722:46:33/17 3:1.0:47:0/1,1/2,63/17@0.25 2:4.0:48:100/17@3";;
    *_3_16_5_e4m3_e4m3) echo "1:0.1:49:0/5,31/4,32/1@0.6 4:1.0:50:200/5";;
    *_2_16_33_e4m3_bf16) echo "1:0.2:51:48/33@1.5 3:1.5:52:7/20,0/33";;
    *_2_16_33_e4m3_e4m3) echo "1:0.2:53:260/33@1.5 3:1.5:54:7/20,0/33";;
    *_8_1_1_e4m3_bf16) echo "1:0.5:55:0/1,64/1,65/1@0.8 2:0.5:56:130/1";;
    *_1_1_1_e4m3_*) echo "1:0.0722:61:0/1,5/1@0.5 3:1.0:62:300/1";;
    *_128_1_1_e4m3_*) echo "1:0.0722:63:70/1@2 2:0.5:64:40/1,0/0";;
    *_64_16_1_e4m3_*) echo "1:0.0722:70:200/1@0.9 2:-2.0:71:17/1";;
    *_16_64_65_e4m3_*) echo "1:0.0722:65:100/65,0/7@0.8";;
    *_8_1_65_e4m3_*) echo "1:0.1:69:33/65,1/20@1.2";;
    *_8_64_65_e4m3_*) echo "1:4.0:90:1300/65,200/40@0.8";;
    *_1_16_257_e4m3_*) echo "1:0.0722:66:20/257@1.5 2:0.3:67:0/100";;
    *_1_64_513_e4m3_*) echo "1:0.0722:68:64/513@0.7";;
    wgmma_8_16_17) echo "1:0.0722:1:40/17 1:0.5:21:300/17 2:0.5:2:200/17,3/5 3:2.0:3:0/17,16/1,17/9 -2:-0.7:4:300/17 -4:1.0:5:300/17,5/3 5:0.3:6:100/3";;
    wgmma_1_1_65) echo "1:0.1:7:0/65,63/65,64/1 1:1.0:8:250/65,1/2 2:1.0:21:300/65 -3:0.5:9:230/64";;
    wgmma_16_64_33) echo "1:0.0722:10:64/33,127/1 -2:-0.3:11:200/33 3:0.3:12:5/20,0/0";;
    wgmma_3_16_5) echo "1:0.1:13:0/5,31/4,32/1 4:1.0:14:200/5 -5:2.0:15:250/5";;
    wgmma_8_1_1) echo "1:0.5:16:0/1,64/1,65/1 -2:0.5:17:130/1 -8:0.5:22:600/1";;
    wgmma_2_64_40) echo "1:0.2:18:48/40 3:1.5:19:7/20,0/40,60/33 -3:-1.0:20:150/40";;
    esac
}
SHAPES_mma="8_16_17 1_1_17 3_16_5 8_1_1 2_16_33"
SHAPES_wgmma="8_16_17 1_1_65 16_64_33 3_16_5 8_1_1 2_64_40"
# an e4m3 cache, both arithmetics (the bodies of E4M3_BODIES)
SHAPES_e4m3="8_16_17_e4m3_bf16 8_16_17_e4m3_e4m3 1_1_17_e4m3_bf16
    1_1_17_e4m3_e4m3 3_16_5_e4m3_e4m3 2_16_33_e4m3_bf16 2_16_33_e4m3_e4m3
    8_1_1_e4m3_bf16 1_1_1_e4m3_bf16 1_1_1_e4m3_e4m3 128_1_1_e4m3_bf16
    128_1_1_e4m3_e4m3 64_16_1_e4m3_bf16 64_16_1_e4m3_e4m3
    16_64_65_e4m3_bf16 16_64_65_e4m3_e4m3 8_1_65_e4m3_bf16
    8_1_65_e4m3_e4m3 1_16_257_e4m3_bf16 1_16_257_e4m3_e4m3
    1_64_513_e4m3_bf16 1_64_513_e4m3_e4m3 8_64_65_e4m3_e4m3"
SHAPES_e4m3=${E4M3_SHAPES:-$SHAPES_e4m3}
SHAPES_e4m3_wgmma="8_16_17_e4m3_bf16 1_1_65_e4m3_bf16 16_64_33_e4m3_bf16
    8_1_1_e4m3_bf16 64_16_5_e4m3_bf16 128_1_1_e4m3_bf16 1_64_513_e4m3_bf16
    1_16_1025_e4m3_bf16 2_1_257_e4m3_bf16 8_16_17_e4m3_e4m3 1_1_65_e4m3_e4m3
    16_64_33_e4m3_e4m3 8_1_1_e4m3_e4m3 64_16_5_e4m3_e4m3 128_1_1_e4m3_e4m3
    1_64_513_e4m3_e4m3 1_16_1025_e4m3_e4m3 2_1_257_e4m3_e4m3 8_64_65_e4m3_e4m3
    3_48_33_e4m3_e4m3 2_128_65_e4m3_e4m3"
SHAPES_e4m3_wgmma=${E4M3_SHAPES:-$SHAPES_e4m3_wgmma}
MODES_mma="lazy eager"
MODES_wgmma="lazy,lazy eager,eager"
if [ "${QUICK:-0}" = 1 ]; then
    SHAPES_mma="8_16_17 1_1_17" MODES_mma=lazy
    SHAPES_wgmma="8_16_17 1_1_65" MODES_wgmma=lazy,lazy
    SHAPES_e4m3="8_16_17_e4m3_bf16 8_16_17_e4m3_e4m3"
    SHAPES_e4m3_wgmma="8_16_17_e4m3_bf16 1_1_65_e4m3_bf16 8_16_17_e4m3_e4m3
        2_128_65_e4m3_e4m3"
fi
E4M3_BODIES=${E4M3_BODIES:-mma wgmma}
for body in $E4M3_BODIES; do
    eval "SHAPES_$body=\"\$SHAPES_$body \${SHAPES_e4m3_$body:-\$SHAPES_e4m3}\""
done
# SHAPES, when set, is every body's whole list (one shape to look at)
if [ -n "${SHAPES:-}" ]; then
    for body in $BODIES; do eval "SHAPES_$body=\$SHAPES"; done
fi

# kernel dirs: $tmp/k<i> (m<i> for mutants) hold a body's prepped
# kernel.cc and the headers it includes; $1 = its source dir (a copy of
# kernels_src, the kernel as kernel.cu)
KDIRS=""
# the headers verify_attn may include: the shared kdt_* ones and its own
HDRS="kdt_*.h kdt_*.cuh verify_attn*.cuh"
srcdir() { # dir kernel.cu: kernels_src's, then the kernel's own
    mkdir -p "$1"
    for d in "$top/kernels_src" "$(dirname "$2")"; do
        (cd "$d" && for h in $HDRS; do [ -f "$h" ] && cp "$h" "$1"/; done) || true
    done
    cp "$2" "$1/kernel.cu"
}
prep() { # dir srcdir name body
    mkdir -p "$1"
    cp "$2"/*.h "$1"/
    for h in "$2"/*.cuh; do
        sh "$here/emu/prep_attn.sh" "$h" "$1/${h##*/}"
    done
    sh "$here/emu/prep_attn.sh" "$2/kernel.cu" "$1/kernel.cc"
    echo "$3" > "$1/name"
    echo "$4" > "$1/body"
    KDIRS="$KDIRS $1"
}
i=0
for k in "$@"; do
    srcdir "$tmp/s$i" "$k"
    for body in $BODIES; do
        prep "$tmp/k$i$body" "$tmp/s$i" "$(basename "$k" .cu)" "$body"
    done
    i=$((i + 1))
done
if [ $MUTANTS = 1 ]; then
    KDIRS=""
    VARIANTS=${VARIANTS%% *}
    srcdir "$tmp/orig" "$1"
    n=0
    for body in $BODIES; do
        list=$here/attn_mutants.txt
        [ "$body" = wgmma ] && list=$here/attn_wgmma_mutants.txt
        # FILE|sed expression: each must break the kernel.  FILE: a file
        # of the kernel's source dir; cu, body, e4m3, cuh and fp8 name the
        # kernel, the mma.sync body, its e4m3 part, kdt_mma.cuh and
        # kdt_fp8.cuh.
        while IFS='|' read -r f expr; do
            case $f in ""|"#"*) continue;; esac
            case $f in
            cu) f=kernel.cu;; body) f=verify_attn_mma.cuh;;
            e4m3) f=verify_attn_mma_e4m3.cuh;;
            cuh) f=kdt_mma.cuh;; fp8) f=kdt_fp8.cuh;;
            esac
            n=$((n + 1))
            rm -rf "$tmp/ms"; cp -r "$tmp/orig" "$tmp/ms"
            [ -f "$tmp/ms/$f" ] || { echo "mutant $n: no file $f"; exit 1; }
            sed -i "$expr" "$tmp/ms/$f"
            if cmp -s "$tmp/orig/$f" "$tmp/ms/$f"; then
                echo "mutant $n ($body, $f: $expr) changed nothing"; exit 1
            fi
            prep "$tmp/m$n" "$tmp/ms" "mutant$n: $body: $f: $expr" "$body"
        done < "${MUTANT_LIST:-$list}"
    done
fi

for d in $KDIRS; do
    body=$(cat "$d/body")
    defs=
    [ "$body" = wgmma ] && defs=-DKDT_ATTN_WGMMA=1
    for v in $VARIANTS; do
        vdefs=$(echo "$v" | tr , '\n' | grep = | sed 's/^/-DKDT_ATTN_/' | tr '\n' ' ' || true)
        vn=$(echo "$v" | tr ',=' '__')
        eval "shapes=\$SHAPES_$body"
        for s in $shapes; do
            IFS=_ read h pg nm kv math <<< "$s"
            kdefs=
            [ "$kv" = e4m3 ] && kdefs="-DKDT_KV=1 -DKDT_MATH=$([ "$math" = e4m3 ] && echo 1 || echo 0)"
            echo "g++ -O1 -std=c++17 -w -I$d -I$tmp -I$top -DKERNEL='\"kernel.cc\"' $defs $vdefs $kdefs -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm $tmp/t_attn.cc $tmp/emu_rt.o $tmp/ref.o -lpthread -o $d/t_${vn}_$s"
        done
    done
done > "$tmp/builds"
xargs -d '\n' -P "$JOBS" -I{} sh -c {} < "$tmp/builds" || true

for d in $KDIRS; do
    body=$(cat "$d/body")
    eval "shapes=\$SHAPES_$body modes=\$MODES_$body"
    for v in $VARIANTS; do
        vn=$(echo "$v" | tr ',=' '__')
        for s in $shapes; do
            b=$d/t_${vn}_$s
            for mode in $modes; do
                cp=${mode%,*} wg=${mode#*,}
                # a crash (or a missing binary) prints no "ok" line: a failure
                echo "{ [ -x $b ] && EMU_CPASYNC=$cp EMU_WGMMA=$wg timeout 600 $b $(cases "$body" "$s") || echo 'FAIL (exit status '\$?')'; } 2>&1 | sed 's|^|$(basename $d) $v $mode: |' > $b.$cp.out"
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
