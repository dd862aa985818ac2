#!/bin/sh
# The shared library exports exactly the symbols in tests/exports.txt:
# kdtree_* and nothing internal.  A new public function is added there on
# purpose (and is an ABI change to note).
set -eu
lib=${top_builddir:-.}/.libs/libkdtree.so
[ -f "$lib" ] || { echo "no $lib"; exit 1; }
want=${srcdir:-.}/tests/exports.txt
got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort)
if [ "$got" != "$(sort "$want")" ]; then
    echo "exported symbols differ from $want:"
    printf '%s\n' "$got" | diff -u "$want" - || true
    exit 1
fi
echo "exports ok: $(printf '%s\n' "$got" | wc -l) symbols, all kdtree_*"
