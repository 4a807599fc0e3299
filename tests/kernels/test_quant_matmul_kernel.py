import pytest
import torch

from kernels.matmul import matmul_ref
from kernels.quant_matmul import (QuantizedWeight, dequantize_weight, quant_matmul, quant_matmul_ref,
                                  quant_matmul_triton, quantize_weight)
from kernels.quantized_weight import pack_int4, unpack_int4

SCHEMES = [(8, "per-channel"), (8, "per-group"), (8, "per-tensor"),
           (4, "per-channel"), (4, "per-group"), (4, "per-tensor")]
# Triton dequantizes with the same q * scale products, then sums in another order.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-4), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-1)}


def weight_with_outlier_columns(n=96, k=128, seed=0):
    """Gaussian weights plus two input channels 10x bigger, as in real LLMs."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    w[:, [5, 77 % k]] *= 10
    return w


def relative_error(approx, exact):
    return ((approx - exact).norm() / exact.norm()).item()


@pytest.mark.parametrize("bits, granularity", SCHEMES)
def test_dequantized_weight_is_within_half_a_step(bits, granularity):
    w = weight_with_outlier_columns()
    qw = quantize_weight(w, bits, granularity, group_size=32)
    error = (dequantize_weight(qw) - w).abs()
    assert (error <= qw.expanded_scales() / 2 * (1 + 1e-5)).all()


def test_int4_nibbles_unpack_to_what_was_packed():
    q = torch.randint(-7, 8, (5, 12), generator=torch.Generator().manual_seed(0), dtype=torch.int8)
    packed = pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 6)
    assert torch.equal(unpack_int4(packed), q)


def test_finer_scales_and_more_bits_give_smaller_errors():
    w = weight_with_outlier_columns()
    x = torch.randn(10, w.shape[1], generator=torch.Generator().manual_seed(1))
    exact = x @ w.T

    def error(bits, granularity):
        return relative_error(quant_matmul_ref(x, quantize_weight(w, bits, granularity, 32)), exact)

    int8_channel, int4_group, int4_tensor = error(8, "per-channel"), error(4, "per-group"), error(4, "per-tensor")
    # measured: about 0.02 < 0.22 < 0.72
    assert int8_channel < int4_group / 4
    assert int4_group < int4_tensor / 2


def test_an_all_zero_row_quantizes_to_zeros_not_nan():
    w = weight_with_outlier_columns()
    w[3] = 0
    for bits, granularity in SCHEMES:
        restored = dequantize_weight(quantize_weight(w, bits, granularity, 32))
        assert torch.equal(restored[3], torch.zeros(w.shape[1]))


def test_reference_is_matmul_of_the_dequantized_weight():
    w = weight_with_outlier_columns()
    qw = quantize_weight(w, 4, "per-group", 32)
    x = torch.randn(3, w.shape[1])
    assert torch.equal(quant_matmul_ref(x, qw), matmul_ref(x, dequantize_weight(qw)))


def test_reference_row_is_bit_identical_alone_and_in_a_batch():
    w = weight_with_outlier_columns()
    qw = quantize_weight(w, 8, "per-channel")
    x = torch.randn(16, w.shape[1], generator=torch.Generator().manual_seed(2))
    batch = quant_matmul_ref(x, qw)
    for i in (0, 9, 15):
        assert torch.equal(quant_matmul_ref(x[i:i + 1], qw)[0], batch[i])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bits, granularity", SCHEMES)
def test_triton_matches_reference(bits, granularity, dtype, triton_device):
    w = weight_with_outlier_columns(n=80, k=96)
    qw = quantize_weight(w, bits, granularity, group_size=32)
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(bits)).to(dtype)
    qw_dev = QuantizedWeight(qw.qweight.to(triton_device), qw.scales.to(triton_device), qw.bits,
                             qw.granularity, qw.group_size, qw.shape)
    got = quant_matmul_triton(x.to(triton_device), qw_dev).cpu()
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), quant_matmul_ref(x, qw).float(), **TOL[dtype])


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_dispatcher_runs_the_chosen_backend(backend, triton_device):
    qw = quantize_weight(weight_with_outlier_columns(n=32, k=64), 8, "per-channel")
    x = torch.randn(2, 64)
    device = "cpu" if backend == "torch" else triton_device
    qw_dev = QuantizedWeight(qw.qweight.to(device), qw.scales.to(device), 8, "per-channel", 32, qw.shape)
    got = quant_matmul(x.to(device), qw_dev, backend=backend).cpu()
    torch.testing.assert_close(got, quant_matmul_ref(x, qw), **TOL[torch.float32])


def test_quantized_weight_rejects_inconsistent_fields():
    good = quantize_weight(weight_with_outlier_columns(n=8, k=64), 4, "per-group", 32)
    fields = dict(qweight=good.qweight, scales=good.scales, bits=4, granularity="per-group",
                  group_size=32, shape=(8, 64))
    QuantizedWeight(**fields)  # the consistent version is accepted
    for bad in [dict(bits=3), dict(granularity="per-row"), dict(group_size=24),
                dict(shape=(8, 66)), dict(qweight=good.qweight.to(torch.int8)),
                dict(scales=good.scales.double()), dict(scales=good.scales[:, :1])]:
        with pytest.raises(ValueError):
            QuantizedWeight(**{**fields, **bad})


def test_quantize_rejects_a_group_size_that_does_not_divide_k():
    with pytest.raises(ValueError):
        quantize_weight(torch.randn(4, 48), 4, "per-group", group_size=32)


@pytest.mark.gpu
@pytest.mark.parametrize("bits, granularity", [(8, "per-channel"), (4, "per-group")])
def test_large_triton_quant_matmul_matches_reference_on_gpu(bits, granularity):
    w = torch.randn(4096, 4096, device="cuda")
    qw = quantize_weight(w, bits, granularity, 128)
    x = torch.randn(64, 4096, device="cuda").to(torch.bfloat16)
    torch.testing.assert_close(quant_matmul_triton(x, qw).float(), quant_matmul_ref(x, qw).float(),
                               **TOL[torch.bfloat16])
