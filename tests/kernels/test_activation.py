"""silu(gate) * up: the row-invariant mode gives a row the same bits in any batch."""
import pytest
import torch
import torch.nn.functional as F

from kernels.activation import silu_mul


def gate_up(rows: int, width: int = 688, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    # As in the engine: gate and up are the two halves of one fused projection.
    fused = 4 * torch.randn(rows, 2 * width, generator=torch.Generator().manual_seed(seed))
    return fused.chunk(2, dim=-1)


def test_default_mode_is_plain_silu_times_up():
    gate, up = gate_up(37)
    assert torch.equal(silu_mul(gate, up), F.silu(gate) * up)


def test_row_invariant_mode_matches_silu_to_the_last_bit_or_two():
    gate, up = gate_up(37)
    torch.testing.assert_close(silu_mul(gate, up, row_invariant=True), F.silu(gate) * up, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("width", [688, 344])  # the target's and the draft's intermediate sizes
def test_row_invariant_mode_gives_each_row_the_same_bits_in_every_batch_size(width):
    torch.set_num_threads(2)  # thread ranges cut rows: the hazard this mode removes
    gate, up = gate_up(300, width)
    alone = torch.cat([silu_mul(gate[i:i + 1], up[i:i + 1], row_invariant=True) for i in range(300)])
    for rows in (2, 7, 33, 49, 64, 150, 299, 300):
        assert torch.equal(silu_mul(gate[:rows], up[:rows], row_invariant=True), alone[:rows])


def test_a_width_the_tiles_cannot_cover_is_refused():
    gate, up = gate_up(4, width=1100)
    with pytest.raises(ValueError, match="row-invariant"):
        silu_mul(gate, up, row_invariant=True)
