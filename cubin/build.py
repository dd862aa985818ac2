#!/usr/bin/env python3
"""cubin/build.py: builds the kdtree-jit-cubin wheel.

    python3 cubin/build.py --tool tools/kdtree-cache --out dist/

1. stages the package (cubin/'s pyproject.toml, setup.py, README.md,
   kdtree_jit_cubin/, and the repository's LICENSE) in a temporary
   directory;
2. compiles every shape of cubin/shapes.txt for its targets into the
   staged kdtree_jit_cubin/layer/ with `kdtree-cache populate` (one
   process per target, each shape compile-only through kdtree_compile(),
   every other cache layer switched off so that each entry is written
   there);
3. checks that the layer holds one entry and one alias per shape and
   target, all from one NVRTC build; lists each kernel function that
   spills registers to local memory (`kdtree-cache resources`: a stack
   above 0) and fails if one is for a target of NO_SPILL (sm_120: the
   portable body is asked for no spill there, docs/performance.md, and
   the NVRTC the wheel pins may allocate otherwise than the one the
   tests compile with); makes the layer world-readable (0755/0644, as
   `make prebuilt-cache` does), and writes layer.json: the version, the
   kdtree-jit version its keys name, that NVRTC build, and the pip
   requirement of the NVRTC wheel it came from; appends the list of
   entries, read back from the layer, to the staged README.md (the
   wheel's long description);
4. runs `python -m build --wheel` on the staged package.

NVRTC: --nvrtc PATH, else the nvidia-cuda-nvrtc (or -cu12) wheel installed
for this Python, whose exact version then becomes the wheel's `[nvrtc]`
extra: a node that installs kdtree-jit-cubin[nvrtc] gets the NVRTC build
the layer's keys name, so the layer serves its shapes there too, and
shapes it lacks compile with the same compiler.  `pip install -r
cubin/build-requirements.txt` installs `build` and the NVRTC a release
is built with (the one the users' torch requires).  The tool must come
from the same sources as the kdtree-jit package the wheel is for (the
keys name the library version and every kernel source).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NVRTC_WHEELS = ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12")
# Targets whose entries must hold nothing in local memory (the wgmma
# body's FP8 arithmetic on sm_90a spills by design: docs/performance.md).
NO_SPILL = ("sm_120",)


def read_shapes(path):
    """[(kernel, shape or None for the default, [targets])] of shapes.txt."""
    targets, out = None, []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "targets":
                targets = words[1:]
                continue
            if len(words) < 2:
                raise SystemExit("%s:%d: want KERNEL SHAPE [TARGET...]"
                                 % (path, n))
            want = words[2:] or targets
            if not want:
                raise SystemExit("%s:%d: no targets (a `targets` line "
                                 "first, or targets on the line)" % (path, n))
            out.append((words[0], None if words[1] == "default" else words[1],
                        want))
    if not out:
        raise SystemExit("%s: no shapes" % path)
    return out


def nvrtc_wheel():
    """(path of libnvrtc, "nvidia-cuda-nvrtc==X") of the NVRTC wheel
    installed for this Python, or (None, None)."""
    try:
        from importlib import metadata
    except ImportError:
        return None, None
    for name in NVRTC_WHEELS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            base = os.path.basename(str(f))
            if base.startswith("libnvrtc.so.") and \
                    "builtins" not in base:
                return (os.path.abspath(str(dist.locate_file(f))),
                        "%s==%s" % (name, dist.version))
    return None, None


def version():
    out = subprocess.check_output(
        ["sh", os.path.join(ROOT, "build-aux", "version.sh"),
         os.path.join(ROOT, "include", "kdtree.h")])
    return out.decode().strip()


def stage(dest):
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(os.path.join(HERE, name), dest)
    shutil.copy(os.path.join(ROOT, "LICENSE"), dest)
    pkg = os.path.join(dest, "kdtree_jit_cubin")
    os.mkdir(pkg)
    shutil.copy(os.path.join(HERE, "kdtree_jit_cubin", "__init__.py"), pkg)
    return pkg


def populate(tool, layer, nvrtc, shapes, jobs):
    """Runs one `kdtree-cache populate` per target; returns the seconds
    the whole took."""
    env = dict(os.environ, KDTREE_CACHE="readwrite", KDTREE_CACHE_PATH="",
               KDTREE_CACHE_PREBUILT_DIR="", KDTREE_CACHE_MAX_BYTES="0",
               KDTREE_NVRTC_LIBRARY=nvrtc)
    by_target = {}
    for kernel, shape, targets in shapes:
        for t in targets:
            by_target.setdefault(t, []).append(
                kernel if shape is None else "%s:%s" % (kernel, shape))

    def run(target):
        cmd = [tool, "--dir", layer, "populate", "--arch", target] + \
            by_target[target]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        return target, p.returncode, p.stdout.decode()

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(run, sorted(by_target)))
    for target, rc, text in results:
        sys.stdout.write(text)
        if rc:
            raise SystemExit("build.py: kdtree-cache populate --arch %s "
                             "exited %d" % (target, rc))
    return time.time() - t0


def spills(tool, layer):
    """[(target, "KERNEL SHAPE TARGET FUNCTION: N bytes")] for each kernel
    function of the layer's cubins whose stack (local memory a thread) is
    not 0, from `kdtree-cache resources`."""
    env = dict(os.environ, KDTREE_CACHE_PATH="",
               KDTREE_CACHE_PREBUILT_DIR="")
    p = subprocess.run([tool, "--dir", layer, "resources"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = p.stdout.decode()
    if p.returncode:
        raise SystemExit("build.py: kdtree-cache resources exited %d:\n%s"
                         % (p.returncode, text))
    out = []
    for line in text.splitlines()[1:]:
        # KEY KERNEL SHAPE TARGET FUNCTION REGS STACK SHARED PARAMS THREADS
        f = line.split()
        if len(f) == 10 and f[6].isdigit() and f[6] != "0":
            out.append((f[3], "%s %s %s %s: %s bytes"
                        % (f[1], f[2], f[3], f[4], f[6])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True,
                    help="the kdtree-cache program of this source tree")
    ap.add_argument("--out", required=True, help="where the wheel goes")
    ap.add_argument("--nvrtc", help="libnvrtc to compile with (default: "
                    "the nvidia-cuda-nvrtc wheel of this Python)")
    ap.add_argument("--shapes", default=os.path.join(HERE, "shapes.txt"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="populate processes at once (one per target)")
    args = ap.parse_args()

    shapes = read_shapes(args.shapes)
    requirement = None
    nvrtc = args.nvrtc
    if not nvrtc:
        nvrtc, requirement = nvrtc_wheel()
        if not nvrtc:
            raise SystemExit("build.py: no NVRTC: pip install "
                             "nvidia-cuda-nvrtc for this Python, or give "
                             "--nvrtc PATH")
    tool = os.path.abspath(args.tool)
    out = os.path.abspath(args.out)
    sys.path.insert(0, HERE)
    import kdtree_jit_cubin

    tmp = tempfile.mkdtemp(prefix="kdt-cubin.")
    try:
        pkg = stage(tmp)
        layer = os.path.join(pkg, "layer")
        seconds = populate(tool, layer, nvrtc, shapes, max(1, args.jobs))
        want = sum(len(t) for _, _, t in shapes)
        got = kdtree_jit_cubin.scan(layer)
        if got["entries"] != want or got["aliases"] != want or \
                len(got["nvrtc"]) != 1:
            raise SystemExit("build.py: the layer holds %s; want %d entries "
                             "and as many aliases, from one NVRTC"
                             % (got, want))
        spilled = spills(tool, layer)
        for _, what in spilled:
            print("build.py: spills (local memory a thread): %s" % what)
        bad = [what for target, what in spilled if target in NO_SPILL]
        if bad:
            raise SystemExit("build.py: NVRTC %s spills registers on %s, "
                             "which must not:\n  %s\n(another NVRTC "
                             "allocates otherwise: CUDA 12.8's spills where "
                             "12.9's does not; docs/cluster.md)"
                             % (got["nvrtc"][0], " ".join(NO_SPILL),
                                "\n  ".join(bad)))
        for d, _, files in os.walk(layer):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        v = version()
        manifest = {"version": v, "kdtree_jit": v, "nvrtc": got["nvrtc"][0],
                    "nvrtc_wheel": requirement}
        with open(os.path.join(pkg, "layer.json"), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")
        # The long description ends with what this wheel holds, read back
        # from its entries.
        with open(os.path.join(tmp, "README.md"), "a") as f:
            f.write("\n## The entries of this wheel\n\nCompiled by NVRTC "
                    "%s for kdtree-jit %s:\n\n| kernel | shape | target "
                    "|\n| --- | --- | --- |\n" % (manifest["nvrtc"], v))
            for line in kdtree_jit_cubin.shapes(layer):
                f.write("| %s |\n" % " | ".join(line.split()))
        print("build.py: %d entries (%d shapes x targets) by NVRTC %s in "
              "%.1f s" % (got["entries"], want, manifest["nvrtc"], seconds))
        subprocess.check_call([sys.executable, "-m", "build", "--wheel",
                               "-o", out, tmp])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
