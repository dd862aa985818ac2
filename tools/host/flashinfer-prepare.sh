#!/bin/sh
# tools/host/flashinfer-prepare.sh [DIR]: on the build machine (no GPU
# needed), gathers into DIR (default .whl, git-ignored) what
# tools/host/gpu-flashinfer.sh installs on the GPU host for the verify_attn
# baselines (tools/baseline_attn.py), small enough to travel with the tree
# (the device tool carries 64 MiB in all):
#
#   DIR/apache_tvm_ffi-*.whl   FlashInfer's one compiled dependency, for
#                              the host's CPython 3.12
#   DIR/flashinfer-slim.tar.gz FlashInfer's package without the headers
#                              and sources it compiles from (cutlass,
#                              cccl, most of csrc: most of its 62 MB
#                              wheel), with the JIT modules the
#                              baselines run compiled here with nvcc for
#                              sm_90a in its AOT directory (fa3 and fa2 MLA
#                              for a bf16 and an e4m3 cache, the cascade's
#                              merge), so the host compiles nothing
#   DIR/sglang/                SGLang's Triton attention modules and the
#                              one module of its own they import
#                              (sglang/srt/environ.py), unpacked from its
#                              wheel, which is not carried (its native
#                              extensions and dependencies are not needed)
#
# The versions: FlashInfer's newest release, and SGLang's newest built for
# the host's torch (2.11; its Triton 3.6).  Downloads and the build venv
# live in $KDT_FLASHINFER_VENV (default /tmp/kdt-flashinfer-venv): the venv
# sees this machine's site packages and installs torch from PyPI only when
# they have none.  nvcc: $CUDA_HOME (default /usr/local/cuda).  Before it
# ends, it checks what it made: FlashInfer imports from the slim tree with
# its JIT off and finds every module prebuilt, and SGLang's modules load
# with torch and triton alone (tools/baseline_attn.py --sglang-check).
set -eu
cd "$(dirname "$0")/../.."
dir=${1:-.whl}
venv=${KDT_FLASHINFER_VENV:-/tmp/kdt-flashinfer-venv}
cuda=${CUDA_HOME:-/usr/local/cuda}
fi_ver=0.7.2.post1
tvm_pkg='apache-tvm-ffi>=0.1.11,<0.2'
sgl_ver=0.5.17
host_py="--python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
    --platform manylinux_2_17_x86_64"

mkdir -p "$dir" "$venv/dl"
dir=$(cd "$dir" && pwd)
rm -f "$dir"/flashinfer_python-*.whl "$dir"/apache_tvm_ffi-*.whl
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: $host_py \
    -d "$dir" "$tvm_pkg"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: $host_py \
    -d "$venv/dl" "flashinfer-python==$fi_ver" "sglang==$sgl_ver"

# The build venv: this machine's torch if it has one, its Python's
# tvm-ffi, FlashInfer from its wheel.
[ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -c 'import torch' 2>/dev/null ||
    "$venv/bin/python" -m pip install -q torch
"$venv/bin/python" -m pip install -q jinja2 numpy ninja filelock requests \
    tqdm packaging einops click tabulate nvidia-ml-py "$tvm_pkg"
"$venv/bin/python" -m pip install -q --no-deps --force-reinstall \
    "$venv/dl/flashinfer_python-$fi_ver-py3-none-any.whl"
t0=$(date +%s)
CUDA_HOME=$cuda PATH=$cuda/bin:$PATH MAX_JOBS=${MAX_JOBS:-2} \
    FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} \
    FLASHINFER_WORKSPACE_BASE=$venv/workspace \
    "$venv/bin/python" tools/baseline_attn.py \
    --flashinfer-prebuild "$venv/aot"
echo "flashinfer-prepare: modules built in $(( $(date +%s) - t0 )) s"

# The slim tree: the wheel installed, the compile-time data dropped but
# for the csrc files the module specs read, the modules in data/aot.
slim=$venv/slim
rm -rf "$slim"
python3 -m pip install -q --no-deps --no-compile --target "$slim" \
    "$venv/dl/flashinfer_python-$fi_ver-py3-none-any.whl"
FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} \
    FLASHINFER_WORKSPACE_BASE=$venv/workspace \
    "$venv/bin/python" - "$slim/flashinfer/data" tools <<'PY'
import os, shutil, sys
data = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import torch
import baseline_attn
keep = {"batch_mla_config.jinja"}
for spec in baseline_attn.flashinfer_modules(torch):
    keep.update(os.path.basename(str(p)) for p in spec.sources)
for sub in ("cutlass", "cccl", "include", "spdlog"):
    shutil.rmtree(os.path.join(data, sub), ignore_errors=True)
csrc = os.path.join(data, "csrc")
for top, dirs, files in os.walk(csrc, topdown=False):
    for f in files:
        if top != csrc or f not in keep:
            os.remove(os.path.join(top, f))
    if top != csrc:
        os.rmdir(top)
print("flashinfer-prepare: csrc keeps " + ", ".join(sorted(os.listdir(csrc))))
PY
mkdir -p "$slim/flashinfer/data/aot"
cp -r "$venv"/aot/* "$slim/flashinfer/data/aot/"
# The check: the slim tree imports with the JIT off and finds them all.
PYTHONPATH=$slim FLASHINFER_DISABLE_JIT=1 \
    FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} \
    FLASHINFER_WORKSPACE_BASE=$venv/workspace \
    "$venv/bin/python" - tools <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import torch, flashinfer, baseline_attn
if not flashinfer.__file__.startswith(os.environ["PYTHONPATH"]):
    sys.exit("flashinfer-prepare: %s is not the slim tree's flashinfer"
             % flashinfer.__file__)
specs = baseline_attn.flashinfer_modules(torch)
missing = [s.name for s in specs if not s.is_aot]
if missing:
    sys.exit("flashinfer-prepare: not prebuilt: " + ", ".join(missing))
print("flashinfer-prepare: flashinfer %s imports from %s, %d modules "
      "prebuilt" % (flashinfer.__version__, flashinfer.__file__, len(specs)))
PY
tar czf "$dir/flashinfer-slim.tar.gz" -C "$slim" .

# SGLang's Triton attention modules, wherever its version keeps them.
rm -rf "$dir/sglang"
mkdir -p "$dir/sglang"
rm -rf "$venv/sgl-wheel"
python3 -m zipfile -e "$(ls "$venv"/dl/sglang-"$sgl_ver"-*.whl | head -1)" \
    "$venv/sgl-wheel"
for d in sglang/kernels/ops/attention sglang/srt/layers/attention/triton_ops; do
    if [ -f "$venv/sgl-wheel/$d/decode_attention.py" ]; then
        mkdir -p "$dir/sglang/$d" "$dir/sglang/sglang/srt"
        cp "$venv/sgl-wheel/$d"/*.py "$dir/sglang/$d/"
        cp "$venv/sgl-wheel/sglang/srt/environ.py" "$dir/sglang/sglang/srt/"
        break
    fi
done
rm -rf "$venv/sgl-wheel"
if python3 -c 'import torch, triton' 2>/dev/null; then
    python3 tools/baseline_attn.py --sglang-check "$dir/sglang"
else
    echo "flashinfer-prepare: no torch and triton here to check" \
        "$dir/sglang with (tools/baseline_attn.py --sglang-check)" >&2
fi
echo "flashinfer-prepare: $(du -sh "$dir" | cut -f1) in $dir; on the GPU" \
    "host: . tools/host/gpu-flashinfer.sh $(basename "$dir")"
