#!/bin/sh
# test_pip_install.sh: the pip package as a new user meets it.  In a fresh
# venv: `pip install ./python` from a copy of this tree's sources (a git
# clone of HEAD with KDT_PIP_CLONE=1, as CI does), then, from a directory
# outside the tree with no KDTREE_* variable set: import kdtree_jit, its
# version, and kdtree_jit.compile("tree_accept", "sm_120") (which works
# where this machine has an NVRTC and otherwise must say how to get one);
# then `pip install ./python[nvrtc]`, after which the same compile must
# take NVRTC from the nvidia-cuda-nvrtc wheel, and the log must say so;
# then `python -m build` must give a wheel (through the sdist) that holds
# the library and the header.
#
# Needs python3 with venv and pip with network access: skips (77)
# without them, or with KDT_PIP_TEST=0 (.ci/run's distcheck, which would
# only repeat it).  Uses its own cache (XDG_CACHE_HOME) and removes all it
# made.
set -u
top_src=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
if [ "${KDT_PIP_TEST:-1}" = 0 ]; then
    echo "test_pip_install: KDT_PIP_TEST=0; skipped"
    exit 77
fi
command -v python3 >/dev/null 2>&1 || { echo "no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kdt-pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "test_pip_install: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

if ! python3 -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1; then
    cat "$tmp/venv.log"
    echo "test_pip_install: python3 cannot make a venv (python3-venv)"
    exit 77
fi
py=$tmp/venv/bin/python
pip="$py -m pip --disable-pip-version-check"
if ! $pip download -q --no-deps --timeout 15 --retries 1 -d "$tmp/probe" \
        cffi >"$tmp/probe.log" 2>&1; then
    tail -n 3 "$tmp/probe.log"
    echo "test_pip_install: pip cannot reach its index; skipped"
    exit 77
fi

step "a clean copy of the sources"
if [ "${KDT_PIP_CLONE:-0}" = 1 ]; then
    git clone -q "$top_src" "$tmp/src" || fail "git clone"
else
    # The working tree as it is (uncommitted changes included), without
    # build outputs.
    mkdir "$tmp/src"
    (cd "$top_src" && tar cf - --exclude='*.o' --exclude='*.lo' \
        --exclude='*.la' --exclude=.libs --exclude=.deps \
        --exclude=.dirstamp --exclude=__pycache__ --exclude='*.egg-info' \
        --exclude=python/build --exclude=src/jit/kdt_sources.c \
        am build-aux include kernels_src python src) |
        (cd "$tmp/src" && tar xf -) || fail "copying the sources"
fi

step "pip install ./python"
(cd "$tmp/src" && $pip install -q ./python) >"$tmp/install.log" 2>&1 ||
    { tail -n 40 "$tmp/install.log"; fail "pip install ./python"; }

# From elsewhere, with no KDTREE_* variable and a private cache.
mkdir "$tmp/elsewhere"
for v in $(env | sed -n 's/^\(KDTREE_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done
XDG_CACHE_HOME=$tmp/xdg
export XDG_CACHE_HOME
want_version=$(sh "$top_src/build-aux/version.sh" "$top_src/include/kdtree.h")

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

step "python -m build python/ (sdist, then a wheel from it)"
$pip install -q build >"$tmp/build.log" 2>&1 || { tail "$tmp/build.log"; fail "pip install build"; }
(cd "$tmp/src" && "$py" -m build -o "$tmp/dist" python) >>"$tmp/build.log" 2>&1 ||
    { tail -n 40 "$tmp/build.log"; fail "python -m build"; }
whl=$(ls "$tmp"/dist/kdtree_jit-*.whl) || fail "no wheel in $(ls "$tmp/dist")"
echo "built $(basename "$whl")"
case $whl in
    *-py3-none-linux_*.whl) ;;
    *) fail "the wheel is not tagged py3-none-linux_*: $whl" ;;
esac
"$py" - "$whl" <<'EOF' || fail "the wheel's contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("kdtree_jit/libkdtree.so", "kdtree_jit/kdtree.h", "kdtree_jit/__init__.py"):
    assert want in names, (want, names)
print("the wheel holds", len(names), "files, the library and the header among them")
EOF
if command -v nm >/dev/null 2>&1; then
    lib=$(ls "$tmp"/venv/lib/python3*/site-packages/kdtree_jit/libkdtree.so)
    got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort)
    [ "$got" = "$(sort "$top_src/tests/exports.txt")" ] ||
        fail "the pip-built library exports other symbols than tests/exports.txt"
fi
echo "test_pip_install: all passed"
