"""The pure-Python references against the spec's own words: build_ddtree
against brute force (every prefix scored, the B best taken), hand-made
edge cases, the walk of tree_accept, and draft_topk.  No GPU, no library."""
import itertools
import math
import random

import _util  # noqa: F401  (path set-up)
from kdtree_jit import reference as ref

NEG_INF = float("-inf")


def dyadic(rng, lo=-8.0):
    # Multiples of 2^-6 in [lo, 0]: every sum is exact.
    return -rng.randrange(0, int(-lo * 64) + 1) / 64.0


def brute_force(lp, ids, budget, depth_limit=None):
    """Every prefix (rank path) with its score; sort by (score desc, path
    asc); the first `budget`.  Valid when scores are exact (dyadic)."""
    L, K = len(lp), len(lp[0])
    Lr = L if depth_limit is None else depth_limit
    out = []
    for d in range(1, Lr + 1):
        for path in itertools.product(range(K), repeat=d):
            s = sum(lp[i][k] for i, k in enumerate(path))
            out.append((-s, path))
    out.sort()
    return out[:budget]


def tree_paths(t):
    """Rank paths of the built nodes, recovered from token ids (unique per
    depth in these tests)."""
    paths = {0: ()}
    res = []
    for i in range(1, t["n_nodes"]):
        p = t["parent"][i]
        paths[i] = paths[p] + (t["_rank"][i],)
        res.append((-t["score"][i], paths[i]))
    return res


def with_ranks(t, ids):
    # ids[d][k] = unique token; recover k from token and depth.
    t["_rank"] = [None] + [ids[t["depth"][i] - 1].index(t["token"][i])
                           for i in range(1, t["n_nodes"])]
    return t


def unique_ids(L, K):
    return [[1000 * d + k for k in range(K)] for d in range(L)]


def test_matches_brute_force_on_dyadic_inputs():
    rng = random.Random(7)
    for trial in range(60):
        L, K = rng.randint(1, 4), rng.randint(1, 4)
        lp = [sorted((dyadic(rng) for _ in range(K)), reverse=True)
              for _ in range(L)]
        if trial % 3 == 0:  # exact ties on purpose
            lp = [[-1.0] * K for _ in range(L)]
        ids = unique_ids(L, K)
        n_max = rng.randint(1, 40)
        budget = rng.randint(0, n_max + 3)
        Lr = rng.randint(1, L)
        t = with_ranks(ref.build_ddtree_one(lp, ids, budget, 5, n_max, Lr),
                       ids)
        want = brute_force(lp, ids, min(budget, n_max - 1), Lr)
        assert tree_paths(t) == want, (trial, L, K, budget, n_max, Lr)


def test_root_only_and_padding():
    t = ref.build_ddtree_one([[-1.0, -2.0]], [[3, 4]], 0, 9, 4, past_len=7)
    assert t["n_nodes"] == 1
    assert t["token"] == [9, 9, 9, 9]
    assert t["parent"] == [-1] * 4
    assert t["depth"] == [0] * 4
    assert t["position"] == [7] * 4
    assert t["first_child"] == [-1] * 4 and t["next_sibling"] == [-1] * 4
    assert t["score"] == [0.0] + [NEG_INF] * 3
    assert t["anc_mask"] == [[1], [2], [4], [8]]


def test_chain_star_and_links():
    # K = 1: a chain.
    t = ref.build_ddtree_one([[-1.0], [-1.0], [-1.0]], [[1], [2], [3]], 10,
                             9, 8)
    assert t["n_nodes"] == 4
    assert t["parent"][:4] == [-1, 0, 1, 2]
    assert t["anc_mask"][3] == [0b1111]
    # L = 1: a star, siblings in rank order.
    t = ref.build_ddtree_one([[-0.5, -1.0, -2.0]], [[7, 8, 9]], 3, 0, 5)
    assert t["parent"][:4] == [-1, 0, 0, 0]
    assert t["first_child"][:4] == [1, -1, -1, -1]
    assert t["next_sibling"][:4] == [-1, 2, 3, -1]
    assert t["token"][:4] == [0, 7, 8, 9]


def test_zero_lp_child_ties_its_parent_and_comes_after_it():
    t = ref.build_ddtree_one([[0.0, -1.0], [0.0, -1.0]], unique_ids(2, 2), 2,
                             0, 8)
    # (0) and (0,0) both score 0: the prefix first.
    assert t["depth"][1:3] == [1, 2]
    assert t["parent"][2] == 1


def test_nan_and_inf_count_as_minus_infinity():
    # Rows descending as draft_topk writes them, NaN counting as -inf.
    lp = [[-1.0, float("nan")], [-2.0, NEG_INF]]
    t = ref.build_ddtree_one(lp, unique_ids(2, 2), 10, 0, 16)
    # Every candidate is still a node (budget not reached): 2 + 2*2 = 6,
    # the -inf ones in rank-path order: (0,1), (1), (1,0), (1,1).
    assert t["n_nodes"] == 7
    assert t["score"][:7] == [0.0, -1.0, -3.0] + [NEG_INF] * 4
    assert t["depth"][:7] == [0, 1, 2, 2, 1, 2, 2]
    assert t["parent"][:7] == [-1, 0, 1, 1, 0, 4, 4]


def test_budget_clamped_to_rows():
    t = ref.build_ddtree_one([[-1.0] * 4] * 4, unique_ids(4, 4), 1000, 0, 9)
    assert t["n_nodes"] == 9


def test_scores_never_increase_and_parents_first():
    rng = random.Random(3)
    for _ in range(30):
        L, K = rng.randint(1, 6), rng.randint(1, 6)
        lp = [sorted((dyadic(rng) for _ in range(K)), reverse=True)
              for _ in range(L)]
        t = ref.build_ddtree_one(lp, unique_ids(L, K), 64, 0, 65)
        n = t["n_nodes"]
        assert all(t["score"][i] >= t["score"][i + 1] for i in range(1, n - 1))
        assert all(t["parent"][i] < i for i in range(1, n))
        assert all(t["depth"][i] == t["depth"][t["parent"][i]] + 1
                   for i in range(1, n))


def test_tree_accept_walk():
    #      0
    #     / \
    #    1   2      tokens 5, 5 (duplicate: first in sibling order wins)
    #    |
    #    3          token 6
    token = [0, 5, 5, 6, 0]
    fc = [1, 3, -1, -1, -1]
    ns = [-1, 2, -1, -1, -1]
    target = [5, 6, 9, 8, 0]
    assert ref.tree_accept_one(token, fc, ns, 4, target, 3) == \
        (3, [0, 1, 3, -1], [0, 5, 6, -1], 8)
    assert ref.tree_accept_one(token, fc, ns, 4, target, 3, max_accept=2) == \
        (2, [0, 1, -1, -1], [0, 5, -1, -1], 6)
    assert ref.tree_accept_one(token, fc, ns, 4, [4, 0, 0, 0, 0], 3) == \
        (1, [0, -1, -1, -1], [0, -1, -1, -1], 4)
    # n_nodes = 1: the root only, links past it ignored.
    assert ref.tree_accept_one(token, fc, ns, 1, target, 3)[0] == 1


def test_draft_topk_row():
    lp, ids = ref.draft_topk_row([1.0, 3.0, 3.0, float("nan"), -2.0], 3)
    assert ids == [1, 2, 0]
    lse = math.log(math.exp(1) + 2 * math.exp(3) + math.exp(-2))
    assert abs(lp[0] - (3 - lse)) < 1e-6
    assert abs(lp[2] - (1 - lse)) < 1e-6
    lp, ids = ref.draft_topk_row([NEG_INF, NEG_INF], 2)
    assert ids == [0, 1] and lp == [NEG_INF, NEG_INF]


def test_ddtree_from_logits_visibility():
    logits = [[0.0, 2.0, 1.0], [0.5, 0.0, 3.0]]
    tokens, parents, depths, vis = ref.ddtree_from_logits(logits, 3, 42, 2, 8)
    assert tokens[0] == 42 and parents[0] == -1 and depths[0] == 0
    for i in range(len(tokens)):
        j, anc = i, set()
        while j >= 0:
            anc.add(j)
            j = parents[j]
        assert [k in anc for k in range(len(tokens))] == vis[i]


def test_python_reference_equals_c_reference():
    """The two references (C: ref/build_ddtree.c; Python) on random batches
    with dyadic log-probs, ties, -inf and NaN: identical, bit for bit."""
    got = _util.c_reference("build_ddtree")
    if got is None:
        import pytest
        pytest.skip("no C compiler or no ref/build_ddtree.c")
    ffi, lib = got
    rng = random.Random(11)
    for trial in range(40):
        R, L, K = rng.randint(1, 4), rng.randint(1, 6), rng.randint(1, 5)
        n_max = rng.choice([1, 2, 17, 33, 65])
        lp = []
        for r in range(R):
            rows = []
            for d in range(L):
                row = [dyadic(rng) for _ in range(K)]
                if rng.random() < 0.2:
                    row[rng.randrange(K)] = NEG_INF
                if rng.random() < 0.1:
                    row[rng.randrange(K)] = float("nan")
                if rng.random() < 0.2:
                    row = [0.0] * K
                rows.append(sorted(row, key=lambda v: -(v if v == v else NEG_INF)))
            lp.append(rows)
        ids = [[[rng.randrange(6) for _ in range(K)] for _ in range(L)]
               for _ in range(R)]
        budget = [rng.randint(0, n_max + 2) for _ in range(R)]
        depth = [rng.randint(1, L) for _ in range(R)]
        root = [rng.randrange(100) for _ in range(R)]
        past = [rng.randrange(50) for _ in range(R)]
        want = ref.build_ddtree(lp, ids, budget, root, n_max, depth, past)
        W = (n_max + 31) // 32
        outs = {k: ffi.new("int32_t[]", R * n_max) for k in
                ("token", "parent", "depth", "position", "first_child",
                 "next_sibling")}
        nn = ffi.new("int32_t[]", R)
        score = ffi.new("float[]", R * n_max)
        mask = ffi.new("uint32_t[]", R * n_max * W)
        lib.ref_build_ddtree(
            nn, outs["token"], outs["parent"], outs["depth"],
            outs["position"], outs["first_child"], outs["next_sibling"],
            score, mask, ffi.new("float[]", _util.flat(lp)),
            ffi.new("int32_t[]", _util.flat(ids)),
            ffi.new("int32_t[]", budget), ffi.new("int32_t[]", depth),
            ffi.new("int32_t[]", root), ffi.new("int32_t[]", past), R, L, K,
            n_max)
        for r in range(R):
            w = want[r]
            assert nn[r] == w["n_nodes"], trial
            for k, arr in outs.items():
                assert list(arr[r * n_max:(r + 1) * n_max]) == w[k], (trial, k)
            assert list(score[r * n_max:(r + 1) * n_max]) == w["score"], trial
            assert list(mask[r * n_max * W:(r + 1) * n_max * W]) == \
                _util.flat(w["anc_mask"]), trial


def test_python_walk_equals_c_walk():
    got = _util.c_reference("tree_accept")
    if got is None:
        import pytest
        pytest.skip("no C compiler or no ref/tree_accept.c")
    ffi, lib = got
    rng = random.Random(5)
    for trial in range(50):
        L = rng.randint(1, 8)
        lp = [[dyadic(rng, -2.0) for _ in range(3)] for _ in range(L)]
        lp = [sorted(r, reverse=True) for r in lp]
        ids = [[rng.randrange(4) for _ in range(3)] for _ in range(L)]
        n_max = 33
        t = ref.build_ddtree_one(lp, ids, rng.randint(0, 32), 0, n_max)
        target = [rng.randrange(4) for _ in range(n_max)]
        cap = rng.choice([None, 0, 1, 2, 5, 100])
        want = ref.tree_accept_one(t["token"], t["first_child"],
                                   t["next_sibling"], t["n_nodes"], target,
                                   L, cap)
        al, ai = ffi.new("int32_t[1]"), ffi.new("int32_t[]", L + 1)
        at, bo = ffi.new("int32_t[]", L + 1), ffi.new("int32_t[1]")
        lib.ref_tree_accept(al, ai, at, bo,
                            ffi.new("int32_t[]", t["token"]),
                            ffi.new("int32_t[]", t["first_child"]),
                            ffi.new("int32_t[]", t["next_sibling"]),
                            ffi.new("int32_t[]", [t["n_nodes"]]),
                            ffi.new("int32_t[]", target),
                            ffi.NULL if cap is None else ffi.new("int32_t[]", [cap]),
                            1, L, n_max)
        assert (al[0], list(ai), list(at), bo[0]) == want, trial
