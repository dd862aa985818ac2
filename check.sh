#!/bin/sh
# check.sh: the tests on a fresh machine.  Sets up and builds
# (tools/host/setup.sh), then runs `make check`: host suites everywhere, GPU
# suites where a GPU is (they report SKIP without one).  Ends with one
# "N passed, N failed, N skipped" line.
set -eu
cd "$(dirname "$0")"
sh tools/host/setup.sh
status=0
make -j"$(nproc 2>/dev/null || echo 2)" check || status=$?
count() { cat $(find . -name '*.trs' 2>/dev/null) /dev/null | grep -c "^:test-result: $1" || true; }
echo "check: $(count PASS) passed, $(( $(count FAIL) + $(count ERROR) + $(count XPASS) )) failed, $(count SKIP) skipped"
exit $status
