"""DDTree speculative decoding of a Hugging Face DeepseekV3ForCausalLM on
the four kernels (or their torch twins), lossless against the model's own
generation.

A round, for R requests at once (docs/decoder.md has the whole story):

    drafter(DraftInput) -> logits [R, L, V]              phase "draft"
    draft_topk -> build_ddtree (root = bonus token)      "draft", "build"
    the target over the B + 1 tree rows: RoPE at the     "verify"
      tree's position, each layer's latent rows written
      at past_len + i, verify_attn; the target's token
      per row (argmax, or one sample per row at T > 0)
    tree_accept; the accepted tokens appended            "accept"
    accepted rows' KV moved to past_len + j;             "kv_move"
      past_len += accept_len

Every buffer a round touches is allocated before the first round and
every shape is fixed by (R, budget), so a round reads nothing back to the
host and can be captured in a CUDA graph once and replayed (graph=True).
Between rounds the host reads one flag (are all requests done?).  A
request stops at an EOS token or at its token limit; until the batch is
done it keeps running rounds whose tokens are not output, its past_len
frozen.  Budget 0 is plain decoding: one row a step through the same target
forward, with no drafter.
"""
import collections

import torch

from .. import Accept, Draft, Tree
from .kv import E4M3, PagedKVCache, cache_scale
from .mla import install
from .torch_backend import TorchBackend

DraftInput = collections.namedtuple(
    "DraftInput", "bonus position hidden accept_len")
DraftInput.__doc__ = """What the drafter is given each round (device
tensors of fixed shapes; a drafter that is to be captured in a CUDA graph
reads them in place and never syncs):

bonus int32 [R]: the round's root, the target's last token (its KV is
    not in the cache yet);
position int32 [R]: the bonus token's position (past_len);
hidden [R, L + 1, D]: the target's last hidden states (after its final
    norm) at the rows it accepted in the previous round, in path order:
    hidden[r, accept_len[r] - 1] produced `bonus`; after the prefill, row
    0 is the prompt's last token;
accept_len int32 [R].

The drafter returns logits [R, L, V] (f32 or bf16) for the L positions
after the bonus token."""

_MAX_ROWS = 1025  # docs/contract.md: the kernels' largest N_MAX


class _Forward(object):
    """What one forward of the target over a batch of rows carries into
    every layer: where the rows' latent KV goes and how to attend."""

    __slots__ = ("backend", "cache", "tree", "past_len", "slots", "meta")

    def __init__(self, backend, cache, tree, past_len, slots):
        self.backend, self.cache, self.tree = backend, cache, tree
        self.past_len, self.slots = past_len, slots
        self.meta = backend.attention_meta(tree, past_len, cache)

    def write(self, layer, rows):
        self.cache.write(layer, self.slots, rows)

    def attend(self, layer, q, scale):
        return self.backend.attention(q, self.cache, layer, self.past_len,
                                      self.tree, scale, self.meta)


def _chain_mask(n, device):
    """int32 [n, ceil(n/32)]: row i sees rows 0..i (a causal chunk as a
    tree of one branch)."""
    W = (n + 31) // 32
    j = torch.arange(W * 32)
    vis = (j.unsqueeze(0) <= torch.arange(n).unsqueeze(1)).long()
    words = (vis.view(n, W, 32) << torch.arange(32)).sum(-1)
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(
        torch.int32).to(device)


class Batch(object):
    """The state of R requests being decoded: the cache, the round's
    buffers, the tokens so far.  Made by Decoder.start()."""

    def __init__(self, dec, R, capacity, limits):
        dev, D = dec.device, dec.hidden_size
        L, K, N = dec.L, dec.K, dec.n_max
        A = L + 1
        i32 = dict(dtype=torch.int32, device=dev)
        self.R, self.N = R, N
        self.cache = PagedKVCache(
            dec.n_layers, R, capacity, dec.page_size,
            E4M3 if dec.kv_e4m3 else dec.backend.kv_dtype(dec.dtype), dev,
            scale=dec.kv_scale)
        i64 = dict(dtype=torch.int64, device=dev)
        self.past_len = torch.zeros(R, **i32)
        self.hidden = torch.zeros((R, A, D), dtype=dec.dtype, device=dev)
        # A request that is done keeps its whole tree: the round's cost
        # does not change, and nothing it computes is kept (its past_len
        # and output are frozen).
        self.budget = torch.full((R,), dec.budget, **i32)
        self.done = torch.zeros(R, dtype=torch.bool, device=dev)
        self.limit = torch.tensor(limits, **i32)
        # The index of each request's last output token (n_out - 1) and
        # of the last one it may have, so that a round's tokens land at
        # last + 1 + j with no index arithmetic beyond one add.
        self.last = torch.full((R,), -1, **i64)
        self.last_max = self.limit.long() - 1
        self.out = torch.zeros((R, max(limits) + A), **i32)
        # Fixed for (R, budget), made once: the columns of a round's
        # tokens, and a zero that widens accept_idx to int64 as it clamps.
        self.j1 = torch.arange(1, A + 1, **i64)
        self.zero = torch.zeros((1, 1), **i64)
        self.M = min(A, N)  # rows the KV move covers
        self.draft = Draft(torch.zeros((R, L, K), dtype=torch.float32,
                                       device=dev), torch.zeros((R, L, K),
                                                                **i32))
        W = (N + 31) // 32
        rows = torch.arange(N, device=dev)
        # A root-only tree (budget 0 and padding rows alike: docs/contract.md
        # §2); build_ddtree overwrites it every round when the budget is not 0.
        own_bit = torch.where(rows % 32 == 31, -(1 << 31),
                              1 << (rows % 32)).to(torch.int32)
        mask = torch.zeros((R, N, W), **i32)
        mask.scatter_(2, (rows // 32).view(1, N, 1).expand(R, N, 1),
                      own_bit.view(1, N, 1).expand(R, N, 1).contiguous())
        self.tree = Tree(torch.ones(R, **i32), torch.zeros((R, N), **i32),
                         torch.full((R, N), -1, **i32),
                         torch.zeros((R, N), **i32),
                         torch.zeros((R, N), **i32),
                         torch.full((R, N), -1, **i32),
                         torch.full((R, N), -1, **i32), None, mask)
        self.acc = Accept(torch.ones(R, **i32), torch.full((R, A), -1, **i32),
                          torch.full((R, A), -1, **i32), torch.zeros(R, **i32))
        # The walk's bonus is the next round's root and its length the
        # drafter's: the same buffers, nothing copied between rounds.
        self.bonus, self.accept_len = self.acc.bonus, self.acc.accept_len
        self.rounds = 0
        # What the verify leaves for the accept and the KV move: the
        # rows' hidden states [R, N, D], slots [R, N] and tokens [R, N].
        self.rows_h = self.row_slots = self.target = None
        # What the accept leaves for the KV move: each moved row's source
        # (int64 [R, M]) and each request's advance (int32 [R]).
        self.src = torch.zeros((R, self.M), **i64)
        self.adv = torch.zeros(R, **i32)
        self.graphs = None

    @property
    def n_out(self):
        """Tokens output so far, int64 [R]."""
        return self.last + 1

    def finished(self):
        """True once every request is done (reads one flag: a sync)."""
        return bool(self.done.all())

    def tokens(self):
        """Each request's generated tokens (a sync)."""
        n = self.n_out.tolist()
        out = self.out.tolist()
        return [out[r][:n[r]] for r in range(self.R)]


class Decoder(object):
    """DDTree decoding of `model` (a DeepseekV3ForCausalLM; its attention
    layers are swapped for decode.mla.AbsorbedMLA, its weights untouched).

    drafter: callable(DraftInput) -> logits [R, L, V]; not needed at
        budget 0 (plain decoding).
    backend: "torch" (any device), "library" (libkdtree's kernels, CUDA),
        or a backend object (decode.torch_backend.TorchBackend,
        decode._library.LibraryBackend).
    budget: draft nodes a tree (B, 0..1024; N_MAX = B + 1 rows).
    depth, topk: the drafter's L positions and the K candidates kept of
        each (draft_topk).
    temperature: 0 = greedy (argmax); > 0 samples one token per tree row
        from softmax(logits / T), which keeps the walk lossless.
    eos_token_id: an id or a list (default: the model's generation
        config); None = no EOS.
    prefill_chunk: prompt rows a prefill forward (a chain tree through
        the same attention).
    graph: capture the round in CUDA graphs (default: on CUDA devices).
    generator: the torch.Generator of the sampling (T > 0).
    kv_cache_dtype: None (the backend's: bf16 for the library, the
        model's dtype for torch) or "e4m3" (torch.float8_e4m3fn): an FP8
        cache as SGLang's and vLLM's fp8_e4m3 ones, holding each latent
        row divided by kv_scale, rounded to e4m3 (decode.kv).  Decoding
        over it is lossless against plain decoding over the same cache.
    kv_scale: the FP8 cache's scale (SGLang: 1.0; vLLM: its k_scale).
    """

    _UNSET = object()

    def __init__(self, model, drafter=None, backend="torch", budget=64,
                 depth=15, topk=8, page_size=64, temperature=0.0,
                 eos_token_id=_UNSET, prefill_chunk=128, graph=None,
                 generator=None, kv_cache_dtype=None, kv_scale=1.0):
        if not 0 <= budget <= _MAX_ROWS - 1:
            raise ValueError("Decoder: budget must be in 0..%d, got %d"
                             % (_MAX_ROWS - 1, budget))
        if depth < 1 or topk < 1:
            raise ValueError("Decoder: depth and topk must be >= 1, got %d "
                             "and %d" % (depth, topk))
        if budget and drafter is None:
            raise ValueError("Decoder: a budget of %d needs a drafter "
                             "(budget=0 decodes without one)" % budget)
        if not 1 <= prefill_chunk <= _MAX_ROWS:
            raise ValueError("Decoder: prefill_chunk must be in 1..%d, got %d"
                             % (_MAX_ROWS, prefill_chunk))
        if temperature < 0:
            raise ValueError("Decoder: temperature must be >= 0, got %r"
                             % temperature)
        if kv_cache_dtype not in (None, "e4m3", E4M3):
            raise ValueError("Decoder: kv_cache_dtype must be None or "
                             "'e4m3' (torch.float8_e4m3fn), got %r"
                             % (kv_cache_dtype,))
        self.kv_e4m3 = kv_cache_dtype is not None
        self.kv_scale = cache_scale("Decoder: kv_scale", kv_scale,
                                    self.kv_e4m3)
        self.model = model
        self.layers = install(model)
        cfg = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        if isinstance(backend, str):
            backend = _backend(backend, self.device)
        if getattr(backend, "math", "bf16") == "e4m3" and not self.kv_e4m3:
            raise ValueError("Decoder: the backend's math='e4m3' reads an "
                             "e4m3 cache; give kv_cache_dtype='e4m3'")
        self.backend = backend
        self.drafter = drafter
        self.budget, self.L, self.K = budget, depth, topk
        self.n_max = budget + 1
        self.page_size = page_size
        self.temperature = float(temperature)
        self.generator = generator
        self.prefill_chunk = prefill_chunk
        self.n_layers = len(self.layers)
        self.hidden_size = cfg.hidden_size
        self.vocab = cfg.vocab_size
        self.n_heads = cfg.num_attention_heads
        if eos_token_id is Decoder._UNSET:
            gc = getattr(model, "generation_config", None)
            eos_token_id = getattr(gc, "eos_token_id", None)
        if eos_token_id is None:
            eos_token_id = []
        elif isinstance(eos_token_id, int):
            eos_token_id = [eos_token_id]
        self.eos = torch.tensor(list(eos_token_id), dtype=torch.int32,
                                device=self.device)
        if graph is None:
            graph = self.device.type == "cuda"
        if graph and self.device.type != "cuda":
            raise ValueError("Decoder: CUDA graphs need the model on a CUDA "
                             "device; it is on %s" % self.device)
        self.graph = graph

    # ---- the target ------------------------------------------------------

    def forward_rows(self, tokens, position, tree, past_len, cache,
                     slots=None):
        """The target over rows tokens [R, N] at position [R, N], whose
        visibility is the tree's (n_nodes, anc_mask) over the prefix
        [0, past_len): writes each layer's latent rows at past_len + i
        (`slots`: cache.row_slots(past_len, N), computed if not given) and
        returns the final hidden states [R, N, D]."""
        base = self.model.model
        # int32 ids and positions as they are: the embedding takes int32
        # and the rotary embedding casts positions to float itself.
        x = base.embed_tokens(tokens)
        cos, sin = base.rotary_emb(x, position)
        if slots is None:
            slots = cache.row_slots(past_len, tokens.shape[1])
        ctx = _Forward(self.backend, cache, tree, past_len, slots)
        for layer in self.layers:
            x = layer(x, position_embeddings=(cos, sin), attention_mask=None,
                      tree_ctx=ctx)
            if isinstance(x, tuple):
                x = x[0]
        return base.norm(x)

    def pick(self, logits):
        """The target's token (int32) of each row of logits [..., V]:
        argmax, or at T > 0 one sample of softmax(logits / T) (the
        exponential race: argmax of p / E with E ~ Exp(1), no sync)."""
        if self.temperature == 0.0:
            return logits.argmax(dim=-1).to(torch.int32)
        p = torch.softmax(logits.float() / self.temperature, dim=-1)
        e = torch.empty_like(p).exponential_(generator=self.generator)
        return (p / e).argmax(dim=-1).to(torch.int32)

    # ---- a batch ---------------------------------------------------------

    def start(self, prompts, max_new_tokens):
        """Prefills R prompts (lists of token ids, any lengths >= 1) and
        returns the Batch, its first token chosen.  max_new_tokens: an int
        or one per prompt."""
        R = len(prompts)
        if R < 1:
            raise ValueError("Decoder.start: no prompts")
        prompts = [list(map(int, p)) for p in prompts]
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError("Decoder.start: prompt %d is empty" % i)
        limits = max_new_tokens if isinstance(max_new_tokens, (list, tuple)) \
            else [max_new_tokens] * R
        if len(limits) != R or min(limits) < 1:
            raise ValueError("Decoder.start: max_new_tokens must be >= 1, "
                             "one int or one per prompt, got %r"
                             % (max_new_tokens,))
        P = max(len(p) for p in prompts)
        # Room for the longest prompt and output, the last round's overshoot
        # (L + 1 accepted past the limit) and the rows a forward writes past
        # its past_len (a tree, a prefill chunk, the KV move).
        capacity = P + max(limits) + self.L + 1 + max(
            self.n_max, self.prefill_chunk, self.L + 1)
        b = Batch(self, R, capacity, list(limits))
        with torch.no_grad():
            self._prefill(b, prompts)
        return b

    def start_synthetic(self, R, past_len, max_new_tokens, seed=0):
        """A Batch of R requests whose prefix is past_len positions of
        random latent rows (N(0, 1), a function of the seed, the request,
        the layer and the position alone, whatever the cache's size) and
        whose first token is random: what a benchmark needs to decode at
        a long context without a prefill.  The first token is the bonus
        token of round one, not output."""
        capacity = past_len + max_new_tokens + self.L + 1 + max(
            self.n_max, self.L + 1)
        b = Batch(self, R, capacity, [max_new_tokens] * R)
        g = torch.Generator(device=self.device).manual_seed(seed)
        with torch.no_grad():
            b.bonus.copy_(torch.randint(0, self.vocab, (R,), generator=g,
                                        device=self.device))
            pos = torch.arange(past_len, device=self.device)
            slots = b.cache.slots(pos.expand(R, past_len))
            for layer in range(self.n_layers):
                rows = torch.randn((R, past_len, b.cache.data.shape[-1]),
                                   generator=g, device=self.device)
                b.cache.write(layer, slots, rows)
            b.past_len.fill_(past_len)
        return b

    def _prefill(self, b, prompts):
        dev, C, R = self.device, self.prefill_chunk, b.R
        plen = torch.tensor([len(p) for p in prompts], dtype=torch.int32,
                            device=dev)
        P = max(len(p) for p in prompts)
        width = -(-P // C) * C
        toks = torch.zeros((R, width), dtype=torch.int32)
        for r, p in enumerate(prompts):
            toks[r, :len(p)] = torch.tensor(p, dtype=torch.int32)
        toks = toks.to(dev)
        mask = _chain_mask(C, dev).unsqueeze(0).expand(R, C, -1).contiguous()
        rows = torch.arange(C, device=dev, dtype=torch.int32)
        last = torch.zeros((R, self.hidden_size), dtype=self.dtype, device=dev)
        for c0 in range(0, P, C):
            n_nodes = (plen - c0).clamp(0, C)
            past = torch.clamp(plen, max=c0)
            tree = Tree(n_nodes.to(torch.int32), None, None, None, None, None,
                        None, None, mask)
            pos = past.unsqueeze(1) + rows
            h = self.forward_rows(toks[:, c0:c0 + C], pos, tree, past,
                                  b.cache)
            i = (plen - 1 - c0).long()
            here = (i >= 0) & (i < C)
            hi = h.gather(1, i.clamp(0, C - 1).view(R, 1, 1).expand(
                R, 1, h.shape[-1])).squeeze(1)
            last = torch.where(here.unsqueeze(1), hi, last)
        first = self.pick(self.model.lm_head(last))
        b.past_len.copy_(plen)
        b.bonus.copy_(first)
        b.hidden[:, 0].copy_(last)
        b.out[:, 0].copy_(first)
        b.last.fill_(0)
        b.done.copy_(self._is_eos(first) | (b.limit <= 1))

    def _is_eos(self, tokens):
        if self.eos.numel() == 0:
            return torch.zeros_like(tokens, dtype=torch.bool)
        return (tokens.unsqueeze(-1) == self.eos).any(-1)

    # ---- the phases of a round ------------------------------------------

    def _phase_draft(self, b):
        if self.budget == 0:
            return
        logits = self.drafter(DraftInput(b.bonus, b.past_len, b.hidden,
                                         b.accept_len))
        want = (b.R, self.L, self.vocab)
        if tuple(logits.shape) != want:
            raise ValueError("Decoder: the drafter returned logits of shape "
                             "%s; a round needs [R, L, V] = %s"
                             % (list(logits.shape), list(want)))
        self.backend.draft_topk(logits, self.K, b.draft)

    def _phase_build(self, b):
        t = b.tree
        if self.budget == 0:
            t.token[:, 0].copy_(b.bonus)
            t.position[:, 0].copy_(b.past_len)
            return
        self.backend.build_ddtree(b.draft, b.budget, b.bonus, b.past_len,
                                  self.n_max, t)

    def _phase_verify(self, b):
        t = b.tree
        b.row_slots = b.cache.row_slots(b.past_len, self.n_max)
        h = self.forward_rows(t.token, t.position, t, b.past_len, b.cache,
                              b.row_slots)
        b.rows_h = h
        b.target = self.pick(self.model.lm_head(h))

    def _phase_accept(self, b):
        acc = b.acc
        self.backend.tree_accept(b.tree, b.target, self.L, acc)
        L, R = self.L, b.R
        alen = acc.accept_len
        # How far the request advances: nothing once it is done.
        b.adv = alen.masked_fill(b.done, 0)
        # The round's tokens: the accepted drafts, then the bonus, at
        # last + 1 + j.  Columns past the bonus get the walk's -1 padding
        # or stale tokens; they lie past the request's last token, where
        # a later round overwrites them or nothing reads them (out has
        # L + 1 columns past any limit).
        at = b.last.unsqueeze(1) + b.j1
        b.out.scatter_(1, at[:, :L], acc.accept_token[:, 1:])
        b.out.scatter_(1, (b.last + alen).view(R, 1), acc.bonus.view(R, 1))
        if self.eos.numel():
            self._stop_at_eos(b, at)
        else:
            b.last.add_(b.adv)
            torch.minimum(b.last, b.last_max, out=b.last)
            torch.ge(b.last, b.last_max, out=b.done)
        # Each accepted row's source, clamped to row 0 past the path (and
        # widened to int64 in the same operation): the rows of the
        # drafter's hidden states and of the KV move.
        torch.maximum(acc.accept_idx[:, :b.M], b.zero, out=b.src)
        D = b.hidden.shape[-1]
        torch.gather(b.rows_h, 1, b.src.unsqueeze(-1).expand(-1, -1, D),
                     out=b.hidden[:, :b.M])

    def _stop_at_eos(self, b, at):
        """Output up to the first EOS among the round's accepted tokens
        (it included), at most up to the limit; a request that meets one
        is done."""
        A = self.L + 1
        # Columns past accept_len hold stale tokens; an EOS there gives
        # upto > accept_len >= adv, which neither stops the request nor
        # shortens its advance, so they need no mask.
        eos = self._is_eos(b.out.gather(1, at))
        # Tokens up to and including the first EOS; A + 1 where none.
        upto = torch.where(eos, b.j1, A + 1).amin(dim=1)
        hit = upto <= b.adv  # an EOS among the tokens output
        b.last.add_(torch.minimum(b.adv, upto))
        torch.minimum(b.last, b.last_max, out=b.last)
        b.done.logical_or_(hit | (b.last >= b.last_max))

    def _phase_kv_move(self, b):
        if self.n_max > 1:  # a root-only tree's one row is in place
            b.cache.move_accepted(b.row_slots, b.src)
        b.past_len.add_(b.adv)

    PHASES = ("draft", "build", "verify", "accept", "kv_move")

    def _phases(self):
        """(name, function of a Batch, runs on the host) in round order."""
        host = self.backend.host_build and self.budget > 0
        return [("draft", self._phase_draft, False),
                ("build", self._phase_build, host),
                ("verify", self._phase_verify, False),
                ("accept", self._phase_accept, False),
                ("kv_move", self._phase_kv_move, False)]

    # ---- rounds ----------------------------------------------------------

    def step(self, b):
        """One round of every request of the batch (no host sync inside,
        except the torch backend's build).  The first round runs eagerly;
        with graph=True it is then captured and later rounds replay it."""
        with torch.no_grad():
            if b.graphs is None and self.graph:
                # The eager round on a side stream, as torch.cuda.graphs
                # asks of a warm-up (lazy initialisations stay out of the
                # stream that is captured next).
                s, cur = torch.cuda.Stream(self.device), \
                    torch.cuda.current_stream(self.device)
                s.wait_stream(cur)
                with torch.cuda.stream(s):
                    for _, fn, _ in self._phases():
                        fn(b)
                cur.wait_stream(s)
                b.graphs = self.capture(b)
            elif b.graphs is None:
                for _, fn, _ in self._phases():
                    fn(b)
            else:
                for _, g in b.graphs:
                    g()
        b.rounds += 1

    def capture(self, b, mark=None):
        """CUDA graphs of a round on batch b: the phases that stay on the
        device, consecutive ones in one graph.  Returns the callables
        that, called in order, run one round, as (phase names, callable).
        Capturing writes nothing the round reads (a graph is recorded,
        not run); b must have run a round eagerly (every shape loaded,
        every buffer allocated).

        mark: a timing hook (the bench records CUDA events with it).
        mark(label) is called once for each boundary of the round, in
        round order, and returns a callable that records it: in the
        graph before each device phase (label: its name) and at the end
        of each graph (None); before a host phase, at every call."""
        groups, cur = [], []
        for name, fn, host in self._phases():
            if host:
                if cur:
                    groups.append(("device", cur))
                    cur = []
                groups.append(("host", [(name, fn)]))
            else:
                cur.append((name, fn))
        if cur:
            groups.append(("device", cur))
        # One memory pool per capture, shared by its graphs: a tensor one
        # graph leaves for the next (the verify's hidden states) is never
        # reused by another capture's temporaries.
        pool = torch.cuda.graph_pool_handle()
        if self.generator is not None and self.temperature > 0 and \
                self.generator.device.type == "cuda":
            raise ValueError("Decoder: sampling inside a CUDA graph uses the "
                             "default CUDA generator; pass generator=None "
                             "(seed it with torch.cuda.manual_seed)")
        calls = []
        torch.cuda.synchronize()
        with torch.no_grad():
            for kind, fns in groups:
                names = tuple(n for n, _ in fns)
                if kind == "host":
                    rec = mark(names[0]) if mark else None
                    calls.append((names, _bind(fns[0][1], b, rec)))
                    continue
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    for name, fn in fns:
                        if mark:
                            mark(name)()
                        fn(b)
                    if mark:
                        mark(None)()
                calls.append((names, g.replay))
        return calls

    def generate(self, prompts, max_new_tokens):
        """The generated tokens of each prompt (lists of ids), as
        model.generate(do_sample=False) gives them at temperature 0: up to
        and including the first EOS, at most max_new_tokens."""
        b = self.start(prompts, max_new_tokens)
        limit = max(b.limit.tolist())
        while not b.finished() and b.rounds < limit:
            self.step(b)
        return b.tokens()


def _bind(fn, b, before=None):
    if before is None:
        return lambda: fn(b)

    def call():
        before()
        fn(b)
    return call


def _backend(name, device):
    if name == "torch":
        return TorchBackend()
    if name == "library":
        from ._library import LibraryBackend
        return LibraryBackend(device=device.index if device.type == "cuda"
                              else None)
    raise ValueError("Decoder: backend must be 'torch', 'library' or a "
                     "backend object, got %r" % (name,))
