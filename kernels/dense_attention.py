"""Fast torch attention over the paged KV cache, for CPU serving.

Each sequence's keys and values are gathered once and handed to
`scaled_dot_product_attention` (PyTorch's fused CPU kernel): decode queries
of all sequences in one padded call, prefill chunks one sequence at a time.
A query's bits depend on the padded key length of its call (the decode call
pads to the batch's longest sequence) and on how its prompt was chunked, so
it is NOT batch invariant; `batch_invariant=True` swaps in
`kernels.bucketed_attention`, whose call shapes follow each query's own
position, as vLLM swaps in invariant kernels. Same signature as `paged_attention_ref`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _gather(cache: torch.Tensor, blocks: torch.Tensor, length: int, scale: float) -> torch.Tensor:
    # cache: [num_blocks, block_size, Hkv, D] -> [length, Hkv, D] fp32
    rows = cache[blocks].reshape(-1, cache.shape[2], cache.shape[3])[:length]
    return rows.float() * scale if cache.dtype == torch.int8 else rows.float()


def paged_attention_dense(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                          k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    # q: [T, Hq, D] -> out [T, Hq, D]
    out = torch.empty_like(q)
    bs = k_cache.shape[1]
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    decode = [b for b in range(len(lens)) if starts[b + 1] - starts[b] == 1]
    if decode:
        _decode(q, out, k_cache, v_cache, block_tables, lens, starts, decode, bs, scale, k_scale, v_scale)
    for b in range(len(lens)):
        s, e = starts[b], starts[b + 1]
        if e - s <= 1:
            continue
        length, n = lens[b], e - s
        blocks = block_tables[b, : -(-length // bs)].long()
        k = _gather(k_cache, blocks, length, k_scale).transpose(0, 1)[None]  # [1, Hkv, L, D]
        v = _gather(v_cache, blocks, length, v_scale).transpose(0, 1)[None]
        pos = torch.arange(length - n, length, device=q.device)
        mask = torch.arange(length, device=q.device)[None, :] <= pos[:, None]  # [n, L]
        o = F.scaled_dot_product_attention(q[s:e].float().transpose(0, 1)[None], k, v, attn_mask=mask,
                                           scale=scale, enable_gqa=True)
        out[s:e] = o[0].transpose(0, 1).to(q.dtype)
    return out


def _decode(q, out, k_cache, v_cache, block_tables, lens, starts, seqs, bs, scale, k_scale, v_scale):
    """One padded SDPA call for every single-query sequence.

    The G query heads sharing a kv head all look at the same keys with the
    same mask, so they ride in SDPA's query-length slot: no kv-head repeat.
    """
    n, hq = len(seqs), q.shape[1]
    hkv, d = k_cache.shape[2], k_cache.shape[3]
    nb = -(-max(lens[b] for b in seqs) // bs)
    idx = torch.tensor(seqs, device=q.device)
    blocks = block_tables[idx, :nb].long()  # [B, nb]; padding entries are masked below
    # [B, nb, bs, Hkv, D] -> [B, Hkv, nb * bs, D]: one copy, in SDPA's layout
    k = k_cache[blocks].permute(0, 3, 1, 2, 4).reshape(n, hkv, nb * bs, d)
    v = v_cache[blocks].permute(0, 3, 1, 2, 4).reshape(n, hkv, nb * bs, d)
    k = k.float() * k_scale if k_cache.dtype == torch.int8 else k.float()
    v = v.float() * v_scale if v_cache.dtype == torch.int8 else v.float()
    seq_len = torch.tensor([lens[b] for b in seqs], device=q.device)
    mask = (torch.arange(nb * bs, device=q.device)[None, :] < seq_len[:, None])[:, None, None, :]  # [B,1,1,L]
    rows = torch.tensor([starts[b] for b in seqs], device=q.device)
    qg = q[rows].float().view(n, hkv, hq // hkv, d)  # [B, Hkv, G, D]
    o = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=scale)  # [B, Hkv, G, D]
    out[rows] = o.reshape(n, hq, d).to(q.dtype)
