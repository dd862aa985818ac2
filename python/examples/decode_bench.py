#!/usr/bin/env python3
"""DDTree decoding's tokens per second on a Kimi-K2 tensor-parallel-8
slice, against plain decoding of the same model and against the torch
backend, every round captured in CUDA graphs, and the round split into
the drafter, the library's kernels and the torch operations around them.

The model: DeepseekV3ForCausalLM with Kimi-K2's attention at TP8 (hidden
7168, 8 MLA heads, q_lora_rank 1536, kv_lora_rank 512, YaRN factor 32),
a dense MLP of 2304 per layer in place of the MoE, 4 layers, vocabulary
163840, bf16 random weights, its embedding and LM head rewritten by
decode.targets.successor_target: its greedy next token after t is
succ[t] (a random permutation) by a wide margin, so no step is a
near-tie and tree decoding gives plain decoding's tokens in bf16 too
(every other weight, and so every layer's cost, is the random model's).
Each request's prefix is `past` positions of random latent rows
(Decoder.start_synthetic), so no prefill runs.

For each (requests R, past):
1. plain decoding (budget 0: one row a step through the same MLA layer
   and verify_attn) decodes --tokens tokens: its step time is the
   baseline, and its tokens are checked against the successor chain;
2. for each budget and backend, the decoder with a ScriptedDrafter on
   the chain (the target's own continuation): at every depth the
   drafter ranks the target's next token first with probability
   --accept (a hash of request, position and depth, the same on every
   backend), else leaves it out of its candidates, so a round accepts
   1 + sum_d accept^d tokens on average, d up to min(budget, depth)
   (8.15 at 0.9, depth 15, budget >= 15).  It runs
   --rounds rounds, one CUDA graph a round (two around the torch
   backend's host build): tokens per second and tokens a round; then
   rounds of a graph with CUDA events recorded inside it between the
   phases and around each kernel and the drafter: the round split into
   drafter, draft (draft_topk and the operations around it), build,
   verify (all layers), accept and KV move, each phase's kernel apart
   from the rest (glue), the phases summing to the timed round.

    python3 python/examples/decode_bench.py [--requests 1,8]
        [--past 4096,32768] [--budgets 16,32,64,128,256,512]
        [--accept 0.9] [--tokens 512] [--rounds 64]
        [--backends library,torch] [--json decode-bench.json]
    python3 python/examples/decode_bench.py --smoke --json out.json

--smoke runs a tiny configuration on the CPU (torch backend, no graphs,
the host clock between phases) to check the script and its JSON; its
figures mean nothing.  The JSON is drawn by tools/kdtree-plot
(kdtree-decode.png).  Without a CUDA device (and without --smoke) it
says so and exits with status 77.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import kdtree_jit  # noqa: F401  (installed: run that one)
except ImportError:
    sys.path.insert(0, os.path.dirname(HERE))  # python/ of a checkout

import torch  # noqa: E402

import kdtree_jit  # noqa: E402
from kdtree_jit.decode import Decoder, TorchBackend  # noqa: E402
from kdtree_jit.decode.drafters import ScriptedDrafter  # noqa: E402
from kdtree_jit.decode.targets import chain, successor_target  # noqa: E402

# The round split: the decoder's phases, the drafter taken out of draft.
PHASES = ("drafter",) + Decoder.PHASES
KERNELS = {"draft": "draft_topk", "build": "build_ddtree",
           "verify": "verify_attn", "accept": "tree_accept"}

KIMI_K2_TP8 = dict(hidden_size=7168, num_attention_heads=8,
                   q_lora_rank=1536, intermediate_size=2304,
                   num_hidden_layers=4, vocab_size=163840,
                   max_position_embeddings=131072,
                   rope_parameters={"rope_type": "yarn", "factor": 32.0,
                                    "rope_theta": 50000.0,
                                    "original_max_position_embeddings": 4096,
                                    "beta_fast": 1.0, "beta_slow": 1.0,
                                    "mscale": 1.0, "mscale_all_dim": 1.0})
SMOKE = dict(KIMI_K2_TP8, hidden_size=64, num_attention_heads=2,
             q_lora_rank=32, intermediate_size=64, num_hidden_layers=2,
             vocab_size=512, max_position_embeddings=4096)
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def make_model(kw, device, dtype, seed):
    """The random model, its embedding and LM head made a successor
    chain (decode.targets); returns it and succ."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = DeepseekV3Config(
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
        v_head_dim=128, num_key_value_heads=None,
        first_k_dense_replace=kw["num_hidden_layers"], bos_token_id=None,
        eos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
        **kw)
    torch.manual_seed(seed)
    with torch.device(device):
        m = DeepseekV3ForCausalLM(cfg)
    m = m.to(dtype).eval()
    return m, successor_target(m, seed=seed)


class Clock(object):
    """Elapsed microseconds of a callable: CUDA events on a GPU, the host
    clock after a sync on a CPU."""

    def __init__(self, cuda):
        self.cuda = cuda

    def __call__(self, fn):
        if self.cuda:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) * 1e3
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6


class Marks(object):
    """The boundaries of a timed round, in round order, each with a label:
    a phase's name where it starts (or resumes), "phase:what" where a
    kernel or the drafter inside it starts, None at the end of a graph.
    On CUDA each is an event recorded inside the graph (external, with
    timing), so the intervals are the round's own, without a launch
    between phases; on a CPU the host clock.  `on` while a round is
    being recorded: the wrappers below mark only then."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.reset()

    def reset(self):
        """Forgets every boundary (a CPU round's are recorded anew)."""
        self.labels, self.stamps = [], []
        self.on, self.phase = False, None

    def __call__(self, label):
        i = len(self.labels)
        self.labels.append(label)
        if label is not None and ":" not in label:
            self.phase = label
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True, external=True)
            self.stamps.append(ev)
            return ev.record
        self.stamps.append(None)

        def record():
            self.stamps[i] = time.perf_counter()
        return record

    def around(self, what, fn, *a):
        """fn(*a) marked as `what` inside the current phase."""
        if not self.on:
            return fn(*a)
        self("%s:%s" % (self.phase, what))()
        out = fn(*a)
        self(self.phase)()
        return out

    def intervals(self):
        """[(label, us)]: from each boundary to the next (after a sync)."""
        out = []
        for i in range(len(self.stamps) - 1):
            a, b = self.stamps[i], self.stamps[i + 1]
            us = a.elapsed_time(b) * 1e3 if self.cuda else (b - a) * 1e6
            out.append((self.labels[i], us))
        return out


class TimedBackend(object):
    """A backend whose kernels are marked (Marks.around); the rest is the
    backend's own."""

    def __init__(self, be, marks):
        self.be, self.marks = be, marks

    def __getattr__(self, name):
        return getattr(self.be, name)

    def draft_topk(self, *a):
        return self.marks.around("draft_topk", self.be.draft_topk, *a)

    def build_ddtree(self, *a):
        return self.marks.around("build_ddtree", self.be.build_ddtree, *a)

    def attention(self, *a):
        return self.marks.around("verify_attn", self.be.attention, *a)

    def tree_accept(self, *a):
        return self.marks.around("tree_accept", self.be.tree_accept, *a)


class TimedDrafter(object):
    def __init__(self, dr, marks):
        self.dr, self.marks = dr, marks

    def __call__(self, inp):
        return self.marks.around("drafter", self.dr, inp)


def run_rounds(dec, b, rounds, clock):
    """Per-round microseconds of `rounds` rounds and the tokens they made
    (the first round, eager and then captured, not counted)."""
    dec.step(b)
    n0 = sum(b.n_out.tolist())
    us = [clock(lambda: dec.step(b)) for _ in range(rounds)]
    return us, sum(b.n_out.tolist()) - n0


def split_round(label_us):
    """One timed round's intervals -> {phase: us} and {phase: kernel us}:
    an interval goes to the phase it is in; one that starts at the end of
    a graph (the wait for the host's next launch) to the phase after it;
    "draft:drafter" to the drafter."""
    phase, kernel = {}, {}
    pending = 0.0
    for label, us in label_us:
        if label is None:
            pending += us
            continue
        name, _, what = label.partition(":")
        if what == "drafter":
            name = "drafter"
        elif what:
            kernel[name] = kernel.get(name, 0.0) + us
        phase[name] = phase.get(name, 0.0) + us + pending
        pending = 0.0
    return phase, kernel


def phase_split(dec, b, marks, rounds, clock):
    """The split of the median of `rounds` timed rounds (by their sum, so
    the figures of one round, adding up): {phase: us}, {kernel: us} and
    the timed round."""
    timed = []
    with torch.no_grad():
        if clock.cuda:
            marks.on = True
            calls = dec.capture(b, mark=marks)
            marks.on = False
        for _ in range(rounds):
            if clock.cuda:
                for _, fn in calls:
                    fn()
                torch.cuda.synchronize()
            else:
                marks.reset()
                marks.on = True
                for name, fn, _ in dec._phases():
                    marks(name)()
                    fn(b)
                marks(None)()
                marks.on = False
            b.rounds += 1
            ph, ke = split_round(marks.intervals())
            timed.append((sum(ph.values()), ph, ke))
    total, ph, ke = sorted(timed, key=lambda t: t[0])[len(timed) // 2]
    return ph, {KERNELS[k]: v for k, v in ke.items()}, total


def emitted(b):
    n = b.n_out.tolist()
    return [row[:k] for row, k in zip(b.out.tolist(), n)]


def off_script(out, want):
    """Tokens of each output that differ from the chain's."""
    return sum(1 for o, w in zip(out, want) for x, y in zip(o, w) if x != y)


def bench_plain(model, backend, R, past, tokens, a, clock, succ):
    dec = Decoder(model, None, backend=backend, budget=0, depth=a.depth,
                  page_size=a.page, eos_token_id=None, graph=clock.cuda,
                  **a.cache)
    b = dec.start_synthetic(R, past, tokens + 2, seed=a.seed)
    bonus0 = b.bonus.tolist()
    us, _ = run_rounds(dec, b, tokens - 1, clock)
    out = emitted(b)
    want = chain(succ, bonus0, tokens + 1)[:, 1:].tolist()
    return statistics.median(us), bonus0, off_script(out, want)


def bench_tree(model, backend, R, past, budget, bonus0, a, clock, succ):
    marks = Marks(clock.cuda)
    split_rounds = max(4, a.rounds // 4)
    # A limit no request reaches: every round measured is a full round
    # of R requests.
    limit = (a.rounds + split_rounds + 2) * (a.depth + 1)
    # The drafter's script: each request's chain from its first token, at
    # its positions (the first token sits at `past`).
    n = limit + a.depth + 2
    script = torch.zeros((R, past + n), dtype=torch.long)
    script[:, past:] = chain(succ, bonus0, n)
    dr = ScriptedDrafter(script.to(model.device), a.depth, succ.numel(),
                         p_first=a.accept, p_second=0.0, seed=a.seed,
                         dtype=next(model.parameters()).dtype)
    dec = Decoder(model, TimedDrafter(dr, marks),
                  backend=TimedBackend(backend, marks), budget=budget,
                  depth=a.depth, topk=a.topk, page_size=a.page,
                  eos_token_id=None, graph=clock.cuda, **a.cache)
    b = dec.start_synthetic(R, past, limit, seed=a.seed)
    us, made = run_rounds(dec, b, a.rounds, clock)
    phases, kernels, timed = phase_split(dec, b, marks, split_rounds, clock)
    out = emitted(b)
    want = [row[past + 1:past + 1 + len(o)] for row, o in
            zip(script.tolist(), out)]
    lib = sum(phases.get(p, 0.0) for p in ("draft", "build", "accept",
                                           "kv_move"))
    return {"tokens_per_s": made / sum(us) * 1e6,
            "round_us": statistics.median(us),
            "accept_len": made / (a.rounds * R),
            "expected_accept_len": dr.expected_accept(min(budget, a.depth)),
            "phases_us": phases,
            "kernels_us": kernels,
            "glue_us": {p: phases[p] - kernels.get(KERNELS.get(p), 0.0)
                        for p in ("draft", "build", "accept", "kv_move")
                        if p in phases},
            "timed_round_us": timed,
            "library_phases_share": lib / timed,
            "tokens_off_script": off_script(out, want)}


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                              cwd=HERE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL,
                              universal_newlines=True).stdout.strip() or None
    except OSError:
        return None


def ints(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", default="1,8")
    ap.add_argument("--past", default="4096,32768")
    ap.add_argument("--budgets", default="16,32,64,128,256,512")
    ap.add_argument("--backends", default="library,torch")
    ap.add_argument("--accept", type=float, default=0.9,
                    help="chance the drafter ranks the right token first, "
                         "every depth")
    ap.add_argument("--tokens", type=int, default=512,
                    help="steps of plain decoding a measurement")
    ap.add_argument("--rounds", type=int, default=64,
                    help="rounds of tree decoding a measurement (and a "
                         "quarter of it, at least 4, timed phase by phase)")
    ap.add_argument("--depth", type=int, default=15, help="L")
    ap.add_argument("--topk", type=int, default=8, help="K")
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--kv", choices=("bf16", "e4m3"), default="bf16",
                    help="the cache: bf16 (the library's; the torch "
                         "backend's is the model's dtype) or an FP8 e4m3 "
                         "one, scale 1 (SGLang's)")
    ap.add_argument("--math", choices=("bf16", "e4m3"), default="bf16",
                    help="verify_attn's arithmetic on the library backend "
                         "(e4m3: FP8 tensor cores, with --kv e4m3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(DTYPES),
                    help="the model's (default: bf16, f32 with --smoke)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny CPU configuration (checks the script)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    if a.math == "e4m3" and a.kv != "e4m3":
        ap.error("--math e4m3 reads an e4m3 cache: add --kv e4m3")
    a.cache = dict(kv_cache_dtype="e4m3") if a.kv == "e4m3" else {}
    if a.smoke:
        device, dtype, kw = torch.device("cpu"), torch.float32, SMOKE
        backends = ["torch"]
    else:
        if not torch.cuda.is_available():
            print("decode_bench: needs a CUDA device (torch sees none); "
                  "--smoke runs a tiny CPU configuration", file=sys.stderr)
            return 77
        device, dtype, kw = torch.device("cuda"), torch.bfloat16, KIMI_K2_TP8
        backends = a.backends.split(",")
        torch.set_float32_matmul_precision("high")
    if a.dtype:
        dtype = DTYPES[a.dtype]
    clock = Clock(device.type == "cuda")
    model, succ = make_model(kw, device, dtype, a.seed)
    res = {"tool": "kdtree-decode-bench", "commit": git_commit(),
           "device": torch.cuda.get_device_name() if clock.cuda else None,
           "mode": "smoke (CPU)" if a.smoke else "cuda graphs",
           "version": kdtree_jit.version if clock.cuda else None,
           "nvrtc": (kdtree_jit.info(driver=False)["nvrtc"].get("version")
                     if clock.cuda else None),
           "model": dict(kw, layers=kw["num_hidden_layers"],
                         dtype=str(dtype).replace("torch.", ""),
                         target="successor chain (decode.targets)"),
           "depth": a.depth, "topk": a.topk, "page": a.page, "kv": a.kv,
           "math": a.math,
           "accept": a.accept, "tokens": a.tokens, "rounds": a.rounds,
           "rows": []}
    lib = None
    if "library" in backends:
        from kdtree_jit.decode import LibraryBackend
        lib = LibraryBackend(math=a.math)
    for R in ints(a.requests):
        for past in ints(a.past):
            plain_us, bonus0, plain_off = bench_plain(
                model, lib or TorchBackend(), R, past, a.tokens, a, clock,
                succ)
            print("R=%d past=%d plain: %.1f us a step, %.0f tokens/s, %d "
                  "tokens off the chain" % (R, past, plain_us,
                                            R / plain_us * 1e6, plain_off))
            for name in backends:
                for budget in ints(a.budgets):
                    if name == "library":
                        be = lib
                    else:
                        be = TorchBackend()
                    row = bench_tree(model, be, R, past, budget, bonus0, a,
                                     clock, succ)
                    row.update(backend=name, R=R, past=past, budget=budget,
                               plain_step_us=plain_us,
                               plain_tokens_per_s=R / plain_us * 1e6,
                               plain_tokens_off_script=plain_off)
                    row["speedup_vs_plain"] = row["tokens_per_s"] / \
                        row["plain_tokens_per_s"]
                    res["rows"].append(row)
                    print("  %-7s B=%-4d %8.0f tokens/s (%.2fx plain) round "
                          "%.1f us (%.2f plain steps), %.2f tokens a round "
                          "(%.2f set), %d tokens off the chain"
                          % (name, budget, row["tokens_per_s"],
                             row["speedup_vs_plain"], row["round_us"],
                             row["round_us"] / plain_us, row["accept_len"],
                             row["expected_accept_len"],
                             row["tokens_off_script"]))
                    print("    timed round %.1f us: %s; kernels %s; "
                          "draft+build+accept+kv_move %.1f%% of it"
                          % (row["timed_round_us"], " ".join(
                              "%s %.1f" % (p, row["phases_us"][p])
                              for p in PHASES if p in row["phases_us"]),
                             " ".join("%s %.1f" % kv for kv in
                                      row["kernels_us"].items()),
                             100 * row["library_phases_share"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
