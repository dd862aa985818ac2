#!/bin/sh
# test_cache_tool.sh: tools/kdtree-cache end to end on a private cache:
# usage errors, populate (compile-only through kdtree_compile), list
# (with each entry's NVRTC),
# resources, explain (a hit, and misses that name the differing field), verify and gc
# on a corrupted entry and on an alias without its entry, gc of temp and
# lock files, a SIGINT, eviction by gc --max-bytes, clear, the spill
# store's gc and clear, --all with a read-only layer, populate into a full disk (exit 3, with the reason),
# and the exit codes scripts rely on.  Skips (77) when NVRTC is
# unavailable (populate is how entries are made); what needs no NVRTC is
# test_cache_tool_errors.sh.
set -u
name=test_cache_tool
. "${srcdir:-.}/tests/cache_tool_lib.sh"

expect 2 "$tool"
expect 0 "$tool" --help
has "populate"

# An empty (absent) cache is fine.
expect 0 "$tool" list
has "0 entries"
expect 0 "$tool" verify

"$tool" populate --arch sm_90 tree_accept >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    if grep -q "NO_COMPILER" "$tmp/out"; then
        echo "test_cache_tool: NVRTC unavailable: skipped"
        exit 77
    fi
    fail "populate exited $rc"
fi
has "compiled"
expect 0 "$tool" populate --arch sm_90 tree_accept
has "already cached"
expect 2 "$tool" populate --arch sm_90 no_such_kernel
expect 2 "$tool" populate --arch sm_1 tree_accept

expect 0 "$tool" list
has "tree_accept .*sm_90 .*cubin"
has "tree_accept .*sm_90 .*alias"
# Each entry says the NVRTC that made it (version and build), so entries
# of two NVRTCs for one kernel do not read as duplicates.
has "NVRTC"
has "tree_accept .*sm_90 .*cubin [0-9][0-9]*\.[0-9][0-9]* [0-9a-f]\{7\} "
expect 0 "$tool" verify
has "0 bad"
# resources: the kernel function of the cubin entry, aliases left out.
expect 0 "$tool" resources
has "tree_accept .*sm_90 .*kdt_tree_accept  *[1-9][0-9]* "
[ "$(grep -c kdt_tree_accept "$tmp/out")" -eq 1 ] || fail "resources: not one row"
expect 2 "$tool" resources extra

# explain: a hit, then misses that name the field.
expect 0 "$tool" explain tree_accept --arch sm_90
has "^hit: "
expect 1 "$tool" explain tree_accept --arch sm_120
has "^miss: nearest entry"
has "target:"
has "wanted: sm_120"
expect 1 "$tool" explain tree_accept --arch sm_90 --nvrtc "0.0 test build"
has "nvrtc:"
has "wanted: 0.0 test build"
shape=$("$tool" list | awk '$2 == "tree_accept" && $5 == "cubin" { print $3; exit }')
other=$(echo "$shape" | sed 's/N_MAX=[0-9]*/N_MAX=33/')
if [ "$other" != "$shape" ]; then
    expect 1 "$tool" explain tree_accept "$other" --arch sm_90
    has "constants:"
fi
expect 2 "$tool" explain no_such_kernel

# A corrupted entry: verify says so (exit 1), explain reports it rejected,
# gc removes it, verify is clean again.
cubin=$(ls "$tmp/user/v1/"*.kdt | while read -r f; do
    if "$tool" list | grep -q "^$(basename "$f" | cut -c1-12) .*cubin"; then
        echo "$f"
        break
    fi
done)
[ -n "$cubin" ] || fail "no cubin entry found"
printf 'X' | dd of="$cubin" bs=1 seek=100 conv=notrunc 2>/dev/null
expect 1 "$tool" verify
has "^bad: .*checksum"
expect 1 "$tool" explain tree_accept --arch sm_90
has "exists but is rejected"
# The library's own lookup refuses it, recompiles and replaces it.
expect 0 "$tool" populate --arch sm_90 tree_accept
has "compiled"
expect 0 "$tool" verify
expect 0 "$tool" explain tree_accept --arch sm_90
has "^hit: "
# gc removes a bad entry, and the alias that named it, which leads
# nowhere without it.
printf 'X' | dd of="$cubin" bs=1 seek=100 conv=notrunc 2>/dev/null
expect 0 "$tool" gc
has "2 bad entries"
expect 0 "$tool" verify
has "0 bad"
expect 0 "$tool" populate --arch sm_90 tree_accept
has "compiled"

# A temp file that nobody holds locked is swept by gc once it is older
# than the grace (five minutes): a young one may be a live writer of an
# earlier release, which locked nothing.
hex=$(basename "$cubin" .kdt)
host=$(hostname | tr -cd 'A-Za-z0-9-' | cut -c1-40)
[ -n "$host" ] || host=host
sh -c 'exit 0' &
deadpid=$!
wait "$deadpid"
temp="$tmp/user/v1/.$hex.$deadpid.0.$host.tmp"
: >"$temp"
expect 0 "$tool" gc
has "0 stale temp files"
[ -e "$temp" ] || fail "gc swept a fresh temp file nobody held"
touch -d '10 minutes ago' "$temp"
expect 0 "$tool" gc
has "1 stale temp files"

# An alias whose entry is gone leads nowhere: verify says so, gc removes
# it.
rm -f "$cubin"
expect 1 "$tool" verify
has "^bad: .*an alias of .*, which is not in the directory"
expect 0 "$tool" gc
has "1 bad entries"
expect 0 "$tool" list
has "0 entries"
expect 0 "$tool" populate --arch sm_90 tree_accept

# Lock files nobody holds (left by a compile killed before its release)
# are removed by gc, even with no cache directory; a held one stays.
locks=$tmp/run/kdtree-jit-locks
mkdir -p -m 700 "$locks"
: >"$locks/0123456789abcdef0123456789abcdef.lock"
expect 0 env KDTREE_CACHE_DIR="$tmp/none" "$tool" gc
has "1 stale lock files"
[ -e "$locks/0123456789abcdef0123456789abcdef.lock" ] &&
    fail "gc kept a stale lock file"
if command -v flock >/dev/null; then
    held=$locks/fedcba9876543210fedcba9876543210.lock
    flock "$held" sh -c ": >'$tmp/locked'; exec sleep 30" &
    holder=$!
    cleanup='kill "$holder" 2>/dev/null'
    while [ ! -e "$tmp/locked" ]; do sleep 0.05; done
    expect 0 "$tool" gc
    has "0 stale lock files"
    [ -e "$held" ] || fail "gc removed a held lock file"
    kill "$holder"
    wait "$holder" 2>/dev/null
    cleanup=:
else
    echo "test_cache_tool: no flock(1): a held lock file not tried"
fi

# SIGINT stops the tool with a line that says so and status 130, during
# a compile too (NVRTC's own handler exited 4, without a word).
if env --default-signal=INT true 2>/dev/null; then
    env --default-signal=INT "$tool" --dir "$tmp/sig" populate \
        --arch "sm_90 sm_100 sm_120" draft_topk verify_attn >"$tmp/out" 2>&1 &
    pid=$!
    sleep 0.5
    kill -INT "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 130 ] || fail "populate stopped by SIGINT exited $rc"
    has "^kdtree-cache: stopped by SIGINT"
else
    echo "test_cache_tool: env has no --default-signal: SIGINT not tried"
fi

# --all shows a read-only layer as well.
mkdir -p "$tmp/layer"
cp -r "$tmp/user/v1" "$tmp/layer/"
KDTREE_CACHE_PATH=$tmp/layer
export KDTREE_CACHE_PATH
expect 0 "$tool" list --all
has "$tmp/layer"
unset KDTREE_CACHE_PATH

# Eviction to a cap, then clear.
expect 0 "$tool" populate --arch sm_120 tree_accept
expect 0 "$tool" gc --max-bytes 1
has "evicted"
expect 0 "$tool" list
has "0 entries"
expect 0 "$tool" populate --arch sm_90 tree_accept
expect 0 "$tool" clear
has "removed 2 entries"
expect 0 "$tool" list
has "0 entries"

# A compile that cannot be written to the user's directory goes to the
# spill store (populate still says it was not written there: exit 3);
# gc keeps the spill store under its cap, clear empties it too.
spill=$tmp/run/kdtree-jit-spill
expect 3 env KDTREE_CACHE_TEST_PUBLISH_FAIL=EROFS "$tool" populate \
    --arch sm_90 tree_accept
has "not written to"
[ "$(ls "$spill/v1/"*.kdt | wc -l)" -eq 2 ] ||
    fail "the entry and its alias are not in the spill store"
expect 0 "$tool" gc
has "^gc: spill store: 0 stale temp files, 0 bad entries, 0 evicted"
expect 0 env KDTREE_CACHE_SPILL_MAX_BYTES=1 "$tool" gc
has "^gc: spill store: .* 2 evicted (cap 1 bytes)"
expect 3 env KDTREE_CACHE_TEST_PUBLISH_FAIL=EROFS "$tool" populate \
    --arch sm_90 tree_accept
expect 0 "$tool" clear
has "removed 2 entries from $spill/v1 (the spill store)"
[ -z "$(ls "$spill/v1/")" ] || fail "clear left the spill store's entries"

# --dir overrides the directory; KDTREE_CACHE=off leaves none (exit 3).
expect 0 "$tool" --dir "$tmp/elsewhere" populate --arch sm_90 tree_accept
[ -n "$(ls "$tmp/elsewhere/v1/"*.kdt 2>/dev/null)" ] || fail "--dir ignored"

# A full disk: populate compiles, cannot write, and says so (exit 3).
# RLIMIT_FSIZE fails the write as a full disk does (EFBIG for ENOSPC);
# where root may mount, a real full tmpfs too.
expect 3 sh -c "trap '' XFSZ; ulimit -f 4; exec '$tool' --dir '$tmp/full' \
    populate --arch sm_90 tree_accept"
has "FAILED"
has "File too large"
hasnt "compiled in"
if [ "$can_root" -eq 1 ]; then
    mkdir -m 700 "$tmp/tiny"
    unshare -m sh -c "mount -t tmpfs -o size=16k,mode=0700 tmpfs '$tmp/tiny' &&
        '$tool' --dir '$tmp/tiny' populate --arch sm_90 tree_accept" \
        >"$tmp/out" 2>&1
    rc=$?
    [ "$rc" -eq 3 ] || fail "populate into a full tmpfs exited $rc"
    has "No space left on device"
else
    echo "test_cache_tool: not root or no mount namespace: full tmpfs not tried"
fi

KDTREE_CACHE=off
export KDTREE_CACHE
expect 3 "$tool" list
expect 3 "$tool" clear
echo "test_cache_tool: ok"
exit 0
