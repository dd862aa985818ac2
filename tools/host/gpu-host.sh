#!/bin/bash
# tools/host/gpu-host.sh: builds and tests on a GPU host that lacks
# libtool, Check and pytest (docs/gpu-host.md).  Expects, in the current
# directory, .gpu/ and .xfer/kdtree-jit-*.tar.gz, both made by
# tools/host/gpu-prepare.sh.  Builds the tarball once (kept in /tmp/kdt
# between calls on a warm host), then runs the stages named in $STAGES
# (unset: all, in this order; set but empty: none, the build alone):
#   check     make check, GPU suites included, each test under a time limit
#   portable  the GPU suites again with KDTREE_TARGET=$PORTABLE_TARGET
#             (default sm_90: on Hopper, verify_attn's mma.sync body, the
#             one sm_120 and every non-Hopper part runs)
#   python    python -m pytest on each file of python/tests, one process
#             a file, against the built library
#   bench     kdtree-bench with its baselines, within $BENCH_TIMEOUT s
#             (default 300), into bench.json; with BENCH_SELECT="A|B|..."
#             one kdtree-bench a selection (--only A, ...) in that time,
#             into bench-1.json, bench-2.json, ..., none started with
#             less than $BENCH_MIN s left (default 120; bench-skipped.txt
#             names those): tools/dev/perf_tables.py --record joins them
#   round     python/examples/ddtree_round.py
#   wheel     the pip wheel (.xfer/kdtree_jit-*.whl) installed into a
#             fresh directory and used from outside the tree: pytest on
#             each file of python/tests against it, then
#             python/examples/overhead.py (not in the default list)
#   sanitize  compute-sanitizer memcheck and racecheck on the GPU suites
# Logs and JSON go to $OUT (default /tmp/kdt-out).  Extra arguments go to
# kdtree-bench.
#
# A GPU host is where the GPU suites must run: every stage runs them with
# KDTREE_TEST_REQUIRE_GPU=1 (a suite that finds no device fails instead of
# skipping), a suite's exit 77 counts as a failure, a bench that fell back
# to compile-only fails, and so does a compute-sanitizer run that does not
# exit 0.  The script exits 1 when any stage failed.
set -u
out=${OUT:-/tmp/kdt-out}
mkdir -p "$out"
top=$(pwd)
stages=${STAGES-check portable python bench round sanitize}
# shellcheck disable=SC1091
. .gpu/env.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
if [ ! -f /tmp/kdt/built ] || [ "$top/.xfer/kdtree-jit-"*.tar.gz -nt /tmp/kdt/built ]; then
    rm -rf /tmp/kdt && mkdir -p /tmp/kdt && tar xzf "$top"/.xfer/kdtree-jit-*.tar.gz -C /tmp/kdt
    cd /tmp/kdt/kdtree-jit-*/ || exit 1
    ./configure -q >"$out/configure.log" 2>&1 || { tail -30 config.log; exit 1; }
    make -j16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
    touch /tmp/kdt/built
fi
cd /tmp/kdt/kdtree-jit-*/ || exit 1

# pytest_each LOG DIR ENV...: python3 -m pytest on each file of the
# tarball's python/tests, run from DIR under `env ENV...`, the output
# appended to LOG.  One process a file: a device-side assert leaves the
# CUDA context unusable, and would fail every later test of a single
# run; this way it fails its own file only.
pytest_each() {
    local log=$1 dir=$2 tree f rc
    shift 2
    tree=$(pwd)
    : >"$log"
    for f in $(find "$tree/python/tests" -name 'test_*.py' | sort); do
        (cd "$dir" && env "$@" PYTHONDONTWRITEBYTECODE=1 \
            timeout "${PYTEST_TIMEOUT:-600}" python3 -m pytest -rs \
            -p no:cacheprovider "$f") >>"$log" 2>&1
        rc=$?
        [ $rc = 0 ] || status=1
        echo "pytest ${f#"$tree/"}: exit $rc"
    done
}
# bench_one NAME LIMIT ARGS...: kdtree-bench ARGS --baseline under
# `timeout LIMIT`, its JSON, table and log as $out/NAME.{json,txt,err}.
bench_one() {
    local name=$1 limit=$2
    shift 2
    KDTREE_BENCH_TOOLS=$(pwd)/tools timeout "$limit" \
        ./tools/kdtree-bench --json-out "$out/$name.json" --baseline "$@" \
        >"$out/$name.txt" 2>"$out/$name.err" || status=1
    # A bench that found no GPU measured compile-only: not this stage.
    if ! grep -q '"mode": "gpu"' "$out/$name.json" 2>/dev/null; then
        echo "$name: no GPU rows (see $name.err)"
        status=1
    fi
    cat "$out/$name.txt"
}
export KDTREE_CACHE_DIR=/tmp/kdt-cache
export KDTREE_TEST_REQUIRE_GPU=1
status=0
for stage in $stages; do
    t0=$(date +%s)
    case $stage in
    check)
        make -j4 check LOG_COMPILER="timeout ${TEST_TIMEOUT:-240}" >"$out/check.log" 2>&1 || status=1
        tar czf "$out/testlogs.tgz" tests/*.log test-suite.log 2>/dev/null
        grep -E "^(PASS|FAIL|SKIP|ERROR):|^# (TOTAL|PASS|FAIL|SKIP|ERROR)" "$out/check.log"
        ;;
    portable)
        for t in tests/gpu_*; do
            case $t in *.*) continue ;; esac
            [ -x "$t" ] || continue
            log=$out/portable-${t#tests/}.log
            KDTREE_TARGET=${PORTABLE_TARGET:-sm_90} \
                timeout "${TEST_TIMEOUT:-240}" "./$t" >"$log" 2>&1
            rc=$?
            # 77 (skipped) is a failure here: the suite did not run.
            [ $rc = 0 ] || status=1
            echo "${PORTABLE_TARGET:-sm_90} $t: exit $rc $(grep -E 'Checks' "$log" | tail -1)"
        done
        ;;
    python)
        tree=$(pwd)
        pytest_each "$out/pytest.log" "$tree" \
            KDTREE_LIBRARY="$tree/.libs/libkdtree.so" \
            KDTREE_HEADER="$tree/include/kdtree.h" \
            PYTHONPATH="$tree/python:${PYTHONPATH:-}"
        ;;
    bench)
        if [ -z "${BENCH_SELECT:-}" ]; then
            bench_one bench "${BENCH_TIMEOUT:-300}" "$@"
        else
            # One kdtree-bench per selection, bench-N.*, in the time
            # BENCH_TIMEOUT gives them all; a selection that would start
            # with less than BENCH_MIN seconds left is not started.
            IFS='|' read -ra sels <<<"$BENCH_SELECT"
            n=0
            : >"$out/bench-skipped.txt"
            for sel in "${sels[@]}"; do
                n=$((n + 1))
                left=$(( ${BENCH_TIMEOUT:-300} - ($(date +%s) - t0) ))
                if [ "$left" -lt "${BENCH_MIN:-120}" ]; then
                    echo "bench-$n ($sel): not started, ${left} s left" |
                        tee -a "$out/bench-skipped.txt"
                    status=1
                    continue
                fi
                echo "$sel" >"$out/bench-$n.only"
                bench_one "bench-$n" "$left" "$@" --only "$sel"
            done
        fi
        ;;
    round)
        KDTREE_LIBRARY=$(pwd)/.libs/libkdtree.so PYTHONPATH=$(pwd)/python:${PYTHONPATH:-} \
            timeout "${ROUND_TIMEOUT:-180}" python3 python/examples/ddtree_round.py \
            --json "$out/round.json" >"$out/round.txt" 2>&1 || status=1
        tail -30 "$out/round.txt"
        ;;
    wheel)
        # What a user gets from pip: the wheel installed with pip --target
        # (its own libkdtree and header; torch is the host's), the tests
        # importing it (KDTREE_TEST_INSTALLED=1) from /tmp, never the
        # tree's python/ or the built library.
        tree=$(pwd)
        whl=$(ls "$top"/.xfer/kdtree_jit-*.whl 2>/dev/null | head -1)
        if [ -z "$whl" ]; then
            echo "wheel: no .xfer/kdtree_jit-*.whl (gpu-prepare.sh builds it)"
            status=1
        else
            site=/tmp/kdt-wheel
            rm -rf "$site"
            python3 -m pip install -q --no-index --no-deps --no-compile \
                --target "$site" "$whl" >"$out/wheel-pip.log" 2>&1 || status=1
            # from /tmp, so that nothing of the tree is on sys.path
            pytest_each "$out/wheel-pytest.log" /tmp \
                -u KDTREE_LIBRARY -u KDTREE_HEADER KDTREE_TEST_INSTALLED=1 \
                PYTHONPATH="$site:${PYTHONPATH:-}"
            # overhead.py measures the package it can import: the wheel's
            (cd /tmp && env -u KDTREE_LIBRARY -u KDTREE_HEADER \
                PYTHONPATH=$site:${PYTHONPATH:-} timeout 300 python3 \
                "$tree/python/examples/overhead.py" \
                --json "$out/wheel-overhead.json") \
                >"$out/wheel-overhead.txt" 2>&1 || status=1
            cat "$out/wheel-overhead.txt"
        fi
        ;;
    sanitize)
        # $SAN_SUITES (default: every kernel's GPU suite) under each tool
        # of $SAN_TOOLS, each run limited to $SAN_TIMEOUT seconds.
        for t in ${SAN_SUITES:-gpu_verify_attn gpu_tree_accept gpu_draft_topk gpu_build_ddtree}; do
            for tool in ${SAN_TOOLS:-memcheck racecheck}; do
                timeout "${SAN_TIMEOUT:-200}" compute-sanitizer --tool $tool \
                    --error-exitcode 9 ./tests/$t >"$out/san-$tool-$t.log" 2>&1
                rc=$?
                # 9: errors found; 77: the suite did not run; else it
                # failed or timed out.  Only 0 passes.
                [ $rc = 0 ] || status=1
                echo "compute-sanitizer $tool $t: exit $rc ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Checks:' "$out/san-$tool-$t.log" | tr '\n' ' '))"
            done
        done
        ;;
    esac
    echo "stage $stage: $(( $(date +%s) - t0 )) s"
done
exit $status
