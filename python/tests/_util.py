"""What the Python tests share: an isolated cache directory, the binding,
GPU detection, and stand-ins for device arrays so argument checks can be
tested without a GPU."""
import atexit
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# python/, for kdtree_jit; KDTREE_TEST_INSTALLED=1 tests the installed
# package instead (a wheel on the GPU host).
if not os.environ.get("KDTREE_TEST_INSTALLED"):
    sys.path.insert(0, os.path.dirname(HERE))

# Never touch the user's cache: every test process gets its own.
if not os.environ.get("KDTREE_TEST_KEEP_CACHE"):
    _cache = tempfile.mkdtemp(prefix="kdtree-pytest.")
    os.environ["KDTREE_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, True)

import kdtree_jit  # noqa: E402
from kdtree_jit import _lib  # noqa: E402


def binding():
    return _lib.load()


_gpu = None


def gpu_runtime():
    """A Runtime on device 0 and torch, or None (the reason in
    gpu_reason())."""
    global _gpu
    if _gpu is None:
        _gpu = (None, "not probed")
        try:
            import torch
        except ImportError:
            _gpu = (None, "no torch")
            return None
        if not torch.cuda.is_available():
            _gpu = (None, "torch sees no CUDA device")
            return None
        try:
            rt = kdtree_jit.Runtime(0)
        except kdtree_jit.KdtreeError as e:
            _gpu = (None, "no runtime: %s" % e)
            return None
        _gpu = (rt, "")
    return _gpu[0]


def gpu_reason():
    return _gpu[1] if _gpu else "not probed"


def need_gpu():
    """(Runtime, torch) for a GPU test; where there is none, the test is
    skipped, or fails under KDTREE_TEST_REQUIRE_GPU=1 (a GPU host: a
    suite that found no GPU there did not run, as the C suites' 77)."""
    import pytest
    rt = gpu_runtime()
    if rt is None:
        required = os.environ.get("KDTREE_TEST_REQUIRE_GPU", "")
        if required == "1":
            pytest.fail("GPU test, KDTREE_TEST_REQUIRE_GPU=1: %s"
                        % gpu_reason(), pytrace=False)
        if required not in ("", "0"):
            pytest.fail('KDTREE_TEST_REQUIRE_GPU="%s" is neither 1 nor 0'
                        % required, pytrace=False)
        pytest.skip("GPU test: %s" % gpu_reason())
    import torch
    return rt, torch


class FakeArray(object):
    """Something with __cuda_array_interface__ that is not memory: only
    for argument checks that must fail before the library is called."""

    def __init__(self, shape, typestr="<i4", ptr=0x10000, strides=None):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
            "strides": strides, "version": 3}


def offline_runtime():
    """A Runtime object whose handle is NULL: its methods run every Python
    check, and a call that passes them reaches the library, which must
    refuse the NULL runtime (KDTREE_ERROR_INVALID_ARGUMENT) without
    touching any pointer."""
    b = binding()
    rt = kdtree_jit.Runtime.__new__(kdtree_jit.Runtime)
    rt._setup(b.ffi, b.lib, b.ffi.NULL, 0)
    return rt


# ---- the C references (ref/*.c), compiled on the fly ----------------------

SRC_ROOT = os.environ.get("abs_top_srcdir") or os.path.dirname(
    os.path.dirname(HERE))
_c_refs = {}


def c_reference(name):
    """(ffi, lib) of ref/<name>.c built into a temporary shared object
    with cc, declarations taken from ref/<name>.h; None when there is no
    compiler or no such source."""
    if name in _c_refs:
        return _c_refs[name]
    import re
    import subprocess
    import cffi
    src = os.path.join(SRC_ROOT, "ref", name + ".c")
    hdr = os.path.join(SRC_ROOT, "ref", name + ".h")
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not (cc and os.path.exists(src) and os.path.exists(hdr)):
        _c_refs[name] = None
        return None
    out = os.path.join(tempfile.mkdtemp(prefix="kdtree-ref."), name + ".so")
    atexit.register(shutil.rmtree, os.path.dirname(out), True)
    # ref/build_ddtree.h takes its limits from kernels_src/kdt_limits.h
    p = subprocess.run([cc, "-O2", "-std=gnu11", "-shared", "-fPIC", "-I",
                        SRC_ROOT, "-I", os.path.join(SRC_ROOT, "kernels_src"),
                        "-o", out, src, "-lm"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("building %s failed:\n%s" % (src, p.stdout))
    with open(hdr) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = "\n".join(l for l in text.splitlines()
                     if not l.lstrip().startswith("#")
                     and "extern \"C\"" not in l and l.strip() != "}")
    ffi = cffi.FFI()
    ffi.cdef(text)
    _c_refs[name] = (ffi, ffi.dlopen(out))
    return _c_refs[name]


def c_array(ffi, ctype, values):
    """A C array of `ctype` from a flat list, a numpy array or a CPU
    torch tensor."""
    try:
        import numpy as np
        if not isinstance(values, list):
            if hasattr(values, "numpy"):
                values = values.contiguous().numpy()
            arr = np.ascontiguousarray(values)
            return ffi.from_buffer(ctype + "[]", arr), arr  # keep arr alive
    except ImportError:
        pass
    if hasattr(values, "tolist"):
        values = values.reshape(-1).tolist()
    return ffi.new(ctype + "[]", values), None


def flat(xs):
    """A nested list flattened."""
    out = []
    stack = [xs]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out
