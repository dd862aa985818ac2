#!/bin/sh
# tools/host/setup.sh: everything a fresh Debian/Ubuntu machine needs before the
# bench or the tests: the build dependencies (installed with apt-get when
# missing and running as root), then autogen, configure and make in the
# source tree.  Safe to run again: each step is skipped when done.
set -eu
cd "$(dirname "$0")/../.."

need=""
command -v autoreconf >/dev/null 2>&1 || need="$need autoconf automake"
command -v libtoolize >/dev/null 2>&1 || need="$need libtool"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
pkg-config --exists check 2>/dev/null || need="$need check"
if [ -n "$need" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing$need"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # shellcheck disable=SC2086
        apt-get install -y -qq $need >/dev/null
    else
        echo "setup: missing$need; install them (Debian: apt-get install$need)" >&2
        exit 1
    fi
fi

[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure ${KDTREE_CONFIGURE_FLAGS:-}
make -j"$(nproc 2>/dev/null || echo 2)"
