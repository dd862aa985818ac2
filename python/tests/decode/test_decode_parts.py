"""The decoder's parts on their own, on a CPU: the KV move after
acceptance, the absorbed-MLA layer against the model's attention, each
torch step against the references of docs/contract.md, the library
backend's calls against the Runtime's signatures, and rounds that never
read a value back to the host."""
import inspect
import math
import random

import pytest

import _tiny
from _tiny import torch

import kdtree_jit
from kdtree_jit import reference as ref
from kdtree_jit.decode import DraftInput, Decoder, PagedKVCache, install
from kdtree_jit.decode.mla import AbsorbedMLA
from kdtree_jit.decode.torch_backend import TorchBackend
from kdtree_jit.decode.drafters import ScriptedDrafter


# ---- the KV move ------------------------------------------------------------

def _numbered_cache(layers, R, capacity, page):
    """A cache whose row at (layer, request, position) holds that triple,
    so where a row went is read off its value."""
    c = PagedKVCache(layers, R, capacity, page, torch.float32, "cpu")
    pos = torch.arange(c.capacity)
    slots = c.slots(pos.expand(R, -1))
    for layer in range(layers):
        v = (layer * 1e6 + torch.arange(R).unsqueeze(1) * 1e4 +
             pos).unsqueeze(-1).expand(R, c.capacity, 576)
        c.write(layer, slots, v)
    return c


def _logical(c, layer):
    return c.gather(layer)[..., 0]


def _move_case(page, past, idx, lens, n_max):
    """accept_idx idx (-1 past each path of lens[r] rows), clamped at 0 as
    the decoder gives it: rows j < lens[r] come from idx[r][j], the rest
    of the M = min(A, n_max) rows from row 0, nothing else moves."""
    R, A = len(idx), len(idx[0])
    M = min(A, n_max)
    c = _numbered_cache(3, R, max(past) + n_max + A + 1, page)
    before = [_logical(c, layer).clone() for layer in range(3)]
    past_t = torch.tensor(past, dtype=torch.int32)
    src = torch.tensor(idx)[:, :M].clamp(min=0)
    with _tiny.NoSync():
        c.move_accepted(c.row_slots(past_t, n_max), src)
    for layer in range(3):
        want = before[layer].clone()
        for r in range(R):
            for j in range(M):
                s = idx[r][j] if j < lens[r] else 0
                want[r, past[r] + j] = before[layer][r, past[r] + s]
        got = _logical(c, layer)
        assert torch.equal(got, want), (page, past, idx, lens, layer)


def test_kv_move_destination_is_a_source():
    # accept_idx [0, 2, 3]: row 2 to slot 1, row 3 to slot 2; slot 2 is
    # read and written.  Pages of 1 and 64, and pages a move straddles.
    for page in (1, 64, 4):
        _move_case(page, [5, 62], [[0, 2, 3, -1], [0, 2, 3, -1]], [3, 3], 6)
        _move_case(page, [0, 3], [[0, 1, 4, 5], [0, 3, -1, -1]], [4, 2], 6)


def test_kv_move_random_paths():
    rng = random.Random(11)
    for page in (1, 16, 64):
        for _ in range(6):
            R, A, n_max = 3, 6, rng.choice([3, 8, 40])
            idx, lens, past = [], [], []
            for _ in range(R):
                n = rng.randint(1, min(A, n_max))
                rows = sorted(rng.sample(range(1, n_max), n - 1))
                idx.append([0] + rows + [-1] * (A - n))
                lens.append(n)
                past.append(rng.randint(0, 130))
            _move_case(page, past, idx, lens, n_max)


def _e4m3(x):
    """x (a float) rounded to e4m3 as the contract says: to nearest even
    on e4m3's grid (3 mantissa bits, exponents down to -6, subnormals in
    steps of 2^-9), saturated to +-448."""
    a = abs(x)
    if a >= 448.0:
        return math.copysign(448.0, x)
    if a == 0.0:
        return 0.0
    q = 2.0 ** (max(math.floor(math.log2(a)), -6) - 3)
    return math.copysign(round(a / q) * q, x)


def test_kv_e4m3_cache_holds_scaled_e4m3_and_moves_its_bytes():
    """An FP8 cache holds e4m3(x / scale) (rounded to nearest even,
    saturated to +-448) and gives back scale times that; the move copies
    the rows' bytes, so a moved row is the same row bit for bit."""
    g = torch.Generator().manual_seed(5)
    for scale, page in ((1.0, 1), (0.25, 64), (3.0, 16)):
        c = PagedKVCache(2, 2, 200, page, torch.float8_e4m3fn, "cpu",
                         scale=scale)
        x = torch.randn((2, 150, 576), generator=g) * 40
        x[0, 0, :3] = torch.tensor([1e6, -1e6, 448.0 * scale])
        slots = c.slots(torch.arange(150).expand(2, -1))
        c.write(1, slots, x)
        xs = (x[:, :, :24] / scale).tolist()  # the division in f32
        want = torch.tensor([[[_e4m3(v) * scale for v in row]
                              for row in req] for req in xs])
        got = c.gather(1)[:, :150, :24]
        assert got.dtype == torch.float32
        assert torch.equal(got, want), (scale, page)
        assert got[0, 0, :3].tolist() == [448.0 * scale, -448.0 * scale,
                                          448.0 * scale]
        before = c.data.view(torch.uint8).clone()
        past = torch.tensor([10, 100], dtype=torch.int32)
        src = torch.tensor([[0, 2, 3], [0, 1, 4]])
        c.move_accepted(c.row_slots(past, 5), src)
        raw = c.data.view(torch.uint8)[1][c._pages].view(2, c.capacity, 576)
        old = before[1][c._pages].view(2, c.capacity, 576)
        for r in range(2):
            for j in range(3):
                p0 = int(past[r])
                assert torch.equal(raw[r, p0 + j], old[r, p0 + src[r, j]])
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale must be finite"):
            PagedKVCache(1, 1, 8, 1, torch.float8_e4m3fn, "cpu", scale=bad)
    with pytest.raises(ValueError, match="scale must be finite"):
        PagedKVCache(1, 1, 8, 1, torch.float32, "cpu", scale=2.0)


def test_kv_move_is_a_few_device_operations():
    """The move is the same few operations whatever the layers and the
    page size (docs/decoder.md argues torch operations over a kernel from
    this): the slots are the forward's, every layer moves at once: a
    gather of the sources' slots, the read of every source, the write of
    every destination.  Finding a round's slots is two."""
    counts = set()
    for layers, page in ((1, 1), (4, 64), (8, 16)):
        c = PagedKVCache(layers, 8, 700, page, torch.bfloat16, "cpu")
        past = torch.full((8,), 600, dtype=torch.int32)
        c.row_slots(past, 65)  # its row numbers, made once
        with _tiny.NoSync() as n:
            slots = c.row_slots(past, 65)
        counts.add(("slots", n.kernels))
        src = torch.tensor([[0, 2, 3] + [0] * 13] * 8)
        with _tiny.NoSync() as n:
            c.move_accepted(slots, src)
        counts.add(("move", n.kernels))
    assert counts == {("slots", 2), ("move", 3)}, counts


def test_kv_write_and_slots_follow_the_block_table():
    c = PagedKVCache(2, 2, 10, 4, torch.float32, "cpu")
    assert c.capacity == 12 and c.block_table.shape == (2, 3)
    # Shuffled pages: the table is a permutation, not the identity.
    assert sorted(c.block_table.reshape(-1).tolist()) == list(range(6))
    assert c.block_table.reshape(-1).tolist() != list(range(6))
    pos = torch.tensor([[0, 5, 11], [3, 4, 8]])
    s = c.slots(pos)
    bt = c.block_table.tolist()
    for r in range(2):
        for k in range(3):
            p = int(pos[r, k])
            assert int(s[r, k]) == bt[r][p // 4] * 4 + p % 4
    with pytest.raises(ValueError, match="page_size"):
        PagedKVCache(1, 1, 8, 0, torch.float32, "cpu")


# ---- the MLA layer ----------------------------------------------------------

def test_install_keeps_the_weights_and_the_model():
    m = _tiny.model("yarn")
    ids = torch.tensor([[5, 9, 200, 3, 17]])
    with torch.no_grad():
        before = m(ids).logits
    params = {k: (v.data_ptr(), v.clone()) for k, v in m.state_dict().items()}
    layers = install(m)
    attn = [layer.self_attn for layer in layers]
    assert all(isinstance(a, AbsorbedMLA) for a in attn)
    assert [layer.self_attn for layer in install(m)] == attn  # once
    after_sd = m.state_dict()
    assert list(after_sd) == list(params)
    for k, v in after_sd.items():
        assert v.data_ptr() == params[k][0] and torch.equal(v, params[k][1]), k
    with torch.no_grad():
        assert torch.equal(m(ids).logits, before)  # generate() unchanged


def test_absorbed_attention_is_the_models():
    for name in ("yarn", "plain", "deep"):
        m = _tiny.model(name, seed=5)
        ids = torch.tensor([_tiny.prompts(256, [23], seed=6)[0]])
        with torch.no_grad():
            want = m(ids).logits[0]
        dec = Decoder(m, None, budget=0, prefill_chunk=8, page_size=4)
        b = dec.start([ids[0].tolist()], 1)
        # The prefill's last row is the model's last logits...
        got_last = m.lm_head(b.hidden[0, 0])
        assert torch.allclose(got_last, want[-1], atol=2e-5, rtol=1e-4)
        # ...and every row of a prefill forward matches.
        N = ids.shape[1]
        tree = kdtree_jit.Tree(torch.tensor([N], dtype=torch.int32), None,
                               None, None, None, None, None, None,
                               _chain(N))
        c = PagedKVCache(len(dec.layers), 1, N + 8, 4, torch.float32, "cpu")
        with torch.no_grad():
            h = dec.forward_rows(ids.int(), torch.arange(N).view(1, N), tree,
                                 torch.zeros(1, dtype=torch.int32), c)
            got = m.lm_head(h)[0]
        err = (got - want).abs().max().item()
        assert err < 2e-5 * max(1.0, want.abs().max().item()), (name, err)


def _chain(n):
    from kdtree_jit.decode.decoder import _chain_mask
    return _chain_mask(n, "cpu").unsqueeze(0)


def test_softmax_scale_has_yarn_mscale():
    m = _tiny.model("yarn")
    a = install(m)[0].self_attn
    import math
    want = 192 ** -0.5 * (0.1 * math.log(32.0) + 1) ** 2  # contract §3
    assert abs(a.scaling - want) < 1e-12
    p = _tiny.model("plain")
    assert abs(install(p)[0].self_attn.scaling - 192 ** -0.5) < 1e-12


def test_mla_refuses_other_dims():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = _tiny.config("yarn")
    cfg.kv_lora_rank = 256
    torch.manual_seed(0)
    m = DeepseekV3ForCausalLM(cfg)
    with pytest.raises(ValueError, match="kv_lora_rank 256"):
        install(m)
    with pytest.raises(TypeError, match="no .layers"):
        install(torch.nn.Linear(2, 2))
    assert DeepseekV3Config  # the import is the point


# ---- the torch steps against the references ---------------------------------

def _random_draft(R, L, K, V, g):
    logits = torch.randn((R, L, V), generator=g) * 2
    return logits


def test_torch_steps_match_the_references():
    g = torch.Generator().manual_seed(12)
    be = TorchBackend()
    R, L, K, V, N = 3, 5, 4, 40, 20
    for _ in range(5):
        logits = _random_draft(R, L, K, V, g)
        d = kdtree_jit.Draft(torch.empty(R, L, K),
                             torch.empty(R, L, K, dtype=torch.int32))
        be.draft_topk(logits, K, d)
        for r in range(R):
            for i in range(L):
                lp, ids = ref.draft_topk_row(logits[r, i].tolist(), K)
                assert d.ids[r, i].tolist() == ids
                assert torch.allclose(d.lp[r, i], torch.tensor(lp), atol=1e-5)
        budget = torch.tensor([N - 1, 3, 0], dtype=torch.int32)
        root = torch.tensor([7, 8, 9], dtype=torch.int32)
        past = torch.tensor([0, 11, 4], dtype=torch.int32)
        t = _empty_tree(R, N)
        be.build_ddtree(d, budget, root, past, N, t)
        for r in range(R):
            want = ref.build_ddtree_one(d.lp[r].tolist(), d.ids[r].tolist(),
                                        int(budget[r]), int(root[r]), N, None,
                                        int(past[r]))
            assert int(t.n_nodes[r]) == want["n_nodes"]
            for f in ("token", "parent", "depth", "position", "first_child",
                      "next_sibling"):
                assert getattr(t, f)[r].tolist() == want[f], f
            words = [[w & 0xFFFFFFFF for w in row]
                     for row in t.anc_mask[r].tolist()]
            assert words == want["anc_mask"]
        # The walk, with targets that follow a random child most of the time.
        target = torch.randint(0, V, (R, N), generator=g, dtype=torch.int32)
        for r in range(R):
            for i in range(int(t.n_nodes[r])):
                kids = [j for j in range(N) if int(t.parent[r, j]) == i]
                if kids and torch.rand(1, generator=g) < 0.8:
                    k = kids[int(torch.randint(len(kids), (1,), generator=g))]
                    target[r, i] = t.token[r, k]
        acc = _empty_accept(R, L)
        with _tiny.NoSync():
            be.tree_accept(t, target, L, acc)
        for r in range(R):
            n, idx, tok, bonus = ref.tree_accept_one(
                t.token[r].tolist(), t.first_child[r].tolist(),
                t.next_sibling[r].tolist(), int(t.n_nodes[r]),
                target[r].tolist(), L)
            assert (int(acc.accept_len[r]), acc.accept_idx[r].tolist(),
                    acc.accept_token[r].tolist(), int(acc.bonus[r])) == \
                (n, idx, tok, bonus)


def _empty_tree(R, N):
    i32 = dict(dtype=torch.int32)
    return kdtree_jit.Tree(torch.empty(R, **i32), *[
        torch.empty(R, N, **i32) for _ in range(6)],
        torch.empty(R, N), torch.empty(R, N, (N + 31) // 32, **i32))


def _empty_accept(R, L):
    i32 = dict(dtype=torch.int32)
    return kdtree_jit.Accept(torch.empty(R, **i32),
                             torch.empty(R, L + 1, **i32),
                             torch.empty(R, L + 1, **i32),
                             torch.empty(R, **i32))


def test_torch_attention_is_the_contracts():
    """verify_attn's definition (§3), row by row in float64, against the
    backend's SDPA over the paged cache."""
    g = torch.Generator().manual_seed(13)
    R, N, H, page = 2, 9, 3, 4
    past = [6, 13]
    c = PagedKVCache(1, R, 40, page, torch.float64, "cpu")
    c.data.copy_(torch.randn(c.data.shape, generator=g, dtype=torch.float64))
    lp = torch.log_softmax(torch.randn(R, 3, 3, generator=g), -1)
    ids = torch.randint(0, 50, (R, 3, 3), generator=g, dtype=torch.int32)
    t = _empty_tree(R, N)
    TorchBackend().build_ddtree(kdtree_jit.Draft(lp, ids),
                                torch.tensor([N - 1, 5], dtype=torch.int32),
                                torch.tensor([1, 2], dtype=torch.int32),
                                torch.tensor(past, dtype=torch.int32), N, t)
    q = torch.randn((R, N, H, 576), generator=g, dtype=torch.float64)
    pl = torch.tensor(past, dtype=torch.int32)
    be = TorchBackend()
    o = be.attention(q, c, 0, pl, t, 0.07, be.attention_meta(t, pl, c))
    kv = c.gather(0)
    for r in range(R):
        for i in range(int(t.n_nodes[r])):
            anc, j = [], i
            while j >= 0:
                anc.append(j)
                j = int(t.parent[r, j])
            cols = list(range(past[r])) + [past[r] + a for a in anc]
            k = kv[r, cols]
            p = torch.softmax(0.07 * q[r, i] @ k.T, -1)
            assert torch.allclose(o[r, i], p @ k[:, :512], atol=1e-10)


# ---- the library backend's calls, and rounds without a host sync ------------

class _CheckedRuntime(object):
    """Stands in for kdtree_jit.Runtime on a CPU: binds every call to the
    real method's signature (a renamed or missing parameter fails here),
    checks the arrays as the contract lays them out, and computes with
    the torch steps."""

    device = 0

    def __init__(self):
        self.calls = []
        self.t = TorchBackend()
        # verify_attn's workspace sizes asked (kv_dtype, math) and its
        # arithmetics
        self.ws_asked, self.maths = [], []

    def _bind(self, name, *a, **k):
        inspect.signature(getattr(kdtree_jit.Runtime, name)).bind(
            self, *a, **k)
        self.calls.append(name)

    def prepare(self, kernel, shape=None, **constants):
        self._bind("prepare", kernel, shape, **constants)

    def draft_topk(self, logits, k, out=None, stream=None):
        self._bind("draft_topk", logits, k, out=out)
        assert isinstance(out, kdtree_jit.Draft) and out.lp.dtype == \
            torch.float32 and out.ids.dtype == torch.int32
        self.t.draft_topk(logits, k, out)
        return out

    def build_ddtree(self, draft, budget, root_token, n_max, depth_limit=None,
                     past_len=None, want_score=False, out=None, stream=None):
        self._bind("build_ddtree", draft, budget, root_token, n_max,
                   past_len=past_len, out=out)
        for x in (budget, root_token, past_len):
            assert x.dtype == torch.int32 and x.shape == (draft.lp.shape[0],)
        self.t.build_ddtree(draft, budget, root_token, past_len, n_max, out)
        return out

    def verify_attn_workspace_size(self, n_requests, n_heads, n_max,
                                   page_size, max_pages, kv_dtype=0, math=0):
        self._bind("verify_attn_workspace_size", n_requests, n_heads, n_max,
                   page_size, max_pages, kv_dtype=kv_dtype, math=math)
        self.ws_asked.append((kv_dtype, math))
        return 64

    def verify_attn(self, q, kv_cache, block_table, past_len, tree, scale,
                    want_lse=True, workspace=None, out=None, stream=None,
                    kv_scale=1.0, math="bf16"):
        self._bind("verify_attn", q, kv_cache, block_table, past_len, tree,
                   scale, want_lse=want_lse, workspace=workspace, out=out,
                   kv_scale=kv_scale, math=math)
        R, N, H, D = q.shape
        assert q.dtype == torch.bfloat16 and D == 576
        assert kv_cache.dtype == torch.bfloat16 and kv_scale == 1.0 and \
            math == "bf16" or kv_cache.dtype == torch.float8_e4m3fn and \
            kv_scale > 0 and math in ("bf16", "e4m3")
        self.maths.append(math)
        assert q.is_contiguous() and kv_cache.is_contiguous()
        assert kv_cache.dim() == 3 and kv_cache.shape[2] == 576
        assert out.o.shape == (R, N, H, 512) and workspace.numel() == 64
        assert tree.anc_mask.shape == (R, N, (N + 31) // 32)
        c = _Pages(kv_cache, block_table, kv_scale)
        out.o.copy_(self.t.attention(q, c, 0, past_len, tree, scale,
                                     self.t.attention_meta(tree, past_len,
                                                           c)))
        return out

    def tree_accept(self, tree, target, L, max_accept=None, out=None,
                    stream=None):
        self._bind("tree_accept", tree, target, L, out=out)
        assert target.dtype == torch.int32
        self.t.tree_accept(tree, target, L, out)
        return out


class _Pages(object):
    """One layer's pages as decode.kv.PagedKVCache shows them."""

    def __init__(self, data, block_table, scale=1.0):
        self.data, self.block_table, self.scale = data, block_table, scale
        self.page = data.shape[1]
        self.R, self.max_pages = block_table.shape
        self.capacity = self.max_pages * self.page

    def gather(self, layer):
        rows = self.data[self.block_table.long()].view(self.R, self.capacity,
                                                       576)
        if rows.dtype != torch.float8_e4m3fn:
            return rows
        return rows.float() * self.scale


def _library_on_cpu(rt, math="bf16"):
    from kdtree_jit.decode._library import LibraryBackend
    be = LibraryBackend.__new__(LibraryBackend)
    be.rt, be.device, be._attn = rt, torch.device("cpu"), {}
    be.math = math
    return be


class _Bf16Torch(TorchBackend):
    """The torch steps over a bf16 cache with bf16 queries: what the
    kernels are given."""

    def kv_dtype(self, model_dtype):
        return torch.bfloat16

    def attention(self, q, cache, layer, past_len, tree, scale, meta):
        return TorchBackend.attention(self, q.to(torch.bfloat16), cache,
                                      layer, past_len, tree, scale, meta)


def test_library_backend_calls_the_runtime_as_it_is():
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [9, 4], seed=14)
    refs = [_tiny.greedy(m, p, 24) for p in ps]
    rt = _CheckedRuntime()
    outs = []
    for be in (_library_on_cpu(rt), _Bf16Torch()):
        dr = ScriptedDrafter(_tiny.script(ps, refs), 15, 256, 0.7, 0.2)
        dec = Decoder(m, dr, backend=be, budget=16, eos_token_id=None,
                      prefill_chunk=16)
        outs.append(dec.generate(ps, 24))
    assert outs[0] == outs[1]
    assert set(rt.ws_asked) == {(0, 0)} and set(rt.maths) == {"bf16"}
    # an e4m3 cache: the pages as they are, and its scale; the workspace
    # asked for that cache (and, in FP8 arithmetic, for it)
    for math, code in (("bf16", 0), ("e4m3", 1)):
        outs, rt.ws_asked, rt.maths = [], [], []
        for be in (_library_on_cpu(rt, math), _Bf16Torch()):
            dr = ScriptedDrafter(_tiny.script(ps, refs), 15, 256, 0.7, 0.2)
            dec = Decoder(m, dr, backend=be, budget=16, eos_token_id=None,
                          prefill_chunk=16, kv_cache_dtype="e4m3",
                          kv_scale=0.5)
            outs.append(dec.generate(ps, 24))
        assert outs[0] == outs[1]
        assert set(rt.ws_asked) == {(1, code)} and set(rt.maths) == {math}
    with pytest.raises(ValueError, match="math='e4m3' reads an e4m3 cache"):
        Decoder(m, None, backend=_library_on_cpu(rt, "e4m3"), budget=0)
    assert set(rt.calls) == {"draft_topk", "build_ddtree", "verify_attn",
                             "verify_attn_workspace_size", "tree_accept"}


def test_a_round_never_syncs():
    """Every phase of a round, on the torch backend and through the
    library adapter, reads no value back: all but the build (the torch
    backend's is on the host; the stand-in runtime's is the torch one,
    where the kernel's reads nothing back either)."""
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [9, 4, 6], seed=15)
    refs = [_tiny.greedy(m, p, 8) for p in ps]
    for be in (TorchBackend(), _library_on_cpu(_CheckedRuntime())):
        for budget in (0, 16):
            dr = ScriptedDrafter(_tiny.script(ps, refs), 15, 256, 0.7, 0.2)
            dec = Decoder(m, dr if budget else None, backend=be,
                          budget=budget, eos_token_id=[3, 5])
            b = dec.start(ps, 8)
            with torch.no_grad():
                for _ in range(2):
                    for name, fn, host in dec._phases():
                        if name == "build" and budget:
                            fn(b)
                            continue
                        with _tiny.NoSync() as n:
                            fn(b)
                        # plain decoding drafts nothing
                        assert n.ops > 0 or (name, budget) == ("draft", 0)


class _CountedRuntime(_CheckedRuntime):
    """_CheckedRuntime whose kernels count as one launch each in the
    NoSync `counter`, if one is set (what the stand-in computes is not
    counted)."""

    counter = None

    def _kernel(self, name, *a, **k):
        run = getattr(_CheckedRuntime, name)
        if self.counter is None:
            return run(self, *a, **k)
        self.counter.kernels += 1
        with self.counter.paused():
            return run(self, *a, **k)


for _name in ("draft_topk", "build_ddtree", "verify_attn", "tree_accept"):
    setattr(_CountedRuntime, _name,
            lambda self, *a, _n=_name, **k: self._kernel(_n, *a, **k))


def test_round_glue_is_a_few_operations():
    """The device operations of each phase but the verify (the target's
    own forward), through the library adapter: the kernel and the few
    torch operations around it (docs/decoder.md, "What a round
    launches"); the drafter's are its own.  An operation added to a
    phase fails here."""
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [9, 4, 6], seed=16)
    refs = [_tiny.greedy(m, p, 12) for p in ps]
    rt = _CountedRuntime()
    dr = ScriptedDrafter(_tiny.script(ps, refs), 15, 256, 0.7, 0.2)

    def drafter(inp):
        if rt.counter is None:
            return dr(inp)
        with rt.counter.paused():
            return dr(inp)

    for eos, accept in ((None, 10), ([3, 5], 19)):
        dec = Decoder(m, drafter, backend=_library_on_cpu(rt), budget=16,
                      eos_token_id=eos)
        b = dec.start(ps, 12)
        got = {}
        with torch.no_grad():
            dec.step(b)
            for name, fn, _ in dec._phases():
                with _tiny.NoSync() as n:
                    rt.counter = n
                    fn(b)
                rt.counter = None
                got[name] = n.kernels
            with _tiny.NoSync() as n:
                dr(DraftInput(b.bonus, b.past_len, b.hidden, b.accept_len))
            got["drafter"] = n.kernels
        del got["verify"]
        # A kernel each, the glue around it; the bench's drafter
        # (decode/drafters.py) is six operations.
        assert got == {"draft": 1, "build": 1, "accept": 1 + accept,
                       "kv_move": 4, "drafter": 6}, (eos, got)


def test_decoder_refuses_bad_arguments():
    m = _tiny.model("yarn")
    dr = ScriptedDrafter(torch.zeros((1, 8), dtype=torch.long), 15, 256)
    for kw, match in ((dict(budget=1025), "budget must be in 0..1024"),
                      (dict(budget=4), "needs a drafter"),
                      (dict(budget=0, depth=0), "depth and topk"),
                      (dict(budget=0, prefill_chunk=0), "prefill_chunk"),
                      (dict(budget=0, temperature=-1.0), "temperature"),
                      (dict(budget=0, backend="cuda"), "backend must be"),
                      (dict(budget=0, graph=True), "CUDA graphs need"),
                      (dict(budget=0, kv_cache_dtype="fp8"),
                       "kv_cache_dtype must be"),
                      (dict(budget=0, kv_cache_dtype="e4m3", kv_scale=0.0),
                       "kv_scale: the cache's scale must be finite"),
                      (dict(budget=0, kv_scale=0.5),
                       "kv_scale: the cache's scale must be finite")):
        with pytest.raises(ValueError, match=match):
            Decoder(m, **kw)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="backend='torch'"):
            Decoder(m, dr, backend="library")
    from kdtree_jit.decode import LibraryBackend
    with pytest.raises(ValueError, match="math must be 'bf16' or 'e4m3'"):
        LibraryBackend(math="fp8")
    dec = Decoder(m, None, budget=0)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        dec.start([[1], []], 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.start([[1]], 0)
    with pytest.raises(ValueError, match="no prompts"):
        dec.start([], 4)

    def short(inp):
        return torch.zeros((inp.bonus.shape[0], 3, 256))

    with pytest.raises(ValueError, match=r"drafter returned logits of "
                                         r"shape \[1, 3, 256\]"):
        Decoder(m, short, budget=4).generate([[1, 2]], 4)
