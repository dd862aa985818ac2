#!/bin/bash
# kernel_ab.sh: the library's kernels of several source trees side by side
# through kdtree-bench on a GPU host, each built from a release tarball
# (what ships), the benches interleaved so that drift hits all alike.
#
#   tools/dev/kernel_ab.sh pack NAME=DIR ...    (build machine)
#       .xfer/ab-NAME.tgz for each: the `make dist` tarball in .xfer
#       (tools/host/gpu-prepare.sh makes it) with DIR's kernels_src and
#       src (the files git tracks there, as they are in DIR's work tree:
#       a kernel's change may bring its launch code); DIR is a worktree
#       of a branch, say; the first NAME is the reference
#   bash tools/dev/kernel_ab.sh run              (GPU host, repo root)
#       unpacks and builds every .xfer/ab-*.tgz (16 cores, in parallel),
#       then RUNS rounds (default 2; the second in reverse order) of
#       kdtree-bench $BENCH (default: verify_attn, an e4m3 cache in FP8
#       arithmetic, PAGE 64, past 32k) and, when BENCH2 is set, of
#       kdtree-bench $BENCH2 too, each candidate with a cache of its own
#       (both are split on spaces: select a case by several --only, which
#       must all match, e.g. --only H=8 --only R=8 --only rows=65);
#       CHECK="NAME ..." then runs each named candidate's
#       gpu_verify_attn case $CHECK_CASE (default e4m3) and
#       compute-sanitizer racecheck on two calls over an e4m3 cache in
#       $RACE_MATH arithmetic (default e4m3; tools/dev/profile_case.py),
#       on the candidates RACE names (default: CHECK's).
#       Everything goes into $OUT/ab.tgz, rewritten after each phase (a
#       run cut short still brings back what it did).  .gpu/env.sh is
#       sourced first.
#   tools/dev/kernel_ab.sh report DIR            (anywhere, python3)
#       each case's time per candidate against the first candidate (the
#       mean of the rounds), the median, range and run-to-run spread, from
#       the unpacked ab.tgz in DIR.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cmd=${1:-}
[ $# -gt 0 ] && shift

case $cmd in
pack)
    set -e
    tarball=$(ls "$top"/.xfer/kdtree-jit-*.tar.gz | head -1)
    [ -f "$tarball" ] || { echo "kernel_ab: no release tarball in .xfer" \
        "(tools/host/gpu-prepare.sh makes one)" >&2; exit 1; }
    order=""
    for spec in "$@"; do
        name=${spec%%=*} dir=${spec#*=}
        case $name in ""|*[!A-Za-z0-9_]*)
            echo "kernel_ab: NAME=DIR, NAME in letters, digits, _: $spec" >&2
            exit 2;;
        esac
        [ -d "$dir/kernels_src" ] ||
            { echo "kernel_ab: no $dir/kernels_src" >&2; exit 2; }
        t=$(mktemp -d)
        tar xzf "$tarball" -C "$t"
        src=$(ls -d "$t"/kdtree-jit-*)
        (cd "$dir" && git ls-files -z kernels_src src |
            xargs -0 cp --parents -t "$src")
        # regenerated from the kernels by the build
        rm -f "$src/src/jit/kdt_sources.c"
        (cd "$t" && tar czf "$top/.xfer/ab-$name.tgz" "$(basename "$src")")
        rm -rf "$t"
        order="$order $name"
        echo "ab-$name: $(git -C "$dir" log --oneline -1 2>/dev/null)$(
            git -C "$dir" diff --quiet -- kernels_src 2>/dev/null ||
            echo ' (with uncommitted kernel changes)')"
    done
    echo "$order" > "$top/.xfer/ab-order"
    ;;
run)
    final=${OUT:-/tmp/kdt-out}
    out=/tmp/kernel-ab
    rm -rf "$out" && mkdir -p "$out" "$final"
    T0=$(date +%s)
    pack_out() { tar czf "$final/ab.tgz" -C "$out" .; }
    el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$out/summary.txt"; }
    cd "$top" || exit 1
    # shellcheck disable=SC1091
    . .gpu/env.sh >/dev/null 2>&1
    nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv \
        >"$out/gpu.txt" 2>&1
    C=$(cat .xfer/ab-order 2>/dev/null)
    [ -n "$C" ] || C=$(cd .xfer && ls ab-*.tgz | sed 's/^ab-//; s/\.tgz$//')
    echo "$C" > "$out/order"
    for c in $C; do
        (d=/tmp/kernel-ab-build/$c
         rm -rf "$d" && mkdir -p "$d" && tar xzf ".xfer/ab-$c.tgz" -C "$d" &&
             cd "$d"/kdtree-jit-*/ && ./configure -q >"$out/build-$c.log" 2>&1 &&
             make -j4 >>"$out/build-$c.log" 2>&1 &&
             make -j4 tests/gpu_verify_attn >>"$out/build-$c.log" 2>&1
         echo "built $c: exit $?") &
    done
    wait
    el "built"
    BENCH=${BENCH:-"--kernel verify_attn --no-load --kv e4m3 --math e4m3 \
--page 64 --only past_len=32768"}
    # bench_one NAME CANDIDATE ROUND ARGS...: kdtree-bench ARGS in the
    # candidate's build, its JSON as NAME-CANDIDATE-ROUND.json
    bench_one() {
        local name=$1 cand=$2 round=$3
        shift 3
        KDTREE_CACHE_DIR=/tmp/kernel-ab-cache-$cand KDTREE_BENCH_TOOLS=tools \
            timeout "${BENCH_TIMEOUT:-150}" tools/kdtree-bench "$@" \
            --json-out "$out/$name-$cand-$round.json" \
            >"$out/$name-$cand-$round.txt" 2>&1
    }
    for run in $(seq 1 "${RUNS:-2}"); do
        order=$C
        [ $((run % 2)) = 0 ] && order=$(echo $C | tr ' ' '\n' | tac)
        for c in $order; do
            cd /tmp/kernel-ab-build/"$c"/kdtree-jit-*/ || continue
            # shellcheck disable=SC2086
            bench_one b "$c" "$run" $BENCH
            el "bench $c round $run: exit $?"
            if [ -n "${BENCH2:-}" ]; then
                # shellcheck disable=SC2086
                bench_one c "$c" "$run" $BENCH2
                el "bench2 $c round $run: exit $?"
            fi
        done
        pack_out
    done
    for c in ${CHECK:-}; do
        cd /tmp/kernel-ab-build/"$c"/kdtree-jit-*/ || continue
        export KDTREE_CACHE_DIR=/tmp/kernel-ab-cache-$c \
            KDTREE_LIBRARY=$PWD/.libs/libkdtree.so \
            KDTREE_HEADER=$PWD/include/kdtree.h \
            PYTHONPATH=$PWD/python:${PYTHONPATH:-}
        CK_RUN_CASE=${CHECK_CASE:-e4m3} KDTREE_TEST_REQUIRE_GPU=1 \
            timeout "${CHECK_TIMEOUT:-240}" tests/gpu_verify_attn \
            >"$out/check-$c.log" 2>&1
        rc=$? log=$out/check-$c.log
        el "$c gpu_verify_attn ${CHECK_CASE:-e4m3}: exit $rc" \
            "$(grep -c ' 0 bad' "$log") calls 0 bad," \
            "$(grep -c ' [1-9][0-9]* bad' "$log") with bad"
        # RACE="NAME ...": the candidates racecheck runs on (default: all)
        case " ${RACE-$CHECK} " in *" $c "*) ;; *) pack_out; continue;; esac
        for a in "8 1 256" "1 1 2048"; do
            f=$out/race-$c-${a// /_}.log
            BATCH=1 REPS=1 timeout 120 compute-sanitizer --tool racecheck \
                --racecheck-report hazard python3 "$top/tools/dev/profile_case.py" \
                attn $a e4m3 "${RACE_MATH:-e4m3}" >"$f" 2>&1
            el "$c racecheck attn $a e4m3 ${RACE_MATH:-e4m3}: exit $? $(grep 'RACECHECK SUMMARY' "$f")"
        done
        pack_out
    done
    pack_out
    ;;
report)
    python3 - "${1:?kernel_ab report DIR}" <<'PY'
import glob, json, os, statistics as st, sys
d = sys.argv[1]
order = open(os.path.join(d, "order")).read().split()
def rows(c):
    r = {}
    for pfx in ("b", "c"):
        for f in sorted(glob.glob(os.path.join(d, "%s-%s-*.json" % (pfx, c)))):
            for k in json.load(open(f))["kernels"]:
                if "us" in k:
                    r.setdefault(k["config"], []).append(k["us"])
    return r
res = {c: rows(c) for c in order}
ref = order[0]
cases = [k for k in res[ref] if all(k in res[c] for c in order)]
w = max(len(k) for k in cases) if cases else 10
print("%-*s %10s" % (w, "case", ref + " µs") +
      "".join("%10s" % c for c in order[1:]))
ratios = {c: [] for c in order[1:]}
for k in cases:
    m = st.mean(res[ref][k])
    line = "%-*s %10.1f" % (w, k, m)
    for c in order[1:]:
        x = st.mean(res[c][k]) / m
        ratios[c].append(x)
        line += "%10.3f" % x
    print(line)
for c in order[1:]:
    if ratios[c]:
        print("%s / %s: median %.3f, %.3f-%.3f over %d cases" % (
            c, ref, st.median(ratios[c]), min(ratios[c]), max(ratios[c]),
            len(ratios[c])))
spread = [max(v) / min(v) - 1 for c in order for v in res[c].values()
          if len(v) > 1]
if spread:
    print("run-to-run spread of a case: median %.3f, max %.3f" % (
        st.median(spread), max(spread)))
PY
    ;;
*)
    echo "usage: kernel_ab.sh pack NAME=DIR ... | run | report DIR" >&2
    exit 2
    ;;
esac
