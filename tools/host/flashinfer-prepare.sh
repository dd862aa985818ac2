#!/bin/sh
# tools/host/flashinfer-prepare.sh [DIR]: on the build machine (no GPU needed),
# gathers into DIR (default .whl, git-ignored) what tools/host/gpu-flashinfer.sh
# installs on the GPU host for the verify_attn baseline: the wheels of
# flashinfer-python and apache-tvm-ffi for that host's Python 3.12, and
# FlashInfer's JIT modules that tools/baseline_attn.py runs, compiled here
# with nvcc for sm_90a into DIR/flashinfer-aot/ so the host need not.
#
# Building the modules needs FlashInfer importable here, and FlashInfer
# imports torch: a venv in $KDT_FLASHINFER_VENV (default
# /tmp/kdt-flashinfer-venv) gets torch from PyPI once (about 5 GB with its
# CUDA wheels; nothing of it is carried) and apache-tvm-ffi for this
# machine's Python, whose C library the modules are built against is the
# same as the host's.  nvcc: $CUDA_HOME (default /usr/local/cuda).
set -eu
cd "$(dirname "$0")/../.."
dir=${1:-.whl}
venv=${KDT_FLASHINFER_VENV:-/tmp/kdt-flashinfer-venv}
cuda=${CUDA_HOME:-/usr/local/cuda}
fi_pkg=flashinfer-python==0.6.4
tvm_pkg=apache-tvm-ffi==0.1.9

mkdir -p "$dir"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$dir" "$fi_pkg" "$tvm_pkg"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q torch jinja2 numpy ninja filelock \
    requests tqdm packaging einops click tabulate nvidia-ml-py "$tvm_pkg"
"$venv/bin/python" -m pip install -q --no-deps "$dir"/flashinfer_python-*.whl
t0=$(date +%s)
CUDA_HOME=$cuda PATH=$cuda/bin:$PATH \
    FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} \
    FLASHINFER_WORKSPACE_BASE=$venv/workspace \
    "$venv/bin/python" tools/baseline_attn.py --flashinfer-prebuild "$dir/flashinfer-aot"
echo "flashinfer-prepare: modules built in $(( $(date +%s) - t0 )) s;" \
    "$(du -sh "$dir" | cut -f1) in $dir; on the GPU host:" \
    ". tools/host/gpu-flashinfer.sh $dir"
