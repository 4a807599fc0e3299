"""SwiGLU's activation, silu(gate) * up, with an optional row-invariant mode.

PyTorch's CPU `silu` computes most elements with a vectorized exp and the
last few of each contiguous run with the scalar libm exp; the two can differ
in the last bit. With several threads, an op over [T, I] is cut into thread
ranges at element offsets that follow T, so a row can straddle a cut and get
some elements from the other path: measured, a row of 688 got different bits
in 140 of the batch sizes 1..600 (2 threads). Row-invariant mode runs the op
on fixed tiles of ROWS_PER_TILE contiguous rows (zero-padded): a tile is small
enough to run on one thread and a whole multiple of any vector width, so
every element takes the vectorized path whatever the batch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# 32 rows x I=688 = 22016 elements: under PyTorch's parallel grain (32768),
# and a multiple of 64, so no scalar tail.
ROWS_PER_TILE = 32
MAX_TILE_ELEMENTS = 32768


def silu_mul(gate: torch.Tensor, up: torch.Tensor, row_invariant: bool = False) -> torch.Tensor:
    """gate, up: [T, I] -> silu(gate) * up: [T, I]."""
    if gate.shape != up.shape or gate.dim() != 2:
        raise ValueError(f"silu_mul wants gate and up of one [T, I] shape, got {tuple(gate.shape)}, {tuple(up.shape)}")
    if not row_invariant:
        return F.silu(gate) * up
    t, width = gate.shape
    if ROWS_PER_TILE * width > MAX_TILE_ELEMENTS or (ROWS_PER_TILE * width) % 64:
        raise ValueError(f"row-invariant silu_mul needs 32 x I to be a multiple of 64 "
                         f"and at most {MAX_TILE_ELEMENTS}, got I={width}")
    padded = -(-t // ROWS_PER_TILE) * ROWS_PER_TILE
    tiles = gate.new_zeros((padded, width))
    tiles[:t] = gate
    act = torch.empty_like(tiles)
    for s in range(0, padded, ROWS_PER_TILE):
        act[s:s + ROWS_PER_TILE] = F.silu(tiles[s:s + ROWS_PER_TILE])
    return act[:t] * up
