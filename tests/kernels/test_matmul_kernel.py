import pytest
import torch

from kernels.matmul import ROW_TILE, choose_split_k, matmul, matmul_ref, matmul_triton, row_tiles

# Triton vs reference: same chunks and partial order, but the sums inside a
# chunk run in a different order, and bf16 outputs round to 8 mantissa bits.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-4), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-1)}


def random_problem(m, n, k, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)


@pytest.mark.parametrize("rows", [1, 3, 4, 16, 17, 512])
def test_batch_invariant_mode_never_splits(rows):
    assert choose_split_k(rows, 4096, batch_invariant=True) == 1


@pytest.mark.parametrize("rows, k, split", [
    (1, 4096, 8), (2, 4096, 4), (4, 4096, 4), (5, 4096, 2), (16, 4096, 2), (17, 4096, 1), (512, 4096, 1),
    (0, 4096, 8),  # an empty GEMM splits like one row (nothing to add up either way)
    (1, 63, 1),  # short reductions are never split
    (1, 68, 4),  # 68 is a multiple of 4, not of 8
    (1, 66, 2),  # 66 is even but not a multiple of 4
    (1, 65, 1),  # odd K: no even split exists
])
def test_small_batches_get_more_splits_that_divide_k(rows, k, split):
    assert choose_split_k(rows, k, batch_invariant=False) == split


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("split_k", [1, 4])
def test_a_row_is_bit_identical_alone_and_in_a_batch_of_16(split_k, dtype, threads):
    torch.set_num_threads(threads)  # the autouse fixture restores it
    x, w = random_problem(16, 96, 256, dtype)
    batch = matmul_ref(x, w, split_k)
    for i in (0, 5, 15):
        assert torch.equal(matmul_ref(x[i:i + 1], w, split_k)[0], batch[i])
    for m in (1, 2, 3, 5, 9, 11):  # batch sizes where an unpadded BLAS call changes path
        assert torch.equal(matmul_ref(x[:m], w, split_k), batch[:m])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k, n", [(256, 384), (688, 256), (130, 40)])  # the model's shapes, and a K off the 16-float grid
def test_a_row_gets_the_same_bits_in_every_batch_size_up_to_40(k, n, threads):
    torch.set_num_threads(threads)
    x, w = random_problem(40, n, k)
    whole = matmul_ref(x, w)
    differing = [m for m in range(1, 40) if not torch.equal(matmul_ref(x[:m], w), whole[:m])]
    assert differing == []


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_gets_the_same_bits_at_every_place_in_its_tile(threads):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(1)
    w, row = torch.randn(256, 688, generator=g), torch.randn(688, generator=g)
    alone = matmul_ref(row[None], w)[0]
    for place in range(ROW_TILE):
        batch = torch.randn(ROW_TILE + 3, 688, generator=g)  # other rows around it, and a second tile
        batch[place] = row
        assert torch.equal(matmul_ref(batch, w)[place], alone), f"row at place {place}"


@pytest.mark.parametrize("m, k, rows, stride", [(1, 256, 16, 256), (16, 256, 16, 256), (17, 688, 32, 688),
                                                (0, 130, 16, 144), (40, 130, 48, 144)])
def test_row_tiles_pads_to_whole_tiles_with_rows_on_64_byte_boundaries(m, k, rows, stride):
    x = torch.randn(m, k)
    tiles = row_tiles(x)
    assert tiles.shape == (rows, k) and tiles.stride() == (stride, 1)
    assert tiles.data_ptr() % 64 == 0
    assert torch.equal(tiles[:m], x) and not tiles[m:].any()


def test_split_k_changes_bits_but_not_value():
    x, w = random_problem(16, 256, 256)
    whole = matmul_ref(x, w, split_k=1)
    split = matmul_ref(x, w, split_k=4)
    relative = (split - whole).abs().amax(1) / whole.abs().amax(1)  # per row
    assert relative.max() <= 1e-5
    differing_rows = (split != whole).any(1).sum().item()
    assert differing_rows > 0, "split-K must change the bits of some rows"


@pytest.mark.parametrize("split_k", [1, 3, 4])
def test_reference_matches_float64(split_k):
    x, w = random_problem(7, 40, 130)
    exact = x.double() @ w.double().T
    torch.testing.assert_close(matmul_ref(x, w, split_k).double(), exact, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m, n, k, split_k", [
    (1, 64, 64, 1), (5, 70, 100, 4), (16, 32, 256, 2), (20, 33, 65, 3),
])
def test_triton_matches_reference(m, n, k, split_k, dtype, triton_device):
    x, w = random_problem(m, n, k, dtype, seed=m + n)
    expected = matmul_ref(x, w, split_k)
    got = matmul_triton(x.to(triton_device), w.to(triton_device), split_k).cpu()
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), expected.float(), **TOL[dtype])


def test_triton_reads_strided_inputs(triton_device):
    x, w = random_problem(6, 48, 64)
    x_t = x.T.contiguous().T  # same values, column-major strides
    got = matmul_triton(x_t.to(triton_device), w.to(triton_device), 2).cpu()
    torch.testing.assert_close(got, matmul_ref(x, w, 2), **TOL[torch.float32])


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_dispatcher_runs_the_chosen_backend(backend, triton_device):
    x, w = random_problem(4, 32, 64)
    device = "cpu" if backend == "torch" else triton_device
    got = matmul(x.to(device), w.to(device), split_k=2, backend=backend).cpu()
    torch.testing.assert_close(got, matmul_ref(x, w, 2), **TOL[torch.float32])


@pytest.mark.parametrize("x_shape, w_shape, split_k", [
    ((4, 8), (3, 9), 1),  # K mismatch
    ((4, 8, 1), (3, 8), 1),  # x not 2-D
    ((4, 8), (3, 8), 0),  # no chunks
    ((4, 8), (3, 8), 9),  # more chunks than K
])
def test_bad_shapes_are_rejected(x_shape, w_shape, split_k):
    with pytest.raises(ValueError):
        matmul_ref(torch.zeros(x_shape), torch.zeros(w_shape), split_k)


def test_mixed_dtypes_are_rejected():
    with pytest.raises(ValueError):
        matmul_ref(torch.zeros(2, 8), torch.zeros(3, 8, dtype=torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("split_k", [1, 4])
def test_large_triton_matmul_matches_reference_on_gpu(split_k):
    x, w = random_problem(300, 4096, 4096, torch.bfloat16)
    x, w = x.cuda(), w.cuda()
    torch.testing.assert_close(matmul_triton(x, w, split_k).float(),
                               matmul_ref(x, w, split_k).float(), **TOL[torch.bfloat16])


@pytest.mark.gpu
def test_triton_row_is_bit_identical_alone_and_in_a_batch_on_gpu():
    x, w = random_problem(64, 1024, 1024, torch.bfloat16)
    x, w = x.cuda(), w.cuda()
    batch = matmul_triton(x, w, 1)
    for i in (0, 17, 63):
        assert torch.equal(matmul_triton(x[i:i + 1], w, 1)[0], batch[i])


def test_bf16_partials_move_results_by_whole_bf16_ulps_when_the_split_changes():
    torch.manual_seed(0)
    x, w = torch.randn(16, 256), torch.randn(256, 256)
    one = matmul_ref(x, w, 1, partial_dtype=torch.bfloat16)
    four = matmul_ref(x, w, 4, partial_dtype=torch.bfloat16)
    differ = (one != four).float().mean().item()
    assert differ > 0.2  # many outputs move ...
    # ... by a few bf16 ulps of the partials (values here are ~13, ulp 0.0625)
    assert (one - four).abs().max().item() <= 0.5


def test_bf16_partial_rounding_matches_between_triton_and_reference():
    torch.manual_seed(1)
    x, w = torch.randn(5, 96), torch.randn(40, 96)
    for split in (1, 3):
        ref = matmul_ref(x, w, split, partial_dtype=torch.bfloat16)
        tri = matmul_triton(x, w, split, partial_dtype=torch.bfloat16)
        torch.testing.assert_close(tri, ref, rtol=1e-2, atol=1e-2)
