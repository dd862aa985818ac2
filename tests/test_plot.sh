#!/bin/sh
# test_plot.sh: tools/kdtree-plot on tests/kdtree-bench-sample.json.
# Without matplotlib (an import that fails on purpose) it says so in one
# line and exits 2; with it (when python3 has it) it writes both PNGs and
# prints their paths, and refuses a JSON that is not kdtree-bench's.  A
# report with verify_attn's variants (the sample's rows again with an
# e4m3 cache in both arithmetics, and in pages of one token, with the
# kv_dtype and math fields; a second load shape of one kernel) gets a
# verify_attn PNG per page size.
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
python3 - "$sample" "$tmp/variants.json" <<'PY' || fail "could not make the variants' JSON"
import copy, json, sys
d = json.load(open(sys.argv[1]))
rows = []
for r in d["kernels"]:
    if r.get("kernel") != "verify_attn":
        continue
    for page in ("", " page=1"):
        for kv, math, speed in (("bf16", "bf16", 1.0), ("e4m3", "bf16", 1.3),
                                ("e4m3", "e4m3", 1.8)):
            x = copy.deepcopy(r)
            x["config"] += page + (" kv=e4m3 kv_scale=1 math=" + math
                                   if kv == "e4m3" else "")
            x["kv_dtype"], x["math"] = kv, math
            x["us"] = r["us"] / speed
            rows.append(x)
d["kernels"] = rows
load = [r for r in d["load"] if r.get("kernel") == "verify_attn"]
for r in load:
    x = copy.deepcopy(r)
    x["shape"] = x["shape"].replace("PAGE=64", "PAGE=1")
    d["load"].append(x)
json.dump(d, open(sys.argv[2], "w"))
PY
python3 "$plot" "$tmp/variants.json" -o "$tmp/png" --prefix v >"$tmp/out" 2>"$tmp/err" ||
    fail "kdtree-plot on the variants exited $?"
for f in "$tmp/png/v-load.png" "$tmp/png/v-verify-attn.png" \
    "$tmp/png/v-verify-attn-page1.png"; do
    grep -qx "$f" "$tmp/out" || fail "$f not printed"
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "$f is not a PNG"
done
echo '{"tool": "something else"}' >"$tmp/other.json"
python3 "$plot" "$tmp/other.json" -o "$tmp/png" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "a foreign JSON was not refused"
grep -q "is not kdtree-bench's JSON" "$tmp/err" || fail "no reason for the refusal"
echo "test_plot: ok"
