#!/bin/sh
# test_docs.sh: the documents stay true to the tree.  Every file that
# README.md, NOTES.md, cache/README.md and docs/*.md point to exists
# (tests/doc_paths.py), and docs/performance.md's tables are what
# tools/dev/perf_tables.py makes of docs/bench/*.json, so a run added
# without its tables, or a table edited by hand, fails here.  Each check
# is first shown to fail on a broken copy.  Skips (77) without python3.
set -u
src=${srcdir:-.}
build=${abs_top_builddir:-.}
if ! command -v python3 >/dev/null 2>&1; then
    echo "test_docs: no python3" >&2
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_docs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
export PYTHONDONTWRITEBYTECODE=1

# The checks can fail: a pointer to nothing, and a table not its output.
mkdir -p "$tmp/tree/docs" "$tmp/tree/tools"
printf 'See `tools/no-such-script.sh` and [this](docs/nothing.md).\n' \
    >"$tmp/tree/README.md"
if python3 "$src/tests/doc_paths.py" "$tmp/tree" >"$tmp/out" 2>&1; then
    echo "FAIL: doc_paths.py passed a README that points to nothing" >&2
    fail=1
elif ! grep -q "tools/no-such-script.sh does not exist" "$tmp/out" ||
    ! grep -q "docs/nothing.md does not exist" "$tmp/out"; then
    echo "FAIL: doc_paths.py did not name the missing files:" >&2
    cat "$tmp/out" >&2
    fail=1
fi
sed 's/^| R=1 K=64 bf16 | [0-9.]* |$/| R=1 K=64 bf16 | 1.00 |/' \
    "$src/docs/performance.md" >"$tmp/performance.md"
if cmp -s "$src/docs/performance.md" "$tmp/performance.md"; then
    echo "FAIL: could not edit a cell of docs/performance.md's tables" >&2
    fail=1
elif python3 "$src/tools/dev/perf_tables.py" --check \
    --bench-dir "$src/docs/bench" "$tmp/performance.md" >/dev/null 2>&1
then
    echo "FAIL: perf_tables.py --check passed a table edited by hand" >&2
    fail=1
fi

# --record joins the runs of one build on one GPU, and refuses another
# GPU's run, writing nothing.
one=$(ls "$src"/docs/bench/*.json | head -1)
python3 - "$one" "$tmp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
del d["record"]
half = len(d["kernels"]) // 2
a, b = dict(d), dict(d)
a["kernels"], b["kernels"] = d["kernels"][:half], d["kernels"][half:]
a["notes"], b["notes"] = ["first", "both"], ["both", "second"]
other = dict(b, device="another GPU")
for name, r in (("a", a), ("b", b), ("other", other)):
    json.dump(r, open("%s/%s.json" % (sys.argv[2], name), "w"))
PY
rec="--commit 0123abc --date 2026-01-02 --command cmd --source src"
# shellcheck disable=SC2086
if ! python3 "$src/tools/dev/perf_tables.py" --record "$tmp/ab.json" $rec \
    "$tmp/a.json" "$tmp/b.json" >"$tmp/out" 2>&1; then
    echo "FAIL: perf_tables.py --record:" >&2
    cat "$tmp/out" >&2
    fail=1
elif ! python3 - "$one" "$tmp/ab.json" <<'PY'
import json, sys
d, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert m["kernels"] == d["kernels"], "the rows are not the runs' in order"
assert m["notes"] == ["first", "both", "second"], m["notes"]
assert m["record"]["commit"] == "0123abc", m["record"]
PY
then
    echo "FAIL: perf_tables.py --record joined the runs wrongly" >&2
    fail=1
fi
# shellcheck disable=SC2086
if python3 "$src/tools/dev/perf_tables.py" --record "$tmp/ao.json" $rec \
    "$tmp/a.json" "$tmp/other.json" >"$tmp/out" 2>&1 ||
    [ -e "$tmp/ao.json" ] || ! grep -q "device is 'another GPU'" "$tmp/out"
then
    echo "FAIL: perf_tables.py --record took another GPU's run:" >&2
    cat "$tmp/out" >&2
    fail=1
fi

# The documents themselves.
python3 "$src/tests/doc_paths.py" "$src" "$build" || fail=1
python3 "$src/tools/dev/perf_tables.py" --check "$src/docs/performance.md" ||
    fail=1
exit $fail
