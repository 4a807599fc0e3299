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


def _gather(cache: torch.Tensor, tables: torch.Tensor, lengths: torch.Tensor, length: int,
            cache_scale: float) -> torch.Tensor:
    """Keys 0..length-1 of n sequences -> [n, Hkv, length, D] fp32.

    cache: [num_blocks, bs, Hkv, D]; tables: [n, >= length // bs] (entries
    past a sequence's blocks must be valid ids; the caller zeroes them);
    lengths: [n] keys each sequence has. Keys past a sequence's length are
    zeroed: a masked key scores -inf either way, but stale memory may hold NaN,
    and NaN + -inf is NaN.
    """
    n, (bs, hkv, d) = tables.shape[0], cache.shape[1:]
    blocks = tables[:, : length // bs].long()  # [n, nb]
    rows = cache[blocks].permute(0, 3, 1, 2, 4).reshape(n, hkv, length, d)  # one copy, in SDPA's layout
    rows = rows.float() * cache_scale if cache.dtype == torch.int8 else rows.float()
    stale = torch.arange(length, device=cache.device)[None, :] >= lengths[:, None]  # [n, length]
    return rows.masked_fill_(stale[:, None, :, None], 0.0)


def paged_attention_bucketed(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                             k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    # q: [T, Hq, D] -> out [T, Hq, D] in q's dtype
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    bs = k_cache.shape[1]
    if KEYS_PER_BUCKET % bs:
        raise ValueError(f"block_size {bs} must divide KEYS_PER_BUCKET={KEYS_PER_BUCKET}")
    T, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    out = torch.empty((T, Hkv, Hq // Hkv, D), device=q.device)
    if T == 0:
        return out.reshape(T, Hq, D).to(q.dtype)
    seq_of_token, pos = query_positions(seq_lens, query_start_loc, T)
    qg = q.float().reshape(T, Hkv, Hq // Hkv, D)  # [T, Hkv, G, D]
    buckets = bucket_of(pos.long())
    # Table entries past each sequence's blocks become block 0 (any valid id:
    # those keys are zeroed and masked), widened so every bucket can be sliced.
    width = max(int(buckets.max()) // bs, block_tables.shape[1])
    owned = torch.arange(width, device=q.device)[None, :] < (seq_lens.long()[:, None] + bs - 1) // bs
    tables = torch.where(owned, F.pad(block_tables, (0, width - block_tables.shape[1])), 0)
    seqs, positions, lengths = seq_of_token.tolist(), pos.tolist(), buckets.tolist()
    groups: dict[int, dict[int, list[int]]] = {}  # bucket -> sequence -> its tokens
    for t in range(T):
        groups.setdefault(lengths[t], {}).setdefault(seqs[t], []).append(t)
    for length, by_seq in groups.items():
        singles = [ts[0] for ts in by_seq.values() if len(ts) == 1]
        for b, tokens in by_seq.items():
            if len(tokens) > 1:  # one gather, shared by the queries through a stride-0 expand
                n, sl = len(tokens), seq_lens[b:b + 1]
                k = _gather(k_cache, tables[b:b + 1], sl, length, k_scale).expand(n, -1, -1, -1)
                v = _gather(v_cache, tables[b:b + 1], sl, length, v_scale).expand(n, -1, -1, -1)
                _attend(qg, out, tokens, positions, k, v, scale)
        if singles:
            idx = torch.tensor([seqs[t] for t in singles], device=q.device)
            rows, sl = tables[idx], seq_lens[idx]
            k, v = _gather(k_cache, rows, sl, length, k_scale), _gather(v_cache, rows, sl, length, v_scale)
            _attend(qg, out, singles, positions, k, v, scale)
    return out.reshape(T, Hq, D).to(q.dtype)


def _attend(qg, out, tokens: list[int], positions: list[int], k, v, scale: float) -> None:
    """One SDPA call: items `tokens` of qg [T, Hkv, G, D] against k, v [n, Hkv, L, D]."""
    idx = torch.tensor(tokens, device=qg.device)
    pos = torch.tensor([positions[t] for t in tokens], device=qg.device)
    mask = (torch.arange(k.shape[2], device=qg.device)[None, :] <= pos[:, None])[:, None, None, :]  # [n,1,1,L]
    out[idx] = F.scaled_dot_product_attention(qg[idx], k, v, attn_mask=mask, scale=scale)


if __name__ == "__main__":  # seeded timing against the dense SDPA path and the blockwise reference
    import json
    import time

    from kernels.dense_attention import paged_attention_dense
    from kernels.paged_attention import paged_attention_ref

    torch.manual_seed(0)
    torch.set_num_threads(1)
    bs, hkv, hq, d, num_blocks = 16, 2, 8, 32, 2048
    k_cache, v_cache = torch.randn(num_blocks, bs, hkv, d), torch.randn(num_blocks, bs, hkv, d)

    def case(lens, q_lens):
        tables = torch.randperm(num_blocks)[: len(lens) * 64].view(len(lens), 64).int()
        qsl = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
        return (torch.randn(sum(q_lens), hq, d), k_cache, v_cache, tables,
                torch.tensor(lens, dtype=torch.int32), qsl, d ** -0.5)

    cases = {"decode 16 x 200": case([200 + 3 * i for i in range(16)], [1] * 16),
             "decode 32 x 300": case([250 + 7 * i for i in range(32)], [1] * 32),
             "prefill 16 x 40": case([40 + i for i in range(16)], [40 + i for i in range(16)]),
             "prefill 1 x 500": case([500], [500])}
    result = {}
    for name, args in cases.items():
        for fn in (paged_attention_dense, paged_attention_bucketed, paged_attention_ref):
            fn(*args)
            times = []
            for _ in range(20):
                t0 = time.process_time()
                fn(*args)
                times.append(time.process_time() - t0)
            result.setdefault(name, {})[fn.__name__] = round(1e3 * min(times), 3)
    print(json.dumps({"ms_per_call_min_cpu_time": result}, indent=1))
