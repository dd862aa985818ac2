"""kdtree_jit: the DDTree kernels of libkdtree from Python.

    import torch, kdtree_jit
    rt = kdtree_jit.Runtime()                       # current torch device
    lp, ids = rt.draft_topk(logits, k=8)            # [R, L, V] -> [R, L, 8]
    tree = rt.build_ddtree(lp, ids, budget, root_token, n_max=65)
    acc = rt.tree_accept(tree.token, tree.first_child, tree.next_sibling,
                         tree.n_nodes, target, L=L)

Arrays are torch tensors or any object with ``__cuda_array_interface__``;
outputs are allocated when not given, or written into ``out=`` (a tuple in
the order the method returns, typically the result of an earlier call).
Launches go on the current torch stream unless ``stream=`` says otherwise
and never synchronise, so a round can be captured in a CUDA graph once
its shapes were prepared (an eager call or ``prepare()`` first).

Failures of the library raise KdtreeError (the status name and the
library's detail); wrong Python arguments raise TypeError or ValueError
before anything reaches the library.
"""

import collections
import os

from . import _arrays
from ._lib import EXPECTED_ABI, AbiMismatch, LibraryNotFound, load

__all__ = ["Runtime", "Bound", "KdtreeError", "LibraryNotFound", "AbiMismatch",
           "compile", "cache_stats", "cache_stats_reset", "info", "kernels",
           "kernel_constants", "default_shape", "max_qlen", "status_name",
           "abi_version", "version", "TopK", "Tree", "Attn", "Accept",
           "EXPECTED_ABI"]

TopK = collections.namedtuple("TopK", "lp ids")
Tree = collections.namedtuple(
    "Tree", "n_nodes token parent depth position first_child next_sibling "
            "score anc_mask")
Attn = collections.namedtuple("Attn", "o lse")
Accept = collections.namedtuple(
    "Accept", "accept_len accept_idx accept_token bonus")

# Fixed by the model family (docs/contract.md §3).
KV_DIM = 576
V_DIM = 512


class KdtreeError(RuntimeError):
    """A libkdtree call failed.  ``status`` is the negative status code,
    ``name`` its enumerator ("KDTREE_ERROR_SHAPE"), ``detail`` the
    library's kdtree_last_error() text, ``function`` the C function."""

    def __init__(self, status, name, detail, function):
        self.status = status
        self.name = name
        self.detail = detail
        self.function = function
        RuntimeError.__init__(self, "%s: %s: %s" % (function, name, detail))


def _binding():
    return load()


def _text(ffi, p):
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None


def _fail(st, function):
    b = _binding()
    name = _text(b.ffi, b.lib.kdtree_status_name(st))
    detail = _text(b.ffi, b.lib.kdtree_last_error())
    return KdtreeError(st, name, detail, function)


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
        raise _fail(st, "kdtree_cache_stats")
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


# ---- the runtime -----------------------------------------------------------

def _default_device():
    torch = _arrays.torch_module()
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    cupy = _arrays.cupy_module()
    if cupy is not None:
        try:
            return cupy.cuda.Device().id
        except Exception:
            pass
    return 0


def _outputs(out, n, fn, cls):
    """out= as a list of n entries (None = allocate)."""
    if out is None:
        return [None] * n
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise TypeError("%s: out must be a tuple of %d arrays (%s), as %s "
                        "returns, got %s" % (fn, n, ", ".join(cls._fields),
                                             fn, type(out).__name__))
    return list(out)


def _int_arg(fn, name, v):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import operator
            v = operator.index(v)
        except TypeError:
            raise TypeError("%s: %s must be an int, got %s"
                            % (fn, name, type(v).__name__))
    return int(v)


_KERNEL_METHODS = ("draft_topk", "build_ddtree", "verify_attn", "tree_accept")


class Bound(object):
    """A launch whose arguments were checked once (Runtime.bind)."""

    __slots__ = ("_rt", "_fn", "_name", "_args", "result")

    def __init__(self, rt, fn, name, args, result):
        self._rt, self._fn, self._name, self._args = rt, fn, name, args
        self.result = result

    def __call__(self, stream=None):
        rt = self._rt
        if rt._rt is None:
            raise ValueError("%s: the runtime was closed" % self._name)
        st = self._fn(*(self._args + (rt._stream(stream),)))
        if st:
            raise _fail(st, self._name)
        return self.result


class Runtime(object):
    """A libkdtree runtime for one CUDA device (default: torch's current
    device).  Loads nothing until a kernel is prepared or launched."""

    def __init__(self, device=None):
        b = _binding()
        self._ffi, self._lib = b.ffi, b.lib
        if device is None:
            device = _default_device()
        device = _int_arg("Runtime", "device", device)
        p = self._ffi.new("kdtree_runtime **")
        st = self._lib.kdtree_runtime_create(p, device)
        if st:
            raise _fail(st, "kdtree_runtime_create")
        self._rt = p[0]
        self.device = device
        self._streams = {}
        self._workspaces = {}

    def close(self):
        """Unloads the runtime's modules (no launch may be in flight)."""
        rt, self._rt = getattr(self, "_rt", None), None
        if rt is not None:
            self._lib.kdtree_runtime_destroy(rt)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self, fn):
        if self._rt is None:
            raise ValueError("%s: the runtime was closed" % fn)
        return self._rt

    @property
    def arch(self):
        """The device's architecture as the runtime targets it ("sm_90a" on
        Hopper, "sm_120")."""
        return _text(self._ffi, self._lib.kdtree_runtime_arch(
            self._handle("arch")))

    def _stream(self, stream):
        h = _arrays.stream_handle(stream, self.device)
        s = self._streams.get(h)
        if s is None:
            s = self._ffi.cast("void *", h)
            self._streams[h] = s
        return s

    def _launch(self, cname, args, stream, result, bind):
        cfn = getattr(self._lib, cname)
        if bind:
            return Bound(self, cfn, cname, args, result)
        st = cfn(*(args + (self._stream(stream),)))
        if st:
            raise _fail(st, cname)
        return result

    def bind(self, kernel, *args, **kwargs):
        """Checks a kernel's arguments once and returns a Bound launch:
        calling it (``bound(stream=None)``) launches with the pointers
        resolved now, skipping every check, and returns the same outputs
        each time.  The arrays must stay alive and in place.  For loops
        that do not use CUDA graphs and care about microseconds."""
        if kernel not in _KERNEL_METHODS:
            raise ValueError("bind: no kernel named %r; there are %s"
                             % (kernel, ", ".join(_KERNEL_METHODS)))
        if "stream" in kwargs:
            raise TypeError("bind: give the stream when calling the bound "
                            "launch")
        return getattr(self, kernel)(*args, _bind=True, **kwargs)

    def prepare(self, kernel, shape=None, **constants):
        """Compiles (or fetches from the cache) and loads `kernel` for a
        shape, so that launches of it are hot: call it before capturing a
        CUDA graph.  The shape as for compile()."""
        name = _c_str("prepare", "kernel", kernel)
        shape = _shape_string(kernel, shape, constants, "prepare")
        st = self._lib.kdtree_prepare(self._handle("prepare"), name, shape)
        if st:
            raise _fail(st, "kdtree_prepare")

    # ---- §1 draft_topk -------------------------------------------------

    def draft_topk(self, logits, k, out=None, stream=None, _bind=False):
        """The k largest logits of each row and their log-probabilities.
        logits: float32 or bfloat16 [..., V]; returns TopK(lp float32
        [..., k], ids int32 [..., k])."""
        fn = "draft_topk"
        dev = self.device
        k = _int_arg(fn, "k", k)
        ptr, shp, dt = _arrays.check(fn, "logits", logits,
                                     ("float32", "bfloat16"), None, dev)
        if len(shp) < 2:
            raise ValueError("%s: logits must have shape [..., V] with at "
                             "least 2 dimensions, got %s" % (fn, list(shp)))
        dtype = 1 if dt == "bfloat16" else 0
        vocab = shp[-1]
        n_rows = 1
        for d in shp[:-1]:
            n_rows *= d
        oshape = tuple(shp[:-1]) + (k,)
        lp, ids = _outputs(out, 2, fn, TopK)
        if lp is None:
            lp = _arrays.empty(oshape, "float32", dev, logits)
        if ids is None:
            ids = _arrays.empty(oshape, "int32", dev, logits)
        lp_p = _arrays.check(fn, "out.lp", lp, ("float32",), oshape, dev)[0]
        ids_p = _arrays.check(fn, "out.ids", ids, ("int32",), oshape, dev)[0]
        draft = self._ffi.new("kdtree_draft *", {
            "lp": lp_p, "ids": ids_p, "n_requests": n_rows, "depth": 1,
            "k": k})
        return self._launch(
            "kdtree_draft_topk", (self._handle(fn), draft, ptr, dtype, vocab),
            stream, TopK(lp, ids), _bind)

    # ---- §2 build_ddtree -----------------------------------------------

    def build_ddtree(self, lp, ids, budget, root_token, n_max,
                     depth_limit=None, past_len=None, want_score=False,
                     out=None, stream=None, _bind=False):
        """Best-first selection of each request's draft tree.  lp float32
        [R, L, K], ids int32 [R, L, K], budget, root_token, depth_limit,
        past_len int32 [R] (the last two optional); n_max rows per request.
        Returns Tree(n_nodes [R], token, parent, depth, position,
        first_child, next_sibling [R, n_max], score float32 [R, n_max] or
        None, anc_mask int32 [R, n_max, ceil(n_max/32)]: the bits of
        ancestor-or-self rows)."""
        fn = "build_ddtree"
        dev = self.device
        n_max = _int_arg(fn, "n_max", n_max)
        lp_p, shp, _ = _arrays.check(fn, "lp", lp, ("float32",),
                                     (None, None, None), dev)
        R, L, K = shp
        ids_p = _arrays.check(fn, "ids", ids, ("int32",), (R, L, K), dev)[0]
        i32 = ("int32",)
        budget_p = _arrays.check(fn, "budget", budget, i32, (R,), dev)[0]
        root_p = _arrays.check(fn, "root_token", root_token, i32, (R,), dev)[0]
        dl_p = 0 if depth_limit is None else _arrays.check(
            fn, "depth_limit", depth_limit, i32, (R,), dev)[0]
        pl_p = 0 if past_len is None else _arrays.check(
            fn, "past_len", past_len, i32, (R,), dev)[0]
        W = (n_max + 31) // 32
        o = _outputs(out, 9, fn, Tree)
        rows = (R, n_max)
        spec = [("n_nodes", "int32", (R,)), ("token", "int32", rows),
                ("parent", "int32", rows), ("depth", "int32", rows),
                ("position", "int32", rows), ("first_child", "int32", rows),
                ("next_sibling", "int32", rows), ("score", "float32", rows),
                ("anc_mask", "int32", (R, n_max, W))]
        ptrs = []
        for i, (name, dt, s) in enumerate(spec):
            if o[i] is None and (name != "score" or want_score):
                o[i] = _arrays.empty(s, dt, dev, lp)
            if o[i] is None:
                ptrs.append(0)
                continue
            ok = ("int32", "uint32") if name == "anc_mask" else (dt,)
            ptrs.append(_arrays.check(fn, "out." + name, o[i], ok, s, dev)[0])
        ffi = self._ffi
        tree = ffi.new("kdtree_tree *", dict(
            zip(Tree._fields, ptrs), n_requests=R, n_max=n_max))
        draft = ffi.new("kdtree_draft *", {
            "lp": lp_p, "ids": ids_p, "n_requests": R, "depth": L, "k": K})
        req = ffi.new("kdtree_requests *", {
            "budget": budget_p, "root_token": root_p, "depth_limit": dl_p,
            "past_len": pl_p, "n_requests": R})
        return self._launch(
            "kdtree_build_ddtree", (self._handle(fn), tree, draft, req),
            stream, Tree(*o), _bind)

    # ---- §3 verify_attn ------------------------------------------------

    def verify_attn_workspace_size(self, n_requests, n_heads, n_max,
                                   page_size, max_pages):
        fn = "verify_attn_workspace_size"
        ffi = self._ffi
        out = ffi.new("uint64_t *")
        st = self._lib.kdtree_verify_attn_workspace_size(
            out, self._handle(fn),
            ffi.new("kdtree_attn *", {"n_heads": n_heads}),
            ffi.new("kdtree_tree *", {"n_requests": n_requests,
                                      "n_max": n_max}),
            ffi.new("kdtree_kv_cache *", {"page_size": page_size,
                                          "max_pages": max_pages}))
        if st:
            raise _fail(st, "kdtree_verify_attn_workspace_size")
        return int(out[0])

    def verify_attn(self, q, kv_cache, block_table, past_len, n_nodes,
                    anc_mask, scale, want_lse=True, workspace=None, out=None,
                    stream=None, _bind=False):
        """Absorbed-MLA tree attention.  q bfloat16 [R, N_MAX, H, 576],
        kv_cache bfloat16 [pages, PAGE, 576], block_table int32
        [R, max_pages], past_len, n_nodes int32 [R], anc_mask int32/uint32
        [R, N_MAX, W]; workspace, if given, uint8 [bytes] of at least
        verify_attn_workspace_size().  Returns Attn(o bfloat16 [R, N_MAX, H, 512], lse
        float32 [R, N_MAX, H] or None).  The workspace is allocated once
        per shape and kept by the runtime unless given."""
        fn = "verify_attn"
        dev = self.device
        if not isinstance(scale, (float, int)) or isinstance(scale, bool):
            raise TypeError("%s: scale must be a float, got %s"
                            % (fn, type(scale).__name__))
        bf = ("bfloat16",)
        i32 = ("int32",)
        q_p, qs, _ = _arrays.check(fn, "q", q, bf, (None, None, None, KV_DIM),
                                dev)
        R, N, H, _ = qs
        kv_p, ks, _ = _arrays.check(fn, "kv_cache", kv_cache, bf,
                                 (None, None, KV_DIM), dev)
        page = ks[1]
        bt_p, bs, _ = _arrays.check(fn, "block_table", block_table, i32,
                                 (R, None), dev)
        max_pages = bs[1]
        pl_p = _arrays.check(fn, "past_len", past_len, i32, (R,), dev)[0]
        nn_p = _arrays.check(fn, "n_nodes", n_nodes, i32, (R,), dev)[0]
        W = (N + 31) // 32
        m_p = _arrays.check(fn, "anc_mask", anc_mask, ("int32", "uint32"),
                            (R, N, W), dev)[0]
        o, lse = _outputs(out, 2, fn, Attn)
        if o is None:
            o = _arrays.empty((R, N, H, V_DIM), "bfloat16", dev, q)
        if lse is None and want_lse:
            lse = _arrays.empty((R, N, H), "float32", dev, q)
        o_p = _arrays.check(fn, "out.o", o, bf, (R, N, H, V_DIM), dev)[0]
        lse_p = 0 if lse is None else _arrays.check(
            fn, "out.lse", lse, ("float32",), (R, N, H), dev)[0]
        key = (R, H, N, page, max_pages)
        if workspace is None:
            ws = self._workspaces.get(key)
            if ws is None:
                size = self.verify_attn_workspace_size(R, H, N, page,
                                                       max_pages)
                buf = _arrays.empty((max(size, 16),), "uint8", dev, q) \
                    if size else None
                ws = (buf, 0 if buf is None else
                      _arrays.describe(buf)[0], size)
                self._workspaces[key] = ws
            ws_p, ws_n = ws[1], ws[2]
        else:
            ws_p, (ws_n,), _ = _arrays.check(fn, "workspace", workspace,
                                             ("uint8",), (None,), dev)
        ffi = self._ffi
        attn = ffi.new("kdtree_attn *", {
            "q": q_p, "o": o_p, "lse": lse_p, "workspace": ws_p,
            "workspace_bytes": ws_n, "n_heads": H, "scale": float(scale)})
        tree = ffi.new("kdtree_tree *", {
            "n_nodes": nn_p, "anc_mask": m_p, "n_requests": R, "n_max": N})
        req = ffi.new("kdtree_requests *", {"past_len": pl_p,
                                            "n_requests": R})
        kv = ffi.new("kdtree_kv_cache *", {
            "data": kv_p, "block_table": bt_p, "page_size": page,
            "max_pages": max_pages})
        return self._launch(
            "kdtree_verify_attn", (self._handle(fn), attn, tree, req, kv),
            stream, Attn(o, lse), _bind)

    # ---- §4 tree_accept ------------------------------------------------

    def tree_accept(self, token, first_child, next_sibling, n_nodes, target,
                    L, max_accept=None, out=None, stream=None,
                    _bind=False):
        """Walks each tree from the root along the target's tokens.  token,
        first_child, next_sibling, target int32 [R, N_MAX], n_nodes int32
        [R], max_accept int32 [R] or None.  Returns Accept(accept_len [R],
        accept_idx [R, L+1], accept_token [R, L+1], bonus [R])."""
        fn = "tree_accept"
        dev = self.device
        L = _int_arg(fn, "L", L)
        i32 = ("int32",)
        tok_p, ts, _ = _arrays.check(fn, "token", token, i32, (None, None), dev)
        R, N = ts
        fc_p = _arrays.check(fn, "first_child", first_child, i32, ts, dev)[0]
        ns_p = _arrays.check(fn, "next_sibling", next_sibling, i32, ts,
                             dev)[0]
        nn_p = _arrays.check(fn, "n_nodes", n_nodes, i32, (R,), dev)[0]
        tg_p = _arrays.check(fn, "target", target, i32, ts, dev)[0]
        ma_p = 0 if max_accept is None else _arrays.check(
            fn, "max_accept", max_accept, i32, (R,), dev)[0]
        o = _outputs(out, 4, fn, Accept)
        shapes = ((R,), (R, L + 1), (R, L + 1), (R,))
        ptrs = []
        for i, name in enumerate(Accept._fields):
            if o[i] is None:
                o[i] = _arrays.empty(shapes[i], "int32", dev, token)
            ptrs.append(_arrays.check(fn, "out." + name, o[i], i32,
                                      shapes[i], dev)[0])
        ffi = self._ffi
        acc = ffi.new("kdtree_accept *", dict(
            zip(Accept._fields, ptrs), n_requests=R, depth=L))
        tree = ffi.new("kdtree_tree *", {
            "n_nodes": nn_p, "token": tok_p, "first_child": fc_p,
            "next_sibling": ns_p, "n_requests": R, "n_max": N})
        req = ffi.new("kdtree_requests *", {"max_accept": ma_p,
                                            "n_requests": R})
        return self._launch(
            "kdtree_tree_accept", (self._handle(fn), acc, tree, tg_p, req),
            stream, Accept(*o), _bind)
