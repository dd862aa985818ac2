#!/bin/sh
# run.sh: the PTX interpreter's own tests (t_ptx.cc: formats,
# conversions, mma.sync and wgmma layouts, the errors it must raise), then
# the host emulation of draft_topk, build_ddtree and tree_accept
# (one pthread per CUDA thread, barriers for __syncthreads and warp ops)
# against their references in ref/ at a few shapes, and build_ddtree on
# realistic requests (t_bench.cc).  For checking kernel logic
# on a machine without a GPU; it proves nothing about timing, and its
# memory model is stronger than the GPU's.  Usage: tools/dev/emu/run.sh
# (every shape, minutes), QUICK=1 tools/dev/emu/run.sh (a few, both of
# build_ddtree's paths: what `make emu-check` runs).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here"/*.h "$here"/*.cc "$tmp"/
for k in draft_topk build_ddtree tree_accept; do
    sh "$here/prep.sh" "$top/kernels_src/$k.cu" "$tmp/$k.cc"
done
# The headers and parts they include, prepared the same way ($tmp comes
# first on the include path; verify_attn's are prep_attn.sh's).
for h in "$top"/kernels_src/*.h "$top"/kernels_src/*.cuh; do
    case ${h##*/} in verify_attn* | kdt_mma.cuh | kdt_attn_tiles.h) continue ;; esac
    sh "$here/prep.sh" "$h" "$tmp/${h##*/}"
done
for k in draft_topk build_ddtree tree_accept; do
    gcc -O2 -I"$top" -I"$top/kernels_src" -c "$top/ref/$k.c" -o "$tmp/ref_$k.o"
done
build() { # test.cc out -D...
    src=$1 out=$2
    shift 2
    g++ -O1 -std=c++17 -w -I"$tmp" -I"$top/kernels_src" -I"$top" "$@" \
        "$tmp/$src" "$tmp/emu_rt.cc" "$tmp"/ref_*.o -lpthread -o "$tmp/$out"
}
# Shapes, ;-separated.  draft_topk: V K DTYPE (1 bf16, 0 f32).
# build_ddtree: L K N_MAX iterations, both paths (the threshold path needs
# N_MAX - 1 > 16); L = 1 and K = 1 included.  15 1024 1025 keeps the
# first 512 ranks of each row in shared memory (KS < K) and reads the rest
# from global memory.  Realistic full-budget requests (t_bench.cc: K, then
# its input kind, 0 kdtree-bench's and 1 profile_case.py's, and how many):
# bit-exact, with the search's rounds, levels and barriers.  tree_accept:
# N_MAX L.
if [ "${QUICK:-0}" = 1 ]; then
    TOPK='1000 8 1;1000 300 0'
    BUILD='15 64 65 12;3 2 1 5'
    BENCH='64 0 8'
    ACCEPT='65 15;1 1'
else
    TOPK='1000 8 1;1000 300 0;20000 64 1;4097 1024 0;8193 1 1;7 7 1'
    TOPK="$TOPK;30001 1024 1;1 1 0;129 128 1;12000 64 1;200 64 1"
    TOPK="$TOPK;163840 64 1;163840 16 0"
    BUILD='15 64 65 12;4 3 40 20;1 8 9 10;6 1 20 10;3 2 1 5;1 64 100 10'
    BUILD="$BUILD;30 1 40 10;15 16 200 10;5 40 300 8;15 512 513 4"
    BUILD="$BUILD;8 300 1024 2;4 1024 1025 2;15 1024 1025 2"
    BENCH='64 0 8;512 0 8;512 1 3'
    ACCEPT='65 15;1 1;300 40'
fi
fail=0
g++ -O1 -std=c++17 -w -I"$tmp" "$tmp/t_ptx.cc" "$tmp/emu_rt.cc" -lpthread -o "$tmp/t_ptx" && "$tmp/t_ptx" || fail=1
IFS=';'
for s in $TOPK; do
    IFS=' ' && set -- $s
    build t_topk.cc t -DKDT_V=$1 -DKDT_K=$2 -DKDT_DTYPE=$3 && "$tmp/t" || fail=1
done
IFS=';'
for s in $BUILD; do
    IFS=' ' && set -- $s
    build t_build.cc t -DKDT_L=$1 -DKDT_K=$2 -DKDT_N_MAX=$3 -DITERS=$4 && "$tmp/t" || fail=1
done
IFS=';'
for s in $BENCH; do
    IFS=' ' && set -- $s
    build t_bench.cc t -DKDT_L=15 -DKDT_K=$1 -DKDT_N_MAX=$(($1 + 1)) && "$tmp/t" $2 $3 | tail -1 || fail=1
done
IFS=';'
for s in $ACCEPT; do
    IFS=' ' && set -- $s
    build t_accept.cc t -DKDT_N_MAX=$1 -DKDT_L=$2 && "$tmp/t" || fail=1
done
exit $fail
