"""Batch-invariant fast torch attention over the paged KV cache, for CPU serving.

PyTorch's fused CPU SDPA gives a query row different low-order bits as the
key length of its call changes (measured: a query at position 200 got 12
different results for padded lengths 208..384), and the padded decode call
of `paged_attention_dense` pads every sequence to the batch's longest one.
So here every query's call shape is a function of its own position alone:

    query at position p  ->  keys padded to bucket(p) = (p // 64 + 1) * 64
    one SDPA item per query: its G query heads ride in the query-length slot

    q item [Hkv, G, D]  x  keys [Hkv, bucket(p), D], mask: key index <= p

Items with the same bucket share a call (measured: the batch count and an
item's place in it do not change its bits). Queries of one sequence in one
bucket share the gathered keys through a stride-0 expand instead of a copy.
A query thus gets the same bits alone or in any batch, decoded or prefilled,
however its prompt was chunked. Same signature as `paged_attention_ref`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.paged_attention_inputs import check_paged_inputs, query_positions

# Keys per bucket; a multiple of every block size we use (16). Wider buckets
# mean fewer SDPA calls per step but more masked keys per query.
KEYS_PER_BUCKET = 64


def bucket_of(pos: torch.Tensor) -> torch.Tensor:
    """Padded key length for queries at positions pos (int) -> same shape."""
    return (pos // KEYS_PER_BUCKET + 1) * KEYS_PER_BUCKET


def _gather(cache: torch.Tensor, tables: torch.Tensor, length: int, cache_scale: float) -> torch.Tensor:
    """Keys 0..length-1 of n sequences: cache [num_blocks, bs, Hkv, D], tables [n, >= length // bs]
    -> [n, Hkv, length, D] fp32. Table entries past a sequence's end are masked keys: any block does."""
    n, (bs, hkv, d) = tables.shape[0], cache.shape[1:]
    blocks = tables[:, : length // bs].long()  # [n, nb]
    rows = cache[blocks].permute(0, 3, 1, 2, 4).reshape(n, hkv, length, d)  # one copy, in SDPA's layout
    return rows.float() * cache_scale if cache.dtype == torch.int8 else rows.float()


def paged_attention_bucketed(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                             k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    # q: [T, Hq, D] -> out [T, Hq, D] in q's dtype
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    if KEYS_PER_BUCKET % k_cache.shape[1]:
        raise ValueError(f"block_size {k_cache.shape[1]} must divide KEYS_PER_BUCKET={KEYS_PER_BUCKET}")
    T, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    out = torch.empty((T, Hkv, Hq // Hkv, D), device=q.device)
    if T == 0:
        return out.reshape(T, Hq, D).to(q.dtype)
    seq_of_token, pos = query_positions(seq_lens, query_start_loc, T)
    qg = q.float().reshape(T, Hkv, Hq // Hkv, D)  # [T, Hkv, G, D]
    buckets = bucket_of(pos.long())
    # Pad the tables (with block 0) so every bucket's blocks can be sliced.
    width = int(buckets.max()) // k_cache.shape[1]
    tables = F.pad(block_tables, (0, max(0, width - block_tables.shape[1])))
    seqs, positions, lengths = seq_of_token.tolist(), pos.tolist(), buckets.tolist()
    groups: dict[int, dict[int, list[int]]] = {}  # bucket -> sequence -> its tokens
    for t in range(T):
        groups.setdefault(lengths[t], {}).setdefault(seqs[t], []).append(t)
    for length, by_seq in groups.items():
        singles = [ts[0] for ts in by_seq.values() if len(ts) == 1]
        for b, tokens in by_seq.items():
            if len(tokens) > 1:
                k = _gather(k_cache, tables[b:b + 1], length, k_scale)
                v = _gather(v_cache, tables[b:b + 1], length, v_scale)
                n = len(tokens)
                _attend(qg, out, tokens, positions, k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1), scale)
        if singles:
            rows = tables[torch.tensor([seqs[t] for t in singles], device=q.device)]
            k, v = _gather(k_cache, rows, length, k_scale), _gather(v_cache, rows, length, v_scale)
            _attend(qg, out, singles, positions, k, v, scale)
    return out.reshape(T, Hq, D).to(q.dtype)


def _attend(qg, out, tokens: list[int], positions: list[int], k, v, scale: float) -> None:
    """One SDPA call: items `tokens` of qg [T, Hkv, G, D] against k, v [n, Hkv, L, D]."""
    idx = torch.tensor(tokens, device=qg.device)
    pos = torch.tensor([positions[t] for t in tokens], device=qg.device)
    mask = (torch.arange(k.shape[2], device=qg.device)[None, :] <= pos[:, None])[:, None, None, :]  # [n,1,1,L]
    out[idx] = F.scaled_dot_product_attention(qg[idx], k, v, attn_mask=mask, scale=scale)
