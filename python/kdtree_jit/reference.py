"""Pure-Python references of docs/contract.md, written to be obviously
right, not fast: a binary heap for build_ddtree (§2), the walk of
tree_accept (§4), and a sort for draft_topk (§1).  No torch, no numpy.

Float semantics follow the kernels: every score is one f32 addition
(rounded to f32 here), and NaN counts as -inf.  On dyadic log-probs
(multiples of 2**-6 in [-8, 0]) every sum is exact, so the results equal
the kernels' node for node.

Conventions shared with the C reference (ref/build_ddtree.h): budget is
clamped to [0, N_MAX-1] and depth_limit to [1, L]; padded rows (past
n_nodes) hold token = root_token, parent -1, depth 0, position = past_len,
links -1, score -inf and only their own mask bit.
"""

import heapq
import math
import struct

NEG_INF = float("-inf")


def f32(x):
    """x rounded to float32; NaN becomes -inf."""
    if x != x:
        return NEG_INF
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(float("inf"), x)


def build_ddtree_one(lp, ids, budget, root_token, n_max, depth_limit=None,
                     past_len=0):
    """One request.  lp: [L][K] floats, ids: [L][K] ints.  Returns a dict
    with n_nodes and the rows token, parent, depth, position, first_child,
    next_sibling, score (lists of n_max) and anc_mask (n_max lists of
    ceil(n_max/32) uint32 words)."""
    L = len(lp)
    K = len(lp[0]) if L else 0
    budget = max(0, min(int(budget), n_max - 1))
    Lr = L if depth_limit is None else max(1, min(int(depth_limit), L))
    W = (n_max + 31) // 32

    def lpv(d, k):  # lp of depth d (1-based), rank k, NaN -> -inf
        v = float(lp[d - 1][k])
        return NEG_INF if v != v else v

    token, parent, depth, score = [int(root_token)], [-1], [0], [0.0]
    # Heap entries: (-score, rank path, depth, rank, parent).  On equal
    # scores the smaller rank path wins, a prefix before its extensions:
    # exactly Python's tuple order.
    heap = []
    if budget > 0 and L > 0 and K > 0:
        heap.append((-f32(0.0 + lpv(1, 0)), (0,), 1, 0, 0))
    while len(token) - 1 < budget and heap:
        neg, path, d, k, p = heapq.heappop(heap)
        s = -neg
        n = len(token)
        token.append(int(ids[d - 1][k]))
        parent.append(p)
        depth.append(d)
        score.append(s)
        if k + 1 < K:
            heapq.heappush(heap, (-f32(score[p] + lpv(d, k + 1)),
                                  path[:-1] + (k + 1,), d, k + 1, p))
        if d < Lr:
            heapq.heappush(heap, (-f32(s + lpv(d + 1, 0)), path + (0,),
                                  d + 1, 0, n))
    n = len(token)
    first_child = [-1] * n_max
    next_sibling = [-1] * n_max
    last = {}
    for i in range(1, n):  # node order is rank order among siblings
        p = parent[i]
        if p in last:
            next_sibling[last[p]] = i
        else:
            first_child[p] = i
        last[p] = i
    mask = []
    for i in range(n_max):
        words = [0] * W
        j = i
        while j >= 0:
            words[j // 32] |= 1 << (j % 32)
            j = parent[j] if j < n else -1
        mask.append(words)
    pad = n_max - n
    return {
        "n_nodes": n,
        "token": token + [int(root_token)] * pad,
        "parent": parent + [-1] * pad,
        "depth": depth + [0] * pad,
        "position": [int(past_len) + d for d in depth] + [int(past_len)] * pad,
        "first_child": first_child,
        "next_sibling": next_sibling,
        "score": score + [NEG_INF] * pad,
        "anc_mask": mask,
    }


def build_ddtree(lp, ids, budget, root_token, n_max, depth_limit=None,
                 past_len=None):
    """A batch: lp, ids [R][L][K]; budget, root_token, depth_limit,
    past_len [R] (the last two may be None).  Returns one dict per
    request (see build_ddtree_one)."""
    R = len(lp)
    return [build_ddtree_one(lp[r], ids[r], budget[r], root_token[r], n_max,
                             None if depth_limit is None else depth_limit[r],
                             0 if past_len is None else past_len[r])
            for r in range(R)]


def tree_accept_one(token, first_child, next_sibling, n_nodes, target, L,
                    max_accept=None):
    """§4 for one request (rows as lists).  Returns (accept_len,
    accept_idx [L+1], accept_token [L+1], bonus)."""
    n_max = len(token)
    n = max(1, min(int(n_nodes), n_max))
    cap = L + 1 if max_accept is None else max(1, min(int(max_accept), L + 1))
    cur, path = 0, [0]
    while len(path) < cap:
        c = first_child[cur]
        found = -1
        while cur < c < n:  # links point forward inside the tree
            if token[c] == target[cur]:
                found = c
                break
            nxt = next_sibling[c]
            if not (c < nxt < n):
                break
            c = nxt
        if found < 0:
            break
        cur = found
        path.append(cur)
    idx = path + [-1] * (L + 1 - len(path))
    tok = [token[i] for i in path] + [-1] * (L + 1 - len(path))
    return len(path), idx, tok, target[cur]


def draft_topk_row(row, k):
    """§1 for one row of logits (floats): (lp [k], ids [k]), the k largest
    in descending order, ties to the lower id, lp = logit - logsumexp."""
    vals = [NEG_INF if (v != v) else float(v) for v in row]
    order = sorted(range(len(vals)), key=lambda i: (-vals[i], i))[:k]
    m = max(vals)
    if m == NEG_INF:
        return [NEG_INF] * k, order
    lse = m + math.log(sum(math.exp(v - m) for v in vals))
    return [f32(vals[i] - lse) for i in order], order


def visibility(anc_mask_row_words, n):
    """The boolean row [n] of a mask row's words: j visible from the row."""
    return [bool((anc_mask_row_words[j // 32] >> (j % 32)) & 1)
            for j in range(n)]


def ddtree_from_logits(logits, budget, root_token, k, n_max,
                       depth_limit=None, past_len=0):
    """The whole drafting step for one request in pure Python: per-position
    top-k of the drafter's logits [L][V], then the best-first tree.
    Returns (tokens, parents, depths, visibility) over the n_nodes tree
    rows (root first; visibility[i][j]: row i attends to row j)."""
    lp, ids = [], []
    for row in logits:
        a, b = draft_topk_row(row, k)
        lp.append(a)
        ids.append(b)
    t = build_ddtree_one(lp, ids, budget, root_token, n_max, depth_limit,
                         past_len)
    n = t["n_nodes"]
    vis = [visibility(t["anc_mask"][i], n) for i in range(n)]
    return t["token"][:n], t["parent"][:n], t["depth"][:n], vis
