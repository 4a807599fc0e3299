"""Varlen paged attention with grouped-query attention (GQA).

One call serves a whole engine step: decode sequences (one new query each) and
chunked-prefill sequences (several new queries whose keys include earlier
context) side by side. Their queries are concatenated along T and located by
`query_start_loc`; their keys live in a paged cache addressed through
`block_tables`. The new tokens' K/V must already be in the cache (`write_kv`).

Query i of sequence b sits at position p = seq_lens[b] - q_len_b + i and sees
keys 0..p. Its result is an online softmax over the sequence's cache blocks
in order 0, 1, 2, ..., with running max m, running sum l and running output
acc kept in fp32. Nothing in that recipe mentions other sequences or the
other queries of the same step, so a query's output is the same bits whatever
it was batched with and however its prompt was chunked (per backend: the two
backends sum within a block in different orders).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kernels.backend import resolve_backend
from kernels.kv_cache_write import write_kv, write_kv_ref, write_kv_triton
from kernels.lazy_triton import dot_dim, lazy_jit

if TYPE_CHECKING:
    import triton.language as tl

__all__ = ["paged_attention_ref", "paged_attention_triton", "paged_attention", "naive_attention",
           "query_positions", "check_paged_metadata", "write_kv", "write_kv_ref", "write_kv_triton"]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@lazy_jit
def paged_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_of_token_ptr, pos_ptr, out_ptr,
    scale, k_scale, v_scale,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_bt, stride_ot, stride_oh,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    GROUP_P: tl.constexpr, HEAD_DIM_P: tl.constexpr, BLOCK_SIZE_P: tl.constexpr,
):
    # One program = one query token x one kv head, with the GROUP query heads
    # that share the kv head as the rows of its tiles: K/V are read once per
    # group, and the tiles are big enough for tl.dot. The *_P sizes are those
    # dims padded to powers of two >= 16; masks hide the padding.
    token = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    seq = tl.load(seq_of_token_ptr + token).to(tl.int64)
    pos = tl.load(pos_ptr + token)

    g = tl.arange(0, GROUP_P)
    d = tl.arange(0, HEAD_DIM_P)
    slot = tl.arange(0, BLOCK_SIZE_P)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM

    # q: [GROUP_P, HEAD_DIM_P]; padded rows are zeros and never stored
    q = tl.load(q_ptr + token * stride_qt + (kv_head * GROUP + g)[:, None] * stride_qh + d[None, :],
                mask=g_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)

    m = tl.full((GROUP_P,), float("-inf"), dtype=tl.float32)
    l = tl.zeros((GROUP_P,), dtype=tl.float32)
    acc = tl.zeros((GROUP_P, HEAD_DIM_P), dtype=tl.float32)

    # Only the blocks holding keys 0..pos are visited, so block-table padding
    # past the sequence's end is never read.
    for j in range(0, pos // BLOCK_SIZE + 1):
        block = tl.load(block_tables_ptr + seq * stride_bt + j).to(tl.int64)
        visible = (slot < BLOCK_SIZE) & (j * BLOCK_SIZE + slot <= pos)  # [BLOCK_SIZE_P]
        kv_ok = visible[:, None] & d_ok[None, :]
        # k, v: [BLOCK_SIZE_P, HEAD_DIM_P]; an int8 cache is dequantized here
        # (k_scale is 1.0 for float caches: an exact no-op)
        k = tl.load(k_cache_ptr + block * stride_kb + slot[:, None] * stride_ks
                    + kv_head * stride_kh + d[None, :], mask=kv_ok, other=0.0).to(tl.float32) * k_scale
        v = tl.load(v_cache_ptr + block * stride_vb + slot[:, None] * stride_vs
                    + kv_head * stride_vh + d[None, :], mask=kv_ok, other=0.0).to(tl.float32) * v_scale

        # "ieee": TF32 would cost ~1e-3 relative error against the reference
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # [GROUP_P, BLOCK_SIZE_P]
        scores = tl.where(visible[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp(m - m_new)  # 0 on the first block, where m = -inf
        p = tl.exp(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new

    out = acc / l[:, None]
    tl.store(out_ptr + token * stride_ot + (kv_head * GROUP + g)[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])


def paged_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                           k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """Same contract as `paged_attention_ref`; returns out: [T, Hq, D] in q's dtype.

    Only shapes are checked: validating the metadata's values would cost a
    GPU sync per layer. Call `check_paged_metadata` once per step instead.
    On CPU (the interpreter) it is checked here, as a bad index would read
    out of bounds.
    """
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    if not q.is_cuda:
        check_paged_metadata(q, k_cache, block_tables, seq_lens, query_start_loc)
    T, Hq, D = q.shape
    _, block_size, Hkv, _ = k_cache.shape
    group = Hq // Hkv
    seq_of_token, pos = query_positions(seq_lens, query_start_loc, T)
    out = torch.empty_like(q)
    if T == 0:
        return out
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1 or block_tables.stride(1) != 1:
        raise ValueError("paged_attention_triton needs unit stride along head_dim and block_tables rows")
    paged_attention_kernel[(T, Hkv)](
        q, k_cache, v_cache, block_tables, seq_of_token, pos, out,
        float(scale), float(k_scale), float(v_scale),
        q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3],
        block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=group, HEAD_DIM=D, BLOCK_SIZE=block_size,
        GROUP_P=dot_dim(group), HEAD_DIM_P=dot_dim(D), BLOCK_SIZE_P=dot_dim(block_size),
    )
    return out


def paged_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                        k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """Torch twin of `paged_attention_triton`, vectorised over all queries of the step.

    q: [T, Hq, D]; k_cache, v_cache: [num_blocks, block_size, Hkv, D] (float, or
    int8 holding value / k_scale, value / v_scale); block_tables: [B, max_blocks]
    int32; seq_lens: [B] int32 (including this step's tokens); query_start_loc:
    [B + 1] int32. Returns out: [T, Hq, D] in q's dtype.

    Scores and P @ V are elementwise products summed with `.sum()` over one
    small axis, not matmuls: measured on this CPU, a batched matmul gives an
    item different bits depending on how many items are in the batch, while
    a reduction over a fixed-length axis does not.
    """
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    check_paged_metadata(q, k_cache, block_tables, seq_lens, query_start_loc)
    T, Hq, D = q.shape
    _, block_size, Hkv, _ = k_cache.shape
    group = Hq // Hkv
    seq_of_token, pos = query_positions(seq_lens, query_start_loc, T)
    pos = pos.long()
    if T == 0:
        return torch.empty_like(q)

    q32 = q.float().view(T, 1, Hkv, group, D)  # [T, 1, Hkv, G, D]
    tables = block_tables.long()[seq_of_token.long()]  # [T, max_blocks]
    slots = torch.arange(block_size, device=q.device)
    m = torch.full((T, Hkv, group), float("-inf"), device=q.device)
    l = torch.zeros((T, Hkv, group), device=q.device)
    acc = torch.zeros((T, Hkv, group, D), device=q.device)

    for j in range(int(pos.max()) // block_size + 1):
        visible = j * block_size + slots[None, :] <= pos[:, None]  # [T, block_size]
        active = visible[:, 0]  # [T]: block j holds some key this query sees
        block = torch.where(active, tables[:, j], 0)  # padding entries are never used
        k = dequantize(k_cache[block], k_scale)  # [T, block_size, Hkv, D]
        v = dequantize(v_cache[block], v_scale)
        # Masked slots may hold anything (stale or uninitialised memory, even
        # NaN); p = 0 there, but 0 * NaN = NaN, so zero them instead.
        v = torch.where(visible[:, :, None, None], v, 0.0)

        scores = (q32 * k[:, :, :, None, :]).sum(-1) * scale  # [T, block_size, Hkv, G]
        scores = torch.where(visible[:, :, None, None], scores, float("-inf"))
        m_new = torch.maximum(m, scores.amax(1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new[:, None])  # [T, block_size, Hkv, G]
        l_new = l * alpha + p.sum(1)
        acc_new = acc * alpha[..., None] + (p[..., None] * v[:, :, :, None, :]).sum(1)

        keep = active[:, None, None]  # queries that ended earlier: exact no-op
        m = torch.where(keep, m_new, m)
        l = torch.where(keep, l_new, l)
        acc = torch.where(keep[..., None], acc_new, acc)

    return (acc / l[..., None]).reshape(T, Hq, D).to(q.dtype)


def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                    k_scale: float = 1.0, v_scale: float = 1.0,
                    backend: str | None = None) -> torch.Tensor:
    impl = paged_attention_triton if resolve_backend(backend) == "triton" else paged_attention_ref
    return impl(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
                k_scale, v_scale)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Textbook causal softmax attention for one sequence, in float64.

    q: [Tq, Hq, D] are the last Tq positions of k, v: [Tk, Hkv, D]. The test
    oracle: no paging, no online softmax, no GQA tricks.
    """
    Tq, Hq, D = q.shape
    Tk, Hkv, _ = k.shape
    k64 = k.double().repeat_interleave(Hq // Hkv, dim=1)  # [Tk, Hq, D]
    v64 = v.double().repeat_interleave(Hq // Hkv, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k64) * scale  # [Hq, Tq, Tk]
    q_pos = torch.arange(Tk - Tq, Tk, device=q.device)
    causal = torch.arange(Tk, device=q.device)[None, :] <= q_pos[:, None]  # [Tq, Tk]
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v64).to(q.dtype)


def dequantize(cache_rows: torch.Tensor, cache_scale: float) -> torch.Tensor:
    if cache_rows.dtype == torch.int8:
        return cache_rows.float() * cache_scale
    return cache_rows.float()


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
