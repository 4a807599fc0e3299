"""Compute kernels of the engine, each as a Triton kernel plus a torch twin.

Every op has `<op>_ref` (plain torch, the readable definition and the CPU
path), `<op>_triton` (the GPU path) and a dispatcher `<op>(..., backend=)`
choosing between them (see `resolve_backend`). Importing this package does
not import Triton; a Triton kernel imports it on first launch.

The bottom of the house: imports nothing of the project (tests/test_imports.py).
"""

from kernels.backend import resolve_backend
from kernels.matmul import choose_split_k, matmul
from kernels.paged_attention import paged_attention, write_kv
from kernels.quant_matmul import QuantizedWeight, dequantize_weight, quant_matmul, quantize_weight
from kernels.rmsnorm import rms_norm

__all__ = [
    "QuantizedWeight",
    "choose_split_k",
    "dequantize_weight",
    "matmul",
    "paged_attention",
    "quant_matmul",
    "quantize_weight",
    "resolve_backend",
    "rms_norm",
    "write_kv",
]
