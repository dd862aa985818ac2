"""The paged latent KV cache of an absorbed-MLA model, and the move of the
accepted tree rows' KV into place after a round.

Layout (docs/contract.md §3): one tensor `data [layers][pages][PAGE][576]`
holds every layer's pages (row = 512 normalised c_kv + 64 roped k_pe), and
`block_table [R][max_pages]` (int32) lists request r's pages in logical
order; logical position `pos` of request r is slot `pos % PAGE` of page
`block_table[r][pos / PAGE]`.  All layers share the block table, so a
slot index computed once serves every layer.

An FP8 cache (dtype torch.float8_e4m3fn, the `fp8_e4m3` KV cache SGLang
and vLLM keep for MLA; docs/contract.md §3, "An FP8 (e4m3) cache") holds
each element as e4m3(value / scale), rounded to nearest even and
saturated to +-448, with one `scale` for the whole cache (SGLang's 1.0,
vLLM's k_scale); what it holds is worth scale times that.  Its moves
copy bytes (torch has no index_copy_ for float8).

The round writes its tree rows at `past_len + i` (row i of the tree, root
at i = 0).  After the walk, accepted row `accept_idx[j]` must sit at
`past_len + j`.  `move_accepted` does that for all layers with one gather
and one scatter, reading every source before writing any destination:
`accept_idx = [0, 2, 3]` moves row 2 to slot 1 and row 3 to slot 2, so
slot 2 is both read and written, and an in-place copy in any parallel
order could read it after it was overwritten.  The destinations
`past_len + j` are distinct, so the scatter has no duplicate index.
Shapes never depend on the accepted length: the move always covers `M =
min(L + 1, N_MAX)` rows, and a row j past `accept_len` gets whatever
source it is given (the decoder gives row 0): it lies past the request's
new past_len, where the next round's forward writes its own rows before
any layer reads them.  So a round is capturable in a CUDA graph and
nothing is read back to the host (docs/decoder.md, "The KV move", argues
torch operations over a fifth kernel).
"""
import math

import torch

KV_DIM = 576  # 512 c_kv + 64 k_pe (docs/contract.md §3)
LATENT_DIM = 512
E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # the largest finite e4m3 value


def cache_scale(who, scale, e4m3):
    """`scale` as a float, checked: finite and > 0 for an e4m3 cache,
    1.0 for any other (ValueError naming `who` otherwise)."""
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0) or \
            (not e4m3 and scale != 1.0):
        raise ValueError("%s: the cache's scale must be finite and > 0 "
                         "for an e4m3 cache, 1.0 for any other; got %r"
                         % (who, scale))
    return scale


class PagedKVCache(object):
    """`n_layers` layers of latent KV for `n_requests` requests of up to
    `capacity` positions each, in pages of `page_size` tokens.  The pages
    of the requests are interleaved in a fixed permutation (`shuffle`,
    the default), so that nothing can work by accident on a block table
    that is the identity.  dtype torch.float8_e4m3fn: an FP8 cache worth
    `scale` times what it holds (the module's docstring)."""

    def __init__(self, n_layers, n_requests, capacity, page_size, dtype,
                 device, shuffle=True, scale=1.0):
        if page_size < 1:
            raise ValueError("PagedKVCache: page_size must be >= 1, got %d"
                             % page_size)
        if capacity < 1:
            raise ValueError("PagedKVCache: capacity must be >= 1, got %d"
                             % capacity)
        self.e4m3 = dtype == E4M3
        self.scale = cache_scale("PagedKVCache", scale, self.e4m3)
        self.n_layers, self.R = n_layers, n_requests
        self.page = page_size
        self.max_pages = -(-capacity // page_size)
        self.capacity = self.max_pages * page_size
        n_pages = n_requests * self.max_pages
        self.data = torch.zeros((n_layers, n_pages, page_size, KV_DIM),
                                dtype=dtype, device=device)
        if shuffle:
            g = torch.Generator().manual_seed(n_pages)
            order = torch.randperm(n_pages, generator=g)
        else:
            order = torch.arange(n_pages)
        self.block_table = order.to(torch.int32).view(
            n_requests, self.max_pages).to(device)
        # The table as the int64 indices gather() takes, made once: every
        # slot computation of every round reads it.
        self._pages = self.block_table.long()
        # Every layer's rows as one 2-D table per layer: slot -> row.
        self._flat = self.data.view(n_layers, n_pages * page_size, KV_DIM)
        # What the writes and moves copy: the rows' bytes for e4m3.
        self._store = self._flat.view(torch.uint8) if self.e4m3 \
            else self._flat
        # The slot of every logical position, int64 [R, capacity]: a
        # round's slots are then one gather (row_slots).
        self._slot_of = self.slots(torch.arange(
            self.capacity, device=device).expand(n_requests, -1))
        self._rows = {}

    def layer(self, i):
        """Layer i's pages, [pages][PAGE][576], contiguous (a view)."""
        return self.data[i]

    def slots(self, positions):
        """Slot indices (int64, the shape of `positions` [R, ...]) of the
        logical positions of each request.  Positions are clamped to the
        capacity: the decoder sizes the cache so that they never need to
        be, and a clamp keeps a wrong position inside the buffer."""
        pos = positions.long().clamp(0, self.capacity - 1)
        R = pos.shape[0]
        flat_pos = pos.reshape(R, -1)
        page = torch.gather(self._pages, 1, torch.div(
            flat_pos, self.page, rounding_mode="floor"))
        return (page * self.page + flat_pos % self.page).view_as(pos)

    def quantize(self, rows):
        """rows as the cache holds them: in its dtype; for e4m3, divided
        by the scale (in f32), saturated to +-448 and rounded."""
        if not self.e4m3:
            return rows.to(self.data.dtype)
        x = rows.float()
        if self.scale != 1.0:
            x = x / self.scale
        return x.clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)

    def write(self, layer, slots, rows):
        """Writes rows [R, N, 576] at the slots [R, N] of one layer."""
        q = self.quantize(rows).reshape(-1, KV_DIM)
        self._store[layer].index_copy_(
            0, slots.reshape(-1), q.view(torch.uint8) if self.e4m3 else q)

    def gather(self, layer):
        """Layer `layer` of every request in logical order: [R, capacity,
        576] (a copy; the torch backend's attention reads it): the cache's
        values, for e4m3 dequantized (f32, scale times the e4m3 number:
        the values verify_attn attends over)."""
        rows = self.data[layer][self._pages].view(
            self.R, self.capacity, KV_DIM)
        if not self.e4m3:
            return rows
        rows = rows.float()
        return rows * self.scale if self.scale != 1.0 else rows

    def row_slots(self, past_len, n):
        """The slots int64 [R, n] of positions past_len + i, i < n: where
        a forward over n rows writes them (two device operations; the
        positions must be inside the capacity, as the decoder sizes it)."""
        rows = self._rows.get(n)
        if rows is None:
            rows = self._rows[n] = torch.arange(n, device=past_len.device)
        return self._slot_of.gather(1, past_len.unsqueeze(1) + rows)

    def move_accepted(self, row_slots, src):
        """Moves, in every layer, tree row src[r][j] to row j.
        row_slots [R, N_MAX]: the tree rows' slots (row_slots(past_len,
        N_MAX), which the round's forward wrote); src int64 [R, M], M <=
        N_MAX: tree_accept's accept_idx with its -1 padding past the path
        clamped to 0 (rows past accept_len are moved too, from row 0;
        the module's docstring says why that is harmless)."""
        M = src.shape[1]
        # Gather first, then scatter: a destination may be another row's
        # source (the module's docstring).
        rows = self._store.index_select(1, row_slots.gather(1, src).view(-1))
        self._store[:, row_slots[:, :M]] = rows.view(
            self.n_layers, self.R, M, KV_DIM)
