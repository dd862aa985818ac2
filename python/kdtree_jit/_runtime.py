"""The Runtime: the four kernels on one CUDA device.

A launch's cost in Python is what this module is written around: each
call checks its arrays (kdtree_jit._arrays' one-expression fast path for
torch tensors, and each argument slot's memory of the tensor it last
passed), looks up what depends only on the call's sizes in a per-shape
cache (output shapes, the workspace, a reusable argument buffer), packs
every field of the C structs the kernel takes into that buffer with one
struct.pack_into, and calls the C function.  No message is built unless
something is wrong.

The call a loop makes over and over costs less again.  Each kernel
remembers its last call that wrote into out= one of the namedtuples below
(Runtime._hot_*): the marks of that tuple and of a Draft or Tree argument,
weak references to its tensor arguments, its other arguments, and the
pointer of every tensor it passed.  A call with the same tuples, tensors
and other arguments, each tensor still at the pointer it had, is that
call again, checked then: a tuple cannot change its members nor a tensor
its dtype or device; a tensor whose storage was replaced (set_(), a
resize_() that grows it) has a new pointer; one made smaller or
reshaped in place (resize_(), t_(), squeeze_()) keeps its storage, so the
kernel still reads and writes only memory checked to be that tensor's
(what such a tensor then shows of it is its owner's business).  Such
a call skips every check, and the packing too while its shape's buffer
still holds its values: a few identity tests, one data_ptr() per tensor
and the launch.

Threads: a shape's argument buffer belongs to the thread that made the
shape.  Any other thread packs a fresh buffer on every call and never
takes the remembered path, so two threads sharing a Runtime never write
one buffer, nor launch from one that the other is filling.
"""

import collections
import struct
import threading
from weakref import ref as _weakref

from . import _arrays
from ._arrays import BF16, F32, I32, U32, U8

_get_ident = threading.get_ident


class _Marked(object):
    """What the namedtuples below add to theirs: an instance dict for
    `_kdt_mark`, an object() given to a tuple the first time a call
    remembers it (_mark()) and kept for its life.  A tuple cannot be
    weakly referenced and a runtime must not keep the arrays of its
    callers alive, so a remembered call keeps the mark instead: a tuple
    carrying that mark is the one remembered (or a shallow copy of it,
    which holds the same arrays), because no other tuple is ever given
    it."""

    _kdt_mark = None


def _tuple(name, fields, doc):
    return type(name, (collections.namedtuple(name, fields), _Marked),
                {"__doc__": doc, "__module__": __name__})


Draft = _tuple("Draft", "lp ids", "draft_topk's outputs.")
Tree = _tuple(
    "Tree", "n_nodes token parent depth position first_child next_sibling "
            "score anc_mask", "build_ddtree's outputs.")
Attn = _tuple("Attn", "o lse", "verify_attn's outputs.")
Accept = _tuple("Accept", "accept_len accept_idx accept_token bonus",
                "tree_accept's outputs.")


def _mark(t):
    m = t._kdt_mark
    if m is None:
        m = t._kdt_mark = object()
    return m


# A namedtuple from a sequence of its fields, without the keyword-argument
# handling of its constructor (on every launch).
_new = tuple.__new__

# Fixed by the model family (docs/contract.md §3).
KV_DIM = 576
V_DIM = 512

_KERNELS = ("draft_topk", "build_ddtree", "verify_attn", "tree_accept")


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


def text(ffi, p):
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None


def fail(ffi, lib, st, function):
    return KdtreeError(st, text(ffi, lib.kdtree_status_name(st)),
                       text(ffi, lib.kdtree_last_error()), function)


def int_arg(fn, name, v):
    if v.__class__ is int:
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import operator
            v = operator.index(v)
        except TypeError:
            raise TypeError("%s: %s must be an int, got %s"
                            % (fn, name, type(v).__name__))
    return int(v)


def outputs(out, n, fn, cls):
    """out= as a list of n entries (None = allocate)."""
    if out is None:
        return [None] * n
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise TypeError("%s: out must be a tuple of %d arrays (%s), as %s "
                        "returns, got %s" % (fn, n, ", ".join(cls._fields),
                                             fn, type(out).__name__))
    return list(out)


def fields_of(fn, name, obj, names):
    """The named fields of a Tree- or Draft-like argument."""
    try:
        return [getattr(obj, f) for f in names]
    except AttributeError as e:
        raise TypeError("%s: %s must have the fields %s (a kdtree_jit.%s), "
                        "got %s (%s)" % (fn, name, ", ".join(names),
                                         name.capitalize(),
                                         type(obj).__name__, e))


def _refs(*xs):
    """Weak references to the torch tensors `xs` (None for None), or None
    if one is anything else: only a torch tensor's checks can be skipped
    on its identity and data_ptr() (_arrays.Seen says why)."""
    T = _arrays._Tensor
    refs = []
    for x in xs:
        if x is None:
            refs.append(None)
        elif x.__class__ is T:
            refs.append(_weakref(x))
        else:
            return None
    return refs


class Layout(object):
    """Some of the C structs a kernel takes, back to back in one buffer,
    each at its C alignment, with the listed fields packed in the order
    given (the rest zero).  Offsets and sizes come from cffi's reading of
    kdtree.h, so nothing here restates the header's layout."""

    _CODES = {"uint64_t": "Q", "int32_t": "i", "float": "f"}

    def __init__(self, ffi, *structs):
        fmt, pos, self.offsets, self.types = "=", 0, [], []
        for cname, names in structs:
            t = ffi.typeof(cname)
            align = ffi.alignof(t)
            base = (pos + align - 1) // align * align
            fmt += "x" * (base - pos)
            self.offsets.append(base)
            self.types.append(cname + " *")
            fields = dict(t.fields)
            pos = base
            for n in names:
                f = fields[n]
                fmt += "x" * (base + f.offset - pos)
                fmt += self._CODES[f.type.cname]
                pos = base + f.offset + ffi.sizeof(f.type)
            fmt += "x" * (base + ffi.sizeof(t) - pos)
            pos = base + ffi.sizeof(t)
        self.packer = struct.Struct(fmt)
        self.size = pos
        self.ffi = ffi

    def buffer(self):
        """A new argument buffer: (writable view, pointers to each
        struct)."""
        ffi = self.ffi
        raw = ffi.new("char[]", self.size)
        ptrs = tuple(ffi.cast(t, raw + off)
                     for t, off in zip(self.types, self.offsets))
        return _Buffer(raw, ffi.buffer(raw), ptrs)


class _Buffer(object):
    __slots__ = ("raw", "view", "ptrs")

    def __init__(self, raw, view, ptrs):
        self.raw, self.view, self.ptrs = raw, view, ptrs


class _Shape(object):
    """What one kernel's calls of one shape share: the output shapes and
    whatever else follows from the sizes, the memory of each tensor slot
    (_arrays.Seen), and an argument buffer owned by the thread that made
    it (another thread gets a fresh one per call, so concurrent callers
    never share one)."""

    __slots__ = ("layout", "buf", "owner", "extra", "seen", "keep",
                 "packed", "alloc")

    def __init__(self, layout, seen, extra, alloc):
        self.layout = layout
        self.buf = layout.buffer()
        self.owner = _get_ident()
        self.extra = extra
        self.alloc = alloc  # (shape, DType) of each output, None: none
        self.seen = tuple(seen)
        self.keep = None  # what pointers in the arguments point into
        # The pointers of the remembered call whose values the buffer
        # holds, or None: set where a call is remembered, cleared by every
        # other packing of the buffer.
        self.packed = None

    def args(self, private, values):
        """Packs `values` into this thread's buffer, or into a new one
        that a bound launch keeps (`private`); returns its struct pointers
        and that private buffer (else None)."""
        if private or _get_ident() != self.owner:
            buf = self.layout.buffer()
        else:
            buf = self.buf
            self.packed = None
        self.layout.packer.pack_into(buf.view, 0, *values)
        return buf.ptrs, buf if private else None

    def repack(self, vals, ptrs):
        """Writes a remembered call's values back into this thread's
        buffer (another call of the shape packed its own since)."""
        self.layout.packer.pack_into(self.buf.view, 0, *vals)
        self.packed = ptrs


class Bound(object):
    """A launch whose arguments were checked once (Runtime.bind)."""

    __slots__ = ("_rt", "_fn", "_name", "_args", "_keep", "result")

    def __init__(self, rt, fn, name, args, keep, result):
        self._rt, self._fn, self._name, self._args = rt, fn, name, args
        self._keep = keep  # the argument buffer the pointers point into
        self.result = result

    def __call__(self, stream=None):
        rt = self._rt
        if rt._rt is None:
            raise ValueError("%s: the runtime was closed" % self._name)
        st = self._fn(*(self._args + (rt._stream(stream),)))
        if st:
            raise fail(rt._ffi, rt._lib, st, self._name)
        return self.result


class Runtime(object):
    """A libkdtree runtime for one CUDA device (default: torch's current
    device).  Compiles nothing until a kernel is prepared or launched."""

    def __init__(self, device=None, target=None):
        from ._lib import load
        b = load()
        if device is None:
            device = _default_device()
        device = int_arg("Runtime", "device", device)
        p = b.ffi.new("kdtree_runtime **")
        if target is None:
            st = b.lib.kdtree_runtime_create(p, device)
        else:
            from . import _c_str
            st = b.lib.kdtree_runtime_create_for(
                p, device, _c_str("Runtime", "target", target))
        if st:
            raise fail(b.ffi, b.lib, st, "kdtree_runtime_create")
        self._setup(b.ffi, b.lib, p[0], device)

    def _setup(self, ffi, lib, handle, device):
        """The state every method uses (tests make offline runtimes with a
        NULL handle through this)."""
        _arrays.torch_module()
        self._ffi, self._lib, self._rt = ffi, lib, handle
        self.device = device
        self._streams = {}
        self._shapes = {}
        self._layouts = {}
        # Each kernel's remembered call (the module's docstring), a tuple
        # whose fields the kernel's method lists where it unpacks it; made
        # by the slow path once its checks passed, on the thread that owns
        # the shape's buffer, and only where every array is a torch tensor.
        self._hot_draft = self._hot_tree = self._hot_attn = None
        self._hot_accept = None
        # The arguments each kernel reads its sizes from.
        S = _arrays.Seen
        self._seen = {
            "draft_topk": (S("draft_topk", "logits", (F32, BF16), device),),
            "build_ddtree": (S("build_ddtree", "draft.lp", (F32,), device,
                               ndim=3),),
            "verify_attn": (S("verify_attn", "q", (BF16,), device, ndim=4),
                            S("verify_attn", "kv_cache", (BF16,), device,
                              ndim=3),
                            S("verify_attn", "block_table", (I32,), device,
                              ndim=2)),
            "tree_accept": (S("tree_accept", "tree.token", (I32,), device,
                              ndim=2),)}

    def close(self):
        """Unloads the runtime's modules (no launch may be in flight)."""
        rt, self._rt = getattr(self, "_rt", None), None
        if rt is not None and rt != self._ffi.NULL:
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
        """The device's architecture as the runtime names it ("sm_90a" on
        Hopper, "sm_120")."""
        return text(self._ffi, self._lib.kdtree_runtime_arch(
            self._handle("arch")))

    @property
    def target(self):
        """What the runtime builds its kernels for ("sm_90a", "sm_90",
        "compute_90")."""
        return text(self._ffi, self._lib.kdtree_runtime_target(
            self._handle("target")))

    def _stream(self, stream):
        if stream is None:
            raw = _arrays._raw_stream
            h = raw(self.device) if raw is not None else \
                _arrays.current_stream(self.device)
        else:
            h = _arrays.stream_handle(stream, self.device)
        s = self._streams.get(h)
        if s is None:
            s = self._ffi.cast("void *", h)
            self._streams[h] = s
        return s

    def _layout(self, kernel, *structs):
        lay = self._layouts.get(kernel)
        if lay is None:
            lay = self._layouts[kernel] = Layout(self._ffi, *structs)
        return lay

    def _bound(self, cname, args, buf, result):
        """A Bound launch of the C function `cname` with `args` (after the
        runtime, before the stream), whose structs are in `buf`."""
        return Bound(self, getattr(self._lib, cname), cname,
                     (self._handle(cname),) + tuple(args), buf, result)

    def bind(self, kernel, *args, **kwargs):
        """Checks a kernel's arguments once and returns a Bound launch:
        calling it (``bound(stream=None)``) launches with the pointers
        resolved now, skipping every check, and returns the same outputs
        each time.  The arrays must stay alive and in place.  For loops
        that do not use CUDA graphs and care about microseconds."""
        if kernel not in _KERNELS:
            raise ValueError("bind: no kernel named %r; there are %s"
                             % (kernel, ", ".join(_KERNELS)))
        if "stream" in kwargs:
            raise TypeError("bind: give the stream when calling the bound "
                            "launch")
        return getattr(self, kernel)(*args, _bind=True, **kwargs)

    def prepare(self, kernel, shape=None, **constants):
        """Compiles (or fetches from the cache) and loads `kernel` for a
        shape, so that launches of it are hot: call it before capturing a
        CUDA graph.  The shape as for kdtree_jit.compile()."""
        from . import _c_str, _shape_string
        name = _c_str("prepare", "kernel", kernel)
        shape = _shape_string(kernel, shape, constants, "prepare")
        st = self._lib.kdtree_prepare(self._handle("prepare"), name, shape)
        if st:
            raise fail(self._ffi, self._lib, st, "kdtree_prepare")

    # ---- §1 draft_topk -------------------------------------------------

    def draft_topk(self, logits, k, out=None, stream=None, _bind=False):
        """The k largest logits of each row and their log-probabilities.
        logits: float32 or bfloat16 [..., V] (typically [R, L, V]); returns
        Draft(lp float32 [..., k], ids int32 [..., k])."""
        # The remembered call (the module's docstring): the same out Draft
        # and logits tensor, the same k, every pointer as then.
        h = self._hot_draft
        if h is not None and out.__class__ is Draft:
            o_m, w_lg, hk, st, ptrs, vals, c, a_d, lg_p, dtype, vocab = h
            if out._kdt_mark is o_m and w_lg() is logits is not None and \
                    k.__class__ is int and k == hk and not _bind and \
                    _get_ident() == st.owner:
                lp, ids = out
                if (lp.data_ptr(), ids.data_ptr(), logits.data_ptr()) == \
                        ptrs:
                    if st.packed is not ptrs:
                        st.repack(vals, ptrs)
                    raw = _arrays._raw_stream
                    sh = self._streams.get(raw(self.device)) if \
                        stream is None and raw is not None else None
                    if sh is None:
                        sh = self._stream(stream)
                    r = c(self._rt or self._handle("draft_topk"), a_d, lg_p,
                          dtype, vocab, sh)
                    if r:
                        raise fail(self._ffi, self._lib, r,
                                   "kdtree_draft_topk")
                    return out
        fn = "draft_topk"
        dev = self.device
        if k.__class__ is not int:
            k = int_arg(fn, "k", k)
        lg_p, shp, dt = _arrays.seen_first(self._seen[fn][0], logits)
        key = (fn, shp, dt, k)
        st = self._shapes.get(key)
        if st is None:
            st = self._draft_shape(fn, key, shp, dt, k)
        oshape, n_rows, vocab, dtype = st.extra
        if out is None:
            (lp, ids), (lp_p, ids_p) = _arrays.new_arrays(st.alloc, dev,
                                                          logits)
        else:
            lp, ids = outputs(out, 2, fn, Draft)
            sv, sp = st.seen, _arrays.seen_ptr
            lp_p, ids_p = sp(sv[0], lp), sp(sv[1], ids)
        vals = (lp_p, ids_p, n_rows, 1, k)
        ptrs, buf = st.args(_bind, vals)
        result = out if out.__class__ is Draft else _new(Draft, (lp, ids))
        c = self._lib.kdtree_draft_topk
        if _bind:
            return self._bound("kdtree_draft_topk",
                               (ptrs[0], lg_p, dtype, vocab), buf, result)
        if out.__class__ is Draft and _get_ident() == st.owner:
            refs = _refs(logits, lp, ids)
            if refs is not None:
                hp = st.packed = (lp_p, ids_p, lg_p)
                self._hot_draft = (_mark(out), refs[0], k, st, hp, vals, c,
                                   ptrs[0], lg_p, dtype, vocab)
        r = c(self._rt or self._handle(fn), ptrs[0], lg_p, dtype, vocab,
              self._stream(stream))
        if r:
            raise fail(self._ffi, self._lib, r, "kdtree_draft_topk")
        return result

    def _draft_shape(self, fn, key, shp, dt, k):
        if len(shp) < 2:
            raise ValueError("%s: logits must have shape [..., V] with at "
                             "least 2 dimensions, got %s" % (fn, list(shp)))
        n_rows = 1
        for d in shp[:-1]:
            n_rows *= d
        lay = self._layout(fn, ("kdtree_draft", ("lp", "ids", "n_requests",
                                                 "depth", "k")))
        # The library checks k and the sizes against the kernel's limits.
        oshape = tuple(shp[:-1]) + (k,)
        S, dev = _arrays.Seen, self.device
        st = _Shape(lay, (S(fn, "out.lp", (F32,), dev, oshape),
                          S(fn, "out.ids", (I32,), dev, oshape)),
                    (oshape, n_rows, shp[-1], 1 if dt is BF16 else 0),
                    ((oshape, F32), (oshape, I32)))
        self._shapes[key] = st
        return st

    # ---- §2 build_ddtree -----------------------------------------------

    def build_ddtree(self, draft, budget, root_token, n_max,
                     depth_limit=None, past_len=None, want_score=False,
                     out=None, stream=None, _bind=False):
        """Best-first selection of each request's draft tree.  draft: a
        Draft (lp float32 [R, L, K], ids int32 [R, L, K]), as draft_topk
        returns; budget, root_token, depth_limit, past_len int32 [R] (the
        last two optional); n_max rows per request.  Returns Tree(n_nodes
        [R], token, parent, depth, position, first_child, next_sibling
        [R, n_max] int32, score float32 [R, n_max] or None, anc_mask int32
        [R, n_max, ceil(n_max/32)]: the bits of ancestor-or-self rows)."""
        # The remembered call (the module's docstring): the same out Tree,
        # draft Draft and tensors, the same n_max and want_score, every
        # pointer as then.
        h = self._hot_tree
        if h is not None and out.__class__ is Tree and \
                draft.__class__ is Draft:
            (o_m, d_m, w_b, w_r, w_dl, w_pl, hn, hws, st, ptrs, vals, c,
             a_t, a_d, a_r) = h
            if out._kdt_mark is o_m and draft._kdt_mark is d_m and \
                    w_b() is budget is not None and \
                    w_r() is root_token is not None and \
                    (depth_limit is None if w_dl is None else
                     w_dl() is depth_limit is not None) and \
                    (past_len is None if w_pl is None else
                     w_pl() is past_len is not None) and \
                    n_max.__class__ is int and n_max == hn and \
                    want_score is hws and not _bind and \
                    _get_ident() == st.owner:
                o0, o1, o2, o3, o4, o5, o6, o7, o8 = out
                if (o0.data_ptr(), o1.data_ptr(), o2.data_ptr(),
                        o3.data_ptr(), o4.data_ptr(), o5.data_ptr(),
                        o6.data_ptr(), 0 if o7 is None else o7.data_ptr(),
                        o8.data_ptr(), draft[0].data_ptr(),
                        draft[1].data_ptr(), budget.data_ptr(),
                        root_token.data_ptr(),
                        0 if depth_limit is None else depth_limit.data_ptr(),
                        0 if past_len is None else past_len.data_ptr()) == \
                        ptrs:
                    if st.packed is not ptrs:
                        st.repack(vals, ptrs)
                    raw = _arrays._raw_stream
                    sh = self._streams.get(raw(self.device)) if \
                        stream is None and raw is not None else None
                    if sh is None:
                        sh = self._stream(stream)
                    r = c(self._rt or self._handle("build_ddtree"), a_t, a_d,
                          a_r, sh)
                    if r:
                        raise fail(self._ffi, self._lib, r,
                                   "kdtree_build_ddtree")
                    return out
        fn = "build_ddtree"
        dev = self.device
        if n_max.__class__ is not int:
            n_max = int_arg(fn, "n_max", n_max)
        try:
            lp, ids = draft.lp, draft.ids
        except AttributeError:
            lp, ids = fields_of(fn, "draft", draft, ("lp", "ids"))
        lp_p, shp, _ = _arrays.seen_first(self._seen[fn][0], lp)
        key = (fn, shp, n_max, bool(want_score))
        st = self._shapes.get(key)
        if st is None:
            st = self._tree_shape(fn, key, shp, n_max, want_score)
        rs, dims, rows, mshape = st.extra
        R, L, K = dims
        sv, sp = st.seen, _arrays.seen_ptr
        ids_p, budget_p = sp(sv[0], ids), sp(sv[1], budget)
        root_p, dl_p = sp(sv[2], root_token), sp(sv[3], depth_limit)
        pl_p = sp(sv[4], past_len)
        if out is None:
            o, t = _arrays.new_arrays(st.alloc, dev, lp)
        else:
            o = outputs(out, 9, fn, Tree)
            t = [sp(sv[5], o[0]), sp(sv[6], o[1]), sp(sv[7], o[2]),
                 sp(sv[8], o[3]), sp(sv[9], o[4]), sp(sv[10], o[5]),
                 sp(sv[11], o[6]), sp(sv[12], o[7]), sp(sv[13], o[8])]
        vals = tuple(t) + (R, n_max, lp_p, ids_p, R, L, K, budget_p, root_p,
                           dl_p, pl_p, R)
        ptrs, buf = st.args(_bind, vals)
        result = out if out.__class__ is Tree else _new(Tree, o)
        c = self._lib.kdtree_build_ddtree
        if _bind:
            return self._bound("kdtree_build_ddtree", ptrs, buf, result)
        if out.__class__ is Tree and draft.__class__ is Draft and \
                _get_ident() == st.owner and \
                (want_score is True or want_score is False):
            refs = _refs(budget, root_token, depth_limit, past_len, lp, ids,
                         *o)
            if refs is not None:
                hp = st.packed = tuple(t) + (lp_p, ids_p, budget_p, root_p,
                                             dl_p, pl_p)
                self._hot_tree = (_mark(out), _mark(draft), refs[0], refs[1],
                                  refs[2], refs[3], n_max, want_score, st,
                                  hp, vals, c, ptrs[0], ptrs[1], ptrs[2])
        r = c(self._rt or self._handle(fn), ptrs[0], ptrs[1], ptrs[2],
              self._stream(stream))
        if r:
            raise fail(self._ffi, self._lib, r, "kdtree_build_ddtree")
        return result

    def _tree_shape(self, fn, key, shp, n_max, want_score):
        R, L, K = shp
        lay = self._layout(
            fn,
            ("kdtree_tree", Tree._fields + ("n_requests", "n_max")),
            ("kdtree_draft", ("lp", "ids", "n_requests", "depth", "k")),
            ("kdtree_requests", ("budget", "root_token", "depth_limit",
                                 "past_len", "n_requests")))
        W = (n_max + 31) // 32
        rs, dims, rows, mshape = (R,), tuple(shp), (R, n_max), (R, n_max, W)
        S, dev = _arrays.Seen, self.device
        seen = [S(fn, "draft.ids", (I32,), dev, dims),
                S(fn, "budget", (I32,), dev, rs),
                S(fn, "root_token", (I32,), dev, rs),
                S(fn, "depth_limit", (I32,), dev, rs, optional=True),
                S(fn, "past_len", (I32,), dev, rs, optional=True)]
        seen += [S(fn, "out." + f, (I32,), dev, rs if f == "n_nodes" else
                   rows) for f in Tree._fields[:7]]
        seen += [S(fn, "out.score", (F32,), dev, rows, optional=True),
                 S(fn, "out.anc_mask", (I32, U32), dev, mshape)]
        alloc = ((rs, I32),) + ((rows, I32),) * 6 + (
            (rows, F32) if want_score else None, (mshape, I32))
        st = _Shape(lay, seen, (rs, dims, rows, mshape), alloc)
        self._shapes[key] = st
        return st

    # ---- §3 verify_attn ------------------------------------------------

    def verify_attn_workspace_size(self, n_requests, n_heads, n_max,
                                   page_size, max_pages):
        """The bytes of device memory verify_attn needs for this shape."""
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
            raise fail(ffi, self._lib, st,
                       "kdtree_verify_attn_workspace_size")
        return int(out[0])

    def verify_attn(self, q, kv_cache, block_table, past_len, tree, scale,
                    want_lse=True, workspace=None, out=None, stream=None,
                    _bind=False):
        """Absorbed-MLA tree attention.  q bfloat16 [R, N_MAX, H, 576],
        kv_cache bfloat16 [pages, PAGE, 576], block_table int32
        [R, max_pages], past_len int32 [R], tree: a Tree (its n_nodes
        int32 [R] and anc_mask int32/uint32 [R, N_MAX, ceil(N_MAX/32)] are
        read); workspace, if given, uint8 [bytes] of at least
        verify_attn_workspace_size().  Returns Attn(o bfloat16
        [R, N_MAX, H, 512], lse float32 [R, N_MAX, H] or None).  Without
        `workspace`, the runtime allocates one per shape and keeps it."""
        # The remembered call (the module's docstring): the same out Attn,
        # tree Tree and tensors, the same scale and want_lse, every pointer
        # as then.
        h = self._hot_attn
        if h is not None and out.__class__ is Attn and \
                tree.__class__ is Tree:
            (o_m, t_m, w_q, w_kv, w_bt, w_pl, w_ws, hs, hl, st, ptrs, vals,
             c, a_a, a_t, a_r, a_k) = h
            if out._kdt_mark is o_m and tree._kdt_mark is t_m and \
                    w_q() is q is not None and \
                    w_kv() is kv_cache is not None and \
                    w_bt() is block_table is not None and \
                    w_pl() is past_len is not None and \
                    (workspace is None if w_ws is None else
                     w_ws() is workspace is not None) and \
                    scale.__class__ is float and scale == hs and \
                    want_lse is hl and not _bind and \
                    _get_ident() == st.owner:
                o, lse = out
                if (o.data_ptr(), 0 if lse is None else lse.data_ptr(),
                        q.data_ptr(), kv_cache.data_ptr(),
                        block_table.data_ptr(), past_len.data_ptr(),
                        tree[0].data_ptr(), tree[8].data_ptr(),
                        0 if workspace is None else workspace.data_ptr()) == \
                        ptrs:
                    if st.packed is not ptrs:
                        st.repack(vals, ptrs)
                    raw = _arrays._raw_stream
                    sh = self._streams.get(raw(self.device)) if \
                        stream is None and raw is not None else None
                    if sh is None:
                        sh = self._stream(stream)
                    r = c(self._rt or self._handle("verify_attn"), a_a, a_t,
                          a_r, a_k, sh)
                    if r:
                        raise fail(self._ffi, self._lib, r,
                                   "kdtree_verify_attn")
                    return out
        fn = "verify_attn"
        dev = self.device
        if scale.__class__ is not float:
            if not isinstance(scale, (float, int)) or isinstance(scale, bool):
                raise TypeError("%s: scale must be a float, got %s"
                                % (fn, type(scale).__name__))
            scale = float(scale)
        try:
            n_nodes, anc_mask = tree.n_nodes, tree.anc_mask
        except AttributeError:
            n_nodes, anc_mask = fields_of(fn, "tree", tree,
                                          ("n_nodes", "anc_mask"))
        sf, f = self._seen[fn], _arrays.seen_first
        q_p, qs, _ = f(sf[0], q)
        kv_p, ks, _ = f(sf[1], kv_cache)
        bt_p, bs, _ = f(sf[2], block_table)
        own_ws = workspace is None
        key = (fn, qs, ks[1], ks[2], bs, bool(want_lse), own_ws)
        st = self._shapes.get(key)
        if st is None:
            st = self._attn_shape(fn, key, qs, ks, bs, want_lse)
        rs, oshape, lshape, mshape, page = st.extra
        R, N, H, _ = qs
        sv, sp = st.seen, _arrays.seen_ptr
        pl_p, nn_p, m_p = sp(sv[0], past_len), sp(sv[1], n_nodes), sp(
            sv[2], anc_mask)
        if not own_ws:
            ws_p, (ws_n,), _ = _arrays.checked(fn, "workspace", workspace,
                                               (U8,), (None,), dev)
        else:
            ws = st.keep
            if ws is None:
                # Only after every check: this asks the library.
                ws = st.keep = self._workspace(R, H, N, page, bs[1], q)
            ws_p, ws_n = ws[1], ws[2]
        if out is None:
            (o, lse), (o_p, lse_p) = _arrays.new_arrays(st.alloc, dev, q)
        else:
            o, lse = outputs(out, 2, fn, Attn)
            o_p, lse_p = sp(sv[3], o), sp(sv[4], lse)
        vals = (q_p, o_p, lse_p, ws_p, ws_n, H, scale, nn_p, m_p, R, N, pl_p,
                R, kv_p, bt_p, page, bs[1])
        ptrs, buf = st.args(_bind, vals)
        result = out if out.__class__ is Attn else _new(Attn, (o, lse))
        c = self._lib.kdtree_verify_attn
        if _bind:
            return self._bound("kdtree_verify_attn", ptrs, buf, result)
        if out.__class__ is Attn and tree.__class__ is Tree and \
                _get_ident() == st.owner and \
                (want_lse is True or want_lse is False):
            refs = _refs(q, kv_cache, block_table, past_len, workspace, o,
                         lse, n_nodes, anc_mask)
            if refs is not None:
                hp = st.packed = (o_p, lse_p, q_p, kv_p, bt_p, pl_p, nn_p,
                                  m_p, 0 if own_ws else ws_p)
                self._hot_attn = (_mark(out), _mark(tree), refs[0], refs[1],
                                  refs[2], refs[3], refs[4], scale, want_lse,
                                  st, hp, vals, c, ptrs[0], ptrs[1], ptrs[2],
                                  ptrs[3])
        r = c(self._rt or self._handle(fn), ptrs[0], ptrs[1], ptrs[2],
              ptrs[3], self._stream(stream))
        if r:
            raise fail(self._ffi, self._lib, r, "kdtree_verify_attn")
        return result

    def _attn_shape(self, fn, key, qs, ks, bs, want_lse):
        R, N, H, d = qs
        if d != KV_DIM:
            raise ValueError("%s: q must have shape [?, ?, ?, %d], got %s"
                             % (fn, KV_DIM, list(qs)))
        if ks[2] != KV_DIM:
            raise ValueError("%s: kv_cache must have shape [?, ?, %d], got "
                             "%s" % (fn, KV_DIM, list(ks)))
        if bs[0] != R:
            raise ValueError("%s: block_table must have shape [%d, ?], got "
                             "%s" % (fn, R, list(bs)))
        lay = self._layout(
            fn,
            ("kdtree_attn", ("q", "o", "lse", "workspace", "workspace_bytes",
                             "n_heads", "scale")),
            ("kdtree_tree", ("n_nodes", "anc_mask", "n_requests", "n_max")),
            ("kdtree_requests", ("past_len", "n_requests")),
            ("kdtree_kv_cache", ("data", "block_table", "page_size",
                                 "max_pages")))
        rs, oshape, lshape, mshape = (R,), (R, N, H, V_DIM), (R, N, H), (
            R, N, (N + 31) // 32)
        S, dev = _arrays.Seen, self.device
        st = _Shape(lay, (S(fn, "past_len", (I32,), dev, rs),
                          S(fn, "tree.n_nodes", (I32,), dev, rs),
                          S(fn, "tree.anc_mask", (I32, U32), dev, mshape),
                          S(fn, "out.o", (BF16,), dev, oshape),
                          S(fn, "out.lse", (F32,), dev, lshape,
                            optional=True)),
                    (rs, oshape, lshape, mshape, ks[1]),
                    ((oshape, BF16), (lshape, F32) if want_lse else None))
        self._shapes[key] = st
        return st

    def _workspace(self, R, H, N, page, max_pages, like):
        """(array or None, pointer, bytes): the workspace the runtime keeps
        for one verify_attn shape."""
        n = self.verify_attn_workspace_size(R, H, N, page, max_pages)
        if not n:
            return (None, 0, 0)
        ws = _arrays.empty((max(n, 16),), U8, self.device, like)
        return (ws, _arrays.new_ptr(ws), n)

    # ---- §4 tree_accept ------------------------------------------------

    def tree_accept(self, tree, target, L, max_accept=None, out=None,
                    stream=None, _bind=False):
        """Walks each tree from the root along the target's tokens.  tree:
        a Tree (its n_nodes int32 [R], token, first_child, next_sibling
        int32 [R, N_MAX] are read); target int32 [R, N_MAX]; max_accept
        int32 [R] or None.  Returns Accept(accept_len [R], accept_idx
        [R, L+1], accept_token [R, L+1], bonus [R])."""
        # The remembered call (the module's docstring): the same out
        # Accept, tree Tree and tensors, the same L, every pointer as then.
        h = self._hot_accept
        if h is not None and out.__class__ is Accept and \
                tree.__class__ is Tree:
            (o_m, t_m, w_tg, w_ma, hL, st, ptrs, vals, c, a_a, a_t, tg_p,
             a_r) = h
            if out._kdt_mark is o_m and tree._kdt_mark is t_m and \
                    w_tg() is target is not None and \
                    (max_accept is None if w_ma is None else
                     w_ma() is max_accept is not None) and \
                    L.__class__ is int and L == hL and not _bind and \
                    _get_ident() == st.owner:
                o0, o1, o2, o3 = out
                if (o0.data_ptr(), o1.data_ptr(), o2.data_ptr(),
                        o3.data_ptr(), tree[0].data_ptr(), tree[1].data_ptr(),
                        tree[5].data_ptr(), tree[6].data_ptr(),
                        target.data_ptr(),
                        0 if max_accept is None else max_accept.data_ptr()) \
                        == ptrs:
                    if st.packed is not ptrs:
                        st.repack(vals, ptrs)
                    raw = _arrays._raw_stream
                    sh = self._streams.get(raw(self.device)) if \
                        stream is None and raw is not None else None
                    if sh is None:
                        sh = self._stream(stream)
                    r = c(self._rt or self._handle("tree_accept"), a_a, a_t,
                          tg_p, a_r, sh)
                    if r:
                        raise fail(self._ffi, self._lib, r,
                                   "kdtree_tree_accept")
                    return out
        fn = "tree_accept"
        dev = self.device
        if L.__class__ is not int:
            L = int_arg(fn, "L", L)
        try:
            n_nodes, token = tree.n_nodes, tree.token
            first_child, next_sibling = tree.first_child, tree.next_sibling
        except AttributeError:
            n_nodes, token, first_child, next_sibling = fields_of(
                fn, "tree", tree,
                ("n_nodes", "token", "first_child", "next_sibling"))
        tok_p, ts, _ = _arrays.seen_first(self._seen[fn][0], token)
        key = (fn, ts, L)
        st = self._shapes.get(key)
        if st is None:
            st = self._accept_shape(fn, key, ts, L)
        rs, ps = st.extra
        R, N = ts
        sv, sp = st.seen, _arrays.seen_ptr
        fc_p, ns_p = sp(sv[0], first_child), sp(sv[1], next_sibling)
        nn_p, tg_p = sp(sv[2], n_nodes), sp(sv[3], target)
        ma_p = sp(sv[4], max_accept)
        if out is None:
            o, (a0, a1, a2, a3) = _arrays.new_arrays(st.alloc, dev, token)
        else:
            o = outputs(out, 4, fn, Accept)
            a0, a1 = sp(sv[5], o[0]), sp(sv[6], o[1])
            a2, a3 = sp(sv[7], o[2]), sp(sv[8], o[3])
        vals = (a0, a1, a2, a3, R, L, nn_p, tok_p, fc_p, ns_p, R, N, ma_p, R)
        ptrs, buf = st.args(_bind, vals)
        acc_p, tree_p, req_p = ptrs
        result = out if out.__class__ is Accept else _new(Accept, o)
        c = self._lib.kdtree_tree_accept
        if _bind:
            return self._bound("kdtree_tree_accept",
                               (acc_p, tree_p, tg_p, req_p), buf, result)
        if out.__class__ is Accept and tree.__class__ is Tree and \
                _get_ident() == st.owner:
            refs = _refs(target, max_accept, n_nodes, token, first_child,
                         next_sibling, *o)
            if refs is not None:
                hp = st.packed = (a0, a1, a2, a3, nn_p, tok_p, fc_p, ns_p,
                                  tg_p, ma_p)
                self._hot_accept = (_mark(out), _mark(tree), refs[0],
                                    refs[1], L, st, hp, vals, c, acc_p,
                                    tree_p, tg_p, req_p)
        r = c(self._rt or self._handle(fn), acc_p, tree_p, tg_p, req_p,
              self._stream(stream))
        if r:
            raise fail(self._ffi, self._lib, r, "kdtree_tree_accept")
        return result

    def _accept_shape(self, fn, key, ts, L):
        R, N = ts
        lay = self._layout(
            fn,
            ("kdtree_accept", Accept._fields + ("n_requests", "depth")),
            ("kdtree_tree", ("n_nodes", "token", "first_child",
                             "next_sibling", "n_requests", "n_max")),
            ("kdtree_requests", ("max_accept", "n_requests")))
        rs, ps, ts = (R,), (R, L + 1), tuple(ts)
        S, dev = _arrays.Seen, self.device
        seen = [S(fn, "tree.first_child", (I32,), dev, ts),
                S(fn, "tree.next_sibling", (I32,), dev, ts),
                S(fn, "tree.n_nodes", (I32,), dev, rs),
                S(fn, "target", (I32,), dev, ts),
                S(fn, "max_accept", (I32,), dev, rs, optional=True)]
        seen += [S(fn, "out." + f, (I32,), dev, rs if f in ("accept_len",
                                                            "bonus") else ps)
                 for f in Accept._fields]
        st = _Shape(lay, seen, (rs, ps),
                    ((rs, I32), (ps, I32), (ps, I32), (rs, I32)))
        self._shapes[key] = st
        return st


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
