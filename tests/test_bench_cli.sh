#!/bin/sh
# test_bench_cli.sh: kdtree-bench's command line refuses what it cannot
# do instead of measuring nothing and passing: an unknown --kernel name
# (alone or beside a real one), an option without its value, a --device
# that is not an ordinal, an empty --only, each exit 2 with a line that
# names the problem;
# and `make bench` (tools/run-bench.sh) says in the table and the JSON
# that a baseline was skipped and why (here a stand-in baseline_topk.py
# that skips as the real one does without torch).  Builds and runs no
# kernel.  Skips (77) without python3 for the baseline part.
set -u
bench=${KDTREE_BENCH:-./tools/kdtree-bench}
src=${srcdir:-.}
if [ ! -x "$bench" ]; then
    echo "test_bench_cli: $bench is not built" >&2
    exit 99
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench_cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0

# usage_error WANT ARGS...: kdtree-bench ARGS exits 2 and says WANT.
usage_error() {
    want=$1
    shift
    "$bench" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$want" "$tmp/err"; then
        echo "FAIL: kdtree-bench $*: exit $rc (want 2), stderr:" >&2
        sed 's/^/    /' "$tmp/err" >&2
        echo "    (wanted a line with \"$want\")" >&2
        fail=1
    else
        echo "ok: kdtree-bench $*: exit 2, \"$want\""
    fi
}
usage_error 'unknown kernel "nosuch"' --kernel nosuch
usage_error 'unknown kernel "nosuch"' --compile-only --arch '' \
    --kernel tree_accept --kernel nosuch
usage_error 'draft_topk' --kernel nosuch
usage_error '--kernel needs a value' --kernel
usage_error '--arch needs a value' --compile-only --arch
usage_error '--device wants a device ordinal' --device x
usage_error '--only needs a value' --only
usage_error '--only needs a non-empty text' --compile-only --only ''

if ! command -v python3 >/dev/null 2>&1; then
    echo "test_bench_cli: no python3 for the baseline part: skipped" >&2
    [ $fail -eq 0 ] && exit 77
    exit 1
fi
# A stand-in for a baseline that cannot run here: the real scripts exit 77
# with the reason on stderr when torch or a CUDA device is missing.
cat >"$tmp/baseline_topk.py" <<'PY'
import sys
print("torch is not installed", file=sys.stderr)
sys.exit(77)
PY
KDTREE_BENCH="$bench" KDTREE_BENCH_TOOLS="$tmp" \
    KDTREE_BENCH_JSON="$tmp/bench.json" \
    sh "$src/tools/run-bench.sh" --quick --compile-only --arch '' \
    --kernel draft_topk >"$tmp/table" 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL: run-bench.sh exited $rc:" >&2
    sed 's/^/    /' "$tmp/err" >&2
    fail=1
fi
if grep -q "baseline_topk.py *skipped: torch is not installed" "$tmp/table"
then
    echo "ok: the table says the baseline was skipped"
else
    echo "FAIL: the table does not say the baseline was skipped:" >&2
    sed 's/^/    /' "$tmp/table" >&2
    fail=1
fi
python3 - "$tmp/bench.json" <<'PY' || fail=1
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit("FAIL: no JSON from run-bench.sh: %s" % e)
runs = d.get("baseline_runs")
want = [{"script": "baseline_topk.py",
         "outcome": "skipped: torch is not installed", "rows": 0}]
if runs != want:
    sys.exit("FAIL: baseline_runs is %r, want %r" % (runs, want))
print("ok: the JSON says the baseline was skipped")
PY
exit $fail
