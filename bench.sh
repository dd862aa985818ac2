#!/bin/sh
# bench.sh: the main job on a fresh machine.  Sets up and builds
# (tools/host/setup.sh), then runs kdtree-bench: on a GPU, every kernel cold,
# warm, hot and its own time; without one, compile-only for sm_90a
# (Hopper) and sm_120 with the cache cold and warm.  Arguments go to kdtree-bench
# (e.g. --json, --quick, --kernel NAME).
set -eu
cd "$(dirname "$0")"
sh tools/host/setup.sh
exec sh tools/host/run-bench.sh "$@"
