#!/bin/sh
# test_require_gpu.sh: a GPU suite that finds no driver skips (77), and
# fails under KDTREE_TEST_REQUIRE_GPU=1 (a GPU host's run must not pass
# by skipping), saying why; a value other than 1 or 0 is a hard error
# (99).  The driver is made missing on purpose (KDTREE_CUDA_LIBRARY
# names no file), so the check holds on a GPU host too.
set -u
suite=./tests/gpu_tree_accept
if [ ! -x "$suite" ]; then
    echo "test_require_gpu: $suite is not built" >&2
    exit 99
fi
out=${TMPDIR:-/tmp}/test_require_gpu.$$.out
trap 'rm -f "$out"' EXIT
KDTREE_CUDA_LIBRARY=${TMPDIR:-/tmp}/test_require_gpu.$$.no-libcuda.so.1
export KDTREE_CUDA_LIBRARY
fail=0

# expect STATUS TEXT VALUE: runs the suite with KDTREE_TEST_REQUIRE_GPU
# set to VALUE ("unset": not in the environment); its exit status must be
# STATUS and its output hold TEXT.
expect() {
    if [ "$3" = unset ]; then
        (unset KDTREE_TEST_REQUIRE_GPU; "$suite") >"$out" 2>&1
    else
        KDTREE_TEST_REQUIRE_GPU=$3 "$suite" >"$out" 2>&1
    fi
    rc=$?
    if [ "$rc" -ne "$1" ] || ! grep -qF -- "$2" "$out"; then
        echo "test_require_gpu: KDTREE_TEST_REQUIRE_GPU=$3: exit $rc" \
            "(expected $1 and \"$2\"):" >&2
        cat "$out" >&2
        fail=1
    else
        echo "KDTREE_TEST_REQUIRE_GPU=$3: exit $rc: $(head -1 "$out")"
    fi
}

expect 77 "SKIP: no CUDA driver" unset
expect 77 "SKIP: no CUDA driver" ""
expect 77 "SKIP: no CUDA driver" 0
expect 1 "FAIL: KDTREE_TEST_REQUIRE_GPU=1" 1
expect 99 'KDTREE_TEST_REQUIRE_GPU="yes" is neither 1' yes
exit $fail
