"""The four kernels as torch ops: ``import kdtree_jit.torch`` registers

    torch.ops.kdtree.draft_topk(logits, k) -> (lp, ids)
    torch.ops.kdtree.build_ddtree(lp, ids, budget, root_token, n_max,
                                  depth_limit=None, past_len=None)
        -> (n_nodes, token, parent, depth, position, first_child,
            next_sibling, score, anc_mask)
    torch.ops.kdtree.verify_attn(q, kv_cache, block_table, past_len,
                                 n_nodes, anc_mask, scale) -> (o, lse)
    torch.ops.kdtree.tree_accept(n_nodes, token, first_child,
                                 next_sibling, target, L, max_accept=None)
        -> (accept_len, accept_idx, accept_token, bonus)

and, for servers that preallocate, ``<name>_out`` with the outputs as the
last arguments, written in place (it returns nothing).  Each has a fake
implementation that gives every output's shape and dtype and checks the
arguments as the Runtime methods do, so torch.compile traces them
(fullgraph) and bad input fails while tracing; each launches on the
current torch stream, so a round captures in a torch.cuda.CUDAGraph.
The arrays are those of the Runtime methods (docs in kdtree_jit); the
ops always write `score` and `lse` (the methods can skip them).

One Runtime per CUDA device serves the ops (``runtime(device)``).
"""
import threading
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _arrays
from ._arrays import BF16, F32, I32, U32
from ._runtime import KV_DIM, V_DIM, Runtime

_arrays.torch_module()
_runtimes = {}
_lock = threading.Lock()


def runtime(device=None):
    """The Runtime the ops use on CUDA device `device` (an ordinal or a
    torch.device; default: the current one), made on first use."""
    if device is None:
        device = torch.cuda.current_device()
    elif isinstance(device, torch.device):
        device = device.index if device.index is not None else \
            torch.cuda.current_device()
    rt = _runtimes.get(device)
    if rt is None:
        with _lock:
            rt = _runtimes.get(device)
            if rt is None:
                rt = _runtimes[device] = Runtime(device)
    return rt


def _rt_for(fn, name, x, dtypes):
    """The runtime of the device `x` is on; a tensor that is not on a
    CUDA device gets the methods' own TypeError here."""
    dev = x.get_device() if isinstance(x, Tensor) else -1
    if dev < 0:
        _arrays.checked(fn, name, x, dtypes, None, 0)
    return runtime(dev)


class _Draft(object):
    __slots__ = ("lp", "ids")

    def __init__(self, lp, ids):
        self.lp, self.ids = lp, ids


class _Tree(object):
    """The fields of a tree an op receives one by one."""

    __slots__ = ("n_nodes", "token", "first_child", "next_sibling",
                 "anc_mask")

    def __init__(self, n_nodes, token=None, first_child=None,
                 next_sibling=None, anc_mask=None):
        self.n_nodes, self.token = n_nodes, token
        self.first_child, self.next_sibling = first_child, next_sibling
        self.anc_mask = anc_mask


# ---- the checks of the fake implementations ---------------------------------
#
# What the methods check, on tensors that have no memory (FakeTensor,
# meta): the same messages, raised while torch.compile traces.

def _meta(fn, name, x, dtypes, shape):
    if not isinstance(x, Tensor):
        raise TypeError("%s: %s must be a CUDA array, got a %s, not a CUDA "
                        "tensor or an object with __cuda_array_interface__"
                        % (fn, name, type(x).__name__))
    if x.device.type != "cuda":
        raise TypeError("%s: %s must be a CUDA array, got a tensor on %s, "
                        "not on a CUDA device" % (fn, name, x.device))
    if not any(x.dtype is d.torch for d in dtypes):
        raise TypeError("%s: %s must be %s, got %s" % (
            fn, name, " or ".join(d.name for d in dtypes),
            _arrays._dtype_name(x.dtype)))
    if shape is not None:
        s = tuple(x.shape)
        if len(s) != len(shape) or any(
                w is not None and w != n for w, n in zip(shape, s)):
            raise ValueError("%s: %s must have shape %s, got %s" % (
                fn, name, _arrays._fmt_shape(shape), _arrays._fmt_shape(s)))
    if not x.is_contiguous():
        raise ValueError("%s: %s must be contiguous (C order); call "
                         ".contiguous() first" % (fn, name))
    return tuple(x.shape)


def _same_device(fn, first, named):
    """Every array on the device of the first, (name, array)."""
    first_name, first = first
    for name, x in named:
        if x is not None and x.device != first.device:
            raise ValueError("%s: %s is on %s, %s on %s" % (
                fn, name, x.device, first_name, first.device))


def _draft_meta(fn, logits, k):
    s = _meta(fn, "logits", logits, (F32, BF16), None)
    if len(s) < 2:
        raise ValueError("%s: logits must have shape [..., V] with at least "
                         "2 dimensions, got %s" % (fn, list(s)))
    return s[:-1] + (k,)


def _tree_meta(fn, lp, ids, budget, root_token, n_max, depth_limit,
               past_len):
    R, L, K = _meta(fn, "draft.lp", lp, (F32,), (None, None, None))
    _meta(fn, "draft.ids", ids, (I32,), (R, L, K))
    _meta(fn, "budget", budget, (I32,), (R,))
    _meta(fn, "root_token", root_token, (I32,), (R,))
    if depth_limit is not None:
        _meta(fn, "depth_limit", depth_limit, (I32,), (R,))
    if past_len is not None:
        _meta(fn, "past_len", past_len, (I32,), (R,))
    _same_device(fn, ("draft.lp", lp),
                 (("draft.ids", ids), ("budget", budget),
                  ("root_token", root_token), ("depth_limit", depth_limit),
                  ("past_len", past_len)))
    return R, (n_max + 31) // 32


def _attn_meta(fn, q, kv_cache, block_table, past_len, n_nodes, anc_mask):
    R, N, H, _ = _meta(fn, "q", q, (BF16,), (None, None, None, KV_DIM))
    _meta(fn, "kv_cache", kv_cache, (BF16,), (None, None, KV_DIM))
    _meta(fn, "block_table", block_table, (I32,), (R, None))
    _meta(fn, "past_len", past_len, (I32,), (R,))
    _meta(fn, "tree.n_nodes", n_nodes, (I32,), (R,))
    _meta(fn, "tree.anc_mask", anc_mask, (I32, U32), (R, N, (N + 31) // 32))
    _same_device(fn, ("q", q),
                 (("kv_cache", kv_cache), ("block_table", block_table),
                  ("past_len", past_len), ("tree.n_nodes", n_nodes),
                  ("tree.anc_mask", anc_mask)))
    return R, N, H


def _accept_meta(fn, n_nodes, token, first_child, next_sibling, target,
                 max_accept):
    R, N = _meta(fn, "tree.token", token, (I32,), (None, None))
    _meta(fn, "tree.first_child", first_child, (I32,), (R, N))
    _meta(fn, "tree.next_sibling", next_sibling, (I32,), (R, N))
    _meta(fn, "tree.n_nodes", n_nodes, (I32,), (R,))
    _meta(fn, "target", target, (I32,), (R, N))
    if max_accept is not None:
        _meta(fn, "max_accept", max_accept, (I32,), (R,))
    _same_device(fn, ("tree.token", token),
                 (("tree.first_child", first_child),
                  ("tree.next_sibling", next_sibling),
                  ("tree.n_nodes", n_nodes), ("target", target),
                  ("max_accept", max_accept)))
    return R


# ---- §1 draft_topk -------------------------------------------------------

@torch.library.custom_op("kdtree::draft_topk", mutates_args=())
def draft_topk(logits: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    rt = _rt_for("draft_topk", "logits", logits, (F32, BF16))
    return tuple(rt.draft_topk(logits, k))


@draft_topk.register_fake
def _(logits, k):
    s = _draft_meta("draft_topk", logits, k)
    return (logits.new_empty(s, dtype=torch.float32),
            logits.new_empty(s, dtype=torch.int32))


@torch.library.custom_op("kdtree::draft_topk_out", mutates_args=("lp", "ids"))
def draft_topk_out(logits: Tensor, k: int, lp: Tensor, ids: Tensor) -> None:
    rt = _rt_for("draft_topk", "logits", logits, (F32, BF16))
    rt.draft_topk(logits, k, out=(lp, ids))


@draft_topk_out.register_fake
def _(logits, k, lp, ids):
    s = _draft_meta("draft_topk", logits, k)
    _meta("draft_topk", "out.lp", lp, (F32,), s)
    _meta("draft_topk", "out.ids", ids, (I32,), s)


# ---- §2 build_ddtree -----------------------------------------------------

_TREE_OUT = ("n_nodes", "token", "parent", "depth", "position",
             "first_child", "next_sibling", "score", "anc_mask")


@torch.library.custom_op("kdtree::build_ddtree", mutates_args=())
def build_ddtree(lp: Tensor, ids: Tensor, budget: Tensor, root_token: Tensor,
                 n_max: int, depth_limit: Optional[Tensor] = None,
                 past_len: Optional[Tensor] = None
                 ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                            Tensor, Tensor, Tensor]:
    rt = _rt_for("build_ddtree", "draft.lp", lp, (F32,))
    return tuple(rt.build_ddtree(_Draft(lp, ids), budget, root_token, n_max,
                                 depth_limit, past_len, want_score=True))


def _tree_outputs(lp, R, n_max, W):
    i32 = torch.int32
    rows = (R, n_max)
    return (lp.new_empty((R,), dtype=i32),) + tuple(
        lp.new_empty(rows, dtype=i32) for _ in range(6)) + (
        lp.new_empty(rows, dtype=torch.float32),
        lp.new_empty((R, n_max, W), dtype=i32))


@build_ddtree.register_fake
def _(lp, ids, budget, root_token, n_max, depth_limit=None, past_len=None):
    R, W = _tree_meta("build_ddtree", lp, ids, budget, root_token, n_max,
                      depth_limit, past_len)
    return _tree_outputs(lp, R, n_max, W)


@torch.library.custom_op("kdtree::build_ddtree_out", mutates_args=_TREE_OUT)
def build_ddtree_out(lp: Tensor, ids: Tensor, budget: Tensor,
                     root_token: Tensor, n_max: int,
                     depth_limit: Optional[Tensor],
                     past_len: Optional[Tensor], n_nodes: Tensor,
                     token: Tensor, parent: Tensor, depth: Tensor,
                     position: Tensor, first_child: Tensor,
                     next_sibling: Tensor, score: Tensor,
                     anc_mask: Tensor) -> None:
    rt = _rt_for("build_ddtree", "draft.lp", lp, (F32,))
    rt.build_ddtree(_Draft(lp, ids), budget, root_token, n_max, depth_limit,
                    past_len, out=(n_nodes, token, parent, depth, position,
                                   first_child, next_sibling, score,
                                   anc_mask))


@build_ddtree_out.register_fake
def _(lp, ids, budget, root_token, n_max, depth_limit, past_len, *out):
    fn = "build_ddtree"
    R, W = _tree_meta(fn, lp, ids, budget, root_token, n_max, depth_limit,
                      past_len)
    for name, x, dt, s in zip(
            _TREE_OUT, out, (I32,) * 7 + (F32, I32),
            ((R,),) + ((R, n_max),) * 7 + ((R, n_max, W),)):
        _meta(fn, "out." + name, x, (I32, U32) if name == "anc_mask"
              else (dt,), s)


# ---- §3 verify_attn ------------------------------------------------------

@torch.library.custom_op("kdtree::verify_attn", mutates_args=())
def verify_attn(q: Tensor, kv_cache: Tensor, block_table: Tensor,
                past_len: Tensor, n_nodes: Tensor, anc_mask: Tensor,
                scale: float) -> Tuple[Tensor, Tensor]:
    rt = _rt_for("verify_attn", "q", q, (BF16,))
    return tuple(rt.verify_attn(q, kv_cache, block_table, past_len,
                                _Tree(n_nodes, anc_mask=anc_mask), scale))


@verify_attn.register_fake
def _(q, kv_cache, block_table, past_len, n_nodes, anc_mask, scale):
    R, N, H = _attn_meta("verify_attn", q, kv_cache, block_table, past_len,
                         n_nodes, anc_mask)
    return (q.new_empty((R, N, H, V_DIM), dtype=torch.bfloat16),
            q.new_empty((R, N, H), dtype=torch.float32))


@torch.library.custom_op("kdtree::verify_attn_out", mutates_args=("o", "lse"))
def verify_attn_out(q: Tensor, kv_cache: Tensor, block_table: Tensor,
                    past_len: Tensor, n_nodes: Tensor, anc_mask: Tensor,
                    scale: float, o: Tensor, lse: Tensor) -> None:
    rt = _rt_for("verify_attn", "q", q, (BF16,))
    rt.verify_attn(q, kv_cache, block_table, past_len,
                   _Tree(n_nodes, anc_mask=anc_mask), scale, out=(o, lse))


@verify_attn_out.register_fake
def _(q, kv_cache, block_table, past_len, n_nodes, anc_mask, scale, o, lse):
    fn = "verify_attn"
    R, N, H = _attn_meta(fn, q, kv_cache, block_table, past_len, n_nodes,
                         anc_mask)
    _meta(fn, "out.o", o, (BF16,), (R, N, H, V_DIM))
    _meta(fn, "out.lse", lse, (F32,), (R, N, H))


# ---- §4 tree_accept ------------------------------------------------------

@torch.library.custom_op("kdtree::tree_accept", mutates_args=())
def tree_accept(n_nodes: Tensor, token: Tensor, first_child: Tensor,
                next_sibling: Tensor, target: Tensor, L: int,
                max_accept: Optional[Tensor] = None
                ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    rt = _rt_for("tree_accept", "tree.token", token, (I32,))
    return tuple(rt.tree_accept(_Tree(n_nodes, token, first_child,
                                      next_sibling), target, L, max_accept))


@tree_accept.register_fake
def _(n_nodes, token, first_child, next_sibling, target, L, max_accept=None):
    R = _accept_meta("tree_accept", n_nodes, token, first_child,
                     next_sibling, target, max_accept)
    i32 = torch.int32
    return (token.new_empty((R,), dtype=i32),
            token.new_empty((R, L + 1), dtype=i32),
            token.new_empty((R, L + 1), dtype=i32),
            token.new_empty((R,), dtype=i32))


@torch.library.custom_op("kdtree::tree_accept_out",
                         mutates_args=("accept_len", "accept_idx",
                                       "accept_token", "bonus"))
def tree_accept_out(n_nodes: Tensor, token: Tensor, first_child: Tensor,
                    next_sibling: Tensor, target: Tensor, L: int,
                    max_accept: Optional[Tensor], accept_len: Tensor,
                    accept_idx: Tensor, accept_token: Tensor,
                    bonus: Tensor) -> None:
    rt = _rt_for("tree_accept", "tree.token", token, (I32,))
    rt.tree_accept(_Tree(n_nodes, token, first_child, next_sibling), target,
                   L, max_accept,
                   out=(accept_len, accept_idx, accept_token, bonus))


@tree_accept_out.register_fake
def _(n_nodes, token, first_child, next_sibling, target, L, max_accept,
      accept_len, accept_idx, accept_token, bonus):
    fn = "tree_accept"
    R = _accept_meta(fn, n_nodes, token, first_child, next_sibling, target,
                     max_accept)
    for name, x, s in (("accept_len", accept_len, (R,)),
                       ("accept_idx", accept_idx, (R, L + 1)),
                       ("accept_token", accept_token, (R, L + 1)),
                       ("bonus", bonus, (R,))):
        _meta(fn, "out." + name, x, (I32,), s)
