"""Every kernel through Python on the GPU, against the C references
(ref/*.c, built on the fly) and the Python references; out= without
allocation; a caller's stream; CuPy arrays; a whole round captured in a
CUDA graph giving what eager mode gives.  Skipped without torch, CUDA or
a device."""
import math
import random
import sys
import time

import pytest

import _util
import kdtree_jit
from kdtree_jit import reference as ref


def log(msg):
    # Visible in make check's log (tests/test_python.sh runs pytest -s).
    print("test_gpu: " + msg)
    sys.stdout.flush()


def rng_tree(rng, n_max, L, n, alphabet=8):
    """A random tree in build_ddtree's layout (parents before children,
    siblings in index order), depth <= L."""
    parent, depth = [-1], [0]
    for i in range(1, n):
        # A parent among the last few nodes that can still take a child;
        # the root always can (depth 0 < L), so this never loops forever.
        near = [p for p in range(max(0, i - 6), i) if depth[p] < L] or [0]
        p = rng.choice(near)
        parent.append(p)
        depth.append(depth[p] + 1)
    token = [0] + [rng.randrange(alphabet) for _ in range(n - 1)]
    fc, ns, last = [-1] * n_max, [-1] * n_max, {}
    for i in range(1, n):
        p = parent[i]
        if p in last:
            ns[last[p]] = i
        else:
            fc[p] = i
        last[p] = i
    token += [0] * (n_max - n)
    target = []
    for i in range(n_max):
        kids = []
        c = fc[i] if i < n else -1
        while c >= 0:
            kids.append(c)
            c = ns[c]
        target.append(token[rng.choice(kids)] if kids and rng.random() < 0.8
                      else rng.randrange(alphabet))
    return token, fc, ns, target, n


def i32(torch, x):
    return torch.tensor(x, dtype=torch.int32, device="cuda")


def accept_args(a):
    """(tree, target) for tree_accept from (token, first_child,
    next_sibling, n_nodes, target)."""
    tree = kdtree_jit.Tree(a[3], a[0], None, None, None, a[1], a[2], None,
                           None)
    return tree, a[4]


# ---- tree_accept -------------------------------------------------------------

def test_tree_accept_against_references():
    rt, torch = _util.need_gpu()
    rng = random.Random(1)
    N, L, R = 65, 15, 37
    trees = [rng_tree(rng, N, L, rng.randint(1, N)) if r else
             rng_tree(rng, N, L, 1) for r in range(R)]
    n_nodes = [t[4] for t in trees]
    cap = [rng.choice([0, 1, 3, 16]) for _ in range(R)]
    tok = i32(torch, [t[0] for t in trees])
    fc = i32(torch, [t[1] for t in trees])
    ns = i32(torch, [t[2] for t in trees])
    tg = i32(torch, [t[3] for t in trees])
    nn = i32(torch, n_nodes)
    for max_accept in (None, i32(torch, cap)):
        acc = rt.tree_accept(*accept_args((tok, fc, ns, nn, tg)), L=L,
                             max_accept=max_accept)
        torch.cuda.synchronize()
        for r in range(R):
            want = ref.tree_accept_one(
                trees[r][0], trees[r][1], trees[r][2], n_nodes[r],
                trees[r][3], L, None if max_accept is None else cap[r])
            got = (int(acc.accept_len[r]), acc.accept_idx[r].tolist(),
                   acc.accept_token[r].tolist(), int(acc.bonus[r]))
            assert got == want, (r, max_accept is not None)
    c = _util.c_reference("tree_accept")
    if c is not None:  # and the C reference agrees with both
        ffi, lib = c
        al, ai = ffi.new("int32_t[]", R), ffi.new("int32_t[]", R * (L + 1))
        at, bo = ffi.new("int32_t[]", R * (L + 1)), ffi.new("int32_t[]", R)
        lib.ref_tree_accept(al, ai, at, bo,
                            ffi.new("int32_t[]", _util.flat(tok.tolist())),
                            ffi.new("int32_t[]", _util.flat(fc.tolist())),
                            ffi.new("int32_t[]", _util.flat(ns.tolist())),
                            ffi.new("int32_t[]", n_nodes),
                            ffi.new("int32_t[]", _util.flat(tg.tolist())),
                            ffi.NULL, R, L, N)
        acc = rt.tree_accept(*accept_args((tok, fc, ns, nn, tg)), L=L)
        assert list(al) == acc.accept_len.tolist()
        assert list(ai) == _util.flat(acc.accept_idx.tolist())
        assert list(bo) == acc.bonus.tolist()


# ---- build_ddtree ------------------------------------------------------------

def dyadic_batch(rng, R, L, K):
    lp = []
    for r in range(R):
        rows = []
        for d in range(L):
            row = [-rng.randrange(0, 513) / 64.0 for _ in range(K)]
            if rng.random() < 0.15:
                row = [0.0] * K  # ties with the parent
            if rng.random() < 0.1:
                row[-1] = float("-inf")
            rows.append(sorted(row, reverse=True))
        lp.append(rows)
    ids = [[[rng.randrange(50) for _ in range(K)] for _ in range(L)]
           for _ in range(R)]
    return lp, ids


def test_build_ddtree_against_references():
    rt, torch = _util.need_gpu()
    rng = random.Random(2)
    for (R, L, K, N) in ((6, 15, 8, 65), (3, 4, 1, 17), (4, 1, 6, 33),
                         (2, 15, 8, 1025)):
        lp, ids = dyadic_batch(rng, R, L, K)
        budget = [rng.randint(0, N - 1) for _ in range(R)]
        budget[0] = 0
        budget[-1] = N + 100  # clamped
        depth = [rng.randint(1, L) for _ in range(R)]
        root = [rng.randrange(1000) for _ in range(R)]
        past = [rng.randrange(100) for _ in range(R)]
        past[0] = 0
        want = ref.build_ddtree(lp, ids, budget, root, N, depth, past)
        t = rt.build_ddtree(
            kdtree_jit.Draft(torch.tensor(lp, dtype=torch.float32,
                                          device="cuda"), i32(torch, ids)),
            i32(torch, budget), i32(torch, root), N,
            depth_limit=i32(torch, depth), past_len=i32(torch, past),
            want_score=True)
        torch.cuda.synchronize()
        for r in range(R):
            w = want[r]
            assert int(t.n_nodes[r]) == w["n_nodes"], (R, L, K, N, r)
            for k in ("token", "parent", "depth", "position", "first_child",
                      "next_sibling", "score"):
                assert getattr(t, k)[r].tolist() == w[k], (R, L, K, N, r, k)
            got_mask = [[v & 0xFFFFFFFF for v in row]
                        for row in t.anc_mask[r].tolist()]
            assert got_mask == w["anc_mask"], (R, L, K, N, r)
        log("build_ddtree R=%d L=%d K=%d N_MAX=%d equals the reference" %
            (R, L, K, N))


def test_build_ddtree_defaults_and_out_reuse():
    rt, torch = _util.need_gpu()
    rng = random.Random(3)
    R, L, K, N = 2, 5, 3, 33
    lp, ids = dyadic_batch(rng, R, L, K)
    args = (kdtree_jit.Draft(torch.tensor(lp, dtype=torch.float32,
                                          device="cuda"), i32(torch, ids)),
            i32(torch, [10, 32]), i32(torch, [7, 8]), N)
    t = rt.build_ddtree(*args)
    assert t.score is None  # not asked for
    ptrs = [x.data_ptr() for x in t if x is not None]
    t2 = rt.build_ddtree(*args, out=t)
    assert [x.data_ptr() for x in t2 if x is not None] == ptrs
    want = ref.build_ddtree(lp, ids, [10, 32], [7, 8], N)
    torch.cuda.synchronize()
    for r in range(R):
        assert t2.position[r].tolist() == want[r]["position"]
        assert t2.token[r].tolist() == want[r]["token"]


# ---- draft_topk --------------------------------------------------------------

def test_draft_topk_against_references():
    rt, torch = _util.need_gpu()
    g = torch.Generator(device="cuda").manual_seed(4)
    for dtype in (torch.float32, torch.bfloat16):
        for (rows, V, K) in ((30, 1000, 8), (4, 32000, 16), (3, 7, 7)):
            # Small integers: many exact ties, resolved to the lower id.
            logits = torch.randint(-20, 20, (rows, V), device="cuda",
                                   generator=g).to(dtype)
            logits[0, 5] = float("nan")
            if rows > 2:
                logits[2] = float("-inf")
            lp, ids = rt.draft_topk(logits, K)
            torch.cuda.synchronize()
            host = logits.float().cpu().tolist()
            for i in range(rows):
                wlp, wids = ref.draft_topk_row(host[i], K)
                assert ids[i].tolist() == wids, (dtype, rows, V, K, i)
                for a, b in zip(lp[i].tolist(), wlp):
                    assert (a == b) or abs(a - b) <= 1e-5 * max(1, abs(b)), \
                        (dtype, i, a, b)
        log("draft_topk %s equals the reference (ids exact, lp 1e-5)" % dtype)


# ---- verify_attn -------------------------------------------------------------

def torch_verify_attn(torch, q, kv, block_table, past, n_nodes, mask, P,
                      scale):
    """docs/contract.md §3 in float64 with torch: the fallback oracle when
    the C reference cannot be built."""
    R, N, H, _ = q.shape
    o = torch.zeros(R, N, H, 512, dtype=torch.float64)
    lse = torch.full((R, N, H), float("-inf"), dtype=torch.float64)
    for r in range(R):
        total = past[r] + n_nodes[r]
        pages = block_table[r].long().cpu()
        c = kv.double().cpu()[pages].reshape(-1, 576)[:total]
        for i in range(n_nodes[r]):
            vis = [j for j in range(total) if j < past[r] or
                   (mask[r][i][(j - past[r]) // 32] >> ((j - past[r]) % 32)) & 1]
            cv = c[vis]
            logit = (q[r, i].double().cpu() @ cv.T) * scale  # [H, n]
            lse[r, i] = torch.logsumexp(logit, -1)
            o[r, i] = torch.softmax(logit, -1) @ cv[:, :512]
    return o, lse


def test_verify_attn_against_reference():
    rt, torch = _util.need_gpu()
    c = _util.c_reference("verify_attn")
    g = torch.Generator(device="cuda").manual_seed(5)
    R, N, H, P = 3, 65, 8, 64
    past = [100, 0, 257]
    n_nodes = [65, 1, 20]
    max_pages = 8
    # Pages out of order: request r's logical page j is physical page
    # perm[r * max_pages + j].
    perm = list(range(R * max_pages))
    random.Random(6).shuffle(perm)
    block_table = i32(torch, [perm[r * max_pages:(r + 1) * max_pages]
                              for r in range(R)])
    q = (torch.rand(R, N, H, 576, device="cuda", generator=g) - 0.5).to(
        torch.bfloat16)
    kv = (torch.rand(R * max_pages, P, 576, device="cuda", generator=g) -
          0.5).to(torch.bfloat16)
    W = (N + 31) // 32
    # Random ancestor masks (parent < child), own bit included.
    trng = random.Random(77)
    mask = []
    for r in range(R):
        rows = []
        for i in range(N):
            words = [0] * W
            if i < n_nodes[r] and i > 0:
                words = list(rows[trng.randrange(i)])
            words[i // 32] |= 1 << (i % 32)
            rows.append(words)
        mask.append(rows)
    mask_t = torch.tensor([[[v - (1 << 32) if v >= 1 << 31 else v
                             for v in row] for row in m] for m in mask],
                          dtype=torch.int32, device="cuda")
    scale = 192 ** -0.5
    tree = kdtree_jit.Tree(i32(torch, n_nodes), None, None, None, None, None,
                           None, None, mask_t)
    o, lse = rt.verify_attn(q, kv, block_table, i32(torch, past), tree,
                            scale)
    torch.cuda.synchronize()
    if c is not None:
        ffi, lib = c
        ro = ffi.new("float[]", R * N * H * 512)
        rl = ffi.new("float[]", R * N * H)
        qh, qa = _util.c_array(ffi, "uint16_t", q.cpu().view(torch.int16))
        kh, ka = _util.c_array(ffi, "uint16_t", kv.cpu().view(torch.int16))
        lib.ref_verify_attn(
            ro, rl, qh, kh,
            ffi.new("int32_t[]", _util.flat(block_table.tolist())),
            ffi.new("int32_t[]", past), ffi.new("int32_t[]", n_nodes),
            ffi.new("uint32_t[]", _util.flat(mask)), R, H, N, P, max_pages,
            scale)
        want, wl = list(ro), list(rl)
        oracle = "the C reference"
    else:
        wo, wlse = torch_verify_attn(torch, q, kv, block_table, past,
                                     n_nodes, mask, P, scale)
        want, wl = wo.reshape(-1).tolist(), wlse.reshape(-1).tolist()
        oracle = "a float64 torch reference (no C reference)"
    got = o.float().cpu().reshape(-1).tolist()
    bad = sum(1 for a, b in zip(got, want)
              if not abs(a - b) <= 1e-2 + 1e-2 * abs(b))
    assert bad == 0, "%d of %d outputs off" % (bad, len(want))
    for a, b in zip(lse.cpu().reshape(-1).tolist(), wl):
        assert (a == b) or abs(a - b) <= 1e-3 * max(1.0, abs(b)), (a, b)
    # Rows past n_nodes: o = 0, lse = -inf.
    assert float(o[1, 1:].float().abs().max()) == 0.0
    assert math.isinf(float(lse[1, 1:].max()))
    log("verify_attn R=%d H=%d N_MAX=%d PAGE=%d equals %s (tol 1e-2)"
        % (R, H, N, P, oracle))
    # A workspace of the caller's, sized by the runtime, gives the same.
    ws = rt.verify_attn_workspace(q, kv, block_table)
    assert ws.dtype == torch.uint8 and ws.numel() == \
        rt.verify_attn_workspace_size(R, H, N, P, max_pages)
    o2, lse2 = rt.verify_attn(q, kv, block_table, i32(torch, past), tree,
                              scale, workspace=ws)
    torch.cuda.synchronize()
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    if ws.numel():
        with pytest.raises(kdtree_jit.KdtreeError,
                           match="workspace_bytes is %d, this shape needs %d"
                                 % (ws.numel() - 1, ws.numel())):
            rt.verify_attn(q, kv, block_table, i32(torch, past), tree,
                           scale, workspace=ws[:-1])


# ---- streams, CuPy, out= ----------------------------------------------------

def small_accept_case(torch):
    rng = random.Random(9)
    N, L = 65, 15
    t = rng_tree(rng, N, L, N)
    return (i32(torch, [t[0]]), i32(torch, [t[1]]), i32(torch, [t[2]]),
            i32(torch, [N]), i32(torch, [t[3]])), L, t


def test_out_buffers_are_written_without_allocation():
    rt, torch = _util.need_gpu()
    args, L, _ = small_accept_case(torch)
    first = rt.tree_accept(*accept_args(args), L=L)
    out = tuple(torch.full_like(x, -7) for x in first)
    got = rt.tree_accept(*accept_args(args), L=L, out=out)
    assert all(a is b for a, b in zip(got, out))
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(first, got))


def test_bound_launch_equals_a_checked_call():
    rt, torch = _util.need_gpu()
    args, L, _ = small_accept_case(torch)
    want = rt.tree_accept(*accept_args(args), L=L)
    bound = rt.bind("tree_accept", *accept_args(args), L=L)
    got = bound()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert bound() is got  # the same outputs each time


def test_callers_stream_is_used():
    rt, torch = _util.need_gpu()
    args, L, _ = small_accept_case(torch)
    want = rt.tree_accept(*accept_args(args), L=L)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # current stream, picked up by default
        a = rt.tree_accept(*accept_args(args), L=L)
    b = rt.tree_accept(*accept_args(args), L=L, stream=s)  # explicit
    c = rt.tree_accept(*accept_args(args), L=L, stream=s.cuda_stream)  # raw handle
    s.synchronize()
    for got in (a, b, c):
        assert all(torch.equal(x, y) for x, y in zip(want, got))


def test_cupy_arrays():
    rt, torch = _util.need_gpu()
    cupy = pytest.importorskip("cupy")
    args, L, _ = small_accept_case(torch)
    want = rt.tree_accept(*accept_args(args), L=L)
    torch.cuda.synchronize()
    cargs = [cupy.asarray(x.cpu().numpy()) for x in args]
    got = rt.tree_accept(*accept_args(cargs), L=L,
                         stream=cupy.cuda.get_current_stream())
    cupy.cuda.get_current_stream().synchronize()
    assert all(isinstance(x, cupy.ndarray) for x in got)
    for a, b in zip(want, got):
        assert a.cpu().tolist() == b.get().tolist()


def test_a_runtime_of_a_torch_device():
    rt, torch = _util.need_gpu()
    dev = torch.cuda.current_device()
    with kdtree_jit.Runtime(torch.device("cuda")) as r:
        assert r.device == dev
    with kdtree_jit.Runtime(torch.device("cuda", 0)) as r:
        assert r.device == 0 and r.arch == rt.arch


def test_prepare_and_cache_stats():
    rt, torch = _util.need_gpu()
    rt.prepare("tree_accept", N_MAX=9, L=3)
    before = kdtree_jit.cache_stats()
    rt.prepare("tree_accept", "N_MAX=9,L=3")  # hot: nothing counted
    rt.prepare("tree_accept", L=3, N_MAX=9)
    assert kdtree_jit.cache_stats() == before
    assert rt.arch.startswith(("sm_", "compute_"))
    with pytest.raises(kdtree_jit.KdtreeError, match="KDTREE_ERROR_SHAPE"):
        rt.prepare("tree_accept", N_MAX=0, L=3)


def test_library_refuses_bad_pointers_from_python():
    rt, torch = _util.need_gpu()
    args, L, _ = small_accept_case(torch)
    # A misaligned array: Python's checks pass (int32, contiguous), the
    # library's alignment check must refuse it without launching.
    base = torch.zeros(2 * 66, dtype=torch.int32, device="cuda")
    bad = _util.FakeArray((1, 65), "<i4", ptr=base.data_ptr() + 2)
    with pytest.raises(kdtree_jit.KdtreeError,
                       match="KDTREE_ERROR_MISALIGNED.*token"):
        rt.tree_accept(*accept_args((bad,) + tuple(args[1:])), L=L)


# ---- the drop-in and a whole round in a graph --------------------------------

def test_drop_in_tree_builder_against_reference():
    rt, torch = _util.need_gpu()
    from kdtree_jit.ddtree import TreeBuilder
    g = torch.Generator(device="cuda").manual_seed(8)
    R, L, K, N, V = 2, 15, 8, 65, 5000
    logits = torch.randn(R, L, V, device="cuda", generator=g).to(
        torch.bfloat16)
    builder = TreeBuilder(rt, L=L, K=K, n_max=N, vocab=V, n_requests=R)
    t = builder(logits, budget=64, root_token=i32(torch, [11, 12]))
    torch.cuda.synchronize()
    lp = builder._lp.cpu().tolist()
    ids = builder._ids.cpu().tolist()
    for r in range(R):
        host = logits[r].float().cpu().tolist()
        for d in range(L):
            assert ref.draft_topk_row(host[d], K)[1] == ids[r][d]
        w = ref.build_ddtree_one(lp[r], ids[r], 64, [11, 12][r], N)
        n = w["n_nodes"]
        assert int(t.n_nodes[r]) == n
        assert t.tokens[r].tolist() == w["token"]
        assert t.parents[r].tolist() == w["parent"]
        assert t.depths[r].tolist() == w["depth"]
        vis = t.visibility[r, :n, :n].cpu().tolist()
        assert vis == [ref.visibility(w["anc_mask"][i], n) for i in range(n)]


def make_round(rt, torch, R=1, L=15, K=8, N=65, V=4096, H=8, P=64,
               past=1000):
    """The buffers of one round (static shapes) and a function that runs
    it: draft_topk -> build_ddtree -> verify_attn -> argmax -> tree_accept."""
    g = torch.Generator(device="cuda").manual_seed(10)
    dev = "cuda"
    pages = (past + N + P - 1) // P
    st = {
        "logits": torch.randn(R, L, V, device=dev, generator=g).to(
            torch.bfloat16),
        "budget": i32(torch, [N - 1] * R),
        "root": i32(torch, [3] * R),
        "past": i32(torch, [past] * R),
        "q": (torch.rand(R, N, H, 576, device=dev, generator=g) - 0.5).to(
            torch.bfloat16),
        "kv": (torch.rand(R * pages, P, 576, device=dev, generator=g) -
               0.5).to(torch.bfloat16),
        "bt": torch.arange(R * pages, dtype=torch.int32,
                           device=dev).view(R, pages),
        "wo": (torch.rand(512, V, device=dev, generator=g) - 0.5).to(
            torch.bfloat16),
    }
    lp = torch.empty(R, L, K, dtype=torch.float32, device=dev)
    ids = torch.empty(R, L, K, dtype=torch.int32, device=dev)
    st["ws"] = rt.verify_attn_workspace(st["q"], st["kv"], st["bt"])

    def run():
        rt.draft_topk(st["logits"], K, out=(lp, ids))
        tree = rt.build_ddtree(kdtree_jit.Draft(lp, ids),
                               st["budget"], st["root"], N,
                               past_len=st["past"], out=st.get("tree"))
        st["tree"] = tree
        attn = rt.verify_attn(st["q"], st["kv"], st["bt"], st["past"], tree,
                              0.07, workspace=st["ws"], out=st.get("attn"))
        st["attn"] = attn
        # A stand-in for the rest of the model: head 0's output through a
        # random projection, argmax per row.
        target = (attn.o[:, :, 0, :] @ st["wo"]).argmax(-1).to(torch.int32)
        acc = rt.tree_accept(tree, target, L=L, out=st.get("acc"))
        st["acc"] = acc
        return tree, attn, acc
    return run, st


def test_graph_capture_replays_the_eager_round():
    rt, torch = _util.need_gpu()
    run, st = make_round(rt, torch, R=2)
    eager = [x.clone() if x is not None else None
             for part in run() for x in part]
    torch.cuda.synchronize()
    # Scribble over the outputs so the replay must rewrite them.
    for part in (st["tree"], st["attn"], st["acc"]):
        for x in part:
            if x is not None:
                x.fill_(-1) if x.dtype != torch.bfloat16 else x.zero_()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            run()
    torch.cuda.current_stream().wait_stream(s)
    graph.replay()
    torch.cuda.synchronize()
    replayed = [x for part in (st["tree"], st["attn"], st["acc"])
                for x in part]
    for a, b in zip(eager, replayed):
        if a is not None:
            assert torch.equal(a, b)
    log("graph replay of a whole round equals eager (accept_len %s)"
        % st["acc"].accept_len.tolist())


def test_host_overhead_is_reported():
    # Not a test of speed: prints the figure for the log.
    rt, torch = _util.need_gpu()
    args, L, _ = small_accept_case(torch)
    tree, target = accept_args(args)
    out = rt.tree_accept(tree, target, L=L)
    s = torch.cuda.current_stream().cuda_stream
    for _ in range(200):
        rt.tree_accept(tree, target, L=L, out=out, stream=s)
    torch.cuda.synchronize()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        rt.tree_accept(tree, target, L=L, out=out, stream=s)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    bound = rt.bind("tree_accept", *accept_args(args), L=L, out=out)
    t2 = time.perf_counter()
    for _ in range(n):
        bound(s)
    t3 = time.perf_counter()
    torch.cuda.synchronize()
    log("host time per tree_accept call through Python: %.2f us checked "
        "(out= given), %.2f us bound" % ((t1 - t0) / n * 1e6,
                                         (t3 - t2) / n * 1e6))


def test_bad_torch_tensors_name_the_argument():
    """A wrong device, a non-contiguous tensor, an int64 where int32 is
    needed and a CPU tensor: TypeError/ValueError naming the argument,
    from the methods and from the torch ops, before anything launches."""
    rt, torch = _util.need_gpu()
    import kdtree_jit.torch  # noqa: F401
    args, L, _ = small_accept_case(torch)
    tree, target = accept_args(args)
    ops = torch.ops.kdtree
    tok, fc, ns, nn = args[0], args[1], args[2], args[3]

    def both(exc, match, **change):
        a = dict(tok=tok, fc=fc, ns=ns, nn=nn, target=target)
        a.update(change)
        with pytest.raises(exc, match="tree_accept: " + match):
            rt.tree_accept(kdtree_jit.Tree(a["nn"], a["tok"], None, None,
                                           None, a["fc"], a["ns"], None,
                                           None), a["target"], L)
        with pytest.raises(exc, match="tree_accept: " + match):
            ops.tree_accept(a["nn"], a["tok"], a["fc"], a["ns"], a["target"],
                            L, None)
    both(TypeError, "target must be int32, got int64", target=target.long())
    both(ValueError, "tree.first_child must be contiguous",
         fc=torch.zeros(1, 2 * fc.shape[1], dtype=torch.int32,
                        device="cuda")[:, ::2])
    both(TypeError, "target must be a CUDA array, got a tensor on cpu",
         target=target.cpu())
    if torch.cuda.device_count() > 1:
        both(ValueError, "target is on (CUDA device 1, the runtime on 0|"
                         "cuda:1, tree.token on cuda:0)",
             target=target.to("cuda:1"))
    else:
        log("one GPU: the wrong-device case ran on fake arrays only "
            "(test_errors.test_wrong_device, test_torch_ops."
            "test_fake_wrong_device_names_both)")
