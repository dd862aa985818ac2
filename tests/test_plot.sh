#!/bin/sh
# test_plot.sh: tools/kdtree-plot on tests/kdtree-bench-sample.json.
# Without matplotlib (an import that fails on purpose) it says so in one
# line and exits 2; with it (when python3 has it) it writes both PNGs and
# prints their paths, and refuses a JSON that is not kdtree-bench's.
# Skips (77) without python3.
set -u
src=${abs_top_srcdir:-${srcdir:-.}}
plot=$src/tools/kdtree-plot
sample=$src/tests/kdtree-bench-sample.json
command -v python3 >/dev/null 2>&1 || { echo "test_plot: no python3" >&2; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kdt-plot.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*" >&2
    cat "$tmp/out" "$tmp/err" >&2
    exit 1
}

mkdir -p "$tmp/block/matplotlib"
echo 'raise ImportError("blocked by test_plot.sh")' >"$tmp/block/matplotlib/__init__.py"
PYTHONPATH=$tmp/block python3 "$plot" "$sample" -o "$tmp/none" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "without matplotlib: exit $rc, wanted 2"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "without matplotlib: not one line"
grep -q "^kdtree-plot: needs matplotlib" "$tmp/err" || fail "no 'needs matplotlib'"
[ ! -e "$tmp/none" ] || fail "without matplotlib it made $tmp/none"

if ! python3 -c "import matplotlib" >/dev/null 2>&1; then
    echo "test_plot: python3 has no matplotlib: the PNGs are not checked"
    exit 0
fi
python3 "$plot" "$sample" -o "$tmp/png" --prefix s >"$tmp/out" 2>"$tmp/err" ||
    fail "kdtree-plot exited $?"
for f in "$tmp/png/s-load.png" "$tmp/png/s-verify-attn.png"; do
    grep -qx "$f" "$tmp/out" || fail "$f not printed"
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "$f is not a PNG"
done
echo '{"tool": "something else"}' >"$tmp/other.json"
python3 "$plot" "$tmp/other.json" -o "$tmp/png" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "a foreign JSON was not refused"
grep -q "is not kdtree-bench's JSON" "$tmp/err" || fail "no reason for the refusal"
echo "test_plot: ok"
