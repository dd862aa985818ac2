#!/usr/bin/env python3
"""Per-source-line totals of an ncu SASS export.

    sass_lines.py NCU_SASS_CSV CUBIN [TOP]

NCU_SASS_CSV is `ncu -i R --page source --csv --print-source sass` (what
tools/dev/gpu_profile.sh writes); CUBIN the same kernel compiled here
with -lineinfo (nvcc -cubin -lineinfo with the NVRTC flags and -D values
the library used).  The two instruction streams are aligned by opcode
(difflib), the local cubin's line table (nvdisasm -g) names each
instruction's source line, and the warp-stall samples and executed warp
instructions are summed per line.  For profiling NVRTC-compiled kernels,
whose source ncu cannot open.  Development tool: not installed, not tested.
"""
import collections
import csv
import difflib
import os
import re
import subprocess
import sys

NVDISASM = os.environ.get("NVDISASM", "nvdisasm")


def local_sass(cubin):
    out = subprocess.run([NVDISASM, "-g", "-c", cubin], check=True,
                         capture_output=True, text=True).stdout
    ins, line = [], None
    for t in out.splitlines():
        m = re.search(r'## File "([^"]+)", line (\d+)', t)
        if m:
            line = "%s:%s" % (os.path.basename(m.group(1)), m.group(2))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", t)
        if m:
            ins.append((opcode(m.group(2)), line))
    return ins


def opcode(text):
    t = text.strip()
    t = re.sub(r"^@!?U?P\w+\s+", "", t)
    return t.split()[0] if t else ""


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    while rows and "Source" not in rows[0]:
        rows.pop(0)  # "Kernel Name" line, ncu warnings
    head = rows[0]
    src, samp, execd = (head.index("Source"),
                        head.index("Warp Stall Sampling (All Samples)"),
                        head.index("Instructions Executed"))
    prof = [(opcode(r[src]), int(r[samp] or 0), int(r[execd] or 0))
            for r in rows[1:] if len(r) > execd]
    loc = local_sass(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    sm = difflib.SequenceMatcher(None, [p[0] for p in prof],
                                 [l[0] for l in loc], autojunk=False)
    per = collections.defaultdict(lambda: [0, 0])
    matched = 0
    for a, b, n in sm.get_matching_blocks():
        for i in range(n):
            per[loc[b + i][1]][0] += prof[a + i][1]
            per[loc[b + i][1]][1] += prof[a + i][2]
            matched += 1
    tot_s = sum(p[1] for p in prof)
    tot_e = sum(p[2] for p in prof)
    print("instructions: profile %d, local %d, matched %d" %
          (len(prof), len(loc), matched))
    print("samples %d, warp instructions executed %d" % (tot_s, tot_e))
    for line, (s, e) in sorted(per.items(), key=lambda x: -x[1][0])[:top]:
        print("%6.2f%% samples %6.2f%% instr  %s" %
              (100.0 * s / max(tot_s, 1), 100.0 * e / max(tot_e, 1), line))


if __name__ == "__main__":
    main()
