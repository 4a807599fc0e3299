"""RMSNorm with Hugging Face Llama semantics.

    out = weight * (x32 * 1 / sqrt(mean(x32 ** 2) + eps)).to(x.dtype)

The normalisation runs in fp32 and is rounded to the input dtype *before* the
weight multiply, exactly like `LlamaRMSNorm`, so bf16 models match HF bits up
to the mean's summation order. Output is always in x's dtype.
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
def rms_norm_kernel(x_ptr, weight_ptr, out_ptr, hidden, stride_x, stride_out, eps,
                    BLOCK: tl.constexpr):
    # One program per row; the whole row fits in one block.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / hidden
    # 1 / sqrt rather than rsqrt: a correctly rounded sqrt and division give the
    # same bits on every code path, while torch's rsqrt was measured to give an
    # element different bits depending on its position in the tensor.
    inv_rms = tl.math.div_rn(1.0, tl.sqrt_rn(variance + eps))
    normed = (x * inv_rms).to(out_ptr.dtype.element_ty).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols,
             (weight * normed).to(out_ptr.dtype.element_ty), mask=ok)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [..., H], weight: [H] -> [..., H] in x's dtype."""
    check_rms_norm_inputs(x, weight)
    hidden = x.shape[-1]
    rows = x.reshape(-1, hidden)  # [R, H]; copies only if x's rows are not evenly strided
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty((rows.shape[0], hidden), dtype=x.dtype, device=x.device)
    if rows.shape[0] > 0:
        rms_norm_kernel[(rows.shape[0],)](
            rows, weight.contiguous(), out, hidden, rows.stride(0), out.stride(0), float(eps),
            BLOCK=next_power_of_2(hidden),
        )
    return out.reshape(x.shape)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Torch twin of `rms_norm_triton`; a row never depends on the other rows."""
    check_rms_norm_inputs(x, weight)
    x32 = x.float()  # [..., H]
    variance = x32.pow(2).mean(-1, keepdim=True)  # [..., 1]
    normed = (x32 * (1.0 / torch.sqrt(variance + eps))).to(x.dtype)
    return (weight.float() * normed.float()).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             backend: str | None = None) -> torch.Tensor:
    if resolve_backend(backend) == "triton":
        return rms_norm_triton(x, weight, eps)
    return rms_norm_ref(x, weight, eps)


def check_rms_norm_inputs(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() < 1 or weight.dim() != 1 or x.shape[-1] != weight.shape[0]:
        raise ValueError(f"rms_norm wants x [..., H] and weight [H], got {tuple(x.shape)} and {tuple(weight.shape)}")
    if x.dtype not in FLOAT_DTYPES or weight.dtype not in FLOAT_DTYPES:
        raise ValueError(f"rms_norm wants float tensors, got {x.dtype} and {weight.dtype}")
    if x.device != weight.device:
        raise ValueError(f"rms_norm wants x and weight on one device, got {x.device} and {weight.device}")
