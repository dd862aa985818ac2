"""The torch ops (kdtree_jit.torch).  Where torch is importable: the fake
implementations give every output's shape and dtype and check arguments
as the methods do (FakeTensorMode: fake CUDA tensors, no GPU needed), a
whole round traces into one graph of torch.ops.kdtree.* calls, and bad
tensors raise TypeError/ValueError naming the argument before anything
launches.  Where a GPU is too: torch.library.opcheck on every op,
torch.compile(fullgraph=True) of a round, and a round captured in a
torch.cuda.CUDAGraph replaying bit-identical to eager."""
import re

import pytest

import _util

torch = pytest.importorskip("torch")

import kdtree_jit  # noqa: E402
import kdtree_jit.torch  # noqa: E402,F401

R, L, K, N, V, H, PAGE = 2, 5, 4, 17, 300, 8, 16
W = (N + 31) // 32
OPS = ("draft_topk", "build_ddtree", "verify_attn", "tree_accept")


def fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()


def inputs(dev):
    """A round's inputs on `dev` (values arbitrary but valid)."""
    i32 = dict(dtype=torch.int32, device=dev)
    pages = 4
    return dict(
        logits=torch.randn(R, L, V, device=dev).to(torch.bfloat16),
        budget=torch.full((R,), N - 1, **i32),
        root=torch.full((R,), 3, **i32),
        past_len=torch.full((R,), 20, **i32),
        q=(torch.rand(R, N, H, 576, device=dev) - 0.5).to(torch.bfloat16),
        kv=(torch.rand(R * pages, PAGE, 576, device=dev) - 0.5).to(
            torch.bfloat16),
        block_table=torch.arange(R * pages, **i32).view(R, pages),
        target=torch.zeros(R, N, **i32))


def round_fn(logits, budget, root, past_len, q, kv, block_table, target):
    k = torch.ops.kdtree
    lp, ids = k.draft_topk(logits, K)
    t = k.build_ddtree(lp, ids, budget, root, N, None, past_len)
    o, lse = k.verify_attn(q, kv, block_table, past_len, t[0], t[8], 0.125)
    acc = k.tree_accept(t[0], t[1], t[5], t[6], target, L, None)
    return (lp, ids) + tuple(t) + (o, lse) + tuple(acc)


ORDER = ("logits", "budget", "root", "past_len", "q", "kv", "block_table",
         "target")


def split_round(out):
    """round_fn's outputs as (draft, tree, attn, accept)."""
    return out[0:2], out[2:11], out[11:13], out[13:17]


def test_ops_are_registered():
    for name in OPS:
        for op in (name, name + "_out"):
            assert hasattr(torch.ops.kdtree, op), op
    schema = str(torch.ops.kdtree.tree_accept_out.default._schema)
    assert re.search(r"Tensor\(a\d*!\) accept_len", schema), schema
    assert schema.endswith("-> ()"), schema


def test_fake_outputs_have_every_shape_and_dtype():
    with fake_mode():
        x = inputs("cuda")
        out = round_fn(*[x[k] for k in ORDER])
    i32, f32, bf = torch.int32, torch.float32, torch.bfloat16
    want = [((R, L, K), f32), ((R, L, K), i32),  # draft
            ((R,), i32)] + [((R, N), i32)] * 6 + [
            ((R, N), f32), ((R, N, W), i32),  # tree
            ((R, N, H, 512), bf), ((R, N, H), f32),  # attn
            ((R,), i32), ((R, L + 1), i32), ((R, L + 1), i32), ((R,), i32)]
    assert [(tuple(t.shape), t.dtype) for t in out] == want
    assert all(t.device.type == "cuda" and t.is_contiguous() for t in out)


def test_a_round_traces_into_one_graph():
    from torch.fx.experimental.proxy_tensor import make_fx
    with fake_mode():
        x = inputs("cuda")
        g = make_fx(round_fn)(*[x[k] for k in ORDER])
    called = [n.target for n in g.graph.nodes if n.op == "call_function"
              and "kdtree" in str(n.target)]
    assert [str(t).split(".")[1] for t in called] == list(OPS), called


def test_out_variants_trace():
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(logits, lp, ids):
        torch.ops.kdtree.draft_topk_out(logits, K, lp, ids)
        return lp, ids
    with fake_mode():
        x = inputs("cuda")
        lp = torch.empty(R, L, K, device="cuda")
        ids = torch.empty(R, L, K, dtype=torch.int32, device="cuda")
        g = make_fx(fn)(x["logits"], lp, ids)
    assert "kdtree.draft_topk_out" in g.code


# ---- bad input, while tracing and eagerly ------------------------------------

def test_fake_checks_name_the_argument():
    with fake_mode():
        x = inputs("cuda")
        lp, ids = torch.ops.kdtree.draft_topk(x["logits"], K)
        t = torch.ops.kdtree.build_ddtree(lp, ids, x["budget"], x["root"], N,
                                          None, x["past_len"])
        n_nodes, token, fc, ns = t[0], t[1], t[5], t[6]
        ta = torch.ops.kdtree.tree_accept
        with pytest.raises(TypeError, match="tree_accept: target must be "
                                            "int32, got int64"):
            ta(n_nodes, token, fc, ns, x["target"].long(), L, None)
        with pytest.raises(ValueError, match="tree_accept: tree.first_child "
                                             "must be contiguous"):
            ta(n_nodes, token, fc.t().contiguous().t(), ns, x["target"], L,
               None)
        with pytest.raises(TypeError, match="tree_accept: target must be a "
                                            "CUDA array, got a tensor on cpu"):
            ta(n_nodes, token, fc, ns, torch.zeros(R, N, dtype=torch.int32),
               L, None)
        if second_fake_device():
            with pytest.raises(ValueError, match="tree_accept: target is on "
                                                 "cuda:1, tree.token on "
                                                 "cuda:0"):
                ta(n_nodes, token, fc, ns, x["target"].to("cuda:1"), L, None)
        with pytest.raises(ValueError, match=r"verify_attn: tree.anc_mask "
                                             r"must have shape \[2, 17, 1\], "
                                             r"got \[1, 17, 1\]"):
            torch.ops.kdtree.verify_attn(x["q"], x["kv"], x["block_table"],
                                         x["past_len"], n_nodes, t[8][:1],
                                         0.1)


def second_fake_device():
    """Whether a fake tensor can be made on cuda:1: torch checks the
    ordinal against the devices there are when there are any (a one-GPU
    host refuses it), and takes any ordinal where CUDA is absent."""
    return not torch.cuda.is_available() or torch.cuda.device_count() > 1


def test_fake_wrong_device_names_both():
    # The check the fake implementations make of every array's device,
    # on stand-ins that carry only a device: it runs on any host, also one
    # with one GPU, where no tensor can say it is on cuda:1.  (The
    # methods' own wrong-device error: test_errors.test_wrong_device and,
    # with two GPUs, test_gpu.)
    class On(object):
        def __init__(self, device):
            self.device = torch.device(device)
    with pytest.raises(ValueError, match="tree_accept: target is on cuda:1, "
                                         "tree.token on cuda:0"):
        kdtree_jit.torch._same_device(
            "tree_accept", ("tree.token", On("cuda:0")),
            (("tree.n_nodes", On("cuda:0")), ("target", On("cuda:1"))))
    kdtree_jit.torch._same_device(
        "tree_accept", ("tree.token", On("cuda:0")),
        (("tree.n_nodes", On("cuda:0")), ("max_accept", None)))


def test_eager_op_on_cpu_tensors_is_a_type_error():
    # The real implementation refuses before it needs a runtime or a GPU.
    x = inputs("cpu")
    with pytest.raises(TypeError, match="draft_topk: logits must be a CUDA "
                                        "array, got a tensor on cpu"):
        torch.ops.kdtree.draft_topk(x["logits"], K)
    with pytest.raises(TypeError, match="tree_accept: tree.token must be a "
                                        "CUDA array, got a tensor on cpu"):
        torch.ops.kdtree.tree_accept(x["budget"], x["target"], x["target"],
                                     x["target"], x["target"], L, None)


# ---- on a GPU ----------------------------------------------------------------

def gpu():
    rt, torch_ = _util.need_gpu()
    return kdtree_jit.torch.runtime(0)


def prepared_inputs():
    rt = gpu()
    rt.prepare("draft_topk", V=V, K=K, DTYPE="bf16")
    rt.prepare("build_ddtree", L=L, K=K, N_MAX=N)
    rt.prepare("verify_attn", H=H, PAGE=PAGE, N_MAX=N)
    rt.prepare("tree_accept", N_MAX=N, L=L)
    torch.manual_seed(0)
    return inputs("cuda")


def test_opcheck_every_op():
    x = prepared_inputs()
    k = torch.ops.kdtree
    (lp, ids), t, (o, lse), acc = split_round(
        round_fn(*[x[n] for n in ORDER]))
    e = torch.empty_like
    cases = [
        (k.draft_topk, (x["logits"], K)),
        (k.draft_topk_out, (x["logits"], K, e(lp), e(ids))),
        (k.build_ddtree, (lp, ids, x["budget"], x["root"], N, None,
                          x["past_len"])),
        (k.build_ddtree_out, (lp, ids, x["budget"], x["root"], N, None,
                              x["past_len"]) + tuple(e(a) for a in t)),
        (k.verify_attn, (x["q"], x["kv"], x["block_table"], x["past_len"],
                         t[0], t[8], 0.125)),
        (k.verify_attn_out, (x["q"], x["kv"], x["block_table"],
                             x["past_len"], t[0], t[8], 0.125, e(o), e(lse))),
        (k.tree_accept, (t[0], t[1], t[5], t[6], x["target"], L, None)),
        (k.tree_accept_out, (t[0], t[1], t[5], t[6], x["target"], L, None)
         + tuple(e(a) for a in acc)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def same_round(a, b):
    """Two rounds' outputs agree bit for bit: the kernels write every
    element (rows past n_nodes are defined padding, docs/contract.md)."""
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.shape == y.shape and x.dtype == y.dtype, i
        assert torch.equal(x, y), i


def test_torch_compile_fullgraph_round_equals_eager():
    x = prepared_inputs()
    args = [x[k] for k in ORDER]
    eager = round_fn(*args)
    torch._dynamo.reset()
    compiled = torch.compile(round_fn, fullgraph=True)
    got = compiled(*args)
    torch.cuda.synchronize()
    same_round(eager, got)


def test_cuda_graph_replays_bit_identical_to_eager():
    x = prepared_inputs()
    k = torch.ops.kdtree
    bufs = {}

    def step():
        lp, ids = bufs["draft"]
        k.draft_topk_out(x["logits"], K, lp, ids)
        k.build_ddtree_out(lp, ids, x["budget"], x["root"], N, None,
                           x["past_len"], *bufs["tree"])
        t = bufs["tree"]
        k.verify_attn_out(x["q"], x["kv"], x["block_table"], x["past_len"],
                          t[0], t[8], 0.125, *bufs["attn"])
        k.tree_accept_out(t[0], t[1], t[5], t[6], x["target"], L, None,
                          *bufs["acc"])

    (lp, ids), t, (o, lse), acc = split_round(
        round_fn(*[x[n] for n in ORDER]))
    bufs.update(draft=(torch.zeros_like(lp), torch.zeros_like(ids)),
                tree=tuple(torch.zeros_like(a) for a in t),
                attn=(torch.zeros_like(o), torch.zeros_like(lse)),
                acc=tuple(torch.zeros_like(a) for a in acc))
    every = [a for v in bufs.values() for a in v]
    for a in every:
        a.fill_(7)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # eager, off the capture stream, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(s)
    eager = [a.clone() for a in every]
    for a in every:
        a.fill_(7)  # whatever a kernel leaves alone stays 7 in both runs
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    g.replay()
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(eager, every)):
        assert torch.equal(a, b), i
    assert int(bufs["tree"][0].min()) >= 1
