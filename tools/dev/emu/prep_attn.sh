#!/bin/sh
# prep_attn.sh IN OUT: make a kernel source (or a .cuh it includes) compile
# on the host for the emulator.  Unlike prep.sh's one sed rule per known
# asm line, every inline-asm statement becomes a call of the small PTX
# interpreter (emu_ptx.h), with its operands in asm numbering:
#
#   asm volatile("mma.sync... {%0,%1,%2,%3}, ..." : "+f"(c[0]), ... : "r"(a[0]), ...);
#   -> emu_asm("mma.sync... {%0,%1,%2,%3}, ...", {EMU_OUT(c[0]), ..., EMU_IN(a[0]), ...});
#
# so the operand order written in the kernel (which register is the high
# half of a cvt.bf16x2, which address is which ldmatrix row) is what the
# emulator executes, and a wrong fragment layout gives wrong numbers here
# as on the GPU.  The dynamic shared array becomes emu_dyn_smem (shared
# addresses are offsets into the block's window, cuda_emu.h), a static
# __shared__ variable is refused (the blocks of a cluster run together),
# and kdt_params.h is preceded by cuda_emu.h.  An operand list may be a
# macro defined in the same file (of any parameters); it is expanded.
set -eu
python3 - "$1" "$2" <<'EOF'
import re, sys

src = open(sys.argv[1]).read()

def skip_string(s, i):
    """s[i] is '"': index just past the closing quote."""
    i += 1
    while s[i] != '"':
        i += 2 if s[i] == '\\' else 1
    return i + 1

def match_paren(s, i):
    """s[i] is '(': index of its ')'."""
    depth = 0
    while True:
        c = s[i]
        if c == '"':
            i = skip_string(s, i)
            continue
        if c == '(':
            depth += 1
        elif c == ')':
            depth -= 1
            if depth == 0:
                return i
        i += 1

def split_top(s, sep):
    parts, depth, cur, i = [], 0, '', 0
    while i < len(s):
        c = s[i]
        if c == '"':
            j = skip_string(s, i)
            cur += s[i:j]
            i = j
            continue
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += c
        i += 1
    parts.append(cur)
    return parts

# function-like macros defined in this file: an asm's operand list may
# be one (the wgmma accumulators' constraints), and a macro's body may
# name another
macros = {}
for m in re.finditer(r'^#define (\w+)\(([\w\s,]+)\)((?:.*\\\n)*.*)$', src,
                     re.M):
    macros[m.group(1)] = ([p.strip() for p in m.group(2).split(',')],
                          m.group(3).replace('\\\n', ' '))

def expand(op):
    m = re.match(r'\s*(\w+)\((.*)\)\s*$', op, re.S)
    if not m or m.group(1) not in macros:
        return [op]
    params, body = macros[m.group(1)]
    args = [a.strip() for a in split_top(m.group(2), ',')]
    if len(args) != len(params):
        return [op]
    # every parameter at once, so that an argument is not substituted
    # again
    sub = dict(zip(params, args))
    body = re.sub(r'\b(%s)\b' % '|'.join(params),
                  lambda x: sub[x.group(1)], body)
    return [x for part in split_top(body, ',') for x in expand(part)]

def operands(sec, out):
    res = []
    for op in [x for part in split_top(sec, ',') for x in expand(part)]:
        op = op.strip()
        if not op:
            continue
        m = re.match(r'"([^"]*)"\s*\((.*)\)$', op, re.S)
        if not m:
            sys.exit('prep_attn: cannot parse asm operand %r' % op)
        cons, expr = m.groups()
        if out:
            kind = 'EMU_INOUT' if cons.startswith('+') else 'EMU_OUT'
        else:
            kind = 'EMU_IN'
        res.append('%s(%s)' % (kind, expr.strip()))
    return res

out, i = '', 0
pat = re.compile(r'\basm\s*(volatile\s*)?\(')
while True:
    m = pat.search(src, i)
    if not m:
        out += src[i:]
        break
    out += src[i:m.start()]
    lp = m.end() - 1
    rp = match_paren(src, lp)
    secs = split_top(src[lp + 1:rp], ':')
    tmpl = secs[0].strip()
    ops = []
    if len(secs) > 1:
        ops += operands(secs[1], True)
    if len(secs) > 2:
        ops += operands(secs[2], False)
    out += 'emu_asm(%s, {%s})' % (tmpl, ', '.join(ops))
    i = rp + 1

# the dynamic shared array (any name, any alignment) is the block's
out = re.sub(r'extern __shared__ __align__\(\d+\) unsigned char (\w+)\[\];',
             r'unsigned char *\1 = emu_dyn_smem;', out)
# a static __shared__ variable would be one for every block of a cluster,
# which run together here
m = re.search(r'^(?!\s*(\*|//|/\*)).*\b__shared__\b.*$', out, re.M)
if m:
    sys.exit('prep_attn: static __shared__ is not emulated (%s): %r'
             % (sys.argv[1], m.group(0).strip()))
out = out.replace('#include "kdt_params.h"',
                  '#include "cuda_emu.h"\n#include "kdt_params.h"')
open(sys.argv[2], 'w').write(out)
EOF
