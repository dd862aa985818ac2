"""The Runtime: the four kernels on one CUDA device.

Every launch from Python -- a Runtime method, a bound launch, a torch op
(kdtree_jit.torch) -- takes one path, Runtime._call.  It sees a call as
a row of array slots (the kernel's inputs, then its outputs) and the
call's other arguments, as each kernel's _Kernel below describes them:

- The checks: every array a device array of its dtype, shape and device,
  contiguous (_arrays' one-expression fast path for torch tensors).  The
  slots that size the call (`lead`) are checked first; their sizes pick a
  per-shape record (_Shape: every other slot's shape, the outputs to
  allocate, the constants the C structs take), made once per shape.
- The packing: every field of the C structs the kernel takes, written by
  one struct.pack_into into an argument buffer whose layout comes from
  cffi's reading of kdtree.h (Layout), then the C function.
- The last call: each thread remembers, per kernel, the last call it
  checked: a weak reference to and the pointer of every array in it, and
  its other arguments.  An array that dies forgets the call at once, and
  its reference gives back only that live array, never another at its
  address.  A call with the same arrays at the same pointers and the same
  other arguments is that call again: no array can have changed its
  dtype or device, one whose storage moved (set_(), a resize_() that
  grows it) has a new pointer, and one shrunk or reshaped in place keeps
  its storage, so the kernel still touches only memory checked to be
  that array's (what such a tensor then shows of it is its owner's
  business).  That call skips the checks and the packing (the buffer
  still holds its values; an allocating call packs its new arrays'
  pointers, one pack_into of the fields they fill): a call of its
  reference and a data_ptr() per array, and the launch.  Those two calls
  an array are most of what the path costs; nothing cheaper tells the
  same live array at the same pointer without holding it.  Only torch
  tensors are remembered (CuPy arrays and other __cuda_array_interface__
  objects are checked every call).

Nothing else is kept per shape: no workspace, no outputs.  verify_attn's
workspace is an argument (verify_attn_workspace() sizes one), allocated
for the call when it is not given.

Threads: the argument buffers and the last calls are per thread (a
threading.local), so threads sharing a Runtime never write one buffer,
nor launch from one another thread is filling.
"""

import collections
import operator
import struct
import threading
from functools import partial as _partial
from weakref import ref as _weakref

from . import _arrays
from ._arrays import BF16, E4M3, F32, I32, U32, U8

Draft = collections.namedtuple("Draft", "lp ids")
Draft.__doc__ = "draft_topk's outputs."
Tree = collections.namedtuple(
    "Tree", "n_nodes token parent depth position first_child next_sibling "
            "score anc_mask")
Tree.__doc__ = "build_ddtree's outputs."
Attn = collections.namedtuple("Attn", "o lse")
Attn.__doc__ = "verify_attn's outputs."
Accept = collections.namedtuple("Accept",
                                "accept_len accept_idx accept_token bonus")
Accept.__doc__ = "tree_accept's outputs."

# A namedtuple from a sequence of its fields, without the keyword-argument
# handling of its constructor (on every launch).
_new = tuple.__new__

# Fixed by the model family (docs/contract.md §3).
KV_DIM = 576
V_DIM = 512

_get_ident = threading.get_ident

# What a slot holds instead of an array: None, an optional array left
# out (pointer 0); _NEW, an output the call allocates.
_NEW = type("_New", (object,), {"__slots__": (), "__repr__":
                                lambda self: "<a new array>"})()
_data_ptr = None  # torch.Tensor.data_ptr, once torch is imported
# `out` of a call that returns its new arrays as a plain tuple.
TUPLE = type("_Tuple", (object,), {"__slots__": (), "__repr__":
                                   lambda self: "<a plain tuple>"})()


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
            v = operator.index(v)
        except TypeError:
            raise TypeError("%s: %s must be an int, got %s"
                            % (fn, name, type(v).__name__))
    return int(v)


def fields_of(fn, name, obj, names):
    """The named fields of a Tree- or Draft-like argument."""
    try:
        return [getattr(obj, f) for f in names]
    except AttributeError as e:
        raise TypeError("%s: %s must have the fields %s (a kdtree_jit.%s), "
                        "got %s (%s)" % (fn, name, ", ".join(names),
                                         name.capitalize(),
                                         type(obj).__name__, e))


class Layout(object):
    """Some of the C structs a kernel takes, back to back in one buffer,
    each at its C alignment, with the listed fields packed in the order
    given (the rest zero).  Offsets and sizes come from cffi's reading of
    kdtree.h, so nothing here restates the header's layout."""

    _CODES = {"uint64_t": "Q", "int32_t": "i", "float": "f"}

    def __init__(self, ffi, *structs):
        fmt, pos, self.offsets, self.types = "=", 0, [], []
        self.names = []
        self.at = []  # the byte offset of each packed field, in order
        for cname, names in structs:
            t = ffi.typeof(cname)
            align = ffi.alignof(t)
            base = (pos + align - 1) // align * align
            fmt += "x" * (base - pos)
            self.offsets.append(base)
            self.types.append(cname + " *")
            self.names.append(cname)
            fields = dict(t.fields)
            pos = base
            for n in names:
                f = fields[n]
                if base + f.offset < pos:
                    raise AssertionError("Layout: %s.%s out of order"
                                         % (cname, n))
                fmt += "x" * (base + f.offset - pos)
                fmt += self._CODES[f.type.cname]
                self.at.append(base + f.offset)
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
        ptrs = dict((n, ffi.cast(t, raw + off)) for n, t, off in
                    zip(self.names, self.types, self.offsets))
        return _Buffer(raw, ffi.buffer(raw), ptrs)


class _Buffer(object):
    __slots__ = ("raw", "view", "ptrs")

    def __init__(self, raw, view, ptrs):
        self.raw, self.view, self.ptrs = raw, view, ptrs


# ---- the kernels, described once --------------------------------------------

OPTIONAL = True


class _Kernel(object):
    """One kernel's calls: its array slots, inputs then outputs, each a
    (name in messages, DTypes[, OPTIONAL]) -- the first DType is what an
    allocated output gets; the other arguments (`args`, the first
    `key_args` of which size the call); the slots that size it (`lead`:
    (name, number of dimensions or None)); `sizes`, from the lead slots'
    (shape, DType) (None for one to allocate) and the arguments to the
    constants the structs take and every other slot's shape; the C
    structs and the source of each field packed (a slot: its pointer; an
    argument; a constant of `sizes`; an int); and the C function's
    arguments after the runtime (struct names or sources)."""

    def __init__(self, name, result, inputs, outputs, args, key_args, lead,
                 sizes, structs, call):
        slots = inputs + outputs
        self.name, self.c_name, self.result = name, "kdtree_" + name, result
        self.names = tuple(s[0] for s in slots)
        self.dtypes = tuple(s[1] for s in slots)
        self.optional = tuple(len(s) > 2 and s[2] for s in slots)
        self.n_in, self.n_out = len(inputs), len(result._fields)
        self.slot = dict((n, i) for i, n in enumerate(self.names))
        self.lead = tuple((self.slot[n], nd) for n, nd in lead)
        # The other slots, checked at the shapes the lead ones give:
        # (index, name, DTypes, optional) each.
        at = set(i for i, _ in self.lead)
        self.rest = tuple((i, self.names[i], self.dtypes[i],
                           self.optional[i])
                          for i in range(len(slots)) if i not in at)
        self.args, self.key_args = args, key_args
        self.sizes = sizes
        self.structs = tuple((c, tuple(f for f, _ in fs)) for c, fs in structs)
        self.sources = tuple(s for _, fs in structs for _, s in fs)
        self.call = call
        # The output slots of an allocating call, without and with the
        # optional output (score, lse) if there is one.
        self.fresh = tuple(
            tuple(None if self.optional[self.n_in + j] and not want else _NEW
                  for j in range(self.n_out)) for want in (False, True))
        self.index = len(_KERNELS)
        _KERNELS.append(self)

    def outs(self, out, want=True):
        """out= as output slots (None: allocate them; `want` says whether
        the optional one too)."""
        if out.__class__ is tuple and len(out) == self.n_out:
            return out
        if out is None:
            return self.fresh[1 if want is True else bool(want)]
        if out.__class__ is not self.result and (
                not isinstance(out, (tuple, list)) or
                len(out) != self.n_out):
            raise TypeError("%s: out must be a tuple of %d arrays (%s), as "
                            "%s returns, got %s" % (
                                self.name, self.n_out,
                                ", ".join(self.result._fields), self.name,
                                type(out).__name__
                                if not isinstance(out, (tuple, list))
                                else "%d of them" % len(out)))
        return out if out.__class__ is not list else tuple(out)

    def shape(self, rt, lead, args):
        """The _Shape of a call whose lead slots are `lead` and sizing
        arguments `args`."""
        consts, shapes = self.sizes(self.name, lead, args)
        # The row the fields are picked from: every slot's pointer, then the
        # constants (those of `sizes`, then the literals of the sources),
        # then the arguments.
        names = sorted(consts)
        values = [consts[n] for n in names]
        for src in self.sources:
            if src.__class__ is int and src not in names:
                names.append(src)
                values.append(src)
        n_slots = len(self.names)
        everything = list(self.names) + names + list(self.args)
        row = dict((n, i) for i, n in enumerate(everything))
        if len(row) != len(everything):
            raise AssertionError("%s: a source named twice" % self.name)
        alloc = [None] * n_slots
        for i in range(self.n_in, n_slots):
            s = shapes.get(self.names[i])
            if s is not None:
                alloc[i] = (s, self.dtypes[i][0])
        return _Shape(shapes, alloc, tuple(values),
                      dict((n, row[n] - n_slots) for n in consts),
                      [row[s] for s in self.sources], row,
                      tuple(shapes[r[1]] for r in self.rest))

    def late(self, rt, st, i):
        """(shape, DType) of an output slot whose size the library gives
        (None: nothing to allocate); only verify_attn has one."""
        raise AssertionError("%s: no late allocation" % self.name)


class _Shape(object):
    """What the calls of one kernel at one shape share: each slot's shape,
    (shape, DType) of each output to allocate, the constants packed, and
    where each of the structs' fields, in packing order, is in a row of
    slot pointers + constants + arguments (`order`; `row`: a source's
    position in that row; `fields`: the getter of the fields, in
    order, from such a row); the shape of each of the kernel's `rest`
    slots, in order (`rest`)."""

    __slots__ = ("shapes", "alloc", "consts", "consts_at", "order", "row",
                 "rest", "fields")

    def __init__(self, shapes, alloc, consts, consts_at, order, row, rest):
        self.shapes, self.alloc, self.consts = shapes, alloc, consts
        self.consts_at, self.order, self.row = consts_at, order, row
        self.rest = rest
        self.fields = _getter(order)

    def set_const(self, name, value):
        c = list(self.consts)
        c[self.consts_at[name]] = value
        self.consts = tuple(c)


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


def _draft_sizes(fn, lead, args):
    (shp, dt), = lead
    k, = args
    if len(shp) < 2:
        raise ValueError("%s: logits must have shape [..., V] with at least "
                         "2 dimensions, got %s" % (fn, list(shp)))
    o = tuple(shp[:-1]) + (k,)
    return (dict(rows=_prod(shp[:-1]), V=shp[-1],
                 dtype=1 if dt is BF16 else 0),
            {"out.lp": o, "out.ids": o})


_KERNELS = []

_DRAFT = _Kernel(
    "draft_topk", Draft,
    inputs=(("logits", (F32, BF16)),),
    outputs=(("out.lp", (F32,)), ("out.ids", (I32,))),
    args=("k",), key_args=1, lead=(("logits", None),), sizes=_draft_sizes,
    structs=(("kdtree_draft", (("lp", "out.lp"), ("ids", "out.ids"),
                               ("n_requests", "rows"), ("depth", 1),
                               ("k", "k"))),),
    call=("kdtree_draft", "logits", "dtype", "V"))


def _tree_sizes(fn, lead, args):
    ((R, L, K), _), = lead
    n_max, = args
    rs, rows = (R,), (R, n_max)
    shapes = {"draft.ids": (R, L, K), "budget": rs, "root_token": rs,
              "depth_limit": rs, "past_len": rs, "out.n_nodes": rs,
              "out.score": rows,
              "out.anc_mask": (R, n_max, (n_max + 31) // 32)}
    for f in Tree._fields[1:7]:
        shapes["out." + f] = rows
    return dict(R=R, L=L, K=K), shapes


_TREE = _Kernel(
    "build_ddtree", Tree,
    inputs=(("draft.lp", (F32,)), ("draft.ids", (I32,)), ("budget", (I32,)),
            ("root_token", (I32,)), ("depth_limit", (I32,), OPTIONAL),
            ("past_len", (I32,), OPTIONAL)),
    outputs=tuple(("out." + f, (I32,)) for f in Tree._fields[:7]) + (
        ("out.score", (F32,), OPTIONAL), ("out.anc_mask", (I32, U32))),
    args=("n_max",), key_args=1, lead=(("draft.lp", 3),), sizes=_tree_sizes,
    structs=(("kdtree_tree", tuple((f, "out." + f) for f in Tree._fields) +
              (("n_requests", "R"), ("n_max", "n_max"))),
             ("kdtree_draft", (("lp", "draft.lp"), ("ids", "draft.ids"),
                               ("n_requests", "R"), ("depth", "L"),
                               ("k", "K"))),
             ("kdtree_requests", (("budget", "budget"),
                                  ("root_token", "root_token"),
                                  ("depth_limit", "depth_limit"),
                                  ("past_len", "past_len"),
                                  ("n_requests", "R")))),
    call=("kdtree_tree", "kdtree_draft", "kdtree_requests"))


#: verify_attn's arithmetic by name (kdtree_attn_math).
ATTN_MATH = {"bf16": 0, "e4m3": 1}

#: The element types of verify_attn's cache: bf16, or e4m3 bytes as
#: torch.float8_e4m3fn or uint8 (kdtree_kv_dtype by the DType).
KV_DTYPES = (BF16, E4M3, U8)


def _attn_sizes(fn, lead, args):
    (qs, _), (ks, kdt), (bs, _), ws = lead
    math, = args
    R, N, H, d = qs
    if d != KV_DIM:
        raise ValueError("%s: q must have shape [?, ?, ?, %d], got %s"
                         % (fn, KV_DIM, list(qs)))
    if ks[2] != KV_DIM:
        raise ValueError("%s: kv_cache must have shape [?, ?, %d], got %s"
                         % (fn, KV_DIM, list(ks)))
    if bs[0] != R:
        raise ValueError("%s: block_table must have shape [%d, ?], got %s"
                         % (fn, R, list(bs)))
    rs = (R,)
    return (dict(R=R, N=N, H=H, page=ks[1], max_pages=bs[1],
                 KV=0 if kdt is BF16 else 1, MATH=math,
                 ws_bytes=None if ws is None else ws[0][0]),
            {"past_len": rs, "tree.n_nodes": rs,
             "tree.anc_mask": (R, N, (N + 31) // 32),
             "out.o": (R, N, H, V_DIM), "out.lse": (R, N, H)})


class _AttnKernel(_Kernel):
    def late(self, rt, st, i):
        """The workspace of a call that gave none: the size the library
        asks for this shape (asked after every check, once a shape)."""
        n = st.consts[st.consts_at["ws_bytes"]]
        if n is None:
            c = lambda name: st.consts[st.consts_at[name]]  # noqa: E731
            n = rt.verify_attn_workspace_size(c("R"), c("H"), c("N"),
                                              c("page"), c("max_pages"),
                                              c("KV"), c("MATH"))
            st.set_const("ws_bytes", n)
        return ((n,), U8) if n else None


_ATTN = _AttnKernel(
    "verify_attn", Attn,
    inputs=(("q", (BF16,)), ("kv_cache", KV_DTYPES), ("block_table", (I32,)),
            ("past_len", (I32,)), ("tree.n_nodes", (I32,)),
            ("tree.anc_mask", (I32, U32))),
    outputs=(("out.o", (BF16,)), ("out.lse", (F32,), OPTIONAL),
             ("workspace", (U8,))),
    # the arithmetic (an int of ATTN_MATH) sizes the call: the workspace
    # depends on the body it picks
    args=("math", "scale", "kv_scale"), key_args=1,
    lead=(("q", 4), ("kv_cache", 3), ("block_table", 2), ("workspace", 1)),
    sizes=_attn_sizes,
    structs=(("kdtree_attn", (("q", "q"), ("o", "out.o"), ("lse", "out.lse"),
                              ("workspace", "workspace"),
                              ("workspace_bytes", "ws_bytes"),
                              ("n_heads", "H"), ("scale", "scale"),
                              ("math", "MATH"))),
             ("kdtree_tree", (("n_nodes", "tree.n_nodes"),
                              ("anc_mask", "tree.anc_mask"),
                              ("n_requests", "R"), ("n_max", "N"))),
             ("kdtree_requests", (("past_len", "past_len"),
                                  ("n_requests", "R"))),
             ("kdtree_kv_cache", (("data", "kv_cache"),
                                  ("block_table", "block_table"),
                                  ("page_size", "page"),
                                  ("max_pages", "max_pages"),
                                  ("dtype", "KV"), ("scale", "kv_scale")))),
    call=("kdtree_attn", "kdtree_tree", "kdtree_requests", "kdtree_kv_cache"))


def attn_args(fn, scale, kv_scale, math):
    """verify_attn's arguments other than arrays, checked: (math as an
    int, scale, kv_scale) as the kernel description takes them."""
    m = ATTN_MATH.get(math) if math.__class__ is str else None
    if m is not None and scale.__class__ is float and \
            kv_scale.__class__ is float:
        return m, scale, kv_scale
    if scale.__class__ is not float:
        scale = float_arg(fn, "scale", scale)
    if kv_scale.__class__ is not float:
        kv_scale = float_arg(fn, "kv_scale", kv_scale)
    if m is None:
        raise ValueError("%s: math must be %s, got %r" % (
            fn, " or ".join(repr(n) for n in ATTN_MATH), math))
    return m, scale, kv_scale


def float_arg(fn, name, x):
    """x as a float: a float or an int, not a bool (TypeError)."""
    if not isinstance(x, (float, int)) or isinstance(x, bool):
        raise TypeError("%s: %s must be a float, got %s"
                        % (fn, name, type(x).__name__))
    return float(x)


def _accept_sizes(fn, lead, args):
    ((R, N), _), = lead
    L, = args
    rs, ps, ts = (R,), (R, L + 1), (R, N)
    return (dict(R=R, N=N),
            {"tree.first_child": ts, "tree.next_sibling": ts,
             "tree.n_nodes": rs, "target": ts, "max_accept": rs,
             "out.accept_len": rs, "out.accept_idx": ps,
             "out.accept_token": ps, "out.bonus": rs})


_ACCEPT = _Kernel(
    "tree_accept", Accept,
    inputs=(("tree.token", (I32,)), ("tree.first_child", (I32,)),
            ("tree.next_sibling", (I32,)), ("tree.n_nodes", (I32,)),
            ("target", (I32,)), ("max_accept", (I32,), OPTIONAL)),
    outputs=tuple(("out." + f, (I32,)) for f in Accept._fields),
    args=("L",), key_args=1, lead=(("tree.token", 2),), sizes=_accept_sizes,
    structs=(("kdtree_accept", tuple((f, "out." + f) for f in Accept._fields)
              + (("n_requests", "R"), ("depth", "L"))),
             ("kdtree_tree", (("n_nodes", "tree.n_nodes"),
                              ("token", "tree.token"),
                              ("first_child", "tree.first_child"),
                              ("next_sibling", "tree.next_sibling"),
                              ("n_requests", "R"), ("n_max", "N"))),
             ("kdtree_requests", (("max_accept", "max_accept"),
                                  ("n_requests", "R")))),
    call=("kdtree_accept", "kdtree_tree", "target", "kdtree_requests"))

KERNEL_NAMES = tuple(k.name for k in _KERNELS)


# ---- per thread: argument buffers and last calls ----------------------------

class _Plan(object):
    """A checked call, what launching it again takes: its other arguments
    (`args`); the C function and its arguments after the runtime (`c`,
    `cargs`), and the function of the stream that launches it with the
    runtime's handle (`launch`); for a call that allocates, the function
    that makes its new arrays (`alloc`), where their pointers go in the
    argument buffer (`runs`: a struct.Struct of them all, packed at
    offset `at`, or (struct.Struct, offset, getter of the new pointers)
    runs) and the getter of the result's arrays from the new arrays +
    [None] (`pick`).  As a thread's last call (the module's docstring): the
    test that a row of slots is its row again (`same`, _same_test's),
    which holds weak references to its arrays that forget it when one
    dies, and the object that tells it to their callbacks (`token`)."""

    __slots__ = ("args", "c", "cargs", "launch", "alloc", "runs", "at",
                 "pick", "same", "token")

    def __init__(self):
        self.token = object()


def _pack_new(p, buf, ps):
    """Packs the pointers `ps` of the arrays plan `p` allocated into
    `buf`."""
    if p.runs.__class__ is not tuple:
        p.runs.pack_into(buf.view, p.at, *ps)
        return
    for packer, at, pick in p.runs:
        packer.pack_into(buf.view, at, *pick(ps))


def _getter(indices):
    """A function of a sequence that returns its items at `indices`, a
    tuple even of one."""
    if len(indices) < 2:
        if not indices:
            return lambda xs: ()
        i, = indices
        return lambda xs: (xs[i],)
    return operator.itemgetter(*indices)


_ROWS = {}  # the slots' types -> _same_test's answer


def _same_test(xs):
    """The last call's test of rows of slots like `xs` (of the same types
    slot by slot): (make, arrays), where arrays(row) is the tuple of the
    arrays of a row and make(refs, ptrs) the test, a function of a row
    that says whether each slot holds what that of `xs` held: None or
    _NEW where it held them, and where it held its j-th array, the array
    weak reference refs[j] gives, at pointer ptrs[j].  None where an
    array of `xs` is not a torch tensor.  Written out for its row (the
    code made once per kind of row, by exec), the references and
    pointers bound in its closure: a call of the reference and an
    identity test (no id(), no int compared) and a data_ptr() an array,
    with no tuple built of either.  A reference whose array died gives
    None, which the slot may hold: data_ptr() refuses that (TypeError),
    and the row is not the same."""
    key = tuple(map(type, xs))
    try:
        return _ROWS[key]
    except KeyError:
        pass
    T = _arrays._Tensor
    kinds = ["n" if t is type(None) else "w" if t is type(_NEW) else
             "a" if T is not None and issubclass(t, T) else None
             for t in key]
    if None in kinds:
        _ROWS[key] = None
        return None
    at = [i for i, c in enumerate(kinds) if c == "a"]
    test = ["r%d() is x%d" % (i, i) for i in at] + \
        ["x%d is %s" % (i, "None" if c == "n" else "NEW")
         for i, c in enumerate(kinds) if c != "a"] + \
        ["dp(x%d) == p%d" % (i, i) for i in at]
    src = ("def make(refs, ptrs):\n"
           "    %s= refs\n"
           "    %s= ptrs\n"
           "    def same(xs):\n"
           "        %s= xs\n"
           "        try:\n"
           "            return %s\n"
           "        except TypeError:\n"
           "            return False\n"
           "    return same\n") % (
               "".join("r%d, " % i for i in at) or "()",
               "".join("p%d, " % i for i in at) or "()",
               "".join("x%d, " % i for i in range(len(kinds))),
               " and ".join(test))
    scope = {"dp": _data_ptr, "NEW": _NEW}
    exec(src, scope)
    r = _ROWS[key] = scope["make"], _getter(at)
    return r


class _Last(object):
    __slots__ = ("buf", "memo")

    def __init__(self, buf):
        self.buf, self.memo = buf, None


def _forget(last, token):
    """The callback that forgets the last call of `last` whose `token`
    is `token`, when one of its arrays dies.  (The token, not the call:
    a callback that held the call would close a reference cycle through
    its weak references, which only the garbage collector frees.)"""
    def dead(_ref):
        memo = last.memo
        if memo is not None and memo.token is token:
            last.memo = None
    return dead


class _PerThread(threading.local):
    def __init__(self, layouts):
        self.last = [_Last(lay.buffer()) for lay in layouts]


class Bound(object):
    """A launch whose arguments were checked once (Runtime.bind)."""

    __slots__ = ("_rt", "_fn", "_name", "_args", "_keep", "_arrays",
                 "result")

    def __init__(self, rt, fn, name, args, keep, result, arrays=None):
        self._rt, self._fn, self._name, self._args = rt, fn, name, args
        self._keep = keep  # the argument buffer the pointers point into
        # The arrays it allocated, alive as long as the launch that writes
        # them (a workspace is in no result).
        self._arrays = arrays
        self.result = result

    def __call__(self, stream=None):
        rt = self._rt
        if rt._rt is None:
            raise ValueError("%s: the runtime was closed" % self._name)
        st = self._fn(*(self._args + (rt._stream(stream),)))
        if st:
            raise fail(rt._ffi, rt._lib, st, self._name)
        return self.result


def device_ordinal(fn, device):
    """A CUDA device's ordinal from an int, a torch.device or a string
    torch.device reads ("cuda:1"); None for torch's current device."""
    if device is None:
        return _default_device()
    if device.__class__ is int:
        return device
    torch = _arrays.torch_module()
    if torch is not None and isinstance(device, (str, torch.device)):
        try:
            d = torch.device(device)
        except RuntimeError as e:
            raise ValueError("%s: device %r is not a device (%s)"
                             % (fn, device, e))
        if d.type != "cuda":
            raise ValueError("%s: device must be a CUDA device, got %s"
                             % (fn, d))
        return d.index if d.index is not None else _default_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return int(device)
    raise TypeError("%s: device must be an int or a torch.device, got %s"
                    % (fn, type(device).__name__))


class Runtime(object):
    """A libkdtree runtime for one CUDA device: an ordinal, a torch.device
    or "cuda:N" (default: torch's current device).  Compiles nothing until
    a kernel is prepared or launched."""

    def __init__(self, device=None, target=None):
        from ._lib import load
        b = load()
        device = device_ordinal("Runtime", device)
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
        global _data_ptr
        torch = _arrays.torch_module()
        if torch is not None:
            _data_ptr = torch.Tensor.data_ptr
        self._ffi, self._lib, self._rt = ffi, lib, handle
        self.device = device
        self._streams = {}
        self._shapes = {}
        self._ws_sizes = {}
        self._layouts = tuple(Layout(ffi, *k.structs) for k in _KERNELS)
        self._tls = _PerThread(self._layouts)

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

    def bind(self, kernel, *args, **kwargs):
        """Checks a kernel's arguments once and returns a Bound launch:
        calling it (``bound(stream=None)``) launches with the pointers
        resolved now, skipping every check, and returns the same outputs
        each time.  The arrays must stay alive and in place.  For loops
        that do not use CUDA graphs and care about microseconds."""
        if kernel not in KERNEL_NAMES:
            raise ValueError("bind: no kernel named %r; there are %s"
                             % (kernel, ", ".join(KERNEL_NAMES)))
        if "stream" in kwargs:
            raise TypeError("bind: give the stream when calling the bound "
                            "launch")
        return getattr(self, kernel)(*args, _bind=True, **kwargs)

    def prepare(self, kernel, shape=None, **constants):
        """Compiles (or fetches from the cache) and loads `kernel` for a
        shape, so that launches of it are hot: call it before capturing a
        CUDA graph.  The shape as for kdtree_jit.compile(): a string, or
        keywords that override the kernel's default shape."""
        from . import _c_str, _shape_string
        name = _c_str("prepare", "kernel", kernel)
        shape = _shape_string(kernel, shape, constants, "prepare")
        st = self._lib.kdtree_prepare(self._handle("prepare"), name, shape)
        if st:
            raise fail(self._ffi, self._lib, st, "kdtree_prepare")

    # ---- the one path of every launch ---------------------------------

    def _call(self, k, xs, args, out, stream, bind=False):
        """Launches kernel `k` on the array slots `xs` (its inputs, then
        its outputs: arrays, None or _NEW) and its other arguments
        `args`: the last call's path when the call is that one again (the
        module's docstring), else the checks.  Returns the outputs: `out`
        (as k's namedtuple; None for None) when the call allocated none,
        else a new namedtuple (a plain tuple for `out` TUPLE: what torch
        takes back fastest from an op); a Bound when `bind`."""
        last = self._tls.last[k.index]
        p = last.memo
        if p is None or args != p.args or bind or not p.same(xs):
            if bind:
                return self._bind(k, xs, args, out)
            p = self._plan(k, xs, args, last)
        if p.alloc is not None:
            arrays, ps = p.alloc()
            _pack_new(p, last.buf, ps)
        if self._rt is None:
            self._handle(k.name)  # the runtime was closed
        # _stream's common case, the current stream seen before, inline.
        s = None
        if stream is None:
            raw = _arrays._raw_stream
            if raw is not None:
                s = self._streams.get(raw(self.device))
        r = p.launch(self._stream(stream) if s is None else s)
        if r:
            raise fail(self._ffi, self._lib, r, k.c_name)
        if out is None or out is TUPLE:
            if p.alloc is None:
                return None
            arrays.append(None)
            new = p.pick(arrays)
            return new if out is TUPLE else _new(k.result, new)
        return out if out.__class__ is k.result else _new(k.result, out)

    def _plan(self, k, xs, args, last):
        """Checks a call and packs it into the thread's buffer; remembers
        it as the thread's last call when all its arrays are torch
        tensors.  Returns its _Plan."""
        # Forgotten first: the checks may fail after packing over the
        # buffer the last call launches from.
        last.memo = None
        p, ptrs = self._checked(k, xs, args, last.buf)
        t = _same_test(xs)
        if t is not None:
            make, arrays = t
            forget = _forget(last, p.token)
            # The pointers the checks read, which the launch takes.
            p.same = make([_weakref(x, forget) for x in arrays(xs)],
                          arrays(ptrs))
            last.memo = p
        return p

    def _checked(self, k, xs, args, buf):
        """The _Plan of the checked call, its structs packed into `buf`
        (the pointers of the arrays it allocates: 0, until it does), and
        the pointer of each slot (_check's)."""
        ptrs, st, new = self._check(k, xs, args)
        p = _Plan()
        p.args, p.c = args, getattr(self._lib, k.c_name)
        # The outputs to allocate, but a workspace this shape does without
        # (its size, asked once the checks passed, is one of the constants).
        new = [i for i in new if st.alloc[i] is not None or
               self._late(k, st, i) is not None]
        row = tuple(ptrs) + st.consts + args
        p.cargs = self._cargs(k, buf, row, st)
        p.launch = _partial(p.c, self._rt, *p.cargs)
        lay = self._layouts[k.index]
        lay.packer.pack_into(buf.view, 0, *st.fields(row))
        if not new:
            p.alloc = None
            return p, ptrs
        p.alloc = _arrays.allocator([st.alloc[i] for i in new], self.device,
                                    xs[k.lead[0][0]])
        # Where the new pointers go: runs of fields back to back, each
        # packed by one pack_into.
        fields = sorted((lay.at[j], new.index(i)) for j, i in
                        enumerate(st.order) if i in new)
        runs = []
        for at, n in fields:
            if runs and runs[-1][0] + 8 * len(runs[-1][1]) == at:
                runs[-1][1].append(n)
            else:
                runs.append((at, [n]))
        if len(runs) == 1 and runs[0][1] == list(range(len(new))):
            # All of them, in order, in one run: the common case.
            p.at, p.runs = runs[0][0], struct.Struct("=%dQ" % len(new))
        else:
            p.runs = tuple((struct.Struct("=%dQ" % len(ns)), at,
                            _getter(ns)) for at, ns in runs)
        # The result's arrays: the new ones, None for an optional output
        # left out.
        p.pick = _getter([new.index(i) if i in new else len(new)
                          for i in range(k.n_in, k.n_in + k.n_out)])
        return p, ptrs

    def _bind(self, k, xs, args, out):
        """A Bound launch of a checked call, with a buffer of its own."""
        buf = self._layouts[k.index].buffer()
        p = self._checked(k, xs, args, buf)[0]
        result = out if out is None or out.__class__ is k.result else \
            _new(k.result, out)
        arrays = None
        if p.alloc is not None:
            arrays, ps = p.alloc()
            _pack_new(p, buf, ps)
            if out is None:
                result = _new(k.result, p.pick(arrays + [None]))
        return Bound(self, p.c, k.c_name,
                     (self._handle(k.c_name),) + p.cargs, buf, result,
                     arrays)

    def _late(self, k, st, i):
        a = st.alloc[i] = k.late(self, st, i)
        return a

    @staticmethod
    def _cargs(k, buf, row, st):
        """The C function's arguments after the runtime, before the
        stream: the structs in `buf`, and values of the row."""
        return tuple(buf.ptrs[a] if a in buf.ptrs else row[st.row[a]]
                     for a in k.call)

    def _check(self, k, xs, args):
        """The checks of a call (the module's docstring): (pointer of
        each slot, 0 for None and _NEW; its _Shape; the _NEW slots)."""
        fn, dev = k.name, self.device
        ptrs = [0] * len(xs)
        lead, new = [], []
        for i, ndim in k.lead:
            x = xs[i]
            if x is _NEW:
                lead.append(None)
                new.append(i)
                continue
            p, s, d = _arrays.first(fn, k.names[i], x, k.dtypes[i], ndim,
                                    dev)
            ptrs[i] = p
            lead.append((tuple(s), d))
        key_args = args[:k.key_args]
        key = (k.index, key_args) + tuple(lead)
        st = self._shapes.get(key)
        if st is None:
            st = self._shapes[key] = k.shape(self, lead, key_args)
        ptr = _arrays.ptr
        for (i, name, dts, optional), shape in zip(k.rest, st.rest):
            x = xs[i]
            if x is _NEW:
                new.append(i)
            elif x is not None or not optional:
                ptrs[i] = ptr(fn, name, x, dts, shape, dev)
        new.sort()  # a lead slot's among the others'
        return ptrs, st, new

    # ---- §1 draft_topk -------------------------------------------------

    def draft_topk(self, logits, k, out=None, stream=None, _bind=False):
        """The k largest logits of each row and their log-probabilities.
        logits: float32 or bfloat16 [..., V] (typically [R, L, V]); returns
        Draft(lp float32 [..., k], ids int32 [..., k])."""
        if k.__class__ is not int:
            k = int_arg("draft_topk", "k", k)
        return self._call(
            _DRAFT, (logits,) +
            (out if out.__class__ is Draft else _DRAFT.outs(out)), (k,), out,
            stream, _bind)

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
        if n_max.__class__ is not int:
            n_max = int_arg("build_ddtree", "n_max", n_max)
        try:
            lp, ids = draft.lp, draft.ids
        except AttributeError:
            lp, ids = fields_of("build_ddtree", "draft", draft, ("lp", "ids"))
        return self._call(
            _TREE, (lp, ids, budget, root_token,
                    depth_limit, past_len) +
            (out if out.__class__ is Tree else _TREE.outs(out, want_score)),
            (n_max,), out, stream, _bind)

    # ---- §3 verify_attn ------------------------------------------------

    def verify_attn_workspace_size(self, n_requests, n_heads, n_max,
                                   page_size, max_pages, kv_dtype=0,
                                   math=0):
        """The bytes of device memory verify_attn needs for this shape
        (0: none); kv_dtype 0 (bf16) or 1 (e4m3), math 0 (bf16) or 1
        (e4m3) as kdtree_kv_dtype and kdtree_attn_math number them."""
        fn = "verify_attn_workspace_size"
        key = (n_requests, n_heads, n_max, page_size, max_pages, kv_dtype,
               math)
        n = self._ws_sizes.get(key)
        if n is not None:
            return n
        ffi = self._ffi
        out = ffi.new("uint64_t *")
        st = self._lib.kdtree_verify_attn_workspace_size(
            out, self._handle(fn),
            ffi.new("kdtree_attn *", {"n_heads": n_heads, "math": math}),
            ffi.new("kdtree_tree *", {"n_requests": n_requests,
                                      "n_max": n_max}),
            ffi.new("kdtree_kv_cache *", {"page_size": page_size,
                                          "max_pages": max_pages,
                                          "dtype": kv_dtype,
                                          "scale": 1.0}))
        if st:
            raise fail(ffi, self._lib, st,
                       "kdtree_verify_attn_workspace_size")
        n = self._ws_sizes[key] = int(out[0])
        return n

    def verify_attn_workspace(self, q, kv_cache, block_table, math="bf16"):
        """A new workspace for verify_attn on arrays of these shapes and
        this arithmetic: a uint8 array of verify_attn_workspace_size()
        bytes (torch, or CuPy like q), to pass as `workspace=` call after
        call."""
        fn = "verify_attn_workspace"
        dev = self.device
        m = attn_args(fn, 1.0, 1.0, math)[0]
        R, N, H, _ = _arrays.first(fn, "q", q, (BF16,), 4, dev)[1]
        _, ks, kdt = _arrays.first(fn, "kv_cache", kv_cache, KV_DTYPES, 3,
                                   dev)
        max_pages = _arrays.first(fn, "block_table", block_table, (I32,), 2,
                                  dev)[1][1]
        n = self.verify_attn_workspace_size(R, H, N, ks[1], max_pages,
                                            0 if kdt is BF16 else 1, m)
        return _arrays.empty((n,), U8, dev, q)

    def verify_attn(self, q, kv_cache, block_table, past_len, tree, scale,
                    want_lse=True, workspace=None, out=None, stream=None,
                    kv_scale=1.0, math="bf16", _bind=False):
        """Absorbed-MLA tree attention.  q bfloat16 [R, N_MAX, H, 576],
        kv_cache [pages, PAGE, 576]: bfloat16, or FP8 e4m3
        (torch.float8_e4m3fn, or its bytes as uint8) worth kv_scale times
        each number (SGLang's cache: 1.0; vLLM's: its k_scale);
        block_table int32 [R, max_pages], past_len int32 [R], tree: a Tree
        (its n_nodes int32 [R] and anc_mask int32/uint32 [R, N_MAX,
        ceil(N_MAX/32)] are read); workspace uint8 [bytes] of at least
        verify_attn_workspace_size() (verify_attn_workspace() makes one),
        or None: one allocated for the call; math "bf16" (16-bit tensor
        cores, an e4m3 cache widened on chip) or "e4m3" (FP8 tensor-core
        math, an e4m3 cache only; docs/contract.md §3 gives both error
        bounds).
        Returns Attn(o bfloat16 [R, N_MAX, H, 512], lse float32
        [R, N_MAX, H] or None)."""
        args = attn_args("verify_attn", scale, kv_scale, math)
        try:
            n_nodes, anc_mask = tree.n_nodes, tree.anc_mask
        except AttributeError:
            n_nodes, anc_mask = fields_of("verify_attn", "tree", tree,
                                          ("n_nodes", "anc_mask"))
        return self._call(
            _ATTN, (q, kv_cache, block_table, past_len, n_nodes, anc_mask) +
            (out if out.__class__ is Attn else _ATTN.outs(out, want_lse)) +
            (_NEW if workspace is None else workspace,),
            args, out, stream, _bind)

    # ---- §4 tree_accept ------------------------------------------------

    def tree_accept(self, tree, target, L, max_accept=None, out=None,
                    stream=None, _bind=False):
        """Walks each tree from the root along the target's tokens.  tree:
        a Tree (its n_nodes int32 [R], token, first_child, next_sibling
        int32 [R, N_MAX] are read); target int32 [R, N_MAX]; max_accept
        int32 [R] or None.  Returns Accept(accept_len [R], accept_idx
        [R, L+1], accept_token [R, L+1], bonus [R])."""
        if L.__class__ is not int:
            L = int_arg("tree_accept", "L", L)
        try:
            xs = (tree.token, tree.first_child, tree.next_sibling,
                  tree.n_nodes)
        except AttributeError:
            xs = tuple(fields_of("tree_accept", "tree", tree,
                                 ("token", "first_child", "next_sibling",
                                  "n_nodes")))
        return self._call(
            _ACCEPT, xs + (target, max_accept) +
            (out if out.__class__ is Accept else _ACCEPT.outs(out)),
            (L,), out, stream, _bind)


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
