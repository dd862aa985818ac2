#!/bin/sh
# test_python.sh: the Python binding's tests (python/tests) against the
# library of this build.  Skips (77) without python3 or cffi; runs with
# pytest when it is installed, else with the minimal runner in
# python/tests/run.py (the GPU host has no pytest).  The GPU tests inside
# skip themselves without torch or a device.
set -u
top_src=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
top_build=${abs_top_builddir:-$(pwd)}
if ! command -v python3 >/dev/null 2>&1; then
    echo "test_python: no python3" >&2
    exit 77
fi
if ! python3 -c "import cffi" >/dev/null 2>&1; then
    echo "test_python: python3 has no cffi (pip install cffi)" >&2
    exit 77
fi
KDTREE_LIBRARY=${KDTREE_LIBRARY:-$top_build/.libs/libkdtree.so}
KDTREE_HEADER=${KDTREE_HEADER:-$top_src/include/kdtree.h}
PYTHONPATH=$top_src/python${PYTHONPATH:+:$PYTHONPATH}
export KDTREE_LIBRARY KDTREE_HEADER PYTHONPATH
if [ ! -e "$KDTREE_LIBRARY" ]; then
    echo "test_python: $KDTREE_LIBRARY is not built" >&2
    exit 99
fi
# Bytecode would land in the source tree (read-only under distcheck).
export PYTHONDONTWRITEBYTECODE=1
exec python3 "$top_src/python/tests/run.py" -v
