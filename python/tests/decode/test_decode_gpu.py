"""The decoder on a GPU with the library's kernels (skipped without a CUDA
device or libkdtree).

Lossless in bf16: the model's greedy output can differ from ours only
where two tokens tie within bf16 rounding, since the absorbed form, the
tree's row count and the kernels' accumulation order all round
differently from generate().  So every request is decoded three ways
(generate(), our decoder at budget 0 = plain decoding through
verify_attn, our decoder at budgets 16, 64 and 256), every first
divergence is counted, and each is checked teacher-forced: on the
common prefix, the model's logits of the two tokens differ by at most a
few bf16 units in the last place.  The table is printed (-s).

Also: a round replayed from its CUDA graph equals the eager round, the
KV move inside a graph, and each kernel step against the torch step."""
import pytest

import _tiny
from _tiny import torch

import kdtree_jit
from kdtree_jit.decode import Decoder, PagedKVCache, TorchBackend
from kdtree_jit.decode.drafters import ScriptedDrafter

# Tokens whose logits differ by at most this many bf16 units in the last
# place (of the larger) count as a near-tie.
ULPS = 8


def _gpu(math="bf16"):
    """The library backend on device 0 (verify_attn's arithmetic `math`),
    or a skip (a failure under KDTREE_TEST_REQUIRE_GPU=1, as on the GPU
    host: docs/gpu-host.md)."""
    import os
    miss = pytest.fail if os.environ.get("KDTREE_TEST_REQUIRE_GPU") == "1" \
        else pytest.skip
    if not torch.cuda.is_available():
        miss("torch sees no CUDA device")
    try:
        from kdtree_jit.decode import LibraryBackend
        return LibraryBackend(math=math)
    except kdtree_jit.KdtreeError as e:
        miss("no libkdtree runtime: %s" % e)


def _bf16_ulp(x):
    """The spacing of bf16 numbers at |x| (8 significant bits)."""
    import math
    x = abs(x)
    if x == 0:
        return 2.0 ** -133
    return 2.0 ** (math.floor(math.log2(x)) - 7)


def _first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def _near_tie(m, prompt, common, ours, theirs):
    """(gap, tolerance) of the model's logits of two tokens after
    prompt + common, teacher-forced."""
    ids = torch.tensor([prompt + common], device=m.device)
    with torch.no_grad():
        lg = m(ids).logits[0, -1].float()
    la, lb = float(lg[ours]), float(lg[theirs])
    return abs(la - lb), ULPS * _bf16_ulp(max(abs(la), abs(lb)))


def test_lossless_gpu_bf16_library_kernels():
    lib = _gpu()
    dev = torch.device("cuda")
    m = _tiny.model("deep", seed=31, dtype=torch.bfloat16, device=dev,
                    hidden_size=1024, num_attention_heads=8, vocab=4096)
    ps = _tiny.prompts(4096, [5, 40, 130, 300, 17, 1, 77, 512], seed=32)
    n = 96
    hf = [_tiny.greedy(m, p, n) for p in ps]
    plain = Decoder(m, None, backend=lib, budget=0,
                    eos_token_id=None).generate(ps, n)
    rows, bad = [], []
    for budget in (16, 64, 256):
        dr = ScriptedDrafter(_tiny.script(ps, hf, device=dev), 15, 4096,
                             0.8, 0.1, dtype=torch.bfloat16)
        got = Decoder(m, dr, backend=lib, budget=budget,
                      eos_token_id=None).generate(ps, n)
        for r, p in enumerate(ps):
            for what, want in (("generate()", hf[r]), ("budget 0", plain[r])):
                k = _first_divergence(got[r], want)
                if k is None:
                    continue
                gap, tol = _near_tie(m, p, got[r][:k], got[r][k], want[k])
                rows.append((budget, r, what, k, got[r][k], want[k], gap, tol))
                if gap > tol:
                    bad.append(rows[-1])
    k = _first_divergence(plain[0], hf[0])
    print("\nbf16 divergences (budget, request, against, token, ours, "
          "theirs, |logit gap|, tolerance): %d" % len(rows))
    for row in rows:
        print("  B=%d r=%d vs %s at %d: %d / %d, gap %.3g <= %.3g" % row)
    print("budget 0 against generate(): %s"
          % ("same" if all(a == b for a, b in zip(plain, hf)) else
             "first divergence of request 0 at %s" % k))
    assert not bad, "divergences that are not near-ties: %s" % bad


def test_graph_replay_equals_eager_gpu():
    lib = _gpu()
    dev = torch.device("cuda")
    m = _tiny.model("yarn", dtype=torch.bfloat16, device=dev)
    ps = _tiny.prompts(256, [9, 30, 4], seed=33)
    hf = [_tiny.greedy(m, p, 48) for p in ps]
    outs = []
    for graph in (False, True):
        dr = ScriptedDrafter(_tiny.script(ps, hf, device=dev), 15, 256, 0.7,
                             0.2, dtype=torch.bfloat16)
        dec = Decoder(m, dr, backend=lib, budget=64, eos_token_id=None,
                      graph=graph)
        b = dec.start(ps, 48)
        while not b.finished():
            dec.step(b)
        assert (b.graphs is not None) == graph
        outs.append(b.tokens())
    assert outs[0] == outs[1]


def test_kv_move_in_a_graph_gpu():
    _gpu()
    for page in (1, 64):
        c = PagedKVCache(2, 2, 200, page, torch.bfloat16, "cuda")
        c.data.copy_(torch.randn(c.data.shape, device="cuda"))
        past = torch.tensor([7, 100], dtype=torch.int32, device="cuda")
        # Each destination row's source: tree_accept's accept_idx with
        # its -1 padding clamped to 0, as the decoder gives it (rows past
        # the path come from row 0).
        src = torch.zeros((2, 6), dtype=torch.int64, device="cuda")
        slots = c.row_slots(past, 9)
        c.move_accepted(slots, src)  # warm-up
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            c.move_accepted(slots, src)
        for path in ([0, 2, 3], [0, 1, 4, 8], [0]):
            full = path + [0] * (6 - len(path))
            want = [c.gather(layer).clone() for layer in range(2)]
            for r in range(2):
                for j, s in enumerate(full):
                    for layer in range(2):
                        want[layer][r, int(past[r]) + j] = \
                            c.gather(layer)[r, int(past[r]) + s]
            src.copy_(torch.tensor([full] * 2))
            g.replay()
            torch.cuda.synchronize()
            for layer in range(2):
                assert torch.equal(c.gather(layer), want[layer]), (page, path)


def test_kernel_steps_match_torch_steps_gpu():
    lib = _gpu()
    dev = torch.device("cuda")
    tb = TorchBackend()
    g = torch.Generator(device=dev).manual_seed(34)
    R, L, K, V, N, H = 3, 15, 8, 5000, 65, 8
    i32 = dict(dtype=torch.int32, device=dev)

    def draft():
        return kdtree_jit.Draft(torch.empty(R, L, K, device=dev),
                                torch.empty(R, L, K, **i32))

    def tree():
        return kdtree_jit.Tree(torch.empty(R, **i32), *[
            torch.empty(R, N, **i32) for _ in range(6)], None,
            torch.empty(R, N, 3, **i32))

    logits = torch.randn((R, L, V), generator=g, device=dev) * 3
    d_lib, d_t = draft(), draft()
    lib.draft_topk(logits, K, d_lib)
    tb.draft_topk(logits, K, d_t)
    assert torch.equal(d_lib.ids, d_t.ids)  # random f32: no ties
    # Contract §1: within 1e-4 + 1e-6 |lp| of a double reference; torch's
    # f32 log_softmax is another such result.
    assert torch.allclose(d_lib.lp, d_t.lp, atol=2e-4, rtol=1e-5)
    budget = torch.tensor([64, 20, 0], **i32)
    root = torch.tensor([1, 2, 3], **i32)
    past = torch.tensor([10, 300, 77], **i32)
    t_lib, t_t = tree(), tree()
    lib.build_ddtree(d_lib, budget, root, past, N, t_lib)
    tb.build_ddtree(d_lib, budget, root, past, N, t_t)  # the same lp
    for f in ("n_nodes", "token", "parent", "depth", "position",
              "first_child", "next_sibling", "anc_mask"):
        assert torch.equal(getattr(t_lib, f), getattr(t_t, f)), f
    c = PagedKVCache(1, R, 400, 64, torch.bfloat16, dev)
    c.data.copy_(torch.rand(c.data.shape, generator=g, device=dev) - 0.5)
    q = (torch.rand((R, N, H, 576), generator=g, device=dev) - 0.5).to(
        torch.bfloat16)
    o_lib = lib.attention(q, c, 0, past, t_lib, 0.06, None).float()
    o_t = tb.attention(q.float(), _F32(c), 0, past, t_t, 0.06,
                       tb.attention_meta(t_t, past, c)).float()
    n = t_t.n_nodes.tolist()
    for r in range(R):  # contract §3: 2^-8 (|o| + max|v|), twice
        err = (o_lib[r, :n[r]] - o_t[r, :n[r]]).abs()
        assert bool((err <= (o_t[r, :n[r]].abs() + 1) / 128).all()), r
    target = torch.randint(0, V, (R, N), generator=g, **i32)
    target[:, 0] = t_t.token[:, 1]  # something to accept
    acc = [kdtree_jit.Accept(torch.empty(R, **i32),
                             torch.empty(R, L + 1, **i32),
                             torch.empty(R, L + 1, **i32),
                             torch.empty(R, **i32)) for _ in range(2)]
    lib.tree_accept(t_lib, target, L, acc[0])
    tb.tree_accept(t_t, target, L, acc[1])
    for a, b in zip(acc[0], acc[1]):
        assert torch.equal(a, b)


class _F32(object):
    """A bf16 cache read as f32 (the torch step's reference precision)."""

    def __init__(self, c):
        self.c, self.capacity = c, c.capacity

    def gather(self, layer):
        return self.c.gather(layer).float()


@pytest.mark.parametrize("math", ["bf16", "e4m3"])
def test_lossless_gpu_e4m3_cache_library_kernels(math):
    """An FP8 (e4m3) cache through the library's kernels (verify_attn
    KV=e4m3 in either arithmetic, scales 1 and 0.05, pages of 64 and 1),
    on decode.targets' no-near-ties model in bf16: plain decoding is the
    successor chain, and tree decoding at budgets 16 and 64, eager and
    from its graph, gives those tokens."""
    lib = _gpu(math)
    from kdtree_jit.decode.targets import chain, successor_target
    dev = torch.device("cuda")
    m = _tiny.model("deep", seed=41, dtype=torch.bfloat16, device=dev)
    succ = successor_target(m, seed=42)
    ps = _tiny.prompts(256, [3, 30, 11, 64], seed=43)
    n = 48
    want = [chain(succ.cpu(), [int(succ[p[-1]])], n)[0].tolist() for p in ps]
    for scale, page in ((1.0, 64), (0.05, 1)):
        kw = dict(backend=lib, eos_token_id=None, kv_cache_dtype="e4m3",
                  kv_scale=scale, page_size=page)
        plain = Decoder(m, None, budget=0, **kw).generate(ps, n)
        assert plain == want, (scale, page)
        for budget in (16, 64):
            for graph in (False, True):
                dr = ScriptedDrafter(_tiny.script(ps, want, device=dev), 15,
                                     256, 0.9, 0.0, dtype=torch.bfloat16)
                dec = Decoder(m, dr, budget=budget, graph=graph, **kw)
                b = dec.start(ps, n)
                while not b.finished():
                    dec.step(b)
                assert b.cache.data.dtype == torch.float8_e4m3fn
                assert b.tokens() == want, (scale, page, budget, graph)
                assert b.rounds <= 12, (scale, page, budget, graph, b.rounds)
