"""A drop-in for DDTree's tree builder: drafter logits and a budget in,
node tokens, parents, depths and the visibility mask out, computed on the
GPU by draft_topk + build_ddtree with no host copy and no sync (so a round
that uses it can be captured in a CUDA graph).

    builder = TreeBuilder(rt, L=15, K=8, n_max=65, vocab=V)
    t = builder(logits, budget=64, root_token=bonus)   # logits [R, L, V]
    t.tokens, t.parents, t.depths       # int32 [R, n_max]
    t.visibility                        # bool [R, n_max, n_max]
    t.n_nodes                           # int32 [R]: rows in use

The pure-Python equivalent, for checking and for the path a torch user
has without the library, is kdtree_jit.reference.ddtree_from_logits().
"""

import collections

from . import _arrays
from ._runtime import Draft

DDTree = collections.namedtuple(
    "DDTree", "tokens parents depths visibility n_nodes positions tree")


class TreeBuilder(object):
    """Owns the intermediate buffers of one shape (R requests of L draft
    positions over a vocabulary of V, K candidates per position, n_max tree
    rows), so repeated calls allocate nothing but their outputs (or nothing
    with out=)."""

    def __init__(self, runtime, L, K, n_max, vocab, n_requests=1,
                 dtype="bf16"):
        torch = _arrays.torch_module()
        if torch is None:
            raise RuntimeError("TreeBuilder needs torch")
        self.rt = runtime
        self.L, self.K, self.n_max, self.vocab = L, K, n_max, vocab
        self.R = n_requests
        dev = torch.device("cuda", runtime.device)
        self._lp = torch.empty((self.R, L, K), dtype=torch.float32,
                               device=dev)
        self._ids = torch.empty((self.R, L, K), dtype=torch.int32, device=dev)
        self._draft = Draft(self._lp, self._ids)
        self._budget = torch.empty((self.R,), dtype=torch.int32, device=dev)
        self._root = torch.empty((self.R,), dtype=torch.int32, device=dev)
        W = (n_max + 31) // 32
        self._bit = torch.arange(32, dtype=torch.int32, device=dev)
        self._W = W
        runtime.prepare("draft_topk", V=vocab, K=K, DTYPE=dtype)
        runtime.prepare("build_ddtree", L=L, K=K, N_MAX=n_max)

    def _as_rows(self, v, name):
        """An int or an int32 tensor [R] as the device buffer."""
        torch = _arrays.torch_module()
        buf = self._budget if name == "budget" else self._root
        if isinstance(v, torch.Tensor):
            if v.shape != (self.R,) or v.dtype != torch.int32 or not v.is_cuda:
                raise ValueError("%s must be an int or an int32 CUDA tensor "
                                 "[%d]" % (name, self.R))
            return v
        buf.fill_(int(v))
        return buf

    def __call__(self, logits, budget, root_token, past_len=None,
                 depth_limit=None, stream=None):
        """logits [R, L, V] (bf16 or f32) -> DDTree.  visibility[r, i, j]
        is True when row j is row i or one of its ancestors (rows past
        n_nodes see only themselves)."""
        torch = _arrays.torch_module()
        R, L, K, N = self.R, self.L, self.K, self.n_max
        if tuple(logits.shape) != (R, L, self.vocab):
            raise ValueError("logits must have shape [%d, %d, %d], got %s"
                             % (R, L, self.vocab, list(logits.shape)))
        self.rt.draft_topk(logits, K, out=(self._lp, self._ids),
                           stream=stream)
        tree = self.rt.build_ddtree(
            self._draft, self._as_rows(budget, "budget"),
            self._as_rows(root_token, "root_token"), N,
            depth_limit=depth_limit, past_len=past_len, stream=stream)
        # Expand the mask words into booleans: bit j%32 of word j//32.
        bits = (tree.anc_mask.unsqueeze(-1) >> self._bit) & 1
        vis = bits.reshape(R, N, self._W * 32)[:, :, :N].bool()
        return DDTree(tree.token, tree.parent, tree.depth, vis, tree.n_nodes,
                      tree.position, tree)


def build_tree(runtime, logits, budget, root_token, K, n_max, past_len=None):
    """One-shot form of TreeBuilder (allocates its buffers each call)."""
    R, L, V = logits.shape
    dtype = "bf16" if str(logits.dtype).endswith("bfloat16") else "f32"
    return TreeBuilder(runtime, L, K, n_max, V, R, dtype)(
        logits, budget, root_token, past_len=past_len)
