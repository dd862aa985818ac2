# shellcheck shell=bash
# tools/host/gpu-flashinfer.sh [DIR]: sourced by bash on the GPU host, before
# kdtree-bench --baseline, so that tools/baseline_attn.py can time
# FlashInfer and SGLang's Triton kernels beside our verify_attn:
#
#     . tools/host/gpu-flashinfer.sh .whl
#
# DIR (default .whl) holds what tools/host/flashinfer-prepare.sh gathered on
# the build machine (that host has no package index): apache_tvm_ffi-*.whl,
# flashinfer-slim.tar.gz (FlashInfer's package with the JIT modules the
# baselines run compiled ahead for sm_90a in its AOT directory,
# flashinfer/data/aot/, where FlashInfer looks for a module before it
# builds one) and sglang/ (SGLang's Triton attention modules).  This
# installs the wheel into $KDT_FLASHINFER_TARGET (default
# /tmp/kdt-flashinfer) with pip --target, unpacks the FlashInfer tree there,
# exports PYTHONPATH, and points KDT_SGLANG_DIR at DIR/sglang (which
# tools/baseline_attn.py loads alone: torch and Triton are on the host).
#
# FlashInfer's JIT stays off (FLASHINFER_DISABLE_JIT=1): a module that is
# not carried makes the baseline skip that FlashInfer backend at once,
# naming the module in the bench's notes, instead of spending minutes of
# device time in nvcc (its compile-time headers are not carried either).
if [ -z "${BASH_VERSION:-}" ] || [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "gpu-flashinfer: source it from bash: . tools/host/gpu-flashinfer.sh DIR" >&2
    exit 2
fi

kdt_flashinfer_setup() {
    local dir=${1:-.whl} target=${KDT_FLASHINFER_TARGET:-/tmp/kdt-flashinfer}
    local f
    for f in "$dir"/apache_tvm_ffi-*.whl "$dir"/flashinfer-slim.tar.gz \
        "$dir"/sglang; do
        if [ ! -e "$f" ]; then
            echo "gpu-flashinfer: no $f (tools/host/flashinfer-prepare.sh" \
                "$dir makes it on the build machine)" >&2
            return 1
        fi
    done
    rm -rf "$target" && mkdir -p "$target" || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target "$target" \
        "$dir"/apache_tvm_ffi-*.whl || return 1
    tar xzf "$dir/flashinfer-slim.tar.gz" -C "$target" || return 1
    export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
    KDT_SGLANG_DIR=$(cd "$dir/sglang" && pwd)
    export KDT_SGLANG_DIR
    # Where FlashInfer writes the sources it generates for a module spec,
    # even one it then loads prebuilt.
    export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/kdt-flashinfer-ws}
    # What the modules were built for (FlashInfer would read it off the
    # GPU; saying it keeps its specs the same with or without a device).
    export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
    export FLASHINFER_DISABLE_JIT=1
    # The modules link libcudart.so.13; PyTorch's own copy is usually
    # loaded first, the toolkit's serves otherwise.
    if [ -f /usr/local/cuda/lib64/libcudart.so.13 ]; then
        export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
    fi
    echo "gpu-flashinfer: $(python3 -c 'import flashinfer; print("flashinfer", flashinfer.__version__, "imports")' 2>&1 | tail -1);" \
        "$(find "$target/flashinfer/data/aot" -name '*.so' | wc -l) prebuilt modules;" \
        "$(python3 tools/baseline_attn.py --sglang-check "$KDT_SGLANG_DIR" 2>&1 | tail -1)"
}

kdt_flashinfer_setup "$@"
kdt_flashinfer_rc=$?
unset -f kdt_flashinfer_setup
return $kdt_flashinfer_rc
