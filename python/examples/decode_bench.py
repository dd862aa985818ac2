#!/usr/bin/env python3
"""DDTree decoding's tokens per second on a Kimi-K2 tensor-parallel-8
slice, against plain decoding of the same model and against the torch
backend, every round captured in CUDA graphs.

The model: DeepseekV3ForCausalLM with Kimi-K2's attention at TP8 (hidden
7168, 8 MLA heads, q_lora_rank 1536, kv_lora_rank 512, YaRN factor 32),
a dense MLP of 2304 per layer in place of the MoE, 4 layers, vocabulary
163840, bf16 random weights.  Each request's prefix is `past` positions
of random latent rows (Decoder.start_synthetic), so no prefill runs.

For each (requests R, past):
1. plain decoding (budget 0: one row a step through the same MLA layer
   and verify_attn) decodes --tokens tokens: its step time is the
   baseline and its tokens are each request's continuation;
2. for each budget and backend, the decoder with a ScriptedDrafter on
   that continuation: at every depth the drafter ranks the target's next
   token first with probability --accept (a hash of request, position
   and depth, the same on every backend), else leaves it out of its
   candidates, so a round accepts 1 + sum_d accept^d tokens on average
   while the decoder follows plain decoding (bf16 near-ties can make it
   leave that path: the JSON counts the tokens that differ).  It reports
   tokens per second (whole rounds, one CUDA graph a round, or two around
   the torch backend's host build) and the round split into draft, build,
   verify (all layers), accept and KV move (a graph a phase, timed
   apart).

    python3 python/examples/decode_bench.py [--requests 1,8]
        [--past 4096,32768] [--budgets 16,32,64,128,256,512]
        [--accept 0.9] [--tokens 512] [--backends library,torch]
        [--json decode-bench.json]
    python3 python/examples/decode_bench.py --smoke --json out.json

--smoke runs a tiny configuration on the CPU (torch backend, no graphs)
to check the script and its JSON; its figures mean nothing.  The JSON is
drawn by tools/kdtree-plot (kdtree-decode.png).  Without a CUDA device
(and without --smoke) it says so and exits with status 77.
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

PHASES = Decoder.PHASES

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


def make_model(kw, device, dtype):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    cfg = DeepseekV3Config(
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
        v_head_dim=128, num_key_value_heads=None,
        first_k_dense_replace=kw["num_hidden_layers"], bos_token_id=None,
        eos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
        **kw)
    torch.manual_seed(0)
    with torch.device(device):
        m = DeepseekV3ForCausalLM(cfg)
    return m.to(dtype).eval()


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


def run_rounds(dec, b, rounds, clock):
    """Per-round microseconds of `rounds` rounds and the tokens they made
    (the first round, eager and then captured, not counted)."""
    dec.step(b)
    n0 = sum(b.n_out.tolist())
    us = [clock(lambda: dec.step(b)) for _ in range(rounds)]
    return us, sum(b.n_out.tolist()) - n0


def phase_split(dec, b, rounds, clock):
    """Median microseconds of each phase over `rounds` rounds, a graph a
    phase on CUDA (the phases of a round, run one after the other)."""
    if clock.cuda:
        parts = dec.capture(b, per_phase=True)
    else:
        parts = [((name,), (lambda fn=fn: fn(b)))
                 for name, fn, _ in dec._phases()]
    times = {n: [] for n in PHASES}
    with torch.no_grad():
        for _ in range(rounds):
            for names, fn in parts:
                times[names[0]].append(clock(fn))
            b.rounds += 1
    return {n: statistics.median(v) for n, v in times.items() if v}


def emitted(b):
    n = b.n_out.tolist()
    return [row[:k] for row, k in zip(b.out.tolist(), n)]


def bench_plain(model, backend, R, past, tokens, a, clock):
    dec = Decoder(model, None, backend=backend, budget=0, depth=a.depth,
                  page_size=a.page, eos_token_id=None, graph=clock.cuda)
    b = dec.start_synthetic(R, past, tokens + 2, seed=a.seed)
    bonus0 = b.bonus.tolist()
    us, _ = run_rounds(dec, b, tokens - 1, clock)
    # The script of each request by position: its first token at past,
    # then what plain decoding produced.
    T = past + tokens + 1
    script = torch.zeros((R, T + 64), dtype=torch.long)
    for r, row in enumerate(emitted(b)):
        seq = [bonus0[r]] + row
        script[r, past:past + len(seq)] = torch.tensor(seq)
    return statistics.median(us), script.to(model.device), emitted(b)


def bench_tree(model, backend, R, past, budget, script, plain_out, a, clock,
               vocab):
    dr = ScriptedDrafter(script, a.depth, vocab, p_first=a.accept,
                         p_second=0.0, seed=a.seed,
                         dtype=next(model.parameters()).dtype)
    dec = Decoder(model, dr, backend=backend, budget=budget, depth=a.depth,
                  topk=a.topk, page_size=a.page, eos_token_id=None,
                  graph=clock.cuda)
    # Rounds enough to stay on the script (plain decoding's tokens) even
    # if every round accepted a whole branch, and a limit no request
    # reaches: every round measured is a full round of R requests.
    span = a.tokens // (a.depth + 1)
    rounds, split_rounds = max(2, span * 3 // 4), max(2, span // 4)
    b = dec.start_synthetic(R, past, (rounds + split_rounds + 2) *
                            (a.depth + 1), seed=a.seed)
    us, made = run_rounds(dec, b, rounds, clock)
    out = emitted(b)
    differ = sum(1 for o, p in zip(out, plain_out)
                 for x, y in zip(o, p) if x != y)
    split = phase_split(dec, b, split_rounds, clock)
    total_us = sum(us)
    return {"tokens_per_s": made / total_us * 1e6,
            "round_us": statistics.median(us),
            "accept_len": made / (rounds * R),
            "expected_accept_len": dr.expected_accept(),
            "phases_us": split,
            "tokens_differing_from_plain": differ}


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
                    help="tokens of plain decoding a measurement (the "
                         "drafter's script); tree decoding runs "
                         "tokens / (depth + 1) rounds")
    ap.add_argument("--depth", type=int, default=15, help="L")
    ap.add_argument("--topk", type=int, default=8, help="K")
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny CPU configuration (checks the script)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
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
    clock = Clock(device.type == "cuda")
    model = make_model(kw, device, dtype)
    vocab = kw["vocab_size"]
    res = {"tool": "kdtree-decode-bench", "commit": git_commit(),
           "device": torch.cuda.get_device_name() if clock.cuda else None,
           "mode": "smoke (CPU)" if a.smoke else "cuda graphs",
           "version": kdtree_jit.version if clock.cuda else None,
           "nvrtc": (kdtree_jit.info(driver=False)["nvrtc"].get("version")
                     if clock.cuda else None),
           "model": dict(kw, layers=kw["num_hidden_layers"],
                         dtype=str(dtype).replace("torch.", "")),
           "depth": a.depth, "topk": a.topk, "page": a.page,
           "accept": a.accept, "tokens": a.tokens, "rows": []}
    lib = None
    for R in ints(a.requests):
        for past in ints(a.past):
            plain_us, script, plain_out = bench_plain(
                model, "library" if "library" in backends else
                TorchBackend(), R, past, a.tokens, a, clock)
            print("R=%d past=%d plain: %.1f us a step, %.0f tokens/s"
                  % (R, past, plain_us, R / plain_us * 1e6))
            for name in backends:
                for budget in ints(a.budgets):
                    if name == "library":
                        if lib is None:
                            from kdtree_jit.decode import LibraryBackend
                            lib = LibraryBackend()
                        be = lib
                    else:
                        be = TorchBackend()
                    row = bench_tree(model, be, R, past, budget, script,
                                     plain_out, a, clock, vocab)
                    row.update(backend=name, R=R, past=past, budget=budget,
                               plain_step_us=plain_us,
                               plain_tokens_per_s=R / plain_us * 1e6)
                    row["speedup_vs_plain"] = row["tokens_per_s"] / \
                        row["plain_tokens_per_s"]
                    res["rows"].append(row)
                    print("  %-7s B=%-4d %8.0f tokens/s (%.2fx plain) round "
                          "%.1f us, %.2f tokens a round; %s; %d tokens "
                          "differ from plain" % (
                              name, budget, row["tokens_per_s"],
                              row["speedup_vs_plain"], row["round_us"],
                              row["accept_len"], " ".join(
                                  "%s %.1f" % kv
                                  for kv in row["phases_us"].items()),
                              row["tokens_differing_from_plain"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
