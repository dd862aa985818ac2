"""What the decoder's tests share: tiny random DeepseekV3 models with
Kimi-K2's MLA dimensions (kv_lora_rank 512, qk_rope_head_dim 64,
qk_nope_head_dim 128, v_head_dim 128), every layer dense, and the
model's own greedy generation as the oracle."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.environ.get("KDTREE_TEST_INSTALLED"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
# Two cores shared with the rest of the build: one thread each is faster
# than a contended pool, and no test depends on it.
torch.set_num_threads(1)

YARN = {"rope_type": "yarn", "factor": 32.0, "rope_theta": 50000.0,
        "original_max_position_embeddings": 64, "beta_fast": 32,
        "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}

# Three shapes of the family: YaRN with mscale (Kimi-K2's, scale
# 192^-0.5 * mscale^2) and interleaved RoPE; no q LoRA with plain RoPE
# split in halves; four layers, more heads, YaRN with another mscale.
CONFIGS = {
    "yarn": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                 q_lora_rank=32, rope_parameters=YARN, rope_interleave=True,
                 max_position_embeddings=64 * 32),
    "plain": dict(num_hidden_layers=3, hidden_size=48, num_attention_heads=3,
                  q_lora_rank=None, rope_interleave=False,
                  rope_parameters={"rope_type": "default",
                                   "rope_theta": 10000.0}),
    "deep": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                 q_lora_rank=48, rope_interleave=True,
                 rope_parameters=dict(YARN, factor=8.0, mscale=0.707,
                                      mscale_all_dim=0.707),
                 max_position_embeddings=64 * 8),
}


def config(name, vocab=256, **over):
    from transformers import DeepseekV3Config
    kw = dict(vocab_size=vocab, intermediate_size=96, num_key_value_heads=None,
              kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
              v_head_dim=128, max_position_embeddings=512, bos_token_id=None,
              eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    kw.update(CONFIGS[name])
    kw.update(over)
    kw["first_k_dense_replace"] = kw["num_hidden_layers"]  # all dense
    return DeepseekV3Config(**kw)


def model(name, seed=0, dtype=torch.float32, device="cpu", **over):
    from transformers import DeepseekV3ForCausalLM
    torch.manual_seed(seed)
    m = DeepseekV3ForCausalLM(config(name, **over)).eval()
    return m.to(device=device, dtype=dtype)


def prompts(vocab, lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist()
            for n in lengths]


def greedy(m, prompt, n, eos=None):
    """model.generate(do_sample=False)'s new tokens for one prompt."""
    ids = torch.tensor([prompt], device=m.device)
    with torch.no_grad():
        out = m.generate(ids, attention_mask=torch.ones_like(ids),
                         max_new_tokens=n, do_sample=False, eos_token_id=eos,
                         pad_token_id=0 if eos is None else eos)
    new = out[0, len(prompt):].tolist()
    if eos is not None and eos in new:  # generate pads a finished row
        new = new[:new.index(eos) + 1]
    return new


def script(ps, conts, device="cpu", extra=64):
    """int64 [R, T]: each prompt followed by its continuation, zero
    padded (a ScriptedDrafter's script)."""
    T = max(len(p) + len(c) for p, c in zip(ps, conts)) + extra
    s = torch.zeros((len(ps), T), dtype=torch.long)
    for r, (p, c) in enumerate(zip(ps, conts)):
        s[r, :len(p) + len(c)] = torch.tensor(p + c)
    return s.to(device)


class NoSync(object):
    """A context in which an operation that reads a tensor's value back to
    the host (.item(), bool(t), .tolist(), .numpy(), nonzero, a boolean
    index) raises: on a CPU, the check that code would not sync on a GPU.
    `ops` counts the aten operations run inside, `kernels` those that are
    not views (each a kernel on a GPU; a Python scalar wrapped into a
    tensor is made on the host).  While `paused()` nothing is counted or
    refused (what a stand-in for a library kernel computes)."""

    VIEWS = ("view", "unsqueeze", "alias", "expand", "slice", "select",
             "split", "split_with_sizes", "transpose", "reshape",
             "_unsafe_view", "t", "permute", "squeeze", "detach",
             "as_strided", "unbind", "scalar_tensor")

    SYNCS = ("_local_scalar_dense", "nonzero", "masked_select", "unique",
             "_unique2", "item")

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.__name__.split(".")[0]
                if outer._paused:
                    return func(*args, **(kwargs or {}))
                if name in outer.SYNCS or (name == "index" and any(
                        getattr(i, "dtype", None) == torch.bool
                        for i in (args[1] if len(args) > 1 else ()))):
                    raise AssertionError("host sync: aten.%s"
                                         % func.__name__)
                outer.ops += 1
                outer.kernels += name not in outer.VIEWS
                return func(*args, **(kwargs or {}))

        self.ops = self.kernels = self._paused = 0
        self._mode = Mode()
        self._saved = None

    def paused(self):
        """A context in which nothing is counted or refused."""
        import contextlib
        outer = self

        @contextlib.contextmanager
        def ctx():
            outer._paused += 1
            try:
                yield
            finally:
                outer._paused -= 1
        return ctx()

    def __enter__(self):
        self._saved = (torch.Tensor.tolist, torch.Tensor.numpy)

        def refuse(name, saved):
            def f(*a, **k):
                if self._paused:
                    return saved(*a, **k)
                raise AssertionError("host sync: Tensor.%s" % name)
            return f
        torch.Tensor.tolist, torch.Tensor.numpy = \
            refuse("tolist", self._saved[0]), refuse("numpy", self._saved[1])
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        torch.Tensor.tolist, torch.Tensor.numpy = self._saved
        return self._mode.__exit__(*exc)
