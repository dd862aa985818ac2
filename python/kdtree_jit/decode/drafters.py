"""Drafters with a known acceptance, for tests and benchmarks.

A real DDTree drafter (a DFlash-style block-diffusion model) is the
user's; these stand in for it where what matters is how often the target
accepts: ScriptedDrafter knows each request's continuation (the target's
own, computed beforehand) and, at each depth, puts the right token at
rank 0 with probability p_first, at rank 1 with probability p_second, or
leaves it out of its top candidates altogether.  The draw is a hash of
(request, position, depth, seed), not a random generator: the same
position gets the same draft on every backend and in every replay of a
CUDA graph, and the drafter never syncs.
"""
import torch

_HIGH, _SECOND, _OUT = 12.0, 10.0, -40.0


def _uniform(x):
    """A hash of int64 x to [0, 1) (a multiply-xorshift mix, in the 62 bits
    an int64 product keeps positive)."""
    m = (1 << 62) - 1
    x = (x * 0x5851F42D4C957F2D) & m
    x = ((x ^ (x >> 29)) * 0x14057B7EF767814F) & m
    x = x ^ (x >> 32)
    return (x & ((1 << 24) - 1)).double() / float(1 << 24)


class ScriptedDrafter(object):
    """script: int tensor [R, T] on the model's device, request r's
    tokens by position (prompt then continuation); depth L; vocab V.
    p_first, p_second: a float or one per depth.  Logits are small noise
    (a fixed table) with the scripted token raised; a position past the
    script drafts noise alone.

    Every draft is a function of (request, position of the bonus token)
    alone, so the drafts of every position the script covers are worked
    out here, once, as the few logits each one changes (the scripted
    token's and a decoy's): a call is then a handful of device
    operations (a gather of those logits at the request's position, a
    copy of the noise, a scatter), about what a real drafter's output
    layer costs beside its matmul, and never a sync."""

    def __init__(self, script, depth, vocab, p_first=0.8, p_second=0.1,
                 seed=0, dtype=torch.float32):
        script = script.long()
        self.L, self.V, self.seed = depth, vocab, seed
        dev = script.device

        def per_depth(p):
            p = [float(p)] * depth if isinstance(p, (int, float)) else \
                [float(x) for x in p]
            if len(p) != depth:
                raise ValueError("ScriptedDrafter: %d probabilities for %d "
                                 "depths" % (len(p), depth))
            return torch.tensor(p, dtype=torch.float64, device=dev)

        self.p1 = per_depth(p_first)
        self.p2 = self.p1 + per_depth(p_second)
        g = torch.Generator().manual_seed(seed)
        self.noise = torch.rand((depth, vocab), generator=g).to(dev, dtype)
        R, T = script.shape
        self.T = T
        # Position q of the bonus token drafts positions q + 1 + d.
        d = torch.arange(depth, device=dev)
        pos = torch.arange(T, device=dev).view(1, T, 1) + 1 + d  # [1, T, L]
        inside = pos < T
        right = script.gather(1, pos.clamp(max=T - 1).view(1, -1).expand(
            R, -1)).view(R, T, depth)
        r = torch.arange(R, device=dev).view(R, 1, 1)
        u = _uniform(((r * 1000003 + pos) * 64 + d) * 4096 + seed)
        first = (u < self.p1) & inside
        second = (u >= self.p1) & (u < self.p2) & inside
        decoy = (right + 1) % vocab
        noise = self.noise.float()
        at = noise.unsqueeze(0).unsqueeze(0).expand(R, T, -1, -1)

        def noise_of(tok):
            return at.gather(3, tok.unsqueeze(3)).squeeze(3)

        z = torch.zeros_like(right, dtype=torch.float32)
        decoy_v = noise_of(decoy) + torch.where(first | ~inside, z,
                                                z + _HIGH)
        right_v = torch.where(first, z + _HIGH, torch.where(
            second, z + _SECOND, z + _OUT))
        right_v = torch.where(inside, right_v, noise_of(right))
        # [R, T, L, 2]: the decoy, then the scripted token (which wins
        # where the two are one token), as scatter_ takes them.
        self.tok = torch.stack([decoy, right], dim=3)
        self.val = torch.stack([decoy_v, right_v], dim=3).to(dtype)

    def expected_accept(self, depth=None):
        """Expected tokens a round (accept_len) if the tree holds the
        right token, down to `depth` (default L), wherever the drafter
        ranks it first or second: 1 + the sum over those depths of the
        chance that every depth up to it hit.  With p_second = 0 a tree
        of budget B >= depth holds it (its first choices are the best
        chain), so this is exact for depth = min(B, L)."""
        hit = torch.cumprod(self.p2[:depth], 0)
        return 1.0 + float(hit.sum())

    def __call__(self, inp):
        R = inp.bonus.shape[0]
        L = self.L
        q = inp.position.long().clamp_(max=self.T - 1).view(R, 1, 1, 1) \
            .expand(R, 1, L, 2)
        tok = self.tok.gather(1, q).view(R, L, 2)
        val = self.val.gather(1, q).view(R, L, 2)
        logits = self.noise.unsqueeze(0).expand(R, -1, -1).clone()
        return logits.scatter_(2, tok, val)
