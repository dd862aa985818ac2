"""The four kernels as torch ops.  ``import kdtree_jit.torch`` registers
them in the namespace ``kdtree`` with ``torch.library.Library("kdtree",
"FRAGMENT")``, one schema each (SCHEMAS below):

    torch.ops.kdtree.draft_topk_out(logits, k, lp, ids)
    torch.ops.kdtree.build_ddtree_out(lp, ids, budget, root_token, n_max,
        depth_limit, past_len, n_nodes, token, parent, depth, position,
        first_child, next_sibling, score, anc_mask)
    torch.ops.kdtree.verify_attn_out(q, kv_cache, block_table, past_len,
        n_nodes, anc_mask, scale, o, lse, workspace, *, kv_scale=1.0,
        math="bf16")
    torch.ops.kdtree.tree_accept_out(n_nodes, token, first_child,
        next_sibling, target, L, max_accept, accept_len, accept_idx,
        accept_token, bonus)

write into the outputs given (``Tensor(a!)`` in the schema) and return
nothing: the form a server that preallocates calls.  The functional ops,
``draft_topk``, ``build_ddtree``, ``verify_attn`` and ``tree_accept``
(the same arguments without the outputs and the workspace), allocate the
outputs (and the workspace) and launch as the out-variant does.  The ops
always write `score` and `lse`.

Each op has a CUDA implementation, which launches on the current torch
stream through the Runtime of the tensors' device (``runtime(device)``)
and the Runtime's one checked path (kdtree_jit._runtime), and a fake one
(``torch.library.register_fake``) that gives every output's shape and
dtype and makes the Runtime's checks with its messages, so that
torch.compile traces a round (fullgraph) and bad input fails while
tracing; fake tensors may be on a CUDA device or on "meta".  A CPU
tensor gets the methods' TypeError naming the argument (a CPU
implementation that only refuses, rather than the dispatcher's "could not
run ... with arguments from the 'CPU' backend").

verify_attn_out's workspace is an argument, so the op holds no state:
``verify_attn_workspace(q, kv_cache, block_table)`` makes one of the size
the shape needs, once, before the loop (or the CUDA graph) that uses it.
"""
import threading

import torch
from torch import Tensor

from . import _arrays
from ._runtime import (_ACCEPT, _ATTN, _DRAFT, _NEW, _TREE, TUPLE,
                       Runtime, attn_args, device_ordinal)

_arrays.torch_module()
_runtimes = {}
_lock = threading.Lock()

#: Every op's schema, in registration order.
SCHEMAS = {
    "draft_topk_out":
        "draft_topk_out(Tensor logits, int k, Tensor(a!) lp, "
        "Tensor(b!) ids) -> ()",
    "draft_topk":
        "draft_topk(Tensor logits, int k) -> (Tensor lp, Tensor ids)",
    "build_ddtree_out":
        "build_ddtree_out(Tensor lp, Tensor ids, Tensor budget, "
        "Tensor root_token, int n_max, Tensor? depth_limit, "
        "Tensor? past_len, Tensor(a!) n_nodes, Tensor(b!) token, "
        "Tensor(c!) parent, Tensor(d!) depth, Tensor(e!) position, "
        "Tensor(f!) first_child, Tensor(g!) next_sibling, "
        "Tensor(h!) score, Tensor(i!) anc_mask) -> ()",
    "build_ddtree":
        "build_ddtree(Tensor lp, Tensor ids, Tensor budget, "
        "Tensor root_token, int n_max, Tensor? depth_limit=None, "
        "Tensor? past_len=None) -> (Tensor n_nodes, Tensor token, "
        "Tensor parent, Tensor depth, Tensor position, "
        "Tensor first_child, Tensor next_sibling, Tensor score, "
        "Tensor anc_mask)",
    "verify_attn_out":
        "verify_attn_out(Tensor q, Tensor kv_cache, Tensor block_table, "
        "Tensor past_len, Tensor n_nodes, Tensor anc_mask, float scale, "
        "Tensor(a!) o, Tensor(b!) lse, Tensor(c!) workspace, *, "
        "float kv_scale=1., str math=\"bf16\") -> ()",
    "verify_attn":
        "verify_attn(Tensor q, Tensor kv_cache, Tensor block_table, "
        "Tensor past_len, Tensor n_nodes, Tensor anc_mask, float scale, *, "
        "float kv_scale=1., str math=\"bf16\") -> (Tensor o, Tensor lse)",
    "tree_accept_out":
        "tree_accept_out(Tensor n_nodes, Tensor token, Tensor first_child, "
        "Tensor next_sibling, Tensor target, int L, Tensor? max_accept, "
        "Tensor(a!) accept_len, Tensor(b!) accept_idx, "
        "Tensor(c!) accept_token, Tensor(d!) bonus) -> ()",
    "tree_accept":
        "tree_accept(Tensor n_nodes, Tensor token, Tensor first_child, "
        "Tensor next_sibling, Tensor target, int L, "
        "Tensor? max_accept=None) -> (Tensor accept_len, "
        "Tensor accept_idx, Tensor accept_token, Tensor bonus)",
}


def runtime(device=None):
    """The Runtime the ops use on CUDA device `device` (an ordinal, a
    torch.device or "cuda:N"; default: the current one), made on first
    use."""
    device = device_ordinal("runtime", device)
    rt = _runtimes.get(device)
    if rt is None:
        with _lock:
            rt = _runtimes.get(device)
            if rt is None:
                rt = _runtimes[device] = Runtime(device)
    return rt


def verify_attn_workspace(q, kv_cache, block_table, math="bf16"):
    """A uint8 tensor of the bytes verify_attn_out needs on tensors of
    these shapes and this arithmetic (verify_attn_workspace_size), on q's
    device."""
    return runtime(q.device).verify_attn_workspace(q, kv_cache, block_table,
                                                   math)


def _runtime_of(k, x):
    """The Runtime of the device of `x`, the op's first tensor, on its
    first use."""
    if x.get_device() < 0:  # the methods' own TypeError
        i = k.lead[0][0]
        _arrays.checked(k.name, k.names[i], x, k.dtypes[i], None, 0)
    return runtime(x.get_device())


# ---- the implementations ----------------------------------------------------
#
# Each builds the kernel's row of slots (inputs, then outputs) and runs
# the Runtime's one path (Runtime._call) on the current stream; a
# functional op gives _NEW for each output and returns the new ones.

_get = _runtimes.get


def _draft_topk_out(logits, k, lp, ids):
    (_get(logits.get_device()) or _runtime_of(_DRAFT, logits))._call(
        _DRAFT, (logits, lp, ids), (k,), None, None)


def _draft_topk(logits, k):
    return (_get(logits.get_device()) or _runtime_of(_DRAFT, logits))._call(
        _DRAFT, (logits, _NEW, _NEW), (k,), TUPLE, None)


def _build_ddtree_out(lp, ids, budget, root_token, n_max, depth_limit,
                      past_len, *out):
    (_get(lp.get_device()) or _runtime_of(_TREE, lp))._call(
        _TREE, (lp, ids, budget, root_token, depth_limit, past_len) + out,
        (n_max,), None, None)


_TREE_NEW = (_NEW,) * 9


def _build_ddtree(lp, ids, budget, root_token, n_max, depth_limit=None,
                  past_len=None):
    return (_get(lp.get_device()) or _runtime_of(_TREE, lp))._call(
        _TREE, (lp, ids, budget, root_token, depth_limit, past_len,
                *_TREE_NEW), (n_max,), TUPLE, None)


def _verify_attn_out(q, kv_cache, block_table, past_len, n_nodes, anc_mask,
                     scale, o, lse, workspace, *, kv_scale=1.0, math="bf16"):
    (_get(q.get_device()) or _runtime_of(_ATTN, q))._call(
        _ATTN, (q, kv_cache, block_table, past_len, n_nodes, anc_mask, o,
                lse, workspace),
        attn_args("verify_attn_out", scale, kv_scale, math), None, None)


def _verify_attn(q, kv_cache, block_table, past_len, n_nodes, anc_mask,
                 scale, *, kv_scale=1.0, math="bf16"):
    return (_get(q.get_device()) or _runtime_of(_ATTN, q))._call(
        _ATTN, (q, kv_cache, block_table, past_len, n_nodes, anc_mask, _NEW,
                _NEW, _NEW),
        attn_args("verify_attn", scale, kv_scale, math), TUPLE, None)


def _tree_accept_out(n_nodes, token, first_child, next_sibling, target, L,
                     max_accept, *out):
    (_get(token.get_device()) or _runtime_of(_ACCEPT, token))._call(
        _ACCEPT, (token, first_child, next_sibling, n_nodes, target,
                  max_accept) + out, (L,), None, None)


def _tree_accept(n_nodes, token, first_child, next_sibling, target, L,
                 max_accept=None):
    return (_get(token.get_device()) or _runtime_of(_ACCEPT, token))._call(
        _ACCEPT, (token, first_child, next_sibling, n_nodes, target,
                  max_accept, _NEW, _NEW, _NEW, _NEW), (L,), TUPLE, None)


# ---- the fake implementations -----------------------------------------------
#
# The Runtime's checks (_runtime._Kernel: the slots, their dtypes, the
# shapes `sizes` gives) with its messages, on tensors that have no memory
# (FakeTensor, meta).

def _fake_slot(fn, name, x, dtypes, shape):
    """(shape, DType) of the tensor `x` after the checks of one slot."""
    if not isinstance(x, Tensor):
        raise TypeError("%s: %s must be a CUDA array, got a %s, not a CUDA "
                        "tensor or an object with __cuda_array_interface__"
                        % (fn, name, type(x).__name__))
    if x.device.type not in ("cuda", "meta"):
        raise TypeError("%s: %s must be a CUDA array, got a tensor on %s, "
                        "not on a CUDA device" % (fn, name, x.device))
    dt = [d for d in dtypes if x.dtype is d.torch]
    if not dt:
        raise TypeError("%s: %s must be %s, got %s" % (
            fn, name, " or ".join(d.name for d in dtypes),
            _arrays._dtype_name(x.dtype)))
    s = tuple(x.shape)
    if shape is not None and (len(s) != len(shape) or any(
            w is not None and w != n for w, n in zip(shape, s))):
        raise ValueError("%s: %s must have shape %s, got %s" % (
            fn, name, _arrays._fmt_shape(shape), _arrays._fmt_shape(s)))
    if not x.is_contiguous():
        raise ValueError("%s: %s must be contiguous (C order); call "
                         ".contiguous() first" % (fn, name))
    return s, dt[0]


def _same_device(fn, first, named):
    """Every tensor of `named`, (name, tensor), on the device of `first`,
    (name, tensor)."""
    first_name, first = first
    for name, x in named:
        if x is not None and x.device != first.device:
            raise ValueError("%s: %s is on %s, %s on %s" % (
                fn, name, x.device, first_name, first.device))


def _fake_check(k, xs, args):
    """The checks of a call of kernel `k` on the slots `xs`; returns the
    shape of every slot by name."""
    fn = k.name
    lead, is_lead = [], set()
    for i, ndim in k.lead:
        is_lead.add(i)
        lead.append(None if xs[i] is _NEW else _fake_slot(
            fn, k.names[i], xs[i], k.dtypes[i],
            None if ndim is None else (None,) * ndim))
    shapes = k.sizes(fn, lead, args[:k.key_args])[1]
    for i, x in enumerate(xs):
        if i not in is_lead and x is not _NEW and not (
                x is None and k.optional[i]):
            _fake_slot(fn, k.names[i], x, k.dtypes[i], shapes[k.names[i]])
    i = k.lead[0][0]
    _same_device(fn, (k.names[i], xs[i]),
                 [(n, x) for n, x in zip(k.names, xs) if x is not _NEW])
    return shapes


def _fake_outputs(k, xs, args):
    """New fake tensors for k's outputs, after the checks."""
    shapes = _fake_check(k, xs, args)
    like = xs[k.lead[0][0]]
    return tuple(like.new_empty(shapes[k.names[i]],
                                dtype=k.dtypes[i][0].torch)
                 for i in range(k.n_in, k.n_in + k.n_out))


def _fake_draft_topk_out(logits, k, lp, ids):
    _fake_check(_DRAFT, (logits, lp, ids), (k,))


def _fake_draft_topk(logits, k):
    return _fake_outputs(_DRAFT, (logits, _NEW, _NEW), (k,))


def _fake_build_ddtree_out(lp, ids, budget, root_token, n_max, depth_limit,
                           past_len, *out):
    _fake_check(_TREE, (lp, ids, budget, root_token, depth_limit, past_len)
                + out, (n_max,))


def _fake_build_ddtree(lp, ids, budget, root_token, n_max, depth_limit=None,
                       past_len=None):
    return _fake_outputs(_TREE, (lp, ids, budget, root_token, depth_limit,
                                 past_len) + (_NEW,) * 9, (n_max,))


def _fake_verify_attn_out(q, kv_cache, block_table, past_len, n_nodes,
                          anc_mask, scale, o, lse, workspace, *,
                          kv_scale=1.0, math="bf16"):
    _fake_check(_ATTN, (q, kv_cache, block_table, past_len, n_nodes,
                        anc_mask, o, lse, workspace),
                attn_args("verify_attn_out", scale, kv_scale, math))


def _fake_verify_attn(q, kv_cache, block_table, past_len, n_nodes, anc_mask,
                      scale, *, kv_scale=1.0, math="bf16"):
    return _fake_outputs(_ATTN, (q, kv_cache, block_table, past_len, n_nodes,
                                 anc_mask, _NEW, _NEW, _NEW),
                         attn_args("verify_attn", scale, kv_scale, math))


def _fake_tree_accept_out(n_nodes, token, first_child, next_sibling, target,
                          L, max_accept, *out):
    _fake_check(_ACCEPT, (token, first_child, next_sibling, n_nodes, target,
                          max_accept) + out, (L,))


def _fake_tree_accept(n_nodes, token, first_child, next_sibling, target, L,
                      max_accept=None):
    return _fake_outputs(_ACCEPT, (token, first_child, next_sibling, n_nodes,
                                   target, max_accept) + (_NEW,) * 4, (L,))


# ---- registration -----------------------------------------------------------

LIBRARY = torch.library.Library("kdtree", "FRAGMENT")

for _name, _schema in SCHEMAS.items():
    LIBRARY.define(_schema)
    _impl = globals()["_" + _name]
    # CPU: the implementation refuses a CPU tensor by name (_runtime_of).
    LIBRARY.impl(_name, _impl, "CUDA")
    LIBRARY.impl(_name, _impl, "CPU")
    torch.library.register_fake("kdtree::" + _name,
                                globals()["_fake_" + _name], lib=LIBRARY)
del _name, _schema, _impl
