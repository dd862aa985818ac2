#!/bin/sh
# test_layers.sh: the include graph of src/ goes down the folders' order
# and has no circle.  The folders, bottom up (docs/architecture.md):
#
#     base < cuda, cache < jit < runtime < kernels < api
#
# (api is src/api.c; cuda and cache share a floor and use neither each
# other); a module includes modules of its own folder and of lower ones
# only, and a folder missing from that order fails the test.  Inside
# src/cache/, each module includes only modules of lower layers (the
# "Layer N" line of its header; cache/cache.h lists them).  A module is a
# .c and its .h (src/cache/job.c and src/cache/job.h are "cache/job").
# With -v, prints the graph as "module -> module" lines first.
set -u
srcdir=${srcdir:-.}
verbose=0
[ "${1:-}" = "-v" ] && verbose=1
src=$srcdir/src
[ -d "$src" ] || { echo "test_layers: no $src" >&2; exit 99; }

edges=$(cd "$src" && for f in */*.c */*.h *.c; do
    [ -f "$f" ] || continue
    case $f in */kdt_sources.c) continue ;; esac
    from=${f%.*}
    sed -n 's/^#include "\([a-z]*\/\)\{0,1\}\([a-z_]*\)\.h".*/\1\2/p' "$f" |
        while read -r to; do
            # Only modules of src/ ("config.h" is autoconf's).
            [ -f "$to.h" ] || [ -f "$to.c" ] || continue
            [ "$to" = "$from" ] || echo "$from $to"
        done
done | sort -u)

[ "$verbose" -eq 1 ] && echo "$edges" | awk '{ print $1 " -> " $2 }'

# Layers of src/cache/: from each header's "Layer N of the cache" line.
layers=$(cd "$src" && for h in cache/*.h; do
    n=$(sed -n 's/^ \* Layer \([0-9]*\) of the cache.*/\1/p' "$h" | head -1)
    echo "${h%.h} ${n:-none}"
done)

# The folders' floors; a module's folder is what precedes its "/" (api
# for src/api.c).
floors='base 0
cuda 1
cache 1
jit 2
runtime 3
kernels 4
api 5'

# Reads "from to" lines; prints each include that does not go down the
# folders' order, and each folder with no floor.
folder_check() {
    (echo "$floors" | sed 's/^/F /'; sed 's/^/E /') | awk '
        function folder(m) { return index(m, "/") ? substr(m, 1, index(m, "/") - 1) : "api" }
        $1 == "F" { floor[$2] = $3; next }
        {
            a = folder($2); b = folder($3)
            if (!(a in floor)) { print "folder " a "/ has no floor (" $2 ")"; next }
            if (!(b in floor)) { print "folder " b "/ has no floor (" $3 ")"; next }
            if (a != b && floor[b] >= floor[a])
                print $2 " (" a ") includes " $3 " (" b ")"
        }'
}

status=0
# The check itself catches what it must: an include up, one across the
# floor cuda and cache share, and a folder with no floor.
for e in "jit/obtain runtime/runtime" "cache/cache cuda/driver" \
    "cuda/driver cache/cache" "base/error api" "gpu/x base/error"; do
    if [ -z "$(echo "$e" | folder_check)" ]; then
        echo "test_layers: the folder check passes \"$e\"" >&2
        status=1
    fi
done
up=$(echo "$edges" | folder_check)
if [ -n "$up" ]; then
    echo "test_layers: includes that do not go down" \
        "base < cuda, cache < jit < runtime < kernels < api:" >&2
    echo "$up" >&2
    status=1
fi
bad=$(echo "$layers" | awk '$2 == "none" { print $1 }')
if [ -n "$bad" ]; then
    echo "test_layers: no \"Layer N of the cache\" line in: $bad" >&2
    status=1
fi
# Each cache include goes to a strictly lower layer.
up=$( (echo "$layers" | sed 's/^/L /'; echo "$edges" | sed 's/^/E /') | awk '
    $1 == "L" { layer[$2] = $3; next }
    $1 == "E" && $2 ~ /^cache\// && $3 ~ /^cache\// {
        if (!($2 in layer) || !($3 in layer) || layer[$3] + 0 >= layer[$2] + 0)
            print $2 " (layer " layer[$2] ") includes " $3 " (layer " layer[$3] ")"
    }')
if [ -n "$up" ]; then
    echo "test_layers: includes that do not go down:" >&2
    echo "$up" >&2
    status=1
fi
# No circle anywhere: peel off modules that include nothing left, until
# none remain; what cannot be peeled is on a circle.
left=$(echo "$edges" | awk '
    { out[$1] = out[$1] " " $2; n[$1]++; node[$1]; node[$2] }
    END {
        do {
            changed = 0
            for (v in node) {
                if (v in done) continue
                k = split(out[v], to, " ")
                ok = 1
                for (i = 1; i <= k; i++) if (!(to[i] in done)) ok = 0
                if (ok) { done[v]; changed = 1 }
            }
        } while (changed)
        for (v in node) if (!(v in done)) print v
    }' | sort)
if [ -n "$left" ]; then
    echo "test_layers: modules on (or including one on) an include" \
        "circle:" $left >&2
    status=1
fi
[ "$status" -eq 0 ] && echo "test_layers: ok ($(echo "$edges" | wc -l) includes, down the folders' order, no circle)"
exit $status
