#!/bin/sh
# version.sh HEADER: prints "MAJOR.MINOR.PATCH" from kdtree.h's
# KDTREE_VERSION_* macros, the one place the version is written
# (configure.ac's AC_INIT runs this; python/setup.py parses the same lines).
set -eu
part() {
    sed -n "s/^#define KDTREE_VERSION_$1 *\([0-9][0-9]*\).*/\1/p" "$2"
}
major=$(part MAJOR "$1")
minor=$(part MINOR "$1")
patch=$(part PATCH "$1")
if [ -z "$major" ] || [ -z "$minor" ] || [ -z "$patch" ]; then
    echo "version.sh: no KDTREE_VERSION_MAJOR/MINOR/PATCH in $1" >&2
    exit 1
fi
printf '%s.%s.%s\n' "$major" "$minor" "$patch"
