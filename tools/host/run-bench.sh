#!/bin/sh
# run-bench.sh [kdtree-bench arguments...]: runs kdtree-bench with the
# defaults of the README's main job: the table on stdout, the same figures
# as JSON in $KDTREE_BENCH_JSON (default ./kdtree-bench.json), the torch
# baselines beside ours, progress on stderr.  Finds the binary in ./tools
# (the build tree), in tools/ above this script, or on PATH.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bench=
for c in ${KDTREE_BENCH:-} ./tools/kdtree-bench "$here/../kdtree-bench"; do
    if [ -n "$c" ] && [ -x "$c" ]; then
        bench=$c
        break
    fi
done
if [ -z "$bench" ]; then
    bench=$(command -v kdtree-bench || true)
fi
if [ -z "$bench" ]; then
    echo "run-bench.sh: kdtree-bench not found; build it first (make)" >&2
    exit 2
fi
json=${KDTREE_BENCH_JSON:-kdtree-bench.json}
# The torch baselines are always asked for: where python3, torch or a CUDA
# device is missing, the report says that they were skipped and why
# (rather than leaving them out without a word).
"$bench" --json-out "$json" --baseline "$@"
echo "run-bench.sh: JSON written to $json" >&2
