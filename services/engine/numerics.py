"""Compute dtype and storage rounding.

Production serves in bfloat16: inputs and outputs of every op are bf16 while
matmuls accumulate in fp32. This CPU has no fast bf16 GEMM, so on CPU we keep
fp32 tensors and round every op's output to bf16 (`act`). The numbers are the
same as a bf16 kernel with fp32 accumulation; only the storage is wider.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Numerics:
    dtype: torch.dtype  # the model's numerical dtype
    device: torch.device

    @classmethod
    def create(cls, dtype: str, device: torch.device) -> "Numerics":
        name = "bfloat16" if dtype == "auto" else dtype
        return cls(_DTYPES[name], device)

    @property
    def emulated(self) -> bool:
        """True when a reduced dtype is emulated by rounding fp32 tensors."""
        return self.device.type == "cpu" and self.dtype != torch.float32

    @property
    def tensor_dtype(self) -> torch.dtype:
        """The dtype tensors are actually held in."""
        return torch.float32 if self.emulated else self.dtype

    def act(self, x: torch.Tensor) -> torch.Tensor:
        if self.emulated:
            return x.to(self.dtype).to(torch.float32)
        return x.to(self.dtype) if x.dtype != self.dtype else x

    def weight(self, w: torch.Tensor) -> torch.Tensor:
        return self.act(w.to(self.device))

    @property
    def split_k_partial_dtype(self) -> torch.dtype:
        """Split-K partials accumulate in the output dtype (bf16 atomics on a GPU)."""
        return torch.bfloat16 if self.dtype == torch.bfloat16 else torch.float32

    @property
    def kv_storage_dtype(self) -> torch.dtype:
        # Emulated on CPU: fp32 storage holding bf16-rounded values (memory is
        # counted from the real tensors, so the CPU budget sees 4 bytes a value).
        return self.tensor_dtype
