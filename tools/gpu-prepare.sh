#!/bin/sh
# tools/gpu-prepare.sh [DIR]: on the build machine, gathers what a bare GPU
# host lacks for tools/gpu-host.sh: the design notes' gpu-host/prepare
# (Check, libsubunit, cffi wheels) plus the xxHash headers, which that
# host lacks too (configure needs them; the library uses them header-only),
# and a release tarball in .xfer/.  Both folders are git-ignored.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
prepare=${KDT_GPU_PREPARE:-../shared/gpu-host/prepare}
"$prepare" "$dir"
if [ ! -f "$dir/root/usr/include/xxhash.h" ]; then
    (cd "$dir/debs" && apt-get download libxxhash-dev 2>/dev/null)
    for f in "$dir"/debs/libxxhash-dev_*.deb; do dpkg -x "$f" "$dir/root"; done
fi
# Let env.sh rewrite the new .pc file's prefix too (it rewrites all).
make dist >/dev/null
mkdir -p .xfer
rm -f .xfer/kdtree-jit-*.tar.gz
cp kdtree-jit-*.tar.gz tools/gpu-host.sh .xfer/
echo "ready: carry .gpu and .xfer; there: bash .xfer/gpu-host.sh"
