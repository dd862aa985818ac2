# tests/cache_tool_lib.sh: what the kdtree-cache test scripts share,
# sourced after they set `name`: the tool's absolute path in $tool, a
# private temp tree in $tmp (removed at exit; $cleanup runs first) with
# the cache variables pointing into it, and the checks.
tool=${top_builddir:-.}/tools/kdtree-cache
if [ ! -x "$tool" ]; then
    echo "$name: $tool is not built" >&2
    exit 99
fi
tool=$(cd "$(dirname "$tool")" && pwd)/$(basename "$tool")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kdt-$name.XXXXXX") || exit 99
cleanup=:
trap 'eval "$cleanup"; rm -rf "$tmp"' EXIT
mkdir -m 700 "$tmp/run"
KDTREE_CACHE_DIR=$tmp/user
KDTREE_CACHE_PREBUILT_DIR=
XDG_RUNTIME_DIR=$tmp/run
export KDTREE_CACHE_DIR KDTREE_CACHE_PREBUILT_DIR XDG_RUNTIME_DIR
unset KDTREE_CACHE KDTREE_CACHE_PATH KDTREE_CACHE_MAX_BYTES \
    KDTREE_CACHE_SPILL_MAX_BYTES KDTREE_LOG

fail() {
    echo "FAIL: $*" >&2
    echo "--- last output:" >&2
    cat "$tmp/out" >&2
    exit 1
}
# expect RC COMMAND...: runs it into $tmp/out and checks the exit code.
expect() {
    want=$1
    shift
    "$@" >"$tmp/out" 2>&1
    rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, wanted $want"
}
has() {
    grep -q -- "$1" "$tmp/out" || fail "no '$1' in the output"
}
hasnt() {
    if grep -q -- "$1" "$tmp/out"; then fail "'$1' in the output"; fi
}
# 1 where root may make mount namespaces (mounts, PID namespaces).
can_root=0
if [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
    can_root=1
fi
