"""The decoder's output is the model's own, token for token: greedy
DDTree decoding on the torch backend (CPU, f32) against
model.generate(do_sample=False) of the same Hugging Face model, over
several prompts, one request and batches of unequal prompts, budgets 1,
16 and 64 (and 0: plain decoding), pages of 1, 16 and 64 tokens.  The
drafter knows the continuation and gets it right at depth d with a set
chance (rank 0 or rank 1 of its candidates), so rounds accept anything
from the bonus token alone to whole branches, through first and later
siblings; a noise drafter covers the rounds where nothing is accepted.
At T > 0, a chi-square test: the tokens the walk accepts follow the
target's distribution.  Over an FP8 (e4m3) cache the target is the model
reading that cache: tree decoding equals plain decoding (budget 0) over
the same cache."""
import _tiny
from _tiny import torch

from kdtree_jit.decode import Decoder
from kdtree_jit.decode.drafters import ScriptedDrafter

N_NEW = 40


def _references(m, ps, n=N_NEW, eos=None):
    return [_tiny.greedy(m, p, n, eos) for p in ps]


def _decode(m, ps, refs, budget, p_first=0.6, p_second=0.25, n=N_NEW,
            seed=0, **kw):
    dr = None
    if budget:
        dr = ScriptedDrafter(_tiny.script(ps, refs), kw.pop("depth", 15),
                             m.config.vocab_size, p_first, p_second,
                             seed=seed)
    dec = Decoder(m, dr, budget=budget, depth=dr.L if dr else 15, **kw)
    b = dec.start(ps, n)
    while not b.finished():
        dec.step(b)
        assert b.rounds <= n
    return b.tokens(), b


def _same(got, want, what):
    for r, (g, w) in enumerate(zip(got, want)):
        if g != w:
            k = next((i for i, (a, c) in enumerate(zip(g, w)) if a != c),
                     min(len(g), len(w)))
            raise AssertionError(
                "%s: request %d differs from generate() at token %d: got "
                "%s, want %s" % (what, r, k, g[k:k + 5], w[k:k + 5]))


def test_lossless_one_request_budgets():
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [1, 7, 19, 33])
    refs = _references(m, ps)
    accepted = 0
    for p, ref in zip(ps, refs):
        for budget in (1, 16, 64):
            got, b = _decode(m, [p], [ref], budget, eos_token_id=None)
            _same(got, [ref], "yarn R=1 budget %d" % budget)
            accepted = max(accepted, N_NEW - b.rounds)
    # Rounds accepted drafts (fewer rounds than tokens), or the test
    # would prove nothing about the walk.
    assert accepted >= N_NEW // 2


def test_lossless_batch_unequal_prompts():
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [12, 3, 27, 8], seed=2)
    refs = _references(m, ps)
    for budget, page in ((1, 1), (16, 64), (64, 16)):
        got, b = _decode(m, ps, refs, budget, page_size=page,
                         eos_token_id=None)
        _same(got, refs, "yarn R=4 budget %d page %d" % (budget, page))


def test_lossless_plain_rope_no_q_lora():
    m = _tiny.model("plain", seed=3)
    ps = _tiny.prompts(256, [5, 21, 14], seed=3)
    refs = _references(m, ps)
    for budget, page in ((1, 64), (16, 1), (64, 64)):
        got, _ = _decode(m, ps, refs, budget, page_size=page,
                         eos_token_id=None)
        _same(got, refs, "plain R=3 budget %d" % budget)
    got, _ = _decode(m, ps[1:2], refs[1:2], 16, eos_token_id=None)
    _same(got, refs[1:2], "plain R=1 budget 16")


def test_lossless_four_layers_prefill_chunks():
    m = _tiny.model("deep", seed=4)
    ps = _tiny.prompts(256, [30, 9], seed=4)
    refs = _references(m, ps)
    for budget, chunk in ((16, 4), (64, 128)):
        got, _ = _decode(m, ps, refs, budget, prefill_chunk=chunk,
                         eos_token_id=None)
        _same(got, refs, "deep R=2 budget %d chunk %d" % (budget, chunk))


def test_lossless_plain_decoding_budget_0():
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [4, 17, 9], seed=5)
    refs = _references(m, ps)
    got, b = _decode(m, ps, refs, 0, eos_token_id=None)
    _same(got, refs, "budget 0")
    assert b.rounds == N_NEW - 1  # one token a round after the prefill's


def test_lossless_noise_drafter():
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [6, 13], seed=6)
    refs = _references(m, ps)
    got, _ = _decode(m, ps, refs, 64, p_first=0.0, p_second=0.0,
                     eos_token_id=None)
    _same(got, refs, "noise drafter")


def test_lossless_eos_and_limits():
    m = _tiny.model("yarn")
    ps = _tiny.prompts(256, [10, 5, 22], seed=7)
    full = _references(m, ps)
    # An EOS the first request meets at its 9th token: generate() stops
    # there; the others run to their own limits.
    eos = full[0][8]
    refs = _references(m, ps, eos=eos)
    limits = [N_NEW, 11, 25]
    refs = [r[:n] for r, n in zip(refs, limits)]
    assert len(refs[0]) == 9 and refs[0][-1] == eos
    dr = ScriptedDrafter(_tiny.script(ps, full), 15, 256, 0.7, 0.2)
    dec = Decoder(m, dr, budget=16, eos_token_id=eos)
    b = dec.start(ps, limits)
    while not b.finished():
        dec.step(b)
    _same(b.tokens(), refs, "eos %d, limits %s" % (eos, limits))
    # An EOS as the prefill's first token ends the request at once.
    one = Decoder(m, None, budget=0, eos_token_id=full[1][0]).generate(
        ps[1:2], 5)
    assert one == [[full[1][0]]]


def _chi2_p(observed, expected):
    """The p-value of Pearson's statistic, cells with an expected count
    under 5 pooled into one."""
    small = expected < 5
    o = torch.cat([observed[~small], observed[small].sum().view(1)])
    e = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = e > 0
    o, e = o[keep], e[keep]
    stat = ((o - e) ** 2 / e).sum()
    df = torch.tensor(float(len(o) - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, stat / 2))


def test_lossless_sampling_chi_square():
    V, T, n = 8, 0.25, 1500
    m = _tiny.model("yarn", vocab=V, seed=8)
    prompt = [3, 1, 4]
    # The exact law of the first three tokens, from the model itself.
    seqs = torch.cartesian_prod(*[torch.arange(V)] * 3)
    ids = torch.cat([torch.tensor(prompt).expand(len(seqs), 3), seqs], 1)
    with torch.no_grad():
        lp = torch.log_softmax(m(ids).logits[:, 2:5].double() / T, -1)
    law = lp.gather(2, seqs.unsqueeze(2)).squeeze(2).sum(1).exp()
    law = law.view(V, V, V)

    class Drafter(object):
        """Fixed random logits a depth: drafts right sometimes."""
        g = torch.Generator().manual_seed(9)
        table = torch.randn((3, V), generator=g) * 2

        def __call__(self, inp):
            return self.table.expand(inp.bonus.shape[0], -1, -1).clone()

    dec = Decoder(m, Drafter(), budget=10, depth=3, topk=4, temperature=T,
                  eos_token_id=None, prefill_chunk=4, page_size=16,
                  generator=torch.Generator().manual_seed(10))
    b = dec.start([prompt] * n, 3)
    accepted = 0
    while not b.finished():
        dec.step(b)
        accepted += int((b.accept_len - 1).sum())
    toks = torch.tensor(b.tokens())
    assert toks.shape == (n, 3)
    assert accepted > n // 2  # drafts were accepted, not only bonuses
    cells = (toks[:, 0] * V + toks[:, 1]) * V + toks[:, 2]
    count = torch.bincount(cells, minlength=V ** 3).double().view(V, V, V)
    for dims, what in (((2,), "t0,t1"), ((0,), "t1,t2"), ((1,), "t0,t2")):
        o = count.sum(dims).reshape(-1)
        e = law.sum(dims).reshape(-1) * n
        p = _chi2_p(o, e)
        assert p > 1e-3, "(%s) p = %.2g" % (what, p)
    # The test can fail: the same counts against the law at another
    # temperature are rejected.
    with torch.no_grad():
        lp2 = torch.log_softmax(m(ids).logits[:, 2:5].double() / (T * 1.5),
                                -1)
    law2 = lp2.gather(2, seqs.unsqueeze(2)).squeeze(2).sum(1).exp()
    assert _chi2_p(count.sum(2).reshape(-1),
                   law2.view(V, V, V).sum(2).reshape(-1) * n) < 1e-6


def test_lossless_successor_target_f32_and_bf16():
    """decode.targets' construction (the bench's target): greedy decoding
    is the successor chain with a wide margin at every step, so in f32
    and in bf16 tree decoding at budgets 16, 64 and 256 gives plain
    decoding's tokens for the whole run, and the drafter's acceptance is
    what it was set to."""
    from kdtree_jit.decode.targets import chain, margins, successor_target
    n = 48
    for dtype in (torch.float32, torch.bfloat16):
        m = _tiny.model("deep", seed=11, dtype=dtype)
        succ = successor_target(m, seed=12)
        ps = _tiny.prompts(256, [3, 30, 11], seed=13)
        want = [chain(succ, [succ[p[-1]]], n)[0].tolist() for p in ps]
        ids = torch.tensor([p[-3:] + w for p, w in zip(ps, want)])
        gap, top = margins(m, ids)
        # Teacher-forced, every step's winner leads by far more than
        # bf16 rounding (2^-8 of the logit).
        assert float((gap / top).min()) > 0.25, dtype
        plain = Decoder(m, None, budget=0, eos_token_id=None).generate(ps, n)
        _same(plain, want, "%s plain decoding" % dtype)
        for budget in (16, 64, 256):
            got, b = _decode(m, ps, want, budget, p_first=0.9,
                             p_second=0.0, n=n, eos_token_id=None)
            _same(got, plain, "%s budget %d" % (dtype, budget))
            # 1 + sum of 0.9^d over 15 depths is 8.1 tokens a round: a
            # 48-token run takes a handful of rounds.
            assert b.rounds <= 12, (dtype, budget, b.rounds)


def test_lossless_e4m3_cache_against_plain_decoding():
    """An FP8 cache (what SGLang's and vLLM's fp8_e4m3 caches hold, with
    SGLang's scale 1 and a vLLM-like scale) changes the target: its
    reference is plain decoding over the same cache.  Tree decoding at
    budgets 1, 16 and 64 gives those tokens, in fewer rounds than
    tokens."""
    m = _tiny.model("yarn", seed=4)
    ps = _tiny.prompts(256, [9, 2, 23], seed=4)
    for scale, page in ((1.0, 64), (0.05, 1)):
        kw = dict(kv_cache_dtype="e4m3", kv_scale=scale, page_size=page,
                  eos_token_id=None)
        plain, _ = _decode(m, ps, None, 0, **kw)
        assert all(len(t) == N_NEW for t in plain)
        for budget in (1, 16, 64):
            got, b = _decode(m, ps, plain, budget, **kw)
            assert b.cache.data.dtype == torch.float8_e4m3fn
            _same(got, plain, "e4m3 scale %g page %d budget %d"
                  % (scale, page, budget))
            if budget > 1:
                assert b.rounds < N_NEW * 3 // 4, (scale, budget, b.rounds)
