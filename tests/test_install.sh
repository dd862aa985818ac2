#!/bin/sh
# test_install.sh: a staged install as README's "Install" section gives it:
# `make install DESTDIR=STAGE` puts the header, the library, kdtree.pc and
# the tools under STAGE; pkg-config told the stage
# (PKG_CONFIG_SYSROOT_DIR, PKG_CONFIG_PATH) gives the flags that build a
# program against it; the program runs with LD_LIBRARY_PATH, or with an
# rpath and nothing else.  Needs no GPU and no NVRTC.  Skips (77) without
# make, a C compiler or pkg-config.
set -u
top_build=${abs_top_builddir:-$(pwd)}
for t in make pkg-config "${CC:-cc}"; do
    if ! command -v "$t" >/dev/null 2>&1; then
        echo "test_install: no $t" >&2
        exit 77
    fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "test_install: FAIL: $*" >&2
    exit 1
}
stage=$tmp/stage
# The build's own make, outside the test harness's job server.
env MAKEFLAGS= MFLAGS= make -s -C "$top_build" install DESTDIR="$stage" \
    >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log" >&2
    fail "make install DESTDIR=$stage"
}
pc=$(find "$stage" -name kdtree.pc | head -1)
[ -n "$pc" ] || fail "no kdtree.pc under the stage"
libdir=$(dirname "$(dirname "$pc")")
for f in "$libdir/libkdtree.so" "$(dirname "$libdir")/include/kdtree.h"; do
    [ -e "$f" ] || fail "$f is not installed"
done
[ -n "$(find "$stage" -path '*/bin/kdtree-cache')" ] ||
    fail "kdtree-cache is not installed"

# What README says: the sysroot and the stage's pkgconfig directory.
PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs kdtree) || fail "pkg-config kdtree"
echo "pkg-config: $flags"
case $flags in
*"-I$stage"*"-L$stage"*) ;;
*) fail "pkg-config's flags do not point into the stage: $flags" ;;
esac
cat >"$tmp/app.c" <<'EOF'
#include <stdio.h>

#include <kdtree.h>

int
main(void)
{
    printf("%s\n", kdtree_version_string());
    return kdtree_abi_version() == KDTREE_ABI_VERSION ? 0 : 1;
}
EOF
# shellcheck disable=SC2086
"${CC:-cc}" "$tmp/app.c" -o "$tmp/app" $flags || fail "cc with $flags"
LD_LIBRARY_PATH=$libdir "$tmp/app" >"$tmp/out" ||
    fail "the program did not run with LD_LIBRARY_PATH=$libdir"
echo "with LD_LIBRARY_PATH: $(cat "$tmp/out")"
# shellcheck disable=SC2086
"${CC:-cc}" "$tmp/app.c" -o "$tmp/app-rpath" $flags \
    -Wl,-rpath,"$libdir" || fail "cc with an rpath"
env -u LD_LIBRARY_PATH "$tmp/app-rpath" >"$tmp/out" ||
    fail "the program linked with -Wl,-rpath,$libdir did not run"
echo "with an rpath: $(cat "$tmp/out")"
echo "test_install: ok"
