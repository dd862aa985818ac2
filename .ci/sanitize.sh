#!/bin/sh
# .ci/sanitize.sh: the host test suites under AddressSanitizer and
# UndefinedBehaviorSanitizer, then a bounded libFuzzer run over the cache
# entry decoder.  Self-contained: configures a throw-away build directory
# from this checkout (running autogen.sh first if configure is missing)
# and removes it afterwards.
#
#   .ci/sanitize.sh                 all host suites, fuzz 60 s
#   KDT_FUZZ_SECONDS=300 .ci/sanitize.sh
#   SANITIZE_TESTS="tests/test_cache" .ci/sanitize.sh
#
# Host suites are every TEST of the Makefile except the GPU suites
# (tests/gpu_*, test_require_gpu.sh), the Python ones (*.py,
# test_python.sh: an unsanitised interpreter cannot load a sanitised
# library; test_pip_install.sh builds a library of its own) and the
# packaging ones (test_release.sh, test_install.sh: programs and wheels
# of their own, linked without the sanitizer's runtime).  Exit status: 0 when everything passed.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
fuzz_seconds=${KDT_FUZZ_SECONDS:-60}

# A checkout without configure, or whose generated helpers were cleaned.
for f in configure build-aux/compile build-aux/missing build-aux/depcomp \
         build-aux/install-sh build-aux/test-driver; do
    if [ ! -e "$src/$f" ]; then
        (cd "$src" && ./autogen.sh)
        break
    fi
done
build=$(mktemp -d "${TMPDIR:-/tmp}/kdt-sanitize.XXXXXX")
trap 'rm -rf "$build"' EXIT INT TERM
cd "$build"

san='-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined'
echo "sanitize: configuring in $build"
"$src/configure" -q CFLAGS="$san -g -O1"
make -s -j"$jobs"

# The TESTS list as the Makefile has it, less GPU and Python suites.
if [ -z "${SANITIZE_TESTS:-}" ]; then
    # (tail: make may first regenerate itself and say so on stdout)
    all=$(printf 'print-tests:\n\t@echo $(TESTS)\n' |
          make -s -f Makefile -f - print-tests | tail -n 1)
    SANITIZE_TESTS=
    for t in $all; do
        case $t in
            tests/gpu_*|*.py|*python*|*pip_install*) ;;
            # Packaging and install tests: they link programs and build
            # wheels of their own, without the sanitizer's runtime first
            # (ASan aborts them), and test no memory handling of ours;
            # test_require_gpu runs a GPU suite, which is not built here.
            *release*|*test_install*|*require_gpu*) ;;
            *) SANITIZE_TESTS="$SANITIZE_TESTS $t" ;;
        esac
    done
fi
echo "sanitize: host suites:$SANITIZE_TESTS"

# protect_shadow_gap=0: the CUDA driver, should a suite load it, maps
# memory where ASan's shadow gap would be.  Leak checking stays on.
ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:abort_on_error=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/.ci/lsan.supp:print_suppressions=0}
# The fuzz target's own loop runs longer here than in a plain make check.
KDT_FUZZ_ITERS=${KDT_FUZZ_ITERS:-3000000}
export ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS KDT_FUZZ_ITERS
# Build only the programs among those tests (so a list of a few suites
# does not need the whole tree's test programs).
progs=
for t in $SANITIZE_TESTS; do
    case $t in
        *.sh) ;;
        *) progs="$progs $t" ;;
    esac
done
status=0
make -j"$jobs" check TESTS="$SANITIZE_TESTS" check_PROGRAMS="$progs" ||
    status=1
if [ "$status" -ne 0 ]; then
    for f in $SANITIZE_TESTS; do
        if grep -q ':test-result: \(FAIL\|ERROR\)' "$f.trs" 2>/dev/null; then
            echo "=== $f.log"
            tail -n 60 "$f.log"
        fi
    done
fi

# libFuzzer over kdt_entry_decode, when clang can build it.
cc_fuzz=${CC_FUZZ:-clang}
if command -v "$cc_fuzz" >/dev/null 2>&1 &&
   echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' |
   "$cc_fuzz" -x c -fsanitize=fuzzer - -o "$build/fuzz-probe" 2>/dev/null; then
    "$cc_fuzz" -g -O1 -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=undefined -DKDT_FUZZ_LIBFUZZER \
        -I"$build" -I"$src/include" -I"$src/src" \
        "$src/tests/fuzz_entry.c" "$src/src/cache/key.c" "$src/src/cache/entry.c" \
        "$src/src/base/xxh3.c" \
        -o "$build/fuzz_entry"
    mkdir -p "$build/fuzz-corpus"
    cp "$src"/tests/fuzz_corpus/* "$build/fuzz-corpus/"
    echo "sanitize: libFuzzer on kdt_entry_decode for ${fuzz_seconds} s"
    if "$build/fuzz_entry" -max_total_time="$fuzz_seconds" -max_len=8192 \
           -print_final_stats=1 "$build/fuzz-corpus" >"$build/fuzz.log" 2>&1; then
        grep -E '^Done|stat::number_of_executed_units' "$build/fuzz.log" || true
    else
        tail -n 80 "$build/fuzz.log"
        echo "sanitize: the fuzzer found a failure" >&2
        status=1
    fi
else
    echo "sanitize: no clang with libFuzzer; the decoder was fuzzed by" \
         "tests/test_cache_fuzz only"
fi

if [ "$status" -eq 0 ]; then
    echo "sanitize: all passed"
fi
exit "$status"
