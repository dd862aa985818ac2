#!/bin/sh
# test_pip_install.sh: the pip package as a new user meets it.  In a fresh
# venv: `pip install ./python` from a copy of this tree's sources (a git
# clone of HEAD with KDT_PIP_CLONE=1, as CI does), then, from a directory
# outside the tree with no KDTREE_* variable set: import kdtree_jit, its
# version, and kdtree_jit.compile("tree_accept", "sm_120") (which works
# where this machine has an NVRTC and otherwise must say how to get one);
# then `pip install ./python[nvrtc]`, after which the same compile must
# take NVRTC from the nvidia-cuda-nvrtc wheel, and the log must say so.
# (The built artifacts, sdist and wheels: tests/test_release.sh.)
#
# Needs python3 with venv and pip with network access: skips (77)
# without them, or with KDT_PIP_TEST=0 (.ci/run's distcheck, which would
# only repeat it).  Uses its own cache (XDG_CACHE_HOME) and removes all it
# made.
set -u
name=test_pip_install
. "${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/pip_test_lib.sh"

step "a clean copy of the sources"
copy_sources "$tmp/src"

step "pip install ./python"
(cd "$tmp/src" && $pip install -q ./python) >"$tmp/install.log" 2>&1 ||
    { tail -n 40 "$tmp/install.log"; fail "pip install ./python"; }

# From elsewhere, with a private cache.
mkdir "$tmp/elsewhere"
XDG_CACHE_HOME=$tmp/xdg
export XDG_CACHE_HOME

cat >"$tmp/check.py" <<'EOF'
import glob, os, sys
import kdtree_jit

mode, want_version, venv = sys.argv[1], sys.argv[2], sys.argv[3]
info = kdtree_jit.info(driver=False)
assert kdtree_jit.version == want_version, (kdtree_jit.version, want_version)
lib = os.path.realpath(info["library"])
assert lib.startswith(os.path.realpath(venv)), "library not the package's: " + lib
assert info["header"].startswith(os.path.dirname(kdtree_jit.__file__)), info["header"]
print("kdtree_jit", kdtree_jit.version, "from", lib)
try:
    cached = kdtree_jit.compile("tree_accept", "sm_120")
except kdtree_jit.KdtreeError as e:
    system = glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*") + \
        glob.glob("/usr/lib*/*/libnvrtc.so*") + glob.glob("/usr/lib*/libnvrtc.so*")
    if mode == "system" and e.name == "KDTREE_ERROR_NO_COMPILER" and not system:
        # No NVRTC on this machine: the message must say how to get one.
        assert "pip install nvidia-cuda-nvrtc" in e.detail, e.detail
        assert "kdtree-jit[nvrtc]" in e.detail, e.detail
        print("no NVRTC here; compile says:", e.detail[:120], "...")
        sys.exit(0)
    raise
assert cached.source == "compiled", "a fresh cache had the entry: %s" % (cached,)
nv = kdtree_jit.info(driver=False)["nvrtc"]
print("compiled with NVRTC", nv["version"], "from", nv["path"], "(%s)" % nv["found_by"])
if mode == "wheel":
    assert nv["found_by"].startswith("pip wheel"), nv
    assert "/site-packages/nvidia/" in nv["path"], nv
EOF

step "import, version, compile (NVRTC from the system, if any)"
(cd "$tmp/elsewhere" && "$py" "$tmp/check.py" system "$want_version" "$tmp/venv") ||
    fail "the installed package"

step "pip install ./python[nvrtc]"
(cd "$tmp/src" && $pip install -q "./python[nvrtc]") >"$tmp/extra.log" 2>&1 ||
    { tail -n 40 "$tmp/extra.log"; fail "pip install ./python[nvrtc]"; }
rm -rf "$XDG_CACHE_HOME"
(cd "$tmp/elsewhere" && KDTREE_LOG=info "$py" "$tmp/check.py" wheel \
    "$want_version" "$tmp/venv") >"$tmp/wheel.log" 2>&1 ||
    { cat "$tmp/wheel.log"; fail "compile with the nvidia-cuda-nvrtc wheel"; }
cat "$tmp/wheel.log"
grep -q "kdtree: info: NVRTC .* loaded from .*/site-packages/nvidia/.*libnvrtc.so.* (pip wheel" \
    "$tmp/wheel.log" || fail "the log does not name the wheel's NVRTC"

if command -v nm >/dev/null 2>&1; then
    lib=$(ls "$tmp"/venv/lib/python3*/site-packages/kdtree_jit/libkdtree.so)
    got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort)
    [ "$got" = "$(sort "$top_src/tests/exports.txt")" ] ||
        fail "the pip-built library exports other symbols than tests/exports.txt"
fi
echo "test_pip_install: all passed"
