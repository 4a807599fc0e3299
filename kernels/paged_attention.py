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
from kernels.paged_attention_inputs import check_paged_inputs, check_paged_metadata, query_positions

if TYPE_CHECKING:
    import triton.language as tl

__all__ = ["paged_attention_ref", "paged_attention_triton", "paged_attention", "naive_attention",
           "query_positions", "check_paged_metadata", "write_kv", "write_kv_ref", "write_kv_triton"]


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
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1 or block_tables.stride(1) != 1:
        raise ValueError("paged_attention_triton needs unit stride along head_dim and block_tables rows")
    seq_of_token, pos = query_positions(seq_lens, query_start_loc, T)
    out = torch.empty((T, Hq, D), dtype=q.dtype, device=q.device)
    if T == 0:
        return out
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
    """
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
    check_paged_metadata(q, k_cache, block_tables, seq_lens, query_start_loc)
    T, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    seq_of_token, pos = query_positions(seq_lens, query_start_loc, T)
    # tables: [T, max_blocks] padded so BLOCKS_PER_STEP-wide slices never run off the end
    tables = block_tables.long()[seq_of_token.long()]
    tables = torch.nn.functional.pad(tables, (0, BLOCKS_PER_STEP))
    q32 = q.float().reshape(T, Hkv, Hq // Hkv, D)
    out = torch.empty((T, Hkv, Hq // Hkv, D), device=q.device)
    # Chunking queries only bounds memory: every query's arithmetic is the same
    # in any chunk (and any batch), which is the point of the whole design.
    for t0 in range(0, T, QUERIES_PER_CHUNK):
        t1 = min(t0 + QUERIES_PER_CHUNK, T)
        out[t0:t1] = attend_chunk(q32[t0:t1], pos[t0:t1].long(), tables[t0:t1], k_cache, v_cache,
                                  scale, k_scale, v_scale)
    return out.reshape(T, Hq, D).to(q.dtype)


# Keys are fetched and scored BLOCKS_PER_STEP blocks at a time: a CPU reference
# spends its time on per-call overhead, so fewer, larger torch calls are what
# make it fast. The width must be a constant, as matmul bits may depend on the
# matrix shapes; queries are chunked only to bound memory.
BLOCKS_PER_STEP = 8
QUERIES_PER_CHUNK = 256


def attend_chunk(q32, pos, tables, k_cache, v_cache, scale, k_scale, v_scale) -> torch.Tensor:
    """q32: [n, Hkv, G, D] fp32, pos: [n], tables: [n, >= max_blocks + S] -> [n, Hkv, G, D].

    Scores and P @ V go through `torch.bmm`, one kv head at a time, on
    operands whose per-item layout never depends on n. Measured on this CPU:
    bmm then gives an item the same bits whatever the batch count, whereas
    `matmul` on reshaped views switches BLAS code paths with the batch's shape.
    """
    n, Hkv, G, D = q32.shape
    block_size = k_cache.shape[1]
    S = BLOCKS_PER_STEP
    device = q32.device
    m = torch.full((n, Hkv, G), float("-inf"), device=device)  # running max
    # acc and l travel together as [..., :D] and [..., D]: both are rescaled by
    # alpha and then added to, so one update per block serves both.
    acc_l = torch.zeros((n, Hkv, G, D + 1), device=device)
    step_slots = torch.arange(S * block_size, device=device)
    # Gather buffers reused by every step: fresh multi-MB tensors per step
    # were measured to cost more in page faults than the copy itself.
    k_rows = torch.empty((n * S, block_size * Hkv * D), dtype=k_cache.dtype, device=device)
    v_rows = torch.empty_like(k_rows)

    for j0 in range(0, int(pos.max()) // block_size + 1, S):
        visible = j0 * block_size + step_slots[None, :] <= pos[:, None]  # [n, S * block_size]
        active = visible[:, ::block_size]  # [n, S]: block j0 + s holds a key the query sees
        blocks = torch.where(active, tables[:, j0:j0 + S], 0)  # padding entries are never used
        k = gather_blocks(k_cache, blocks, k_scale, k_rows)  # [n, S * block_size, Hkv, D]
        v = gather_blocks(v_cache, blocks, v_scale, v_rows)
        # Masked slots may hold anything (stale or uninitialised memory, even
        # NaN); p = 0 there, but 0 * NaN = NaN, so zero those rows of v.
        hidden_rows = (~visible).reshape(-1).nonzero().squeeze(1)
        v.view(n * S * block_size, Hkv * D).index_fill_(0, hidden_rows, 0.0)

        # scores: [n, Hkv, G, S * block_size]
        scores = torch.stack([torch.bmm(q32[:, h], k[:, :, h].transpose(1, 2)) for h in range(Hkv)], 1)
        scores = (scores * scale).masked_fill_(~visible[:, None, None, :], float("-inf"))
        scores = scores.view(n, Hkv, G, S, block_size)
        # Running max after each block; a block with nothing visible has max
        # -inf and leaves m alone.
        m_after = torch.cummax(torch.cat([m[..., None], scores.amax(-1)], dim=-1), dim=-1).values
        alpha = torch.exp(m_after[..., :-1] - m_after[..., 1:])  # [n, Hkv, G, S]; 0 on block 0
        p = torch.exp(scores - m_after[..., 1:, None])  # [n, Hkv, G, S, block_size]
        p_sum = p.sum(-1)  # [n, Hkv, G, S]
        # One bmm item per (query, block): [G, block_size] @ [block_size, D]
        p_items = p.permute(0, 3, 1, 2, 4).reshape(n * S, Hkv, G, block_size)
        v_items = v.view(n * S, block_size, Hkv, D)
        pv = torch.stack([torch.bmm(p_items[:, h], v_items[:, :, h]) for h in range(Hkv)], 1)
        pv_psum = torch.cat([pv.view(n, S, Hkv, G, D), p_sum.permute(0, 3, 1, 2)[..., None]], -1)
        alpha = alpha.permute(0, 3, 1, 2)[..., None]  # [n, S, Hkv, G, 1]

        for s in range(S):  # the recurrence itself is sequential, block by block
            keep = active[:, s, None, None, None]  # queries past their last key: exact no-op
            acc_l = torch.where(keep, acc_l * alpha[:, s] + pv_psum[:, s], acc_l)
        m = m_after[..., -1]

    return acc_l[..., :D] / acc_l[..., D:]


def gather_blocks(cache: torch.Tensor, blocks: torch.Tensor, cache_scale: float,
                  out: torch.Tensor) -> torch.Tensor:
    """cache: [num_blocks, block_size, Hkv, D], blocks: [n, S] -> fp32 [n, S * block_size, Hkv, D].

    out: [n * S, block_size * Hkv * D] in the cache's dtype, overwritten.
    """
    n, S = blocks.shape
    _, block_size, Hkv, D = cache.shape
    torch.index_select(cache.view(cache.shape[0], -1), 0, blocks.reshape(-1), out=out)
    rows = out.view(n, S * block_size, Hkv, D)
    if cache.dtype == torch.int8:
        return rows.float() * cache_scale
    return rows.float()


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
