"""y = x @ dequantize(qw).T for weight-only int8 / int4 quantized weights.

The weight stays quantized in memory (that is the point: 2-4x less to read per
decode step) and is dequantized tile by tile inside the kernel, in fp32, with
the same q * scale product `dequantize_weight` computes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kernels.backend import resolve_backend
from kernels.lazy_triton import lazy_jit
from kernels.matmul import FLOAT_DTYPES, matmul_ref, triton_cdiv
from kernels.quantized_weight import QuantizedWeight, dequantize_weight, quantize_weight

if TYPE_CHECKING:
    import triton.language as tl

__all__ = ["QuantizedWeight", "quantize_weight", "dequantize_weight", "quant_matmul_ref",
           "quant_matmul_triton", "quant_matmul"]

# Fixed tiles, independent of M, for the same batch-invariance reason as matmul.
BLOCK_M, BLOCK_N, BLOCK_K = 16, 64, 32


@lazy_jit
def quant_matmul_kernel(
    x_ptr, q_ptr, scales_ptr, out_ptr,
    M, N, K, group_size,
    stride_xm, stride_xk, stride_qn, stride_qk, stride_sn, stride_sg, stride_om, stride_on,
    BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        # x tile: [BLOCK_M, BLOCK_K]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        w_ok = col_ok[:, None] & k_ok[None, :]
        if BITS == 8:
            # q tile: [BLOCK_N, BLOCK_K]
            q = tl.load(q_ptr + cols[:, None] * stride_qn + ks[None, :] * stride_qk,
                        mask=w_ok, other=0).to(tl.float32)
        else:
            # Both nibbles of a byte are loaded by neighbouring k; the repeated
            # address costs nothing extra once the line is in cache.
            packed = tl.load(q_ptr + cols[:, None] * stride_qn + (ks[None, :] // 2) * stride_qk,
                             mask=w_ok, other=0).to(tl.int32)
            nibble = (packed >> ((ks[None, :] % 2) * 4)) & 0xF
            q = (nibble - 8).to(tl.float32)  # 8 = quantized_weight.INT4_BIAS
        # One scale index formula covers all granularities: the launcher sets
        # stride_sg = 0 (per-channel) or both strides = 0 (per-tensor).
        scale = tl.load(scales_ptr + cols[:, None] * stride_sn + (ks[None, :] // group_size) * stride_sg,
                        mask=w_ok, other=0.0)
        w = q * scale  # [BLOCK_N, BLOCK_K] fp32, zero where masked
        acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")

    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on,
             acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def quant_matmul_triton(x: torch.Tensor, qw: QuantizedWeight) -> torch.Tensor:
    """x: [M, K] float -> [M, N] in x's dtype."""
    check_quant_matmul_inputs(x, qw)
    M, K = x.shape
    N = qw.shape[0]
    if qw.granularity == "per-tensor":
        stride_sn, stride_sg, group_size = 0, 0, K
    elif qw.granularity == "per-channel":
        stride_sn, stride_sg, group_size = qw.scales.stride(0), 0, K
    else:
        stride_sn, stride_sg = qw.scales.stride()
        group_size = qw.group_size
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    grid = (triton_cdiv(M, BLOCK_M), triton_cdiv(N, BLOCK_N))
    quant_matmul_kernel[grid](
        x, qw.qweight, qw.scales, out, M, N, K, group_size,
        x.stride(0), x.stride(1), qw.qweight.stride(0), qw.qweight.stride(1),
        stride_sn, stride_sg, out.stride(0), out.stride(1),
        BITS=qw.bits, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    return out


def quant_matmul_ref(x: torch.Tensor, qw: QuantizedWeight) -> torch.Tensor:
    """Torch twin: dequantize to fp32, then `matmul_ref` (rows padded to >= 8)."""
    check_quant_matmul_inputs(x, qw)
    return matmul_ref(x.float(), dequantize_weight(qw)).to(x.dtype)


def quant_matmul(x: torch.Tensor, qw: QuantizedWeight, backend: str | None = None) -> torch.Tensor:
    if resolve_backend(backend) == "triton":
        return quant_matmul_triton(x, qw)
    return quant_matmul_ref(x, qw)


def check_quant_matmul_inputs(x: torch.Tensor, qw: QuantizedWeight) -> None:
    if not isinstance(qw, QuantizedWeight):
        raise ValueError(f"quant_matmul wants a QuantizedWeight, got {type(qw).__name__}")
    if x.dim() != 2 or x.shape[1] != qw.shape[1]:
        raise ValueError(f"quant_matmul wants x [M, K={qw.shape[1]}], got {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"quant_matmul wants a float x, got {x.dtype}")
    if x.device != qw.qweight.device:
        raise ValueError(f"x on {x.device} but weight on {qw.qweight.device}")
