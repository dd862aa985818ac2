"""Every step of a round in plain torch: the backend that runs on a CPU
(CI, the lossless tests) and the baseline the library's kernels are
measured against.  It is the way the DDTree reference implementation
verifies: torch top-k, the best-first build in Python on the host,
scaled_dot_product_attention with the tree's mask over the cache gathered
into logical order, and the walk.

Each step computes what the kernel of the same name computes
(docs/contract.md): draft_topk (§1), build_ddtree (§2: the tree is
kdtree_jit.reference's, bit for bit the kernel's on the same
log-probabilities), verify_attn (§3) and tree_accept (§4, on trees whose
siblings are in row order, as build_ddtree writes them).  Only the build
leaves the device: it copies the log-probabilities to the host, so a
round on this backend syncs once (`host_build`), and a CUDA graph of it
is two graphs around the build (decode.decoder).
"""
import torch
import torch.nn.functional as F

from .. import reference
from .kv import LATENT_DIM


def tree_visibility(anc_mask, n):
    """bool [R, N, n]: bit j of each mask row (docs/contract.md §2)."""
    R, N, W = anc_mask.shape
    bit = torch.arange(32, dtype=anc_mask.dtype, device=anc_mask.device)
    bits = (anc_mask.unsqueeze(-1) >> bit) & 1
    return bits.reshape(R, N, W * 32)[:, :, :n].bool()


def _i32(words):
    """uint32 mask words (Python ints) as the int32 the tensors hold."""
    return [[w - (1 << 32) if w >= 1 << 31 else w for w in row]
            for row in words]


class TorchBackend(object):
    """The steps in torch, on whatever device the tensors are."""

    name = "torch"
    host_build = True  # the build reads the draft on the host

    def kv_dtype(self, model_dtype):
        return model_dtype

    def prepare(self, **shape):
        pass

    def draft_topk(self, logits, k, out):
        """out.lp f32 / out.ids i32 [R, L, k]: the k most likely tokens of
        each row and their log-probabilities."""
        lp, ids = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
        out.lp.copy_(lp)
        out.ids.copy_(ids)

    def build_ddtree(self, draft, budget, root_token, past_len, n_max, out):
        """Fills the tree buffers `out` (a kdtree_jit.Tree) with the
        best-first trees of the batch, built on the host."""
        lp, ids = draft.lp.tolist(), draft.ids.tolist()
        b, rt, pl = budget.tolist(), root_token.tolist(), past_len.tolist()
        trees = [reference.build_ddtree_one(lp[r], ids[r], b[r], rt[r], n_max,
                                            None, pl[r])
                 for r in range(len(lp))]
        out.n_nodes.copy_(torch.tensor([t["n_nodes"] for t in trees],
                                       dtype=torch.int32))
        for f in ("token", "parent", "depth", "position", "first_child",
                  "next_sibling"):
            getattr(out, f).copy_(torch.tensor([t[f] for t in trees],
                                               dtype=torch.int32))
        if out.score is not None:
            out.score.copy_(torch.tensor([t["score"] for t in trees],
                                         dtype=torch.float32))
        out.anc_mask.copy_(torch.tensor([_i32(t["anc_mask"]) for t in trees],
                                        dtype=torch.int32))

    def attention_meta(self, tree, past_len, cache):
        """What every layer of one forward shares: the mask bool [R, N, T]
        over the cache's T = capacity logical positions, True where row i
        sees position t (the prefix [0, past_len) and past_len + j for
        each bit j of its mask row), and its copies per head count."""
        R, N, _ = tree.anc_mask.shape
        T = cache.capacity
        dev = tree.anc_mask.device
        pl = past_len.long()
        t = torch.arange(T, device=dev)
        mask = (t.unsqueeze(0) < pl.unsqueeze(1)).unsqueeze(1).expand(
            R, N, T).clone()
        cols = (pl.view(R, 1, 1) + torch.arange(N, device=dev)).clamp(
            max=T - 1).expand(R, N, N)
        mask.scatter_(2, cols, tree_visibility(tree.anc_mask, N))
        return {"mask": mask}

    def attention(self, q, cache, layer, past_len, tree, scale, meta):
        """o [R, N, H, 512]: absorbed-MLA attention of q [R, N, H, 576]
        over one layer of the cache.  The one latent head is shared by
        every query head (multi-query), so the N * H query rows are one
        SDPA head over K = the latent rows, V = their first 512 dims:
        no per-head copy of the cache."""
        R, N, H, D = q.shape
        mask = meta.get(H)
        if mask is None:
            m = meta["mask"]
            mask = meta[H] = m.unsqueeze(2).expand(R, N, H, m.shape[2]) \
                .reshape(R, 1, N * H, m.shape[2])
        kv = cache.gather(layer).unsqueeze(1)
        o = F.scaled_dot_product_attention(
            q.reshape(R, 1, N * H, D).to(kv.dtype), kv, kv[..., :LATENT_DIM],
            attn_mask=mask, scale=scale)
        return o.view(R, N, H, LATENT_DIM)

    def tree_accept(self, tree, target, L, out):
        """Fills `out` (a kdtree_jit.Accept) with the walk of §4: from the
        root, the first child (in row order, which is sibling order) whose
        token is the target's token at the current row."""
        token, parent = tree.token, tree.parent
        R, N = token.shape
        dev = token.device
        rows = torch.arange(N, device=dev)
        live_rows = rows.unsqueeze(0) < tree.n_nodes.unsqueeze(1)
        cur = torch.zeros(R, dtype=torch.long, device=dev)
        alive = torch.ones(R, dtype=torch.bool, device=dev)
        path = torch.full((R, L + 1), -1, dtype=torch.long, device=dev)
        path[:, 0] = 0
        tgt = target.long()
        for d in range(min(L, N - 1)):
            want = tgt.gather(1, cur.unsqueeze(1))
            match = (parent == cur.unsqueeze(1)) & (token == want) & live_rows
            nxt = torch.where(match, rows, N).min(dim=1).values
            alive = alive & (nxt < N)
            cur = torch.where(alive, nxt, cur)
            path[:, d + 1] = torch.where(alive, nxt, -1)
        n = (path >= 0).sum(dim=1)
        out.accept_len.copy_(n)
        out.accept_idx.copy_(path)
        out.accept_token.copy_(torch.where(
            path >= 0, token.gather(1, path.clamp(min=0)), -1))
        out.bonus.copy_(tgt.gather(1, cur.unsqueeze(1)).squeeze(1))
