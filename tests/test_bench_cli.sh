#!/bin/sh
# test_bench_cli.sh: kdtree-bench's command line refuses what it cannot
# do instead of measuring nothing and passing: an unknown --kernel name
# (alone or beside a real one), an option without its value, a --device
# that is not an ordinal, an empty --only or more than four, a --peak
# that is not two or three figures, a --kv or --math that is not bf16 or
# e4m3, --math e4m3 on a bf16 cache alone, a --page out of 1..256 or
# given twice, each exit 2 with a line that names the problem; --peak's
# figures are the report's limits (the third the FP8 one), and without it
# and without a device the report claims none;
# and `make bench` (tools/host/run-bench.sh) says in the table and the JSON
# that a baseline was skipped and why (here a stand-in baseline_topk.py
# that skips as the real one does without torch), and does not run a
# baseline at all when --only leaves its kernel no case; the real
# baseline_topk.py refuses a --configs without a file, or with a line
# that is not a draft_topk config (exit 2), before it looks for torch.
# Builds and runs no kernel.  Skips (77) without python3 for the
# baseline part.
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
usage_error '--peak needs a value' --peak
usage_error '--peak wants TB/S,TFLOP/S' --compile-only --arch '' --peak 3.35
usage_error 'not "3.35,x"' --compile-only --arch '' --peak 3.35,x
usage_error 'not "0,0"' --compile-only --arch '' --peak 0,0
usage_error 'not "1,2,3,4"' --compile-only --arch '' --peak 1,2,3,4
usage_error '--kv wants bf16, e4m3' --kv fp8
usage_error '--math wants bf16, e4m3' --math ''
usage_error '--math e4m3 needs --kv e4m3' --math e4m3
usage_error '--page wants up to 4 different' --page 64,64
usage_error '--page wants up to 4 different' --page 0
usage_error '--page wants up to 4 different' --page 512
usage_error '--page needs a value' --page
usage_error '--only at most 4 times' --only a --only b --only c --only d --only e

# limits_are WANT ARGS...: kdtree-bench --json ARGS reports limits WANT
# (a Python expression).
limits_are() {
    want=$1
    shift
    "$bench" --json "$@" >"$tmp/limits.json" 2>"$tmp/err"
    rc=$?
    if ! command -v python3 >/dev/null 2>&1; then
        return 0
    fi
    python3 - "$tmp/limits.json" "$rc" "$want" "$*" <<'PY' || fail=1
import json, sys
got = json.load(open(sys.argv[1])).get("limits")
want = eval(sys.argv[3])
if sys.argv[2] != "0" or got != want:
    sys.exit("FAIL: kdtree-bench --json %s: exit %s, limits %r, want %r"
             % (sys.argv[4], sys.argv[2], got, want))
print("ok: kdtree-bench --json %s: limits %r" % (sys.argv[4], got))
PY
}
limits_are None --compile-only --arch ''
limits_are '{"bytes_per_s": 3.35e12, "flops_per_s": 989e12, "fp8_flops_per_s": None, "source": "--peak"}' \
    --compile-only --arch '' --peak 3.35,989
limits_are '{"bytes_per_s": None, "flops_per_s": 503.8e12, "fp8_flops_per_s": None, "source": "--peak"}' \
    --compile-only --arch '' --peak 0,503.8
limits_are '{"bytes_per_s": 4.3e12, "flops_per_s": 989e12, "fp8_flops_per_s": 1979e12, "source": "--peak"}' \
    --compile-only --arch '' --peak 4.3,989,1979

if ! command -v python3 >/dev/null 2>&1; then
    echo "test_bench_cli: no python3 for the baseline part: skipped" >&2
    [ $fail -eq 0 ] && exit 77
    exit 1
fi
# want_runs JSON OUTCOME WHAT: the report JSON's baseline_runs is one run
# of baseline_topk.py, with no rows, that came to OUTCOME.
want_runs() {
    python3 - "$1" "$2" "$3" <<'PY' || fail=1
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit("FAIL: no JSON from run-bench.sh: %s" % e)
runs = d.get("baseline_runs")
want = [{"script": "baseline_topk.py", "outcome": sys.argv[2], "rows": 0}]
if runs != want:
    sys.exit("FAIL: baseline_runs is %r, want %r" % (runs, want))
print("ok: " + sys.argv[3])
PY
}
# A stand-in for a baseline that cannot run here: the real scripts exit 77
# with the reason on stderr when torch or a CUDA device is missing.
cat >"$tmp/baseline_topk.py" <<'PY'
import sys
print("torch is not installed", file=sys.stderr)
sys.exit(77)
PY
KDTREE_BENCH="$bench" KDTREE_BENCH_TOOLS="$tmp" \
    KDTREE_BENCH_JSON="$tmp/bench.json" \
    sh "$src/tools/host/run-bench.sh" --quick --compile-only --arch '' \
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
want_runs "$tmp/bench.json" "skipped: torch is not installed" \
    "the JSON says the baseline was skipped"

# --only that leaves draft_topk no case: its baseline is not run (the
# stand-in would leave a mark) and the report says why.
cat >"$tmp/baseline_topk.py" <<PY
open("$tmp/ran", "w").close()
PY
KDTREE_BENCH="$bench" KDTREE_BENCH_TOOLS="$tmp" \
    KDTREE_BENCH_JSON="$tmp/bench2.json" \
    sh "$src/tools/host/run-bench.sh" --quick --compile-only --arch '' \
    --kernel draft_topk --only 'R=1,' >"$tmp/table" 2>"$tmp/err"
if [ -e "$tmp/ran" ]; then
    echo "FAIL: the baseline ran though --only left draft_topk no case" >&2
    fail=1
fi
want_runs "$tmp/bench2.json" "skipped: --only left no draft_topk case" \
    "no baseline where --only left its kernel no case"

# script_error WANT ARGS...: baseline_topk.py ARGS exits 2 and says WANT.
script_error() {
    want=$1
    shift
    python3 "$src/tools/baseline_topk.py" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$want" "$tmp/err"; then
        echo "FAIL: baseline_topk.py $*: exit $rc (want 2), stderr:" >&2
        sed 's/^/    /' "$tmp/err" >&2
        fail=1
    else
        echo "ok: baseline_topk.py $*: exit 2, \"$want\""
    fi
}
script_error '--configs needs a file' --configs
printf 'R=1,L=15,V=163840,K=64,bf16\nH=8 R=1 past_len=4096 rows=65\n' \
    >"$tmp/configs"
script_error 'not a draft_topk config' --configs "$tmp/configs"
script_error 'No such file' --configs "$tmp/nosuch"
exit $fail
