"""Scatter this step's keys and values into the paged KV cache.

Token t goes to slot slot_mapping[t] = block_id * block_size + offset; a
negative slot skips the token (padding). An int8 cache stores
round(clamp(x / scale, -127, 127)), so it holds x to within scale / 2 as long
as |x| <= 127 * scale; bigger values clip.

Both backends compute the same elementwise formula with correctly rounded
division and round-half-to-even, so they write identical bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kernels.backend import resolve_backend
from kernels.lazy_triton import lazy_jit, next_power_of_2

if TYPE_CHECKING:
    import triton.language as tl

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@lazy_jit
def write_kv_kernel(x_ptr, cache_ptr, slot_ptr, scale,
                    stride_xt, stride_xh, stride_cs, stride_ch,
                    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                    HEADS_P: tl.constexpr, HEAD_DIM_P: tl.constexpr, QUANTIZE: tl.constexpr):
    # One program per token, all its kv heads at once: [HEADS_P, HEAD_DIM_P].
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token)
    h = tl.arange(0, HEADS_P)
    d = tl.arange(0, HEAD_DIM_P)
    ok = (h[:, None] < NUM_HEADS) & (d[None, :] < HEAD_DIM) & (slot >= 0)
    x = tl.load(x_ptr + token * stride_xt + h[:, None] * stride_xh + d[None, :], mask=ok, other=0.0)
    if QUANTIZE:
        # div_rn: plain `/` may be approximate on GPU; torch's is exact.
        y = tl.math.div_rn(x.to(tl.float32), scale)
        y = tl.minimum(tl.maximum(y, -127.0), 127.0)
        # Round half to even like torch.round. Every step is exact: a - floor(a)
        # loses nothing for 0 <= a < 2**23, and halving an integer is exact.
        a = tl.abs(y)
        whole = tl.floor(a)
        frac = a - whole
        odd = whole - 2.0 * tl.floor(whole * 0.5)
        up = (frac > 0.5) | ((frac == 0.5) & (odd == 1.0))
        rounded = tl.where(up, whole + 1.0, whole)
        value = tl.where(y < 0, -rounded, rounded).to(cache_ptr.dtype.element_ty)
    else:
        value = x.to(cache_ptr.dtype.element_ty)
    tl.store(cache_ptr + slot * stride_cs + h[:, None] * stride_ch + d[None, :], value, mask=ok)


def write_kv_triton(k, v, k_cache, v_cache, slot_mapping,
                    k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """k, v: [T, Hkv, D]; caches: [num_blocks, block_size, Hkv, D]; slot_mapping: [T] int64."""
    check_write_kv_inputs(k, v, k_cache, v_cache, slot_mapping)
    T, Hkv, D = k.shape
    if T == 0:
        return
    if k.stride(2) != 1 or v.stride(2) != 1:
        raise ValueError("write_kv_triton needs unit stride along head_dim of k and v")
    for x, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
        flat = cache.view(-1, Hkv, D)  # [num_blocks * block_size, Hkv, D], no copy
        write_kv_kernel[(T,)](
            x, flat, slot_mapping, float(scale),
            x.stride(0), x.stride(1), flat.stride(0), flat.stride(1),
            NUM_HEADS=Hkv, HEAD_DIM=D, HEADS_P=next_power_of_2(Hkv),
            HEAD_DIM_P=next_power_of_2(D), QUANTIZE=cache.dtype == torch.int8,
        )


def write_kv_ref(k, v, k_cache, v_cache, slot_mapping,
                 k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """Torch twin of `write_kv_triton`; writes the caches in place."""
    check_write_kv_inputs(k, v, k_cache, v_cache, slot_mapping)
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    for x, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
        flat = cache.view(-1, *cache.shape[2:])  # [num_blocks * block_size, Hkv, D]
        flat[slots] = to_cache_dtype(x[keep], cache.dtype, scale)


def write_kv(k, v, k_cache, v_cache, slot_mapping, k_scale: float = 1.0, v_scale: float = 1.0,
             backend: str | None = None) -> None:
    impl = write_kv_triton if resolve_backend(backend) == "triton" else write_kv_ref
    impl(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)


def to_cache_dtype(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    if dtype != torch.int8:
        return x.to(dtype)
    return torch.round(torch.clamp(x.float() / scale, -127, 127)).to(torch.int8)


def check_write_kv_inputs(k, v, k_cache, v_cache, slot_mapping) -> None:
    if k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f"write_kv wants k, v [T, Hkv, D], got {tuple(k.shape)}, {tuple(v.shape)}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape or k_cache.shape[2:] != k.shape[1:]:
        raise ValueError(f"caches must be [num_blocks, block_size, {k.shape[1]}, {k.shape[2]}], "
                         f"got {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if k.dtype not in FLOAT_DTYPES or v.dtype != k.dtype:
        raise ValueError(f"k, v must share a float dtype, got {k.dtype}, {v.dtype}")
    if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (*FLOAT_DTYPES, torch.int8):
        raise ValueError(f"caches must share a float or int8 dtype, got {k_cache.dtype}, {v_cache.dtype}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("write_kv needs contiguous caches (slots are flat indices)")
    if slot_mapping.shape != (k.shape[0],) or slot_mapping.dtype != torch.int64:
        raise ValueError(f"slot_mapping must be int64 [{k.shape[0]}], got {slot_mapping.dtype} "
                         f"{tuple(slot_mapping.shape)}")
    devices = {t.device for t in (k, v, k_cache, v_cache, slot_mapping)}
    if len(devices) != 1:
        raise ValueError(f"write_kv inputs span devices {devices}")
