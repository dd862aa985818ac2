"""The library backend: each step of a round is one of libkdtree's four
kernels, through kdtree_jit.Runtime's methods.  This module is the only
place the decoder calls the binding, so a change of the Runtime's
signatures is a change here alone.

Every output goes into a buffer the decoder owns (`out=`) and the
verify_attn workspace is allocated here once per shape, so the pointers a
CUDA graph captures stay valid for every replay; nothing is read back to
the host.  The kernels want bf16 queries and a bf16 or e4m3 cache
(docs/contract.md §3): the cache is allocated in bf16 (`kv_dtype`)
unless the decoder keeps an e4m3 one (read with its scale, in bf16
arithmetic), and a query of another dtype is converted on the way in.
"""
import torch


class LibraryBackend(object):
    """The four kernels on one CUDA device: `runtime` (a
    kdtree_jit.Runtime), or a new one on `device` (default: torch's
    current device).  math: verify_attn's arithmetic, "bf16" (any cache)
    or "e4m3" (FP8 tensor cores over an e4m3 cache, docs/contract.md
    §3)."""

    name = "library"
    host_build = False

    def __init__(self, runtime=None, device=None, math="bf16"):
        if math not in ("bf16", "e4m3"):
            raise ValueError("LibraryBackend: math must be 'bf16' or "
                             "'e4m3', got %r" % (math,))
        self.math = math
        if runtime is None:
            if not torch.cuda.is_available():
                raise RuntimeError("LibraryBackend: the library's kernels "
                                   "need a CUDA device and torch sees none; "
                                   "use the torch backend "
                                   "(backend='torch')")
            from .. import Runtime
            runtime = Runtime(device)
        self.rt = runtime
        self.device = torch.device("cuda", runtime.device)
        self._attn = {}

    def kv_dtype(self, model_dtype):
        return torch.bfloat16

    def prepare(self, V, K, L, n_max, H, page, dtype, kv="bf16"):
        """Loads every kernel of a round's shape, so that the first round
        can be captured (kdtree_prepare); kv: the cache's type, "bf16" or
        "e4m3"."""
        rt = self.rt
        rt.prepare("draft_topk", V=V, K=K,
                   DTYPE="bf16" if dtype == torch.bfloat16 else "f32")
        rt.prepare("build_ddtree", L=L, K=K, N_MAX=n_max)
        rt.prepare("verify_attn", H=H, PAGE=page, N_MAX=n_max, KV=kv)
        rt.prepare("tree_accept", N_MAX=n_max, L=L)

    def draft_topk(self, logits, k, out):
        self.rt.draft_topk(logits, k, out=out)

    def build_ddtree(self, draft, budget, root_token, past_len, n_max, out):
        self.rt.build_ddtree(draft, budget, root_token, n_max,
                             past_len=past_len, out=out)

    def attention_meta(self, tree, past_len, cache):
        return None

    def _attn_out(self, q, cache):
        """The output buffers and the workspace of one verify_attn shape,
        made once."""
        R, N, H, _ = q.shape
        key = (R, N, H, cache.page, cache.max_pages, cache.e4m3)
        a = self._attn.get(key)
        if a is None:
            from .. import Attn
            o = torch.empty((R, N, H, 512), dtype=torch.bfloat16,
                            device=q.device)
            # the split, so the workspace, depends on the cache's type and
            # the arithmetic
            n = self.rt.verify_attn_workspace_size(
                R, H, N, cache.page, cache.max_pages,
                kv_dtype=int(cache.e4m3), math=int(self.math == "e4m3"))
            ws = torch.empty((n,), dtype=torch.uint8, device=q.device) \
                if n else None
            a = self._attn[key] = (Attn(o, None), ws)
        return a

    def attention(self, q, cache, layer, past_len, tree, scale, meta):
        out, ws = self._attn_out(q, cache)
        q = q.to(torch.bfloat16).contiguous()
        self.rt.verify_attn(q, cache.layer(layer), cache.block_table,
                            past_len, tree, scale, want_lse=False,
                            workspace=ws, out=out, kv_scale=cache.scale,
                            math=self.math)
        return out.o

    def tree_accept(self, tree, target, L, out):
        self.rt.tree_accept(tree, target, L, out=out)
