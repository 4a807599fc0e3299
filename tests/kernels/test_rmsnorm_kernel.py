import pytest
import torch

from kernels.rmsnorm import rms_norm, rms_norm_ref, rms_norm_triton

EPS = 1e-6
# The two backends sum x**2 in different orders; bf16/fp16 then round the
# normalised value, so an occasional last-bit flip shows up as one ulp.
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}


def random_input(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    weight = 1 + 0.1 * torch.randn(shape[-1], generator=g)
    return x.to(dtype), weight.to(dtype)


def hugging_face_llama_rms_norm(x, weight, eps):
    """LlamaRMSNorm.forward, transcribed."""
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_matches_hugging_face_llama(dtype):
    x, weight = random_input((6, 256), dtype)
    torch.testing.assert_close(rms_norm_ref(x, weight, EPS), hugging_face_llama_rms_norm(x, weight, EPS),
                               **TOL[dtype])


def test_a_row_is_bit_identical_alone_and_in_a_batch():
    x, weight = random_input((33, 4096), torch.float32)
    batch = rms_norm_ref(x, weight, EPS)
    for i in (0, 7, 32):
        assert torch.equal(rms_norm_ref(x[i:i + 1], weight, EPS)[0], batch[i])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 64), (5, 100), (2, 3, 96)])
def test_triton_matches_reference(shape, dtype, triton_device):
    x, weight = random_input(shape, dtype, seed=len(shape))
    got = rms_norm_triton(x.to(triton_device), weight.to(triton_device), EPS).cpu()
    assert got.shape == x.shape and got.dtype == dtype
    torch.testing.assert_close(got, rms_norm_ref(x, weight, EPS), **TOL[dtype])


def test_triton_reads_rows_with_a_gap_between_them(triton_device):
    x, weight = random_input((4, 128), torch.float32)
    rows = x.to(triton_device)[:, :100]  # row stride 128, hidden 100
    got = rms_norm_triton(rows, weight[:100].to(triton_device), EPS).cpu()
    torch.testing.assert_close(got, rms_norm_ref(x[:, :100], weight[:100], EPS), **TOL[torch.float32])


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_dispatcher_runs_the_chosen_backend(backend, triton_device):
    x, weight = random_input((3, 64), torch.float32)
    device = "cpu" if backend == "torch" else triton_device
    got = rms_norm(x.to(device), weight.to(device), EPS, backend=backend).cpu()
    torch.testing.assert_close(got, rms_norm_ref(x, weight, EPS), **TOL[torch.float32])


def test_a_weight_of_the_wrong_length_is_rejected():
    with pytest.raises(ValueError):
        rms_norm_ref(torch.zeros(2, 8), torch.ones(7), EPS)


@pytest.mark.gpu
def test_large_triton_rms_norm_matches_reference_on_gpu():
    x, weight = random_input((4096, 8192), torch.bfloat16)
    torch.testing.assert_close(rms_norm_triton(x.cuda(), weight.cuda(), EPS),
                               rms_norm_ref(x.cuda(), weight.cuda(), EPS), **TOL[torch.bfloat16])
