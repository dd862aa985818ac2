"""A target model whose greedy decoding has no near-ties, for benchmarks
and tests that need tree decoding to produce plain decoding's tokens in
low precision.

A random-weight model's argmax is a near-tie at many steps: in bf16 the
tree verify and plain decoding round differently (another row count,
another accumulation order), pick different tokens there, and from then
on decode different texts.  A drafter that ranks plain decoding's tokens
then drafts a text the tree decoder has left, and the tokens a round
measure that, not the drafter.

`successor_target(model)` rewrites two matrices of a random
DeepseekV3ForCausalLM (its other weights, and so every layer's cost, stay
as they are) so that its next token after token t is succ[t], a fixed
random permutation of the vocabulary, by a wide margin:

    embed_tokens[t]  = a * sqrt(D) * u_t           (rms a per element)
    lm_head[succ[t]] = (c / sqrt(D)) * u_t

with u_t random unit vectors of the hidden size D.  The last hidden
state of a row whose token is t is embed_tokens[t] plus what the layers
add (attention and MLP, from normalised inputs, so their size does not
grow with a), and the final RMSNorm scales it to length sqrt(D) * w (w
the norm's weight, 1 at initialisation).  So the logit of succ[t] is
about c * cos(u_t, h) and every other logit c * cos(u_s, h), where a
random unit vector u_s has a cosine of about N(0, 1/D) with anything:
with a well above the layers' contribution the first is near c and the
rest a few c / sqrt(D).  The layers still run, and attention still
moves the hidden state, by a bounded amount that cannot reach the next
token's margin: every step's argmax is the same in f32 and bf16, in a
tree or in plain decoding, and the text from a first token t0 is t0,
succ[t0], succ[succ[t0]], ... (`chain`).  `margins` measures the gaps.
"""
import torch


def successor_target(model, seed=0, embed_rms=4.0, top_logit=16.0):
    """Rewrites `model`'s embed_tokens and lm_head in place (the module
    doc has the construction) and returns succ, the next token of each
    token (int64 [V], on the CPU).  embed_rms: a, the embedding's rms
    per element; top_logit: c, about the winning logit."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    if emb.data_ptr() == head.data_ptr():
        raise ValueError("successor_target: the model ties its embedding "
                         "and LM head (tie_word_embeddings); the "
                         "construction needs them apart")
    V, D = emb.shape
    dev = emb.device
    # On the model's device, in f32 and in place: at Kimi-K2's size u is
    # 163840 x 7168 (4.7 GB), as large as both matrices together.
    u = torch.randn((V, D), generator=torch.Generator(device=dev)
                    .manual_seed(seed), device=dev)
    u /= u.norm(dim=1, keepdim=True)
    succ = torch.randperm(V, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        emb.copy_(u.mul_(embed_rms * D ** 0.5))
        head.index_copy_(0, succ.to(dev), u.mul_(
            top_logit / D ** 0.5 / (embed_rms * D ** 0.5)).to(head.dtype))
    return succ


def chain(succ, first, n):
    """int64 [R, n]: each first token followed by its n - 1 successors
    (what the target decodes greedily from it)."""
    succ = succ.cpu()
    out = torch.empty((len(first), n), dtype=torch.long)
    out[:, 0] = torch.as_tensor(first, dtype=torch.long).cpu()
    for i in range(1, n):
        out[:, i] = succ[out[:, i - 1]]
    return out


def margins(model, ids):
    """(gap, top) [B, T] of the model's logits teacher-forced on ids
    int64 [B, T]: the winning logit and its lead over the second."""
    with torch.no_grad():
        lg = model(ids.to(model.device)).logits.float()
    top2 = lg.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1], top2[..., 0]
