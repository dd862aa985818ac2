#!/bin/bash
# attn_sass.sh: verify_attn's SASS and ptxas resource lines for both bodies
# (sm_90a: wgmma; sm_120: mma.sync) at the shapes whose code paths differ,
# so that a refactor can be shown to change no instruction without a GPU.
#
#   bash tools/dev/attn_sass.sh DIR [KERNELS_SRC]
#
# SHAPES: H:PAGE:N_MAX[:KV:MATH] each (KV, MATH 0 bf16, 1 e4m3; bf16 when
# left out); writes DIR/<arch>.<H>_<PAGE>_<N_MAX>[_kv<KV>_math<MATH>].sass (cuobjdump -sass with the
# addresses and encodings stripped) and DIR/ptxas.txt.
#
#   bash tools/dev/attn_sass.sh --compare A B
#
# compares two such DIRs: per file, identical, or how much of
# kdt_verify_attn's opcode sequence (registers ignored) the two share and
# whether they hold the same instructions in another order.  KERNELS_SRC defaults to this checkout's kernels_src
# (give an older one, e.g. a `git worktree` of the commit before, for the
# "before" side); CUOBJDUMP names the tool where it is not on PATH
# (pip's nvidia-cuda-cuobjdump carries one).  Compiles with the library's
# NVRTC options (-std=c++17 -lineinfo -DKDT_*) through nvcc -cubin.
# Both sides of a comparison come from the same compiler, so the SASS
# compare holds; but nvcc's register allocation is not always NVRTC's
# (at 252-255 registers, nvcc spills at shapes the library's builds do
# not), so for spills read `kdtree-cache populate` and `resources`, or
# tests/test_compile_attn, not ptxas.txt.
set -eu
if [ "${1:-}" = --compare ]; then
    # (diff exits 1 on a difference: under set -e that would end the
    # comparison before the SASS files)
    diff "$2/ptxas.txt" "$3/ptxas.txt" >/dev/null && echo "ptxas lines identical" \
        || diff "$2/ptxas.txt" "$3/ptxas.txt" || true
    for f in "$2"/*.sass; do
        python3 - "$f" "$3/$(basename "$f")" <<'PY'
import collections, difflib, os, re, sys
def ops(path):
    out, fn = [], None
    for line in open(path):
        m = re.search(r'Function : (\S+)', line)
        if m:
            fn = m.group(1)
            continue
        m = re.match(r'\s*(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)', line)
        if m and fn == 'kdt_verify_attn':
            out.append(m.group(2))
    return out
a, b = sys.argv[1:3]
name = os.path.basename(a)
if open(a).read() == open(b).read():
    print(f"{name}: identical")
else:
    x, y = ops(a), ops(b)
    r = difflib.SequenceMatcher(None, x, y, autojunk=False).ratio()
    same = collections.Counter(x) == collections.Counter(y)
    print(f"{name}: {len(x)} -> {len(y)} instructions, opcode sequence "
          f"{r:.4f} alike, {'the same' if same else 'other'} opcode counts")
PY
    done
    exit 0
fi
DIR=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=${2:-$ROOT/kernels_src}
SHAPES=${SHAPES:-"8:64:65 1:1:1 128:16:1025 16:64:513"}
ARCHS=${ARCHS:-"sm_90a sm_120"}
mkdir -p "$DIR"
: > "$DIR/ptxas.txt"
for a in $ARCHS; do
    for s in $SHAPES; do
        IFS=: read h pg nm kv math <<< "$s"
        n=$a.${h}_${pg}_$nm${kv:+_kv$kv}${math:+_math$math}
        nvcc -std=c++17 -cubin -arch=$a -lineinfo -Xptxas -v \
            -DKDT_H=$h -DKDT_PAGE=$pg -DKDT_N_MAX=$nm \
            ${kv:+-DKDT_KV=$kv} ${math:+-DKDT_MATH=$math} \
            -o "$DIR/$n.cubin" "$SRC/verify_attn.cu" 2> "$DIR/$n.log"
        grep -E "Compiling entry|registers|spill" "$DIR/$n.log" \
            | sed "s/^/$n: /" >> "$DIR/ptxas.txt"
        ${CUOBJDUMP:-cuobjdump} -sass "$DIR/$n.cubin" \
            | sed -E 's@/\*[0-9a-f]{4,}\*/@@; s@/\* 0x[0-9a-f]+ \*/@@; s/[[:space:]]+$//' \
            | grep -v '^[[:space:]]*$' > "$DIR/$n.sass"
        rm -f "$DIR/$n.cubin"
    done
done
cat "$DIR/ptxas.txt"
