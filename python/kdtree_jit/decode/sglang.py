"""Our tree and our accept in the shapes of SGLang's tree verification, so
that a server built on SGLang's speculative path (EAGLE's
build_tree_kernel_efficient, verify_tree_greedy, its attention backends'
custom mask) can take build_ddtree's trees and tree_accept's walks.

SGLang's definitions, per request b of bs, with n = num_draft_tokens
tree rows (the verified token first, as our root) and
num_spec_steps = L + 1:

- candidates int64 [bs, n]: each row's token (row 0 the verified one);
- retrive_index int64 [bs, n]: the row's index in the flat batch,
  b * n + i;
- retrive_next_token int64 [bs, n]: the row's first child, -1 for none;
- retrive_next_sibling int64 [bs, n]: the next child of the same parent,
  -1 for none (siblings in increasing row order);
- positions int64 [bs * n]: seq_len + depth;
- the tree mask, row i seeing row j when j is i or an ancestor: FULL_MASK
  (bool, per request its n rows of seq_len + n columns, the prefix all
  True, requests back to back: the custom mask its FlashInfer-style
  backends read), QLEN_ONLY (bool [bs * n * n], the tree part alone), or
  QLEN_ONLY_BITPACKING (one 8-, 16- or 32-bit word per row, bit j = row
  j, for n <= 32);
- the walk's outputs: accept_index int32 [bs, num_spec_steps] (flat
  indices of the accepted rows, root first, -1 padded), accept_token_num
  int32 [bs] (accepted drafts, root excluded) and predicts int32
  [bs * n] (at each accepted row the target's token there: the next
  accepted token, the bonus at the last; other rows untouched, SGLang
  allocates it zeroed).

Ours (docs/contract.md §2, §4) carry the same information: token is
candidates, first_child / next_sibling are the two links (build_ddtree's
siblings are in row order), position is positions, anc_mask holds the
mask's bits, accept_idx / accept_len / accept_token / bonus the walk.
Rows past n_nodes (a budget the candidates could not fill) keep their
own bit only and are linked from nowhere, so SGLang's walk never reaches
them.  Everything here is a few torch operations on the device; only the
FULL_MASK's size depends on the prefix lengths, which SGLang too takes
from the host (seq_lens_sum).
"""
import collections

import torch

from .torch_backend import tree_visibility

VerifyInputs = collections.namedtuple(
    "VerifyInputs", "candidates retrive_index retrive_next_token "
                    "retrive_next_sibling positions custom_mask")
AcceptOutputs = collections.namedtuple(
    "AcceptOutputs", "predicts accept_index accept_token_num")

FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2  # SGLang's TreeMaskMode


def verify_inputs(tree, seq_lens=None, mask_mode=FULL_MASK):
    """SGLang's tree-verify inputs from a kdtree_jit.Tree [R, N].
    seq_lens: each request's prefix length (past_len), a list of ints or
    a tensor; needed for FULL_MASK only (its size is sum(seq_lens) * N +
    R * N * N)."""
    token = tree.token
    R, N = token.shape
    dev = token.device
    vis = tree_visibility(tree.anc_mask, N)
    if mask_mode == FULL_MASK:
        if seq_lens is None:
            raise ValueError("verify_inputs: FULL_MASK needs seq_lens")
        lens = seq_lens.tolist() if isinstance(seq_lens, torch.Tensor) \
            else [int(x) for x in seq_lens]
        if len(lens) != R:
            raise ValueError("verify_inputs: %d seq_lens for %d requests"
                             % (len(lens), R))
        mask = torch.cat([torch.cat([
            torch.ones((N, lens[r]), dtype=torch.bool, device=dev), vis[r]],
            dim=1).reshape(-1) for r in range(R)])
    elif mask_mode == QLEN_ONLY:
        mask = vis.reshape(-1)
    elif mask_mode == QLEN_ONLY_BITPACKING:
        if N > 32:
            raise ValueError("verify_inputs: QLEN_ONLY_BITPACKING packs at "
                             "most 32 rows, the tree has %d" % N)
        word = tree.anc_mask[:, :, 0].reshape(-1)
        if N <= 8:
            mask = (word & 0xFF).to(torch.uint8)
        elif N <= 16:
            mask = (word & 0xFFFF).to(torch.int32).to(torch.uint16)
        else:
            mask = word.contiguous().view(torch.uint32)
    else:
        raise ValueError("verify_inputs: mask_mode must be FULL_MASK (0), "
                         "QLEN_ONLY (1) or QLEN_ONLY_BITPACKING (2), got %r"
                         % (mask_mode,))
    flat = (torch.arange(R, device=dev).unsqueeze(1) * N +
            torch.arange(N, device=dev))
    return VerifyInputs(token.long(), flat, tree.first_child.long(),
                        tree.next_sibling.long(),
                        tree.position.long().reshape(-1), mask)


def accept_outputs(acc, n_max):
    """SGLang's verify_tree_greedy outputs from a kdtree_jit.Accept of
    trees of n_max rows."""
    idx, alen = acc.accept_idx.long(), acc.accept_len.long()
    R, A = idx.shape
    dev = idx.device
    j = torch.arange(A, device=dev)
    valid = j.unsqueeze(0) < alen.unsqueeze(1)
    flat = torch.arange(R, device=dev).unsqueeze(1) * n_max + idx
    accept_index = torch.where(valid, flat, -1).to(torch.int32)
    # The target's token at accepted row j is the token of row j + 1, and
    # the bonus at the last.
    nxt = torch.cat([acc.accept_token[:, 1:], acc.accept_token[:, :1]], 1)
    nxt = nxt.long().scatter(1, (alen - 1).unsqueeze(1),
                             acc.bonus.long().unsqueeze(1))
    # Rows past the path go to one slot past the end (fixed shapes, no
    # sync), dropped after.
    predicts = torch.zeros(R * n_max + 1, dtype=torch.int64, device=dev)
    predicts.scatter_(0, torch.where(valid, flat, R * n_max).reshape(-1),
                      nxt.reshape(-1))
    return AcceptOutputs(predicts[:-1].to(torch.int32), accept_index,
                         (alen - 1).to(torch.int32))
