"""Symmetric weight-only quantization to int8 or int4.

A weight w: [N, K] (nn.Linear layout) is stored as integers q in [-qmax, qmax]
and fp32 scales with w ~= q * scale. How many weights share one scale is the
granularity:

    per-tensor   scales: []                   one scale for everything
    per-channel  scales: [N]                  one per output row
    per-group    scales: [N, K // group_size] one per run of group_size inputs

The range stays symmetric ([-7, 7] for int4, not [-8, 7]) so that zero is
exact and q * scale never needs a zero point.

int4 packs two values per byte along K, biased by +8 so each nibble is an
unsigned 1..15: byte = (q[2i] + 8) | (q[2i + 1] + 8) << 4. Unpacking is then a
shift, a mask and a subtraction, with no sign extension.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GRANULARITIES = ("per-channel", "per-group", "per-tensor")
QMAX = {8: 127, 4: 7}
INT4_BIAS = 8


@dataclass
class QuantizedWeight:
    qweight: torch.Tensor  # int8 [N, K] for 8 bits; uint8 [N, K // 2] for 4 bits
    scales: torch.Tensor  # fp32, shape set by granularity (see module doc)
    bits: int
    granularity: str
    group_size: int
    shape: tuple[int, int]  # (N, K) of the original weight

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape must be (N, K) with N, K >= 1, got {self.shape}")
        n, k = self.shape
        if self.bits not in QMAX:
            raise ValueError(f"bits must be 8 or 4, got {self.bits!r}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}")
        if self.granularity == "per-group" and (self.group_size < 1 or k % self.group_size):
            raise ValueError(f"group_size {self.group_size} must divide K={k}")
        if self.bits == 8:
            want_dtype, want_shape = torch.int8, (n, k)
        else:
            if k % 2:
                raise ValueError(f"int4 packs pairs along K, so K must be even, got {k}")
            want_dtype, want_shape = torch.uint8, (n, k // 2)
        if self.qweight.dtype != want_dtype or tuple(self.qweight.shape) != want_shape:
            raise ValueError(f"{self.bits}-bit qweight must be {want_dtype} {want_shape}, "
                             f"got {self.qweight.dtype} {tuple(self.qweight.shape)}")
        if self.scales.dtype != torch.float32 or tuple(self.scales.shape) != self.scales_shape:
            raise ValueError(f"{self.granularity} scales must be float32 {self.scales_shape}, "
                             f"got {self.scales.dtype} {tuple(self.scales.shape)}")
        if self.scales.device != self.qweight.device:
            raise ValueError("qweight and scales must be on one device")

    @property
    def scales_shape(self) -> tuple[int, ...]:
        n, k = self.shape
        if self.granularity == "per-tensor":
            return ()
        if self.granularity == "per-channel":
            return (n,)
        return (n, k // self.group_size)

    def expanded_scales(self) -> torch.Tensor:
        """scales broadcast to one per weight: [N, K]."""
        n, k = self.shape
        if self.granularity == "per-tensor":
            return self.scales.expand(n, k)
        if self.granularity == "per-channel":
            return self.scales[:, None].expand(n, k)
        return self.scales.repeat_interleave(self.group_size, dim=1)


def quantize_weight(w: torch.Tensor, bits: int, granularity: str,
                    group_size: int = 32, amax: float | None = None) -> QuantizedWeight:
    """w: [N, K] float -> QuantizedWeight with scale = absmax / qmax per group.

    amax (per-tensor only) replaces w's own absmax, so several tensors can
    share one scale; values beyond it are clamped.
    """
    if w.dim() != 2 or not w.is_floating_point():
        raise ValueError(f"quantize_weight wants a float [N, K] weight, got {w.dtype} {tuple(w.shape)}")
    if bits not in QMAX:
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    n, k = w.shape
    if granularity == "per-group" and (group_size < 1 or k % group_size):
        raise ValueError(f"group_size {group_size} must divide K={k}")
    if amax is not None and (granularity != "per-tensor" or not amax > 0):
        raise ValueError(f"amax overrides a per-tensor scale and must be > 0, got {amax!r} for {granularity}")
    qmax = QMAX[bits]
    w32 = w.float()
    if granularity == "per-tensor":
        scales = (w32.abs().amax() if amax is None else torch.tensor(float(amax))) / qmax  # []
        per_weight = scales.expand(n, k)
    elif granularity == "per-channel":
        scales = w32.abs().amax(dim=1) / qmax  # [N]
        per_weight = scales[:, None].expand(n, k)
    else:
        scales = w32.view(n, k // group_size, group_size).abs().amax(dim=2) / qmax  # [N, G]
        per_weight = scales.repeat_interleave(group_size, dim=1)
    # An all-zero group gets scale 0; divide by 1 instead so q is 0, not NaN.
    divisor = torch.where(per_weight > 0, per_weight, torch.ones_like(per_weight))
    q = torch.round(torch.clamp(w32 / divisor, -qmax, qmax)).to(torch.int8)  # [N, K]
    qweight = q if bits == 8 else pack_int4(q)
    return QuantizedWeight(qweight.contiguous(), scales.contiguous(), bits, granularity,
                           group_size, (n, k))


def dequantize_weight(qw: QuantizedWeight) -> torch.Tensor:
    """-> fp32 [N, K], q * scale elementwise (the Triton kernel does the same)."""
    q = qw.qweight if qw.bits == 8 else unpack_int4(qw.qweight)
    return q.float() * qw.expanded_scales()


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """q: int8 [N, K] in [-7, 7] -> uint8 [N, K // 2]."""
    biased = (q.to(torch.int16) + INT4_BIAS).to(torch.uint8)
    return biased[:, 0::2] | (biased[:, 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """packed: uint8 [N, K // 2] -> int8 [N, K]."""
    low = (packed & 0xF).to(torch.int8) - INT4_BIAS
    high = (packed >> 4).to(torch.int8) - INT4_BIAS
    return torch.stack([low, high], dim=2).reshape(packed.shape[0], -1)
