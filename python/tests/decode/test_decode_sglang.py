"""Our tree and accept in SGLang's tree-verify shapes (decode.sglang):
a tree worked out by hand, SGLang's greedy walk (its verify_tree_greedy,
restated here from its definition) over the converted inputs against our
walk converted, and SGLang's own functions where the sglang package
imports on this machine."""
import importlib
import random

import pytest

import _tiny  # noqa: F401  (the path to kdtree_jit, torch or a skip)
from _tiny import torch

import kdtree_jit
from kdtree_jit.decode import sglang
from kdtree_jit.decode.torch_backend import TorchBackend

I32 = torch.int32


def _hand_tree():
    """Two requests of N = 8 rows (one padding row each):

        request 0:  0 (100) -+- 1 (11) --- 3 (13)
                             +- 2 (12) -+- 4 (14) --- 6 (16)
                                        +- 5 (15)
        request 1:  0 (200) --- 1 (21) -+- 2 (22)
                                        +- 3 (23)     rows 4..7 padding
    """
    par = [[-1, 0, 0, 1, 2, 2, 4, -1], [-1, 0, 1, 1, -1, -1, -1, -1]]
    tok = [[100, 11, 12, 13, 14, 15, 16, 100],
           [200, 21, 22, 23, 200, 200, 200, 200]]
    n = [7, 4]
    past = [5, 2]
    R, N = 2, 8
    depth = [[0] * N for _ in range(R)]
    fc = [[-1] * N for _ in range(R)]
    ns = [[-1] * N for _ in range(R)]
    mask = [[0] * N for _ in range(R)]
    for r in range(R):
        last = {}
        for i in range(N):
            p = par[r][i]
            if i < n[r] and p >= 0:
                depth[r][i] = depth[r][p] + 1
                if p in last:
                    ns[r][last[p]] = i
                else:
                    fc[r][p] = i
                last[p] = i
            j, m = i, 0
            while j >= 0:
                m |= 1 << j
                j = par[r][j] if i < n[r] else -1
            mask[r][i] = m
    pos = [[past[r] + d for d in depth[r]] for r in range(R)]
    t = kdtree_jit.Tree(torch.tensor(n, dtype=I32),
                        torch.tensor(tok, dtype=I32),
                        torch.tensor(par, dtype=I32),
                        torch.tensor(depth, dtype=I32),
                        torch.tensor(pos, dtype=I32),
                        torch.tensor(fc, dtype=I32),
                        torch.tensor(ns, dtype=I32), None,
                        torch.tensor(mask, dtype=I32).unsqueeze(-1))
    return t, past


def test_sglang_inputs_by_hand():
    t, past = _hand_tree()
    v = sglang.verify_inputs(t, past)
    assert v.candidates.dtype == torch.int64
    assert v.candidates.tolist() == t.token.tolist()
    assert v.retrive_index.tolist() == [list(range(8)), list(range(8, 16))]
    assert v.retrive_next_token.tolist() == [[1, 3, 4, -1, 6, -1, -1, -1],
                                             [1, 2, -1, -1, -1, -1, -1, -1]]
    assert v.retrive_next_sibling.tolist() == [[-1, 2, -1, -1, 5, -1, -1, -1],
                                               [-1, -1, 3, -1, -1, -1, -1,
                                                -1]]
    assert v.positions.tolist() == [5, 6, 6, 7, 7, 7, 8, 5,
                                    2, 3, 4, 4, 2, 2, 2, 2]
    qlen0 = [[0], [0, 1], [0, 2], [0, 1, 3], [0, 2, 4], [0, 2, 5],
             [0, 2, 4, 6], [7]]
    qlen1 = [[0], [0, 1], [0, 1, 2], [0, 1, 3], [4], [5], [6], [7]]
    rows = [[[j in s for j in range(8)] for s in q] for q in (qlen0, qlen1)]
    full = []
    for r, p in enumerate(past):
        for row in rows[r]:
            full += [True] * p + row
    assert v.custom_mask.tolist() == full
    assert len(full) == sum(past) * 8 + 2 * 8 * 8  # SGLang's FULL_MASK size
    q = sglang.verify_inputs(t, mask_mode=sglang.QLEN_ONLY)
    assert q.custom_mask.view(2, 8, 8).tolist() == rows
    b = sglang.verify_inputs(t, mask_mode=sglang.QLEN_ONLY_BITPACKING)
    assert b.custom_mask.dtype == torch.uint8
    assert b.custom_mask.tolist() == [1, 3, 5, 11, 21, 37, 85, 128,
                                      1, 3, 7, 11, 16, 32, 64, 128]
    with pytest.raises(ValueError, match="seq_lens"):
        sglang.verify_inputs(t)


def test_sglang_accept_by_hand():
    t, past = _hand_tree()
    # Request 0 walks 0 -> 2 -> 4 -> 6 and gets 77; request 1 stops at
    # the root (no child of it is 99) and gets 99.
    target = torch.zeros(2, 8, dtype=I32)
    target[0, 0], target[0, 2], target[0, 4], target[0, 6] = 12, 14, 16, 77
    target[1, 0] = 99
    L = 4
    acc = kdtree_jit.Accept(*[torch.empty(s, dtype=I32)
                              for s in ((2,), (2, L + 1), (2, L + 1), (2,))])
    TorchBackend().tree_accept(t, target, L, acc)
    assert acc.accept_idx.tolist() == [[0, 2, 4, 6, -1], [0, -1, -1, -1, -1]]
    o = sglang.accept_outputs(acc, 8)
    assert o.accept_index.dtype == o.predicts.dtype == \
        o.accept_token_num.dtype == I32
    assert o.accept_index.tolist() == [[0, 2, 4, 6, -1], [8, -1, -1, -1, -1]]
    assert o.accept_token_num.tolist() == [3, 0]
    assert o.predicts.tolist() == [12, 0, 14, 0, 16, 0, 77, 0,
                                   99, 0, 0, 0, 0, 0, 0, 0]


def _sglang_greedy(v, target, steps):
    """SGLang's verify_tree_greedy, restated from its definition: per
    request, from row 0, follow retrive_next_token then
    retrive_next_sibling until a candidate equals the target at the last
    accepted row; accept it; at most steps - 1 times."""
    cand, ri = v.candidates.tolist(), v.retrive_index.tolist()
    nt, ns = v.retrive_next_token.tolist(), v.retrive_next_sibling.tolist()
    tp = target.reshape(-1).tolist()
    bs, n = len(cand), len(cand[0])
    predicts = [0] * (bs * n)
    index = [[-1] * steps for _ in range(bs)]
    num = [0] * bs
    for b in range(bs):
        last = ri[b][0]
        index[b][0] = last
        cur = 0
        for _ in range(1, steps):
            cur = nt[b][cur]
            while cur != -1:
                if cand[b][cur] == tp[last]:
                    predicts[last] = tp[last]
                    num[b] += 1
                    index[b][num[b]] = ri[b][cur]
                    last = ri[b][cur]
                    break
                cur = ns[b][cur]
            if cur == -1:
                break
        predicts[last] = tp[last]
    return predicts, index, num


def _random_batch(rng, g, R, L, K, N, V):
    lp = torch.log_softmax(torch.randn(R, L, K, generator=g) * 2, -1)
    lp = lp.sort(-1, descending=True).values
    ids = torch.randint(0, V, (R, L, K), generator=g, dtype=I32)
    t = kdtree_jit.Tree(*[torch.empty(R, dtype=I32)] + [
        torch.empty(R, N, dtype=I32) for _ in range(6)] + [
        None, torch.empty(R, N, (N + 31) // 32, dtype=I32)])
    past = [rng.randint(0, 9) for _ in range(R)]
    TorchBackend().build_ddtree(
        kdtree_jit.Draft(lp, ids),
        torch.tensor([rng.randint(0, N - 1) for _ in range(R)], dtype=I32),
        torch.randint(0, V, (R,), generator=g, dtype=I32),
        torch.tensor(past, dtype=I32), N, t)
    target = torch.randint(0, V, (R, N), generator=g, dtype=I32)
    for r in range(R):
        for i in range(int(t.n_nodes[r])):
            kids = [j for j in range(N) if int(t.parent[r, j]) == i]
            if kids and rng.random() < 0.85:
                target[r, i] = t.token[r, rng.choice(kids)]
    return t, past, target


def _ours(t, past, target, L):
    """Our walk of t converted, and t converted: (AcceptOutputs,
    VerifyInputs)."""
    R, N = t.token.shape
    acc = kdtree_jit.Accept(*[torch.empty(s, dtype=I32) for s in
                              ((R,), (R, L + 1), (R, L + 1), (R,))])
    TorchBackend().tree_accept(t, target, L, acc)
    return sglang.accept_outputs(acc, N), sglang.verify_inputs(t, past)


def test_sglang_walk_on_our_trees():
    rng, g = random.Random(21), torch.Generator().manual_seed(21)
    for N in (2, 9, 20, 33, 65):
        L = 6
        t, past, target = _random_batch(rng, g, 4, L, 3, N, 5)
        o, v = _ours(t, past, target, L)
        predicts, index, num = _sglang_greedy(v, target, L + 1)
        assert o.accept_index.tolist() == index
        assert o.accept_token_num.tolist() == num
        assert o.predicts.tolist() == predicts
        if N <= 32:  # the packed mask: one word a row, bit j = row j
            p = sglang.verify_inputs(t, mask_mode=sglang.QLEN_ONLY_BITPACKING)
            assert p.custom_mask.dtype == (
                torch.uint8 if N <= 8 else torch.uint16 if N <= 16 else
                torch.uint32)
            q = sglang.verify_inputs(t, mask_mode=sglang.QLEN_ONLY)
            bits = q.custom_mask.view(-1, N).long() << torch.arange(N)
            assert p.custom_mask.long().tolist() == bits.sum(1).tolist()
        # Links and positions as SGLang derives them from the mask.
        vis = v.custom_mask
        off = 0
        for r in range(4):
            w = past[r] + N
            m = vis[off:off + N * w].view(N, w)[:, past[r]:]
            off += N * w
            n = int(t.n_nodes[r])
            for i in range(n):
                anc = [j for j in range(i) if m[i, j]]
                assert int(v.positions[r * N + i]) == past[r] + len(anc)
                kids = [k for k in range(i + 1, n) if m[k, i] and
                        max([j for j in range(k) if m[k, j]]) == i]
                assert int(v.retrive_next_token[r, i]) == (kids[0] if kids
                                                           else -1)


def test_sglang_own_functions_where_they_import():
    """SGLang's verify_tree_greedy_func on our converted inputs (needs the
    sglang package and a platform it runs on)."""
    try:
        mod = importlib.import_module(
            "sglang.kernels.ops.speculative.spec_tree")
        fn = mod.verify_tree_greedy_func
    except Exception as e:  # not installed, or no platform of its own
        pytest.skip("sglang's spec_tree does not import here: %s"
                    % str(e).splitlines()[0][:120])
    rng, g = random.Random(22), torch.Generator().manual_seed(22)
    L, N = 5, 17
    t, past, target = _random_batch(rng, g, 3, L, 3, N, 5)
    o, v = _ours(t, past, target, L)
    predicts = torch.zeros(3 * N, dtype=I32)
    index = torch.full((3, L + 1), -1, dtype=I32)
    num = torch.empty(3, dtype=I32)
    fn(predicts, index, num, v.candidates, v.retrive_index,
       v.retrive_next_token, v.retrive_next_sibling, target.long())
    assert index.tolist() == o.accept_index.tolist()
    assert num.tolist() == o.accept_token_num.tolist()
    assert predicts.tolist() == o.predicts.tolist()
