# shellcheck shell=bash
# tools/host/gpu-flashinfer.sh [DIR]: sourced by bash on the GPU host, before
# kdtree-bench --baseline, so that tools/baseline_attn.py can time
# FlashInfer beside our verify_attn:
#
#     . tools/host/gpu-flashinfer.sh .whl
#
# DIR (default .whl) holds what tools/host/flashinfer-prepare.sh gathered on the
# build machine: the wheels flashinfer_python-*.whl and apache_tvm_ffi-*.whl
# (that host has no package index) and flashinfer-aot/<module>/<module>.so,
# the JIT modules the baseline runs, compiled ahead for sm_90a.  This
# installs the wheels into $KDT_FLASHINFER_TARGET (default
# /tmp/kdt-flashinfer) with pip --target, copies the modules into the
# installed package's AOT directory (flashinfer/data/aot/, where FlashInfer
# looks for a module before it builds one) and exports PYTHONPATH.
#
# FlashInfer's JIT stays off (FLASHINFER_DISABLE_JIT=1): a module that is
# not carried makes the baseline skip FlashInfer at once, naming the
# module in the bench's notes, instead of spending minutes of device
# time in nvcc.  KDT_FLASHINFER_JIT=1 lets it build what is missing.
if [ -z "${BASH_VERSION:-}" ] || [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "gpu-flashinfer: source it from bash: . tools/host/gpu-flashinfer.sh DIR" >&2
    exit 2
fi

kdt_flashinfer_setup() {
    local dir=${1:-.whl} target=${KDT_FLASHINFER_TARGET:-/tmp/kdt-flashinfer}
    local f m n=0 wheels=()
    for f in "$dir"/flashinfer_python-*.whl "$dir"/apache_tvm_ffi-*.whl; do
        if [ ! -f "$f" ]; then
            echo "gpu-flashinfer: no $f (tools/host/flashinfer-prepare.sh" \
                "$dir makes it on the build machine)" >&2
            return 1
        fi
        wheels+=("$f")
    done
    python3 -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target "$target" "${wheels[@]}" || return 1
    for f in "$dir"/flashinfer-aot/*/*.so; do
        [ -f "$f" ] || continue
        m=$(basename "$(dirname "$f")")
        mkdir -p "$target/flashinfer/data/aot/$m" &&
            cp "$f" "$target/flashinfer/data/aot/$m/" && n=$((n + 1))
    done
    export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
    # Where FlashInfer writes the sources it generates for a module spec,
    # even one it then loads prebuilt.
    export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/kdt-flashinfer-ws}
    # What the modules were built for (FlashInfer would read it off the
    # GPU; saying it keeps its specs the same with or without a device).
    export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
    if [ "${KDT_FLASHINFER_JIT:-0}" = 1 ]; then
        unset FLASHINFER_DISABLE_JIT
    else
        export FLASHINFER_DISABLE_JIT=1
    fi
    # The modules link libcudart.so.13; PyTorch's own copy is usually
    # loaded first, the toolkit's serves otherwise.
    if [ -f /usr/local/cuda/lib64/libcudart.so.13 ]; then
        export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
    fi
    echo "gpu-flashinfer: $(python3 -c 'import flashinfer; print("flashinfer", flashinfer.__version__, "imports")' 2>&1 | tail -1);" \
        "$n prebuilt modules in $target/flashinfer/data/aot"
}

kdt_flashinfer_setup "$@"
kdt_flashinfer_rc=$?
unset -f kdt_flashinfer_setup
return $kdt_flashinfer_rc
