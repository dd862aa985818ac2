"""Absorbed MLA from a Hugging Face DeepseekV3Attention module's own
weights, for the tree rows of a round.

DeepSeek-V3 / Kimi-K2 attention caches one 576-dim latent row per token
(512 normalised c_kv + 64 roped k_pe) and expands it per head with
kv_b_proj's two halves, W_UK [H][nope][512] and W_UV [H][v][512].  The
absorbed form folds those into the query and the output instead:

    q_lat[h] = q_nope[h] @ W_UK[h]                 [512]
    q[h]     = [q_lat[h], rope(q_pe[h])]           [576]  (the kernel's q)
    kv row   = [norm(c_kv), rope(k_pe)]            [576]  (written to cache)
    o_lat[h] = softmax(scale * q[h] . kv) @ kv[:512]
    out      = o_proj(concat_h(o_lat[h] @ W_UV[h]^T))

which is the model's attention exactly (q_nope . (W_UK c) = (q_nope W_UK)
. c, and W_UV commutes with the weighted sum), with the model's softmax
scale (`module.scaling`: 192^-0.5, times YaRN's mscale^2 where the
config has one) and the model's own RoPE (the rotary embedding's cos/sin
at the tree's positions, including YaRN's attention factor, and the
model's interleaved or half-split rotation).

`install(model)` swaps every layer's self_attn for an AbsorbedMLA that
owns the very same submodules under the same names: no weight is copied,
converted or moved, the state dict keeps its keys, and a call without a
tree context (generate(), a plain forward) runs the model's own
attention unchanged.
"""
import torch
from torch import nn

from .kv import KV_DIM, LATENT_DIM


def _hf_rope():
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m
    return m.apply_rotary_pos_emb, m.apply_rotary_pos_emb_interleave


class AbsorbedMLA(nn.Module):
    """Wraps one DeepseekV3Attention.  forward(..., tree_ctx=ctx) runs the
    absorbed tree attention of the decoder (ctx: decode.decoder's
    _Forward); any other call is the wrapped module's forward."""

    def __init__(self, attn):
        super().__init__()
        if attn.kv_lora_rank != LATENT_DIM or \
                attn.kv_lora_rank + attn.qk_rope_head_dim != KV_DIM:
            raise ValueError(
                "AbsorbedMLA: the kernels take a %d-dim latent and %d-dim "
                "cache rows (docs/contract.md §3); this module has "
                "kv_lora_rank %d and qk_rope_head_dim %d"
                % (LATENT_DIM, KV_DIM, attn.kv_lora_rank,
                   attn.qk_rope_head_dim))
        # The same module objects, registered under the wrapped module's
        # names, so parameters and state-dict keys are untouched.
        for name, child in attn.named_children():
            self.add_module(name, child)
        object.__setattr__(self, "_wrapped", attn)
        self.layer_idx = attn.layer_idx
        self.n_heads = attn.num_heads
        self.nope = attn.qk_nope_head_dim
        self.rope = attn.qk_rope_head_dim
        self.v_dim = attn.v_head_dim
        self.scaling = float(attn.scaling)
        self.interleave = bool(getattr(attn.config, "rope_interleave", False))
        self.has_q_lora = attn.q_lora_rank is not None

    @property
    def wrapped(self):
        """The DeepseekV3Attention this module stands in for."""
        return self._wrapped

    def w_uk_uv(self):
        """Views of kv_b_proj.weight: W_UK [H][nope][512], W_UV
        [H][v][512]."""
        w = self.kv_b_proj.weight.view(self.n_heads, self.nope + self.v_dim,
                                       LATENT_DIM)
        return w[:, :self.nope], w[:, self.nope:]

    def forward(self, *args, **kwargs):
        ctx = kwargs.pop("tree_ctx", None)
        if ctx is None:
            return self._wrapped(*args, **kwargs)
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        cos, sin = kwargs["position_embeddings"]
        return self.tree_forward(hidden, cos, sin, ctx), None

    def project(self, x, cos, sin):
        """The kernel's inputs for rows x [R, N, hidden]: the query
        [R, N, H, 576] and the latent cache rows [R, N, 576]."""
        R, N, _ = x.shape
        H = self.n_heads
        if self.has_q_lora:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        else:
            q = self.q_proj(x)
        q = q.view(R, N, H, self.nope + self.rope)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        ckv = self.kv_a_proj_with_mqa(x)
        c, k_pe = ckv.split([LATENT_DIM, self.rope], dim=-1)
        c = self.kv_a_layernorm(c)
        std, inter = _hf_rope()
        rope = inter if self.interleave else std
        # The model's own rotation, in its [batch, heads, seq, dim] layout.
        q_pe, k_pe = rope(q_pe.transpose(1, 2), k_pe.unsqueeze(1), cos, sin)
        w_uk, _ = self.w_uk_uv()
        q_lat = torch.einsum("rnhd,hdc->rnhc", q_nope, w_uk)
        q_full = torch.cat([q_lat, q_pe.transpose(1, 2).to(q_lat.dtype)],
                           dim=-1)
        rows = torch.cat([c, k_pe.squeeze(1).to(c.dtype)], dim=-1)
        return q_full, rows

    def tree_forward(self, x, cos, sin, ctx):
        """Absorbed attention of the tree rows x [R, N, hidden]: writes
        their latent rows into the cache at past_len + i, attends over
        the prefix and each row's ancestors, returns [R, N, hidden]."""
        R, N, _ = x.shape
        q, rows = self.project(x, cos, sin)
        ctx.write(self.layer_idx, rows)
        o_lat = ctx.attend(self.layer_idx, q, self.scaling)
        _, w_uv = self.w_uk_uv()
        o = torch.einsum("rnhc,hdc->rnhd", o_lat.to(x.dtype), w_uv)
        return self.o_proj(o.reshape(R, N, self.n_heads * self.v_dim))


def install(model):
    """Swaps every DeepseekV3Attention of `model` (a DeepseekV3ForCausalLM
    or its .model) for an AbsorbedMLA around it; layers already swapped
    are left as they are.  Returns the decoder layers."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import \
        DeepseekV3Attention
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise TypeError("install: %s has no .layers (a DeepseekV3ForCausalLM "
                        "or DeepseekV3Model)" % type(model).__name__)
    for i, layer in enumerate(layers):
        a = layer.self_attn
        if isinstance(a, AbsorbedMLA):
            continue
        if not isinstance(a, DeepseekV3Attention):
            raise TypeError("install: layer %d's self_attn is a %s, not a "
                            "DeepseekV3Attention" % (i, type(a).__name__))
        layer.self_attn = AbsorbedMLA(a)
    return layers
