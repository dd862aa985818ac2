#!/bin/sh
# test_bench_attn.sh: verify_attn's bench cases and their baselines, as far
# as no GPU is needed.  kdtree-bench --list-attn lists the cases a GPU run
# would measure: by default bf16 in pages of 64 under the config strings of
# every run before the variants; --kv, --math and --page add the e4m3
# cache in both arithmetics and pages of one token, each row named by its
# variant (kv_scale 1 in pages of one token, 1/448 in larger ones), its
# bytes counting the KV at its element size; --only given twice keeps the
# cases that contain both texts.  tools/baseline_attn.py reads every one
# of those configs back (--dry-run: no torch, no GPU), plans each cache's
# baselines once for the rows of both arithmetics, torch for bf16 caches
# alone, and refuses a config it cannot read, a bad KDT_ATTN_BASELINES
# (exit 2) and runs without torch (exit 77, as kdtree-bench expects).  Its
# SGLang loader, on a stand-in of SGLang's tree whose package __init__s
# and server utilities must not run, loads the kernel modules alone and
# refuses one that imports a package that is neither torch's, triton's
# nor the standard library's (--sglang-check; needs torch and triton,
# else that part is skipped).  With torch, tests/baseline_attn_layout.py
# runs the inputs the script hands FlashInfer and SGLang through their
# semantics on the CPU and checks its check().  Skips (77) without
# python3.
set -u
bench=${KDTREE_BENCH:-./tools/kdtree-bench}
src=${srcdir:-.}
script=$src/tools/baseline_attn.py
if [ ! -x "$bench" ]; then
    echo "test_bench_attn: $bench is not built" >&2
    exit 99
fi
command -v python3 >/dev/null 2>&1 || { echo "test_bench_attn: no python3" >&2; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench_attn.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
export PYTHONDONTWRITEBYTECODE=1
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*" >&2; fail=1; }

"$bench" --list-attn >"$tmp/default" 2>"$tmp/err" || bad "--list-attn exited $?"
"$bench" --list-attn --kv bf16,e4m3 --math bf16,e4m3 --page 64,1 \
    >"$tmp/all" 2>"$tmp/err" || bad "--list-attn with the variants exited $?"
"$bench" --list-attn --kv e4m3 --math e4m3 --page 1 --only 'R=8 ' \
    --only rows=513 >"$tmp/only" 2>"$tmp/err" || bad "--list-attn --only x2 exited $?"
python3 - "$tmp" <<'PY' || fail=1
import re, sys
tmp = sys.argv[1]
def rows(name):
    out = []
    for line in open("%s/%s" % (tmp, name)):
        k, cfg, kv, math, nbytes, flops = line.rstrip("\n").split("\t")
        assert k == "verify_attn", line
        out.append((cfg, kv, math, float(nbytes), float(flops)))
    return out
problems = []
need = lambda c, what: c or problems.append(what)
d, a, o = rows("default"), rows("all"), rows("only")
need(len(d) == 60, "default: %d cases, want 60" % len(d))
need(all(re.fullmatch(r"H=\d+ R=\d+ past_len=\d+ rows=\d+", c) and
         kv == m == "bf16" for c, kv, m, _, _ in d),
     "default: not bf16 in pages of 64 under the old config strings")
need(d[0][0] == "H=8 R=1 past_len=4096 rows=65", "default: first %r" % d[0][0])
need(len(a) == 360, "variants: %d cases, want 60 x 6" % len(a))
need([c for c, _, _, _, _ in a[:6]] == [
    "H=8 R=1 past_len=4096 rows=65",
    "H=8 R=1 past_len=4096 rows=65 kv=e4m3 kv_scale=0.00223214296 math=bf16",
    "H=8 R=1 past_len=4096 rows=65 kv=e4m3 kv_scale=0.00223214296 math=e4m3",
    "H=8 R=1 past_len=4096 rows=65 page=1",
    "H=8 R=1 past_len=4096 rows=65 page=1 kv=e4m3 kv_scale=1 math=bf16",
    "H=8 R=1 past_len=4096 rows=65 page=1 kv=e4m3 kv_scale=1 math=e4m3"],
     "variants: the first shape's rows are %r" % [r[0] for r in a[:6]])
for c, kv, m, nb, fl in a:
    H, R, past, n = (int(x) for x in re.match(
        r"H=(\d+) R=(\d+) past_len=(\d+) rows=(\d+)", c).groups())
    elt = 1 if kv == "e4m3" else 2
    want = R * (past + n) * 576 * elt + R * n * H * (576 + 512) * 2
    need(nb == want, "%s: %d bytes, want %d" % (c, nb, want))
    need(fl == R * n * H * past * 2176, "%s: FLOPs" % c)
    need(("kv=e4m3" in c) == (kv == "e4m3") and
         ("math=e4m3" in c) == (m == "e4m3"), "%s: its types" % c)
need(len(o) == 9 and all("R=8 " in c and "rows=513" in c and
                         "page=1 kv=e4m3 kv_scale=1 math=e4m3" in c
                         for c, _, _, _, _ in o),
     "--only twice: %r" % [r[0] for r in o])
if problems:
    sys.exit("FAIL: " + "\n      ".join(problems))
print("ok: --list-attn: 60 default cases, 360 with the variants, --only x2")
PY

# Every config the bench writes is one the baselines read back.
cut -f2 "$tmp/all" >"$tmp/configs"
if python3 "$script" --dry-run --configs "$tmp/configs" --json "$tmp/plan.json" \
    >"$tmp/out" 2>&1; then
    python3 - "$tmp" <<'PY' || fail=1
import json, sys
tmp = sys.argv[1]
d = json.load(open(tmp + "/plan.json"))
configs = [l.strip() for l in open(tmp + "/configs") if l.strip()]
problems = []
need = lambda c, what: c or problems.append(what)
need(d.get("dry_run") is True and d.get("cases") == [], "not a dry run")
fams = {}
for w in d["plan"]:
    for c in w["configs"]:
        fams.setdefault(c, []).append(w["family"])
    if w["family"] != "torch":
        # one cache: the rows of both arithmetics share its figures
        stem = {c.replace(" math=e4m3", "").replace(" math=bf16", "")
                for c in w["configs"]}
        need(len(stem) == 1, "%s: one plan entry, several caches: %r"
             % (w["family"], w["configs"]))
    want = {"torch": ["torch"], "fa3": ["flashinfer-bound",
            "flashinfer-cascade"], "fa2": ["flashinfer-fa2-bound"],
            "sglang": ["sglang-triton", "sglang-triton-bound"]}
    need(w["labels"] == want[w["family"]], "labels of %s" % w["family"])
for c in configs:
    f = sorted(fams.get(c, []))
    want = sorted(["fa3", "fa2", "sglang"] +
                  (["torch"] if "kv=e4m3" not in c else []))
    need(f == want, "%s: planned for %r, want %r" % (c, f, want))
need(len(fams) == len(configs), "configs planned that the bench never wrote")
if problems:
    sys.exit("FAIL: " + "\n      ".join(problems[:10]))
print("ok: baseline_attn.py --dry-run plans all %d configs" % len(configs))
PY
else
    bad "baseline_attn.py --dry-run exited $?: $(tail -3 "$tmp/out")"
fi
KDT_ATTN_BASELINES=sglang python3 "$script" --dry-run --quick --kv e4m3 \
    --math bf16,e4m3 --page 1 --json "$tmp/plan2.json" >/dev/null 2>&1 &&
    python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))['plan']
assert [w['family'] for w in p] == ['sglang'], p
assert p[0]['configs'] == ['H=8 R=1 past_len=4096 rows=65 page=1 kv=e4m3 kv_scale=1 math=bf16', 'H=8 R=1 past_len=4096 rows=65 page=1 kv=e4m3 kv_scale=1 math=e4m3'], p
" "$tmp/plan2.json" && ok "KDT_ATTN_BASELINES keeps one family; the grid names its rows as the bench does" ||
    bad "KDT_ATTN_BASELINES=sglang --dry-run --quick"

# script_error WANT ARGS...: baseline_attn.py ARGS exits 2 and says WANT.
script_error() {
    want=$1
    shift
    python3 "$script" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$want" "$tmp/err"; then
        bad "baseline_attn.py $*: exit $rc (want 2), stderr: $(cat "$tmp/err")"
    else
        ok "baseline_attn.py $*: exit 2, \"$want\""
    fi
}
for c in 'R=1,L=15,V=163840,K=64,bf16' \
    'H=8 R=1 past_len=4096 rows=65 kv=fp16' \
    'H=8 R=1 past_len=4096 rows=65 math=e4m3' \
    'H=8 R=1 past_len=4096 rows=65 kv=e4m3 kv_scale=0 math=bf16' \
    'H=8 R=1 past_len=4096 rows=65 tile=64'; do
    printf '%s\n' "$c" >"$tmp/c1"
    script_error "verify_attn config\|needs kv=e4m3\|kv_scale is not\|e4m3 cache" \
        --dry-run --configs "$tmp/c1"
done
script_error 'No such file' --dry-run --configs "$tmp/nosuch"
KDT_ATTN_BASELINES=torch,flashinfer script_error 'KDT_ATTN_BASELINES wants' \
    --dry-run --quick
python3 "$script" --help >"$tmp/out" 2>&1 && grep -q -- "--sglang-check" "$tmp/out" &&
    ok "baseline_attn.py --help" || bad "baseline_attn.py --help"

# Without torch: 77 with the reason, which kdtree-bench notes.
mkdir -p "$tmp/block/torch"
echo 'raise ImportError("blocked by test_bench_attn.sh")' >"$tmp/block/torch/__init__.py"
PYTHONPATH=$tmp/block python3 "$script" --quick --json "$tmp/x.json" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 77 ] && grep -q "torch is not installed" "$tmp/err"; then
    ok "no torch: exit 77"
else
    bad "no torch: exit $rc, $(cat "$tmp/err")"
fi

# The inputs it hands FlashInfer and SGLang, run through their semantics
# written out in torch on the CPU, and its check (needs torch).
if python3 -c 'import torch' >/dev/null 2>&1; then
    python3 "$src/tests/baseline_attn_layout.py" "$src/tools" || fail=1
else
    echo "test_bench_attn: no torch here: the baselines' inputs are not checked"
fi

# SGLang's loader, on a stand-in of its tree.
if ! python3 -c 'import torch, triton' >/dev/null 2>&1; then
    echo "test_bench_attn: no torch and triton here: the SGLang loader is not checked"
    exit $fail
fi
sg=$tmp/sgl
att=$sg/sglang/kernels/ops/attention
mkdir -p "$att" "$sg/sglang/srt/utils"
for f in sglang/__init__.py sglang/kernels/__init__.py \
    sglang/kernels/ops/__init__.py sglang/kernels/ops/attention/__init__.py \
    sglang/srt/__init__.py sglang/srt/utils/__init__.py; do
    echo 'raise ImportError("the server: must not run")' >"$sg/$f"
done
echo 'envs = "environ"' >"$sg/sglang/srt/environ.py"
echo 'def unpack_aux_tensors(m, a): return None, 0, 0, 0' >"$att/score_mod.py"
cat >"$att/decode_attention.py" <<'PY'
import torch
import triton
from sglang.kernels.ops.attention.score_mod import unpack_aux_tensors
from sglang.srt.environ import envs
from sglang.srt.utils import get_device_core_count, is_hip
_is_hip = is_hip()
def decode_attention_fwd(*args, **kw):
    return "decode"
PY
cat >"$att/extend_attention.py" <<'PY'
from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd
from sglang.srt.utils import is_cuda, is_gfx95_supported
_is_gfx95 = is_gfx95_supported()
def extend_attention_fwd(*args, **kw):
    return "extend"
PY
echo 'def get_num_kv_splits_triton(*a): pass' >"$att/metadata.py"
if python3 "$script" --sglang-check "$sg" >"$tmp/out" 2>&1 &&
    grep -q "extend_attention.extend_attention_fwd" "$tmp/out"; then
    ok "the SGLang loader loads the modules alone"
else
    bad "--sglang-check on a stand-in tree: $(cat "$tmp/out")"
fi
echo 'import orjson' >>"$att/metadata.py"
if python3 "$script" --sglang-check "$sg" >"$tmp/out" 2>&1; then
    bad "--sglang-check passed a module that imports orjson"
elif grep -q "orjson is neither torch's, triton's nor the standard" "$tmp/out"; then
    ok "--sglang-check refuses a module that needs more than torch and triton"
else
    bad "--sglang-check: $(cat "$tmp/out")"
fi
rm -rf "$att/decode_attention.py"
if python3 "$script" --sglang-check "$sg" >"$tmp/out" 2>&1 ||
    ! grep -q "no sglang/kernels/ops/attention/decode_attention.py" "$tmp/out"; then
    bad "--sglang-check on a tree without the modules: $(cat "$tmp/out")"
else
    ok "--sglang-check says where it looked"
fi
exit $fail
