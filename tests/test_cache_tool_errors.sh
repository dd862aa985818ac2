#!/bin/sh
# test_cache_tool_errors.sh: tools/kdtree-cache where things are wrong, all
# without NVRTC: usage errors that name what was wrong; FIFOs and
# directories at entry paths (verify reports them, gc and clear remove
# them, nothing blocks); populate refusing a cache it cannot write (exit 3)
# or arguments it cannot use (exit 2) before compiling anything; gc and
# clear saying why they could not remove; a --dir that does not exist
# (exit 3, named, for every command but populate, which makes it); the
# temp sweep of a writer in another PID namespace.  The parts that need root (mounts, namespaces)
# are skipped, with a note, where the sandbox does not allow them.
set -u
name=test_cache_tool_errors
. "${srcdir:-.}/tests/cache_tool_lib.sh"
# Never a compile here: a populate that got as far as NVRTC is a failure.
KDTREE_NVRTC_LIBRARY=/nonexistent/libnvrtc.so
export KDTREE_NVRTC_LIBRARY
# A command that must finish: 20 s, then it counts as hung.
bounded() {
    timeout 20 "$@"
}

# --- usage errors name what was wrong ------------------------------------
expect 2 "$tool" frobnicate
has "unknown command 'frobnicate'"
expect 2 "$tool" list --bogus
has "unknown option '--bogus'"
expect 2 "$tool" list extra
has "list takes no argument"
expect 2 "$tool" gc --max-bytes abc
has "--max-bytes abc"
hasnt "KDTREE_CACHE_MAX_BYTES"
expect 2 "$tool" explain tree_accept --arch bogus
has "bogus"
hasnt "key "
expect 2 "$tool" populate --arch ''
has "no architecture"
expect 2 "$tool" populate --arch ' , '
expect 2 "$tool" populate --arch sm_1 tree_accept
has "sm_1"

# --- a --dir that does not exist is an error, not an empty cache --------
for cmd in list resources verify gc clear "explain tree_accept"; do
    # shellcheck disable=SC2086
    expect 3 "$tool" --dir "$tmp/nonexistent" $cmd
    has "$tmp/nonexistent: No such file or directory"
    hasnt "entries"
done
[ -e "$tmp/nonexistent" ] && fail "a command made the --dir it was given"

# --- FIFOs and directories at entry paths --------------------------------
hex=0123456789abcdef0123456789abcdef
mkdir -p -m 700 "$tmp/user/v1"
mkfifo -m 600 "$tmp/user/v1/$hex.kdt"
mkdir -m 700 "$tmp/user/v1/fedcba9876543210fedcba9876543210.kdt"
expect 1 bounded "$tool" verify
has "bad: .*$hex.kdt: not a regular file (a FIFO)"
has "bad: .*fedcba9876543210fedcba9876543210.kdt: not a regular file (a directory)"
has "2 bad"
expect 0 bounded "$tool" list
has "2 entries"
expect 0 bounded "$tool" gc
has "2 bad entries"
[ -e "$tmp/user/v1/$hex.kdt" ] && fail "gc left the FIFO"
[ -e "$tmp/user/v1/fedcba9876543210fedcba9876543210.kdt" ] &&
    fail "gc left the directory"
mkfifo -m 600 "$tmp/user/v1/$hex.kdt"
mkdir -m 700 "$tmp/user/v1/fedcba9876543210fedcba9876543210.kdt"
: >"$tmp/user/v1/fedcba9876543210fedcba9876543210.kdt/inside"
expect 0 bounded "$tool" clear
has "removed 2 entries"
[ -n "$(ls -A "$tmp/user/v1")" ] && fail "clear left $(ls -A "$tmp/user/v1")"
# In a read-only layer (--all) a FIFO is reported, never opened.
mkdir -p -m 755 "$tmp/layer/v1"
mkfifo -m 644 "$tmp/layer/v1/$hex.kdt"
KDTREE_CACHE_PATH=$tmp/layer expect 1 bounded "$tool" verify --all
has "not a regular file (a FIFO)"
rm -rf "$tmp/layer"

# --- populate refuses a cache it cannot write, before compiling ----------
: >"$tmp/a-file"
expect 3 "$tool" --dir "$tmp/a-file" populate --arch sm_90 tree_accept
has "a-file"
has "Not a directory"
hasnt "compiled"
expect 3 "$tool" --dir "$tmp/a-file/sub" populate --arch sm_90 tree_accept
has "Not a directory"
expect 3 "$tool" --dir /proc/kdtree-cache populate --arch sm_90 tree_accept
has "/proc/kdtree-cache"
expect 3 env -u HOME -u KDTREE_CACHE_DIR -u XDG_CACHE_HOME \
    "$tool" populate --arch sm_90 tree_accept
has "no cache directory"
expect 3 env KDTREE_CACHE=readonly "$tool" populate --arch sm_90 tree_accept
has "KDTREE_CACHE=readonly"
mkdir -m 777 "$tmp/open"
expect 3 "$tool" --dir "$tmp/open" populate --arch sm_90 tree_accept
has "writable by group or others"

# --- read-only mounts: say why, exit 3 -----------------------------------
if [ "$can_root" -eq 1 ]; then
    mkdir -m 700 "$tmp/ro"
    cat >"$tmp/ro.sh" <<EOF
set -u
mount -t tmpfs -o size=1m,mode=0700 tmpfs "$tmp/ro" || exit 90
mkdir -m 700 "$tmp/ro/v1"
printf 'not an entry' >"$tmp/ro/v1/$hex.kdt"
chmod 600 "$tmp/ro/v1/$hex.kdt"
mount -o remount,ro "$tmp/ro" || exit 91
"$tool" --dir "$tmp/ro" gc >"$tmp/ro-gc.out" 2>&1; echo \$? >"$tmp/ro-gc.rc"
"$tool" --dir "$tmp/ro" clear >"$tmp/ro-clear.out" 2>&1
echo \$? >"$tmp/ro-clear.rc"
"$tool" --dir "$tmp/ro" populate --arch sm_90 tree_accept \
    >"$tmp/ro-pop.out" 2>&1
echo \$? >"$tmp/ro-pop.rc"
EOF
    unshare -m sh "$tmp/ro.sh" || fail "the read-only mount script failed"
    for c in gc clear pop; do
        cp "$tmp/ro-$c.out" "$tmp/out"
        [ "$(cat "$tmp/ro-$c.rc")" -eq 3 ] ||
            fail "$c on a read-only mount exited $(cat "$tmp/ro-$c.rc")"
        has "Read-only file system"
    done
else
    echo "test_cache_tool_errors: not root or no mount namespace:" \
        "read-only mounts not tried"
fi

# --- the temp sweep across PID namespaces --------------------------------
# A writer outside holds its temp file locked; gc inside a new PID
# namespace (where that pid does not exist) must leave it.
if [ "$can_root" -eq 1 ] && unshare --pid --fork true 2>/dev/null &&
    command -v flock >/dev/null; then
    host=$(hostname | tr -cd 'A-Za-z0-9-' | cut -c1-40)
    [ -n "$host" ] || host=host
    mkdir -p -m 700 "$tmp/user/v1"
    temp="$tmp/user/v1/.$hex.$$.0.$host.tmp"
    : >"$temp"
    chmod 600 "$temp"
    # Past the grace of an unlocked file: only the lock keeps it.
    touch -d '10 minutes ago' "$temp"
    # The holder locks the file through its fd 9 and becomes the sleep
    # that keeps it: killing it is the writer dying.
    TEMP=$temp LOCKED=$tmp/locked sh -c \
        'exec 9>>"$TEMP"; flock 9; : >"$LOCKED"; exec sleep 60' &
    holder=$!
    cleanup='kill "$holder" 2>/dev/null'

    i=0
    while [ ! -e "$tmp/locked" ]; do
        i=$((i + 1))
        [ $i -gt 400 ] && fail "the lock holder never locked"
        sleep 0.05
    done
    expect 0 unshare --pid --fork "$tool" gc
    has "0 stale temp files"
    [ -e "$temp" ] || fail "gc in another PID namespace swept a live writer"
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    cleanup=:
    expect 0 unshare --pid --fork "$tool" gc
    has "1 stale temp files"
    [ -e "$temp" ] && fail "gc kept a dead writer's temp file"
else
    echo "test_cache_tool_errors: no PID namespace or flock(1):" \
        "the cross-namespace sweep not tried (test_cache_housekeep covers" \
        "the rule)"
fi
echo "test_cache_tool_errors: ok"
exit 0
