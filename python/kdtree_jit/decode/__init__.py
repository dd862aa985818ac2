"""DDTree decoding of DeepSeek-V3 / Kimi-K2-class models (Hugging Face
DeepseekV3ForCausalLM) on libkdtree's kernels or their torch twins.

    from kdtree_jit.decode import Decoder
    dec = Decoder(model, drafter, backend="library", budget=64)
    tokens = dec.generate(prompts, max_new_tokens=256)

decode.decoder: the decoder and the drafter's interface (DraftInput);
decode.mla: the absorbed-MLA layer swapped into the model; decode.kv: the
paged latent cache and the KV move after acceptance;
decode.torch_backend / decode._library: the two backends;
decode.sglang: our tree and accept in SGLang's tree-verify shapes;
decode.drafters: drafters of known acceptance for tests and benchmarks.
docs/decoder.md is the whole story.  Needs torch and transformers; the
library backend needs a CUDA device.
"""
from .decoder import Batch, Decoder, DraftInput  # noqa: F401
from .kv import PagedKVCache  # noqa: F401
from .mla import AbsorbedMLA, install  # noqa: F401
from .torch_backend import TorchBackend  # noqa: F401

__all__ = ["Decoder", "DraftInput", "Batch", "PagedKVCache", "AbsorbedMLA",
           "install", "TorchBackend", "LibraryBackend"]


def __getattr__(name):
    # The library backend loads libkdtree: only when asked for.
    if name == "LibraryBackend":
        from ._library import LibraryBackend
        return LibraryBackend
    raise AttributeError("module 'kdtree_jit.decode' has no attribute %r"
                         % name)
