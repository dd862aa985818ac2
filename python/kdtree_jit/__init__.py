"""kdtree_jit: the DDTree kernels of libkdtree from Python.

    import torch, kdtree_jit
    rt = kdtree_jit.Runtime()                       # current torch device
    draft = rt.draft_topk(logits, k=8)              # [R, L, V] -> [R, L, 8]
    tree = rt.build_ddtree(draft, budget, root_token, n_max=65)
    attn = rt.verify_attn(q, kv_cache, block_table, past_len, tree, scale)
    acc = rt.tree_accept(tree, target, L=15)

Arrays are torch tensors or any object with ``__cuda_array_interface__``;
what one kernel writes and the next reads travels as one namedtuple
(Draft, Tree, Accept), as in the C API's structs.  Outputs are allocated
when not given, or written into ``out=`` (a tuple in the order the method
returns, typically the result of an earlier call: a call repeated with the
same namedtuple and arguments skips its checks, docs/python.md).  Launches go on the
current torch stream unless ``stream=`` says otherwise and never
synchronise, so a round can be captured in a CUDA graph once its shapes
were prepared (an eager call or ``prepare()`` first).
``import kdtree_jit.torch`` registers the four kernels as torch ops.

Failures of the library raise KdtreeError (the status name and the
library's detail); wrong Python arguments raise TypeError or ValueError
naming the argument, before anything reaches the library.
"""

import os

from ._lib import EXPECTED_ABI, AbiMismatch, LibraryNotFound, load
from ._runtime import (V_DIM, KV_DIM, Accept, Attn, Bound, Draft,  # noqa: F401
                       KdtreeError, Runtime, Tree, fail, text)

__all__ = ["Runtime", "Bound", "KdtreeError", "LibraryNotFound", "AbiMismatch",
           "compile", "cache_stats", "cache_stats_reset", "info", "kernels",
           "kernel_constants", "default_shape", "max_qlen", "status_name",
           "abi_version", "version", "Draft", "Tree", "Attn", "Accept",
           "EXPECTED_ABI"]


def _binding():
    return load()


def _text(ffi, p):
    return text(ffi, p)


def _fail(st, function):
    b = _binding()
    return fail(b.ffi, b.lib, st, function)


def _c_str(fn, name, value):
    """`value` as the bytes of a C string: a str without NUL (C would stop
    reading at the first one and take the rest for garbage)."""
    if not isinstance(value, str):
        raise TypeError("%s: %s must be a str, got %s"
                        % (fn, name, type(value).__name__))
    if "\x00" in value:
        raise ValueError("%s: %s must not contain a NUL character, got %r"
                         % (fn, name, value))
    return value.encode()


def _shape_string(kernel, shape, constants, where):
    """The shape as C bytes: a string ("N_MAX=65,L=15"), keywords, or
    neither for the kernel's default shape."""
    if shape is not None and constants:
        raise TypeError("%s: give the shape as a string or as keywords, not "
                        "both" % where)
    if shape is None:
        if not constants:
            return _c_str(where, "shape", default_shape(kernel))
        shape = ",".join("%s=%s" % kv for kv in constants.items())
    return _c_str(where, "shape", shape)


# ---- the library ---------------------------------------------------------

def abi_version():
    return int(_binding().lib.kdtree_abi_version())


def status_name(status):
    b = _binding()
    return _text(b.ffi, b.lib.kdtree_status_name(int(status)))


def max_qlen():
    return int(_binding().lib.kdtree_max_qlen())


def kernels():
    """The registered kernels' names."""
    b = _binding()
    return [_text(b.ffi, b.lib.kdtree_kernel_name(i))
            for i in range(b.lib.kdtree_kernel_count())]


def _kernel_text(fn, kernel, where):
    name = _c_str(where, "kernel", kernel)
    b = _binding()
    p = fn(b.lib)(name)
    if p == b.ffi.NULL:
        raise ValueError("no kernel named %r; there are %s"
                         % (kernel, ", ".join(kernels())))
    return _text(b.ffi, p)


def kernel_constants(kernel):
    """The kernel's constants and their ranges ("N_MAX=1..1025, L=...")."""
    return _kernel_text(lambda lib: lib.kdtree_kernel_constants, kernel,
                        "kernel_constants")


def default_shape(kernel):
    return _kernel_text(lambda lib: lib.kdtree_kernel_default_shape, kernel,
                        "default_shape")


def compile(kernel, arch, shape=None, **constants):
    """Compiles `kernel` for `arch` ("sm_90a", "sm_120", "compute_90") with
    the given shape (a string, keywords, or neither for the kernel's
    default shape) into the cache, without a GPU.  Returns True when the
    entry was already cached."""
    name = _c_str("compile", "kernel", kernel)
    arch = _c_str("compile", "arch", arch)
    shape = _shape_string(kernel, shape, constants, "compile")
    kernel = name
    b = _binding()
    cached = b.ffi.new("int32_t *")
    st = b.lib.kdtree_compile(cached, arch, kernel, shape)
    if st:
        raise _fail(st, "kdtree_compile")
    return bool(cached[0])


_STAT_FIELDS = ("memory_hits", "disk_hits", "compiles", "loads",
                "disk_misses", "disk_rejects", "compile_ms", "load_ms",
                "disk_ms")


def cache_stats():
    """The process-wide load-path counters, as a dict."""
    b = _binding()
    s = b.ffi.new("kdtree_cache_stats *")
    st = b.lib.kdtree_cache_stats_get(s)
    if st:
        raise _fail(st, "kdtree_cache_stats_get")
    return {f: getattr(s, f) for f in _STAT_FIELDS}


def cache_stats_reset():
    _binding().lib.kdtree_cache_stats_reset()


def _library_info(b, fn):
    i = b.ffi.new("kdtree_library_info *")
    fn(i)
    v = int(i.version)
    return {"loaded": i.status == 0,
            "status": _text(b.ffi, b.lib.kdtree_status_name(i.status)),
            "version": "%d.%d" % (v // 1000, v % 1000 // 10) if v else None,
            "path": _text(b.ffi, i.path) or None,
            "found_by": _text(b.ffi, i.source) or None,
            "detail": _text(b.ffi, i.detail)}


def info(driver=True):
    """What this process runs: the package and library versions, which
    libkdtree and header were loaded, and which NVRTC and CUDA driver the
    library uses -- each with "path", "found_by", "version", or why it
    could not be loaded ("status", "detail").  Loads NVRTC (no GPU
    needed) and, unless driver=False, loads and initialises the driver."""
    b = _binding()
    out = {"version": _text(b.ffi, b.lib.kdtree_version_string()),
           "abi": int(b.lib.kdtree_abi_version()),
           "library": os.path.abspath(b.library_path)
           if os.sep in b.library_path else b.library_path,
           "header": b.header_path,
           "nvrtc": _library_info(b, b.lib.kdtree_nvrtc_info)}
    if driver:
        out["driver"] = _library_info(b, b.lib.kdtree_driver_info)
    return out


def __getattr__(name):
    # `kdtree_jit.version` loads the library only when asked for.
    if name in ("version", "__version__"):
        b = _binding()
        return _text(b.ffi, b.lib.kdtree_version_string())
    raise AttributeError("module 'kdtree_jit' has no attribute %r" % name)


