#!/bin/sh
# test_layers.sh: the include graph of src/ has no circle, and each module
# of src/cache/ includes only modules of lower layers (the "Layer N" line
# of its header; cache/cache.h lists them).  A module is a .c and its .h
# (src/cache/job.c and src/cache/job.h are "cache/job").  With -v, prints
# the graph as "module -> module" lines first.
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

status=0
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
[ "$status" -eq 0 ] && echo "test_layers: ok ($(echo "$edges" | wc -l) includes, no circle)"
exit $status
