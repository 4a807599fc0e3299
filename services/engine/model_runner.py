"""The paged forward pass: one flat batch of tokens from many sequences.

Every step packs the scheduled tokens of all requests into one [T] batch
(prefill chunks and decode tokens alike). K/V of the new tokens are written
into their slots first, then each query attends over its own sequence's
blocks through the block table:

    block_table[b] = [7, 2, 9]      block_size = 4
    slots of b:      28..31 | 8..11 | 36..39
    position p  ->   slot block_table[b][p // 4] * 4 + p % 4
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.activation import silu_mul
from kernels.bucketed_attention import KEYS_PER_BUCKET, paged_attention_bucketed
from kernels.dense_attention import paged_attention_dense
from kernels.kv_cache_write import write_kv
from kernels.matmul import choose_split_k, matmul
from kernels.paged_attention import BLOCKS_PER_STEP, QUERIES_PER_CHUNK, paged_attention, paged_attention_ref
from kernels.quant_matmul import quant_matmul
from kernels.quantized_weight import QuantizedWeight, dequantize_weight
from kernels.rmsnorm import rms_norm
from services.engine.numerics import Numerics
from services.engine.weights import ModelWeights
from services.model.llama import rope_cos_sin


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor        # [T] int64
    positions: torch.Tensor        # [T] int64
    slot_mapping: torch.Tensor     # [T] int64
    block_tables: torch.Tensor     # [B, max_blocks] int32
    seq_lens: torch.Tensor         # [B] int32, tokens in the cache after this step
    query_start_loc: torch.Tensor  # [B + 1] int32
    logits_indices: torch.Tensor   # [N] int64 rows of T whose logits are needed

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @classmethod
    def build(cls, seqs: list[SeqSlice], block_size: int, device: torch.device) -> ForwardBatch:
        """Flatten per-sequence token slices into one batch; logits for each
        slice's last `num_logits` tokens, in order."""
        ids, pos, slots, seq_lens, qsl, logit_idx = [], [], [], [], [0], []
        width = max(len(s.block_table) for s in seqs)
        tables = torch.zeros((len(seqs), width), dtype=torch.int32)
        for b, s in enumerate(seqs):
            tables[b, : len(s.block_table)] = torch.tensor(s.block_table, dtype=torch.int32)
            positions = range(s.start, s.start + len(s.token_ids))
            ids += s.token_ids
            pos += positions
            slots += [s.block_table[p // block_size] * block_size + p % block_size for p in positions]
            seq_lens.append(s.start + len(s.token_ids))
            qsl.append(qsl[-1] + len(s.token_ids))
            logit_idx += range(qsl[-1] - s.num_logits, qsl[-1])
        return cls(torch.tensor(ids, device=device), torch.tensor(pos, device=device),
                   torch.tensor(slots, device=device), tables.to(device),
                   torch.tensor(seq_lens, dtype=torch.int32, device=device),
                   torch.tensor(qsl, dtype=torch.int32, device=device),
                   torch.tensor(logit_idx, dtype=torch.int64, device=device))


@dataclass
class SeqSlice:
    """One sequence's share of a step: tokens at positions start.. and its block table."""
    token_ids: list[int]
    start: int
    block_table: list[int]
    num_logits: int  # logits needed for the last num_logits tokens (0: mid-prefill)


class ModelRunner:
    def __init__(self, weights: ModelWeights, num_blocks: int, block_size: int, numerics: Numerics,
                 backend: str, batch_invariant: bool, max_model_len: int,
                 kv_cache_dtype: str = "auto", kv_scale: float = 1.0, split_k_override: int | None = None,
                 attention_impl: str = "auto"):
        cfg = weights.config
        self.weights, self.cfg, self.numerics = weights, cfg, numerics
        self.backend, self.batch_invariant = backend, batch_invariant
        self._attention = self._choose_attention(attention_impl)
        self.split_k_override = split_k_override
        self._dequantized: dict[int, torch.Tensor] = {}
        self.block_size, self.num_blocks = block_size, num_blocks
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scale = self.head_dim ** -0.5
        self.kv_quantized = kv_cache_dtype == "int8"
        self.kv_scale = float(kv_scale) if self.kv_quantized else 1.0
        cache_dtype = torch.int8 if self.kv_quantized else numerics.kv_storage_dtype
        shape = (num_blocks, block_size, self.num_kv_heads, self.head_dim)
        self.k_caches = [torch.zeros(shape, dtype=cache_dtype, device=numerics.device) for _ in range(cfg.num_hidden_layers)]
        self.v_caches = [torch.zeros(shape, dtype=cache_dtype, device=numerics.device) for _ in range(cfg.num_hidden_layers)]
        cos, sin = rope_cos_sin(torch.arange(max_model_len + 64), self.head_dim, cfg.rope_theta)
        self.cos, self.sin = cos.to(numerics.device), sin.to(numerics.device)

    # -- memory accounting -------------------------------------------------
    @staticmethod
    def kv_bytes_per_block(cfg, block_size: int, element_size: int) -> int:
        return 2 * cfg.num_hidden_layers * block_size * cfg.num_key_value_heads * cfg.head_dim * element_size

    def kv_pool_bytes(self) -> int:
        return sum(c.numel() * c.element_size() for c in self.k_caches + self.v_caches)

    def activation_bytes(self, num_tokens: int, num_logits: int, max_blocks: int, num_seqs: int = 1) -> int:
        """Peak bytes of the intermediate tensors one step allocates, from their shapes."""
        cfg, f = self.cfg, 4  # activations are fp32 tensors on CPU
        if self.numerics.device.type == "cuda":
            f = torch.tensor([], dtype=self.numerics.tensor_dtype).element_size()
        qkv = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        per_token = 2 * cfg.hidden_size + qkv + self.num_heads * self.head_dim + 3 * cfg.intermediate_size
        tables = num_tokens * (max_blocks + BLOCKS_PER_STEP) * 8
        logits = 3 * num_logits * cfg.vocab_size * 4
        return num_tokens * per_token * f + self.attention_bytes(num_tokens, num_seqs, max_blocks) + tables + logits

    def attention_bytes(self, num_tokens: int, num_seqs: int, max_blocks: int) -> int:
        """Scratch of the attention kernel that runs, which grows with batch x context on SDPA."""
        kv_row = self.num_kv_heads * self.head_dim * 4  # fp32 bytes of one key (or value)
        if self._attention in (paged_attention_dense, paged_attention_bucketed):
            # The SDPA paths gather each sequence's whole context, padded to the
            # batch's longest (dense) or to its bucket: K and V in SDPA's layout,
            # plus the transient block-gather copy. Conservative: every sequence
            # of the step counted at the longest context.
            keys = max_blocks * self.block_size + (KEYS_PER_BUCKET if self.batch_invariant else 0)
            return 3 * num_seqs * keys * kv_row
        # The blockwise reference scores a chunk of queries against BLOCKS_PER_STEP
        # gathered blocks at a time: K and V rows, scores and probabilities (fp32).
        n = min(num_tokens, QUERIES_PER_CHUNK)
        keys = BLOCKS_PER_STEP * self.block_size
        return n * (2 * keys * kv_row + 3 * self.num_heads * keys * 4)

    # -- the forward pass --------------------------------------------------
    def linear(self, x: torch.Tensor, w) -> torch.Tensor:
        # x: [M, K]; w: [N, K] -> [M, N]
        if isinstance(w, QuantizedWeight):
            if self.backend == "torch":
                # The torch path dequantizes once (same values as the reference's
                # per-call dequantization); the Triton kernel dequantizes in registers.
                dense = self._dequantized.get(id(w))
                if dense is None:
                    dense = self._dequantized[id(w)] = self.numerics.act(dequantize_weight(w))
                w = dense
            else:
                return self.numerics.act(quant_matmul(x, w, backend=self.backend))
        split_k = self.split_k_override or choose_split_k(x.shape[0], x.shape[1], self.batch_invariant)
        return self.numerics.act(matmul(x, w, split_k=split_k, backend=self.backend,
                                        partial_dtype=self.numerics.split_k_partial_dtype))

    def _choose_attention(self, impl: str):
        if impl == "paged":  # the blockwise reference, on any device
            return paged_attention_ref
        if self.backend == "triton":  # invariant by construction
            return lambda *a, **kw: paged_attention(*a, backend="triton", **kw)
        # Torch backend: fused SDPA either way. The dense path pads a decode
        # batch to its longest sequence, so its bits follow the batch; the
        # bucketed path fixes each query's call shape from its own position.
        return paged_attention_bucketed if self.batch_invariant else paged_attention_dense

    def attention(self, *args, **kwargs) -> torch.Tensor:
        return self._attention(*args, **kwargs)

    def norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return self.numerics.act(rms_norm(x, w, self.cfg.rms_norm_eps, backend=self.backend))

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: [T, H, D]
        cos, sin = self.cos[positions][:, None, :], self.sin[positions][:, None, :]
        half = self.head_dim // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return self.numerics.act(x * cos + rotated * sin)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """Logits [N, V] (fp32) for the rows `batch.logits_indices`."""
        t = batch.num_tokens
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        x = self.weights.embed[batch.input_ids]  # [T, hidden]
        for i, layer in enumerate(self.weights.layers):
            h = self.norm(x, layer.input_norm)
            qkv = self.linear(h, layer.qkv)  # [T, (Hq + 2 Hkv) * D]
            q = self.rope(qkv[:, : hq * d].reshape(t, hq, d), batch.positions)
            k = self.rope(qkv[:, hq * d: (hq + hkv) * d].reshape(t, hkv, d), batch.positions)
            v = qkv[:, (hq + hkv) * d:].reshape(t, hkv, d)
            write_kv(k, v, self.k_caches[i], self.v_caches[i], batch.slot_mapping,
                             k_scale=self.kv_scale, v_scale=self.kv_scale, backend=self.backend)
            attn = self.attention(q, self.k_caches[i], self.v_caches[i], batch.block_tables,
                                  batch.seq_lens, batch.query_start_loc, self.scale,
                                  k_scale=self.kv_scale, v_scale=self.kv_scale)
            x = self.numerics.act(x + self.linear(self.numerics.act(attn).reshape(t, hq * d), layer.o))
            h = self.norm(x, layer.post_norm)
            gate, up = self.linear(h, layer.gate_up).chunk(2, dim=-1)
            act = silu_mul(gate, up, row_invariant=self.batch_invariant)
            x = self.numerics.act(x + self.linear(self.numerics.act(act), layer.down))
        if batch.logits_indices.numel() == 0:  # every sequence is mid-prefill
            return torch.empty((0, self.cfg.vocab_size), device=x.device)
        x = self.norm(x[batch.logits_indices], self.weights.norm)
        return self.linear(x, self.weights.lm_head).float()

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy-on-write: duplicate shared blocks before they are written."""
        if not pairs:
            return
        src = torch.tensor([s for s, _ in pairs], device=self.numerics.device)
        dst = torch.tensor([d for _, d in pairs], device=self.numerics.device)
        for cache in self.k_caches + self.v_caches:
            cache[dst] = cache[src]
