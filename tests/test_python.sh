#!/bin/sh
# test_python.sh: the Python binding's tests (python/tests) under pytest,
# against the library of this build.  Skips (77) without python3, cffi or
# pytest, and when pytest skipped every test (no torch, no GPU, no NVRTC),
# so that make check tells a suite that could not run from one that
# passed; the GPU tests inside skip themselves without torch or a device.
set -u
top_src=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
top_build=${abs_top_builddir:-$(pwd)}
if ! command -v python3 >/dev/null 2>&1; then
    echo "test_python: no python3" >&2
    exit 77
fi
for m in cffi pytest; do
    if ! python3 -c "import $m" >/dev/null 2>&1; then
        echo "test_python: python3 has no $m (pip install $m)" >&2
        exit 77
    fi
done
KDTREE_LIBRARY=${KDTREE_LIBRARY:-$top_build/.libs/libkdtree.so}
KDTREE_HEADER=${KDTREE_HEADER:-$top_src/include/kdtree.h}
PYTHONPATH=$top_src/python${PYTHONPATH:+:$PYTHONPATH}
export KDTREE_LIBRARY KDTREE_HEADER PYTHONPATH
if [ ! -e "$KDTREE_LIBRARY" ]; then
    echo "test_python: $KDTREE_LIBRARY is not built" >&2
    exit 99
fi
out=$(mktemp "${TMPDIR:-/tmp}/kdtree-pytest.XXXXXX") || exit 99
trap 'rm -f "$out"' EXIT
# Nothing may land in the source tree (read-only under distcheck): no
# bytecode, no .pytest_cache.  -s: the GPU tests print their figures for
# the log; -rs: why each skip.
export PYTHONDONTWRITEBYTECODE=1
python3 -m pytest -v -s -rs -p no:cacheprovider \
    --rootdir "$top_src/python/tests" "$top_src/python/tests" >"$out" 2>&1
rc=$?
cat "$out"
# pytest's last line counts the outcomes: "== 20 skipped in 3.1s ==".
last=$(tail -n 1 "$out")
if [ $rc = 0 ] && echo "$last" | grep -q skipped &&
        ! echo "$last" | grep -q passed; then
    exit 77
fi
exit $rc
