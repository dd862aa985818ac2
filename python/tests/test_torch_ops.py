"""The torch ops (kdtree_jit.torch).  Where torch is importable: every op
registered with its schema (Tensor(a!) on what an out-variant writes);
the fake implementations under FakeTensorMode and on meta tensors give
every output's shape and dtype, alias nothing, and check arguments as the
Runtime does; torch.library.opcheck passes on meta tensors (the fake
implementations against the schemas, dynamic shapes included); a whole
round traces into one graph and compiles with torch.compile(fullgraph=
True) on meta tensors; bad tensors raise TypeError/ValueError naming the
argument before anything launches.  Where a GPU is too: opcheck on every
op with CUDA tensors, torch.compile(fullgraph=True) of a round equal to
eager, and a round of out-variants captured in a torch.cuda.CUDAGraph
replaying bit-identical to eager."""
import logging
import re

import pytest

import _util

torch = pytest.importorskip("torch")

import kdtree_jit  # noqa: E402
import kdtree_jit.torch  # noqa: E402,F401
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

# FakeTensorMode logs every exception a fake implementation raises; the
# tests below raise them on purpose.
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

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
WANT = ([((R, L, K), torch.float32), ((R, L, K), torch.int32),  # draft
         ((R,), torch.int32)] + [((R, N), torch.int32)] * 6 + [
         ((R, N), torch.float32), ((R, N, W), torch.int32),  # tree
         ((R, N, H, 512), torch.bfloat16), ((R, N, H), torch.float32),
         ((R,), torch.int32), ((R, L + 1), torch.int32),
         ((R, L + 1), torch.int32), ((R,), torch.int32)])


def split_round(out):
    """round_fn's outputs as (draft, tree, attn, accept)."""
    return out[0:2], out[2:11], out[11:13], out[13:17]


def out_buffers(x, out):
    """Outputs to write into, like a round's `out`, and a workspace."""
    e = torch.empty_like
    (lp, ids), t, (o, lse), acc = split_round(out)
    if x["q"].is_cuda:  # the size this shape needs on this GPU
        ws = kdtree_jit.torch.verify_attn_workspace(x["q"], x["kv"],
                                                    x["block_table"])
    else:  # the fake implementations do not ask for a size
        ws = torch.empty(1024, dtype=torch.uint8, device=x["q"].device)
    return (e(lp), e(ids)), tuple(e(a) for a in t), (e(o), e(lse), ws), \
        tuple(e(a) for a in acc)


def every_op_call(x, out):
    """(op, args) of every op, the out-variants writing into new tensors
    like `out`, a round's outputs."""
    k = torch.ops.kdtree
    (lp, ids), t, _, _ = split_round(out)
    d, tb, a, acc = out_buffers(x, out)
    return [
        (k.draft_topk, (x["logits"], K)),
        (k.draft_topk_out, (x["logits"], K) + d),
        (k.build_ddtree, (lp, ids, x["budget"], x["root"], N, None,
                          x["past_len"])),
        (k.build_ddtree_out, (lp, ids, x["budget"], x["root"], N, None,
                              x["past_len"]) + tb),
        (k.verify_attn, (x["q"], x["kv"], x["block_table"], x["past_len"],
                         t[0], t[8], 0.125)),
        (k.verify_attn_out, (x["q"], x["kv"], x["block_table"],
                             x["past_len"], t[0], t[8], 0.125) + a),
        (k.tree_accept, (t[0], t[1], t[5], t[6], x["target"], L, None)),
        (k.tree_accept_out, (t[0], t[1], t[5], t[6], x["target"], L, None)
         + acc),
    ]


# ---- the registration -------------------------------------------------------

def test_every_op_has_its_schema():
    schemas = kdtree_jit.torch.SCHEMAS
    assert sorted(schemas) == sorted(OPS + tuple(n + "_out" for n in OPS))
    for name, schema in schemas.items():
        s = getattr(torch.ops.kdtree, name).default._schema
        assert str(s) == "kdtree::" + schema
        written = [a.name for a in s.arguments
                   if a.alias_info is not None and a.alias_info.is_write]
        if name.endswith("_out"):
            assert s.is_mutable and not s.returns, name
            # Every output is marked written, and nothing else: the
            # outputs end the positional arguments (keyword-only ones,
            # verify_attn's kv_scale and math, follow).
            pos = [a.name for a in s.arguments if not a.kwarg_only]
            assert written == pos[-len(written):]
            assert len(written) == {"draft_topk_out": 2,
                                    "build_ddtree_out": 9,
                                    "verify_attn_out": 3,
                                    "tree_accept_out": 4}[name]
        else:
            assert not s.is_mutable and not written, name
    assert re.search(r"Tensor\(c!\) workspace", schemas["verify_attn_out"])


# ---- the fake implementations -----------------------------------------------

@pytest.mark.parametrize("where", ["fake cuda", "meta"])
def test_fake_outputs_have_every_shape_and_dtype(where):
    if where == "meta":
        x = inputs("meta")
        out = round_fn(*[x[k] for k in ORDER])
    else:
        with fake_mode():
            x = inputs("cuda")
            out = round_fn(*[x[k] for k in ORDER])
    assert [(tuple(t.shape), t.dtype) for t in out] == WANT
    dev = "meta" if where == "meta" else "cuda"
    assert all(t.device.type == dev and t.is_contiguous() for t in out)
    # Each output is its own allocation: none aliases an input or another
    # output (the functional schemas promise it).
    seen = [StorageWeakRef(a.untyped_storage()) for a in x.values()]
    for t in out:
        s = StorageWeakRef(t.untyped_storage())
        assert s not in seen
        seen.append(s)


def test_out_variants_write_in_place_and_return_nothing():
    from torch.fx.experimental.proxy_tensor import make_fx
    x = inputs("meta")
    out = round_fn(*[x[k] for k in ORDER])
    calls = every_op_call(x, out)
    for op, args in calls[1::2]:
        assert op(*args) is None

    def fn(logits, lp, ids):
        torch.ops.kdtree.draft_topk_out(logits, K, lp, ids)
        return lp, ids
    (lp, ids), _, _, _ = out_buffers(x, out)
    g = make_fx(fn)(x["logits"], lp, ids)
    called = [str(n.target) for n in g.graph.nodes
              if n.op == "call_function"]
    assert called == ["kdtree.draft_topk_out.default"], called


def test_opcheck_every_op_on_meta_tensors():
    # The fake implementations against the schemas (aliasing, mutation)
    # and under dynamic shapes; the real ones need a GPU (below).
    x = inputs("meta")
    out = round_fn(*[x[k] for k in ORDER])
    for op, args in every_op_call(x, out):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


def test_a_round_traces_into_one_graph():
    from torch.fx.experimental.proxy_tensor import make_fx
    with fake_mode():
        x = inputs("cuda")
        g = make_fx(round_fn)(*[x[k] for k in ORDER])
    called = [n.target for n in g.graph.nodes if n.op == "call_function"
              and "kdtree" in str(n.target)]
    assert [str(t).split(".")[1] for t in called] == list(OPS), called


def test_torch_compile_fullgraph_on_meta_tensors():
    x = inputs("meta")
    args = [x[k] for k in ORDER]
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    got = torch.compile(round_fn, fullgraph=True, backend=capture)(*args)
    assert [(tuple(t.shape), t.dtype) for t in got] == WANT
    called = [str(n.target) for n in graphs[0].graph.nodes
              if "kdtree" in str(n.target)]
    assert [c.split(".")[1] for c in called] == list(OPS), called
    out = round_fn(*args)
    d, t, a, acc = out_buffers(x, out)

    def step(*args):
        k = torch.ops.kdtree
        k.draft_topk_out(args[0], K, *d)
        k.build_ddtree_out(d[0], d[1], args[1], args[2], N, None, args[3],
                           *t)
        k.verify_attn_out(args[4], args[5], args[6], args[3], t[0], t[8],
                          0.125, *a)
        k.tree_accept_out(t[0], t[1], t[5], t[6], args[7], L, None, *acc)
        return acc[0]
    # aot_eager: the out-variants through functionalization and back.
    torch._dynamo.reset()
    assert torch.compile(step, fullgraph=True, backend="aot_eager")(
        *args).shape == (R,)


# ---- bad input, while tracing and eagerly -----------------------------------

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
        o, lse = torch.ops.kdtree.verify_attn(
            x["q"], x["kv"], x["block_table"], x["past_len"], n_nodes, t[8],
            0.1)
        # an e4m3 cache: float8_e4m3fn or its bytes, and the arithmetic
        for kv8 in (x["kv"].to(torch.float8_e4m3fn),
                    x["kv"].to(torch.float8_e4m3fn).view(torch.uint8)):
            for math in ("bf16", "e4m3"):
                o8, lse8 = torch.ops.kdtree.verify_attn(
                    x["q"], kv8, x["block_table"], x["past_len"], n_nodes,
                    t[8], 0.1, kv_scale=0.5, math=math)
                assert o8.shape == o.shape and o8.dtype == torch.bfloat16
                torch.ops.kdtree.verify_attn_out(
                    x["q"], kv8, x["block_table"], x["past_len"], n_nodes,
                    t[8], 0.1, o8, lse8, torch.empty(16, dtype=torch.uint8,
                                                     device="cuda"),
                    kv_scale=2.0, math=math)
        with pytest.raises(ValueError, match="verify_attn: math must be "
                                             "'bf16' or 'e4m3', got 'fp8'"):
            torch.ops.kdtree.verify_attn(
                x["q"], x["kv"], x["block_table"], x["past_len"], n_nodes,
                t[8], 0.1, math="fp8")
        with pytest.raises(TypeError, match="verify_attn: kv_cache must be "
                                            "bfloat16 or float8_e4m3fn or "
                                            "uint8, got float16"):
            torch.ops.kdtree.verify_attn(
                x["q"], x["kv"].half(), x["block_table"], x["past_len"],
                n_nodes, t[8], 0.1)
        with pytest.raises(TypeError, match="verify_attn: workspace must be "
                                            "uint8, got float32"):
            torch.ops.kdtree.verify_attn_out(
                x["q"], x["kv"], x["block_table"], x["past_len"], n_nodes,
                t[8], 0.1, o, lse, torch.empty(16, device="cuda"))
        with pytest.raises(ValueError, match=r"draft_topk: out.ids must have "
                                             r"shape \[2, 5, 4\], got "
                                             r"\[2, 5, 3\]"):
            torch.ops.kdtree.draft_topk_out(x["logits"], K, lp, ids[..., 1:])


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
    # The CPU implementation refuses before it needs a runtime or a GPU.
    x = inputs("cpu")
    with pytest.raises(TypeError, match="draft_topk: logits must be a CUDA "
                                        "array, got a tensor on cpu"):
        torch.ops.kdtree.draft_topk(x["logits"], K)
    with pytest.raises(TypeError, match="tree_accept: tree.token must be a "
                                        "CUDA array, got a tensor on cpu"):
        torch.ops.kdtree.tree_accept(x["budget"], x["target"], x["target"],
                                     x["target"], x["target"], L, None)
    lp = torch.empty(R, L, K)
    with pytest.raises(TypeError, match="draft_topk: logits must be a CUDA "
                                        "array, got a tensor on cpu"):
        torch.ops.kdtree.draft_topk_out(x["logits"], K, lp,
                                        lp.to(torch.int32))


# ---- on a GPU ---------------------------------------------------------------

def prepared_inputs():
    _util.need_gpu()
    rt = kdtree_jit.torch.runtime(0)
    rt.prepare("draft_topk", V=V, K=K, DTYPE="bf16")
    rt.prepare("build_ddtree", L=L, K=K, N_MAX=N)
    rt.prepare("verify_attn", H=H, PAGE=PAGE, N_MAX=N)
    rt.prepare("tree_accept", N_MAX=N, L=L)
    torch.manual_seed(0)
    return inputs("cuda")


def test_opcheck_every_op():
    x = prepared_inputs()
    out = round_fn(*[x[n] for n in ORDER])
    for op, args in every_op_call(x, out):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


def same_round(a, b):
    """Two rounds' outputs agree bit for bit: the kernels write every
    element (rows past n_nodes are defined padding, docs/contract.md)."""
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.shape == y.shape and x.dtype == y.dtype, i
        assert torch.equal(x, y), i


def test_functional_ops_equal_the_methods():
    x = prepared_inputs()
    rt = kdtree_jit.torch.runtime(0)
    (lp, ids), t, (o, lse), acc = split_round(
        round_fn(*[x[n] for n in ORDER]))
    draft = rt.draft_topk(x["logits"], K)
    tree = rt.build_ddtree(draft, x["budget"], x["root"], N,
                           past_len=x["past_len"], want_score=True)
    attn = rt.verify_attn(x["q"], x["kv"], x["block_table"], x["past_len"],
                          tree, 0.125)
    got = rt.tree_accept(tree, x["target"], L)
    same_round((lp, ids) + t + (o, lse) + acc,
               tuple(draft) + tuple(tree) + tuple(attn) + tuple(got))


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
    out = round_fn(*[x[n] for n in ORDER])
    d, t, a, acc = out_buffers(x, out)

    def step():
        k.draft_topk_out(x["logits"], K, *d)
        k.build_ddtree_out(d[0], d[1], x["budget"], x["root"], N, None,
                           x["past_len"], *t)
        k.verify_attn_out(x["q"], x["kv"], x["block_table"], x["past_len"],
                          t[0], t[8], 0.125, *a)
        k.tree_accept_out(t[0], t[1], t[5], t[6], x["target"], L, None,
                          *acc)

    every = list(d + t + a[:2] + acc)
    for v in every:
        v.fill_(7)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # eager, off the capture stream, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(s)
    eager = [v.clone() for v in every]
    for v in every:
        v.fill_(7)  # whatever a kernel leaves alone stays 7 in both runs
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    g.replay()
    torch.cuda.synchronize()
    for i, (u, v) in enumerate(zip(eager, every)):
        assert torch.equal(u, v), i
    assert int(t[0].min()) >= 1
    same_round(eager, out)
