"""The step metadata paged attention reads, and its validation.

Both backends derive each query's sequence and position the same way, from
`seq_lens` and `query_start_loc` alone.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def query_positions(seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                    num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (seq_of_token [T] int32, pos [T] int32): each query's sequence and position.

    Stays on the tensors' device without a host sync (output_size is given).
    """
    device = query_start_loc.device
    q_lens = (query_start_loc[1:] - query_start_loc[:-1]).long()  # [B]
    seq = torch.repeat_interleave(torch.arange(q_lens.numel(), device=device), q_lens,
                                  output_size=num_tokens)  # [T]
    token = torch.arange(num_tokens, device=device)
    pos = seq_lens.long()[seq] - q_lens[seq] + (token - query_start_loc.long()[seq])
    return seq.to(torch.int32), pos.to(torch.int32)


def check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc) -> None:
    """Shapes, dtypes and devices only: cheap, no host sync."""
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"paged_attention wants q [T, Hq, D] and caches [blocks, block_size, Hkv, D], "
                         f"got {tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    T, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    if k_cache.shape[3] != D or Hkv == 0 or Hq % Hkv:
        raise ValueError(f"need cache head_dim == {D} and Hq={Hq} a multiple of Hkv={Hkv}")
    if q.dtype not in FLOAT_DTYPES:
        raise ValueError(f"q must be float32/float16/bfloat16, got {q.dtype}")
    if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (q.dtype, torch.int8):
        raise ValueError(f"caches must both be {q.dtype} or int8, got {k_cache.dtype}, {v_cache.dtype}")
    B = seq_lens.shape[0] if seq_lens.dim() == 1 else -1
    if block_tables.dim() != 2 or block_tables.shape[0] != B or query_start_loc.shape != (B + 1,):
        raise ValueError(f"want block_tables [B, max_blocks], seq_lens [B], query_start_loc [B+1], got "
                         f"{tuple(block_tables.shape)}, {tuple(seq_lens.shape)}, {tuple(query_start_loc.shape)}")
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens),
                    ("query_start_loc", query_start_loc)):
        if t.dtype != torch.int32:
            raise ValueError(f"{name} must be int32, got {t.dtype}")
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)}
    if len(devices) != 1:
        raise ValueError(f"paged_attention inputs span devices {devices}")


def check_paged_metadata(q, k_cache, block_tables, seq_lens, query_start_loc) -> None:
    """Value checks on the step metadata (syncs with the GPU; once per step)."""
    qsl = query_start_loc.long().cpu()
    q_lens = qsl[1:] - qsl[:-1]
    lens = seq_lens.long().cpu()
    num_blocks, block_size = k_cache.shape[:2]
    if qsl[0] != 0 or qsl[-1] != q.shape[0] or bool((q_lens < 0).any()):
        raise ValueError(f"query_start_loc must rise from 0 to T={q.shape[0]}, got {qsl.tolist()}")
    if bool((q_lens > lens).any()):
        raise ValueError("a sequence has more new queries than tokens in seq_lens")
    if bool((lens > block_tables.shape[1] * block_size).any()):
        raise ValueError("a sequence is longer than its block table can address")
    used = torch.arange(block_tables.shape[1])[None, :] * block_size < lens[:, None]  # [B, max_blocks]
    ids = block_tables.long().cpu()[used & (q_lens > 0)[:, None]]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_blocks):
        raise ValueError(f"block_tables points outside the cache's {num_blocks} blocks")
