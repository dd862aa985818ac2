# tests/pip_test_lib.sh: what the pip package's test scripts share, sourced
# after they set `name`: the skips (77: KDT_PIP_TEST=0, which .ci/run's
# distcheck sets; no python3, no venv, pip cannot reach its index), a
# private temp tree in $tmp (removed at exit), fail and step, fresh venvs
# (make_venv), and a clean copy of the sources (copy_sources).
top_src=${abs_top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
top_build=${abs_top_builddir:-$(pwd)}
if [ "${KDT_PIP_TEST:-1}" = 0 ]; then
    echo "$name: KDT_PIP_TEST=0; skipped"
    exit 77
fi
command -v python3 >/dev/null 2>&1 || { echo "$name: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kdt-$name.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "$name: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

# make_venv DIR: a fresh venv (77 when python3 cannot make one).
make_venv() {
    if ! python3 -m venv "$1" >"$tmp/venv.log" 2>&1; then
        cat "$tmp/venv.log"
        echo "$name: python3 cannot make a venv (python3-venv)"
        exit 77
    fi
}

make_venv "$tmp/venv"
py=$tmp/venv/bin/python
pip="$py -m pip --disable-pip-version-check"
if ! $pip download -q --no-deps --timeout 15 --retries 1 -d "$tmp/probe" \
        cffi >"$tmp/probe.log" 2>&1; then
    tail -n 3 "$tmp/probe.log"
    echo "$name: pip cannot reach its index; skipped"
    exit 77
fi

# copy_sources DIR: a git clone of HEAD with KDT_PIP_CLONE=1 (as CI does),
# else the working tree as it is (uncommitted changes included), without
# build outputs.
copy_sources() {
    if [ "${KDT_PIP_CLONE:-0}" = 1 ]; then
        git clone -q "$top_src" "$1" || fail "git clone"
        return
    fi
    mkdir "$1"
    (cd "$top_src" && tar cf - --exclude='*.o' --exclude='*.lo' \
        --exclude='*.la' --exclude=.libs --exclude=.deps \
        --exclude=.dirstamp --exclude=__pycache__ --exclude='*.egg-info' \
        --exclude=python/build --exclude=python/LICENSE \
        --exclude=src/jit/kdt_sources.c \
        LICENSE am build-aux cubin include kernels_src python src) |
        (cd "$1" && tar xf -) || fail "copying the sources"
}

# No KDTREE_* variable of the caller's reaches the package.
for v in $(env | sed -n 's/^\(KDTREE_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done
want_version=$(sh "$top_src/build-aux/version.sh" "$top_src/include/kdtree.h")
