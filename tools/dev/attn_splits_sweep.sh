#!/bin/bash
# attn_splits_sweep.sh: times verify_attn at every split count through the
# standalone harness (tools/dev/attn_harness.cu), for fitting the split
# rule's constants (src/kernels/verify_attn_splits.h) with
# tools/dev/attn_splits_fit.py.  Run on a GPU host from the repository
# root (or a copy of kernels_src, ref, src/kernels and tools/dev):
#
#   OUT=/tmp/out bash tools/dev/attn_splits_sweep.sh
#
# ARCHS "90a 90" by default (90a: the wgmma body; any other: mma.sync).
# Writes $OUT/bench_<arch>.log; the first line of each case is the rule's
# own pick (SPLITS 0).
set -u
OUT=${OUT:-/tmp/out}
B=/tmp/attn-splits
mkdir -p "$OUT" "$B"
ARCHS=${ARCHS:-"90a 90"}
# NAME:H:N_MAX, PAGE 64
SHAPES="A:8:65 F:16:65 K:64:65 G:128:65 P:8:257 Q:16:257 I:8:513 J:16:513"
for a in $ARCHS; do
    wg=0; [ "$a" = 90a ] && wg=1
    for s in $SHAPES; do
        IFS=: read n h nm <<< "$s"
        nvcc -std=c++17 -O2 -gencode arch=compute_$a,code=sm_$a -I kernels_src \
            -I . -DKNAME="\"$a\"" -DKDT_ATTN_WGMMA=$wg -DKDT_H=$h -DKDT_PAGE=64 \
            -DKDT_N_MAX=$nm tools/dev/attn_harness.cu ref/verify_attn.c \
            -o $B/$n.$a > $B/$n.$a.build 2>&1 &
    done
done
wait
S4="0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16"
S32="0 1 2 3 4 5 6 7 8 10 12 14 16 18 20 24 28 32 40 48 64"
SBIG="0 1 2 3 4 6 8 12 16" # the long cases: few splits are interesting
for a in $ARCHS; do
    for s in $SHAPES; do
        n=${s%%:*}
        [ -x $B/$n.$a ] || { echo "no $n.$a: $(tail -3 $B/$n.$a.build)"; continue; }
        for R in 1 8; do
            for past in 4096 32768; do
                S=$S4
                [ $past = 32768 ] && S=$S32
                case $n$R$past in [GKIJ]832768) S=$SBIG;; esac
                timeout 200 $B/$n.$a bench $R $past $S 2>&1
            done
        done
    done > "$OUT/bench_$a.log"
done
