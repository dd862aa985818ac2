#!/bin/sh
# tools/host/gpu-prepare.sh [DIR]: on the build machine (after ./configure),
# gathers what a bare GPU host lacks to build and test this project, for
# tools/host/gpu-host.sh to use there (docs/gpu-host.md):
#   DIR/debs, DIR/root  Check and libsubunit, as Debian packages fetched
#                       with apt-get download and unpacked with dpkg -x
#                       (configure needs both)
#   DIR/wheels          cffi and pytest wheels with what they need, for
#                       CPython 3.12 (the host's), when a package index is
#                       reachable; with KDT_PREPARE_TRANSFORMERS=1 also
#                       transformers and what it imports (the decoder's
#                       reference model: its GPU tests and decode_bench),
#                       numpy left out (the host has it, and its 17 MB
#                       would crowd the device tool's 64 MiB)
#   DIR/env.sh          sourced (bash) on the host: points pkg-config, the
#                       linker and Python at the above
# and a release tarball, the pip wheel and gpu-host.sh in .xfer/.  DIR
# defaults to .gpu;
# both folders are git-ignored.  What is already there is not fetched again.
set -eu
cd "$(dirname "$0")/../.."
dir=${1:-.gpu}
mkdir -p "$dir/debs" "$dir/root" "$dir/wheels"
dir=$(cd "$dir" && pwd)

# Debian packages: only the ones not downloaded yet.
for pkg in check libsubunit-dev libsubunit0; do
    if ! ls "$dir/debs/${pkg}_"*.deb >/dev/null 2>&1; then
        (cd "$dir/debs" && apt-get download "$pkg") ||
            { echo "gpu-prepare: apt-get download $pkg failed" >&2; exit 1; }
    fi
done
for deb in "$dir"/debs/*.deb; do
    dpkg -x "$deb" "$dir/root"
done

# Wheels for the host's Python, their dependencies resolved here for it
# (the host has no index): cffi for the binding, pytest to run its tests.
host_wheels() {
    python3 -m pip download -q --only-binary=:all: \
        --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$dir/wheels" "$@"
}
if ! ls "$dir"/wheels/cffi-*.whl "$dir"/wheels/pytest-*.whl \
    >/dev/null 2>&1; then
    host_wheels cffi pytest ||
        echo "gpu-prepare: no cffi or pytest wheels (no package index?);" \
             "the Python tests will not run on the host" >&2
fi

# transformers, on request: about 30 MB of wheels, so not by default.
if [ "${KDT_PREPARE_TRANSFORMERS:-0}" = 1 ] &&
    ! ls "$dir"/wheels/transformers-*.whl >/dev/null 2>&1; then
    host_wheels transformers && rm -f "$dir"/wheels/numpy-*.whl ||
        { echo "gpu-prepare: no transformers wheels" >&2; exit 1; }
fi

# env.sh finds everything relative to itself, so DIR may land anywhere.
cat >"$dir/env.sh" <<'EOF'
# Sourced by bash on the GPU host (tools/host/gpu-prepare.sh wrote it): makes the
# unpacked packages and the wheels beside this file usable without
# installing anything.
kdt_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kdt_lib=$kdt_here/root/usr/lib/x86_64-linux-gnu
# The .pc files name /usr as their prefix: point copies at root/usr.
mkdir -p "$kdt_here/pkgconfig"
for kdt_pc in "$kdt_lib"/pkgconfig/*.pc; do
    [ -f "$kdt_pc" ] || continue
    sed "s|^prefix=.*|prefix=$kdt_here/root/usr|" "$kdt_pc" \
        >"$kdt_here/pkgconfig/${kdt_pc##*/}"
done
export PKG_CONFIG_PATH=$kdt_here/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LIBRARY_PATH=$kdt_lib${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$kdt_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ls "$kdt_here"/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile \
        --target /tmp/kdt-site "$kdt_here"/wheels/*.whl &&
        export PYTHONPATH=/tmp/kdt-site${PYTHONPATH:+:$PYTHONPATH}
fi
unset kdt_here kdt_lib kdt_pc
EOF

make dist >/dev/null
mkdir -p .xfer
rm -f .xfer/kdtree-jit-*.tar.gz .xfer/kdtree_jit-*.whl
cp kdtree-jit-*.tar.gz tools/host/gpu-host.sh .xfer/
# The pip wheel, for gpu-host.sh's wheel stage (built as pip builds it:
# python/setup.py compiles libkdtree into the package).
python3 -m pip wheel -q --no-deps -w .xfer ./python >/dev/null 2>&1 ||
    echo "gpu-prepare: no pip wheel (pip wheel ./python failed);" \
         "gpu-host.sh's wheel stage will not run" >&2
echo "ready: carry $(basename "$dir") and .xfer; there: bash .xfer/gpu-host.sh"
