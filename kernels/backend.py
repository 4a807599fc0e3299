"""Which implementation of a kernel runs: Triton on a GPU, plain torch elsewhere."""

from __future__ import annotations

import torch

BACKENDS = ("torch", "triton")


def resolve_backend(name: str | None) -> str:
    """Turn the `kernel_backend` setting into a concrete backend name.

    None means "the best one this machine can run": Triton needs a GPU to be
    fast (the CPU interpreter exists only for tests), so without CUDA the torch
    reference is the default.
    """
    if name is None:
        return "triton" if torch.cuda.is_available() else "torch"
    if name not in BACKENDS:
        raise ValueError(
            f"unknown kernel_backend {name!r}; expected one of {', '.join(BACKENDS)} or None"
        )
    return name
