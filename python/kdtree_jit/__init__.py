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
same arrays and arguments skips its checks, docs/python.md).  Launches go
on the current torch stream unless ``stream=`` says otherwise and never
synchronise, so a round can be captured in a CUDA graph once its shapes
were prepared (an eager call or ``prepare()`` first).
``import kdtree_jit.torch`` registers the four kernels as torch ops.

Failures of the library raise KdtreeError (the status name and the
library's detail); wrong Python arguments raise TypeError or ValueError
naming the argument, before anything reaches the library.
"""

import collections
import os
import time

from ._lib import (EXPECTED_ABI, AbiMismatch, LibraryNotFound, cubin_info,
                   load)
from ._runtime import (V_DIM, KV_DIM, Accept, Attn, Bound, Draft,  # noqa: F401
                       KdtreeError, Runtime, Tree, fail, text)

__all__ = ["Runtime", "Bound", "KdtreeError", "LibraryNotFound", "AbiMismatch",
           "compile", "Compiled", "cache_stats", "cache_stats_reset", "info",
           "kernels", "kernel_constants", "default_shape", "max_qlen",
           "status_name", "abi_version", "version", "Draft", "Tree", "Attn",
           "Accept", "EXPECTED_ABI"]


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
    """The shape as C bytes: a string ("N_MAX=65,L=15") taken as it is, or
    the kernel's default shape with the constants given as keywords put
    in place of its own (and any it lacks added, for the library to
    refuse by name)."""
    if shape is not None and constants:
        raise TypeError("%s: give the shape as a string or as keywords, not "
                        "both" % where)
    if shape is not None:
        return _c_str(where, "shape", shape)
    b = _binding()
    p = b.lib.kdtree_kernel_default_shape(_c_str(where, "kernel", kernel))
    # (An unknown kernel: the constants alone, for the library to name it.)
    merged = []
    for part in (_text(b.ffi, p).split(",") if p != b.ffi.NULL else ()):
        name, _, value = part.partition("=")
        merged.append([name, constants.pop(name, value)])
    merged += [[n, v] for n, v in constants.items()]
    return _c_str(where, "shape", ",".join("%s=%s" % (n, v)
                                            for n, v in merged))


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


class Compiled(collections.namedtuple(
        "Compiled", "kernel arch shape source ms compile_ms")):
    """What compile() did: the kernel, arch and whole shape string it
    compiled for; `source` "compiled" (NVRTC ran), "disk" (an entry of a
    cache directory served), "memory" (this process had it), or "cache"
    when loads of other threads at the same moment hide which of the two;
    `ms` the call's wall time, `compile_ms` NVRTC's part of it."""

    __slots__ = ()

    @property
    def cached(self):
        """Whether the entry was already cached (NVRTC did not run)."""
        return self.source != "compiled"


def compile(kernel, arch, shape=None, **constants):
    """Compiles `kernel` for `arch` ("sm_90a", "sm_120", "compute_90") into
    the cache, without a GPU.  The shape: a string ("N_MAX=33,L=7"), or
    keywords that override the constants of the kernel's default shape
    (``compile("tree_accept", "sm_120", N_MAX=33)``), or neither for the
    default shape.  Returns a Compiled (what happened, how long it
    took)."""
    name = _c_str("compile", "kernel", kernel)
    arch_c = _c_str("compile", "arch", arch)
    shape = _shape_string(kernel, shape, constants, "compile")
    b = _binding()
    cached = b.ffi.new("int32_t *")
    before = cache_stats()
    t0 = time.perf_counter()
    st = b.lib.kdtree_compile(cached, arch_c, name, shape)
    ms = (time.perf_counter() - t0) * 1e3
    if st:
        raise _fail(st, "kdtree_compile")
    after = cache_stats()
    memory = after["memory_hits"] - before["memory_hits"]
    disk = after["disk_hits"] - before["disk_hits"]
    if not cached[0]:
        source = "compiled"
    elif memory and not disk:
        source = "memory"
    elif disk and not memory:
        source = "disk"
    else:
        source = "cache"
    return Compiled(kernel, arch, shape.decode(), source, ms,
                    after["compile_ms"] - before["compile_ms"]
                    if not cached[0] else 0.0)


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
    could not be loaded ("status", "detail").  "cubin" is None, or says
    what the kdtree-jit-cubin package's layer holds ("entries",
    "aliases", "nvrtc": the build that compiled them) and whether it
    serves this process ("serves", "note").  Loads NVRTC (no GPU needed)
    and, unless driver=False, loads and initialises the driver."""
    b = _binding()
    out = {"version": _text(b.ffi, b.lib.kdtree_version_string()),
           "abi": int(b.lib.kdtree_abi_version()),
           "library": os.path.abspath(b.library_path)
           if os.sep in b.library_path else b.library_path,
           "header": b.header_path,
           "nvrtc": _library_info(b, b.lib.kdtree_nvrtc_info)}
    out["cubin"] = cubin_info(b, out["nvrtc"])
    if driver:
        out["driver"] = _library_info(b, b.lib.kdtree_driver_info)
    return out


def __getattr__(name):
    # `kdtree_jit.version` loads the library only when asked for.
    if name in ("version", "__version__"):
        b = _binding()
        return _text(b.ffi, b.lib.kdtree_version_string())
    raise AttributeError("module 'kdtree_jit' has no attribute %r" % name)


