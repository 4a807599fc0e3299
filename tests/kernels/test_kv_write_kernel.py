import pytest
import torch

from kernels.paged_attention import write_kv, write_kv_ref, write_kv_triton

BLOCK_SIZE, HKV, D = 4, 2, 8


def empty_caches(dtype, num_blocks=5):
    fill = 0 if dtype == torch.int8 else float("nan")
    k_cache = torch.full((num_blocks, BLOCK_SIZE, HKV, D), fill, dtype=dtype)
    return k_cache, k_cache.clone()


def new_tokens(t=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, HKV, D, generator=g), torch.randn(t, HKV, D, generator=g)


def test_each_token_lands_in_its_slot():
    k, v = new_tokens()
    k_cache, v_cache = empty_caches(torch.float32)
    slots = torch.tensor([0, 1, 2, 13, 7, 19])  # block 3 offset 1, block 1 offset 3, ...
    write_kv_ref(k, v, k_cache, v_cache, slots)
    for t, slot in enumerate(slots.tolist()):
        assert torch.equal(k_cache[slot // BLOCK_SIZE, slot % BLOCK_SIZE], k[t])
        assert torch.equal(v_cache[slot // BLOCK_SIZE, slot % BLOCK_SIZE], v[t])
    assert int(k_cache.isnan().all(-1).all(-1).sum()) == 5 * BLOCK_SIZE - len(slots)


def test_a_negative_slot_skips_the_token():
    k, v = new_tokens(t=2)
    k_cache, v_cache = empty_caches(torch.float32)
    write_kv_ref(k, v, k_cache, v_cache, torch.tensor([-1, 6]))
    assert torch.equal(k_cache[1, 2], k[1])
    assert int((~k_cache.isnan()).any(-1).any(-1).sum()) == 1


def test_int8_rounds_half_to_even_and_clips_at_127():
    scale = 0.5
    values = torch.tensor([1.25, 1.75, -1.25, 0.26, 100.0, -100.0, 0.0, 63.5])  # / 0.5 = 2.5, 3.5, ...
    k = values.repeat(HKV, 1).T[:, :, None].expand(-1, HKV, D).contiguous()  # [8, HKV, D]
    k_cache, v_cache = empty_caches(torch.int8)
    write_kv_ref(k, k, k_cache, v_cache, torch.arange(len(values)), k_scale=scale, v_scale=scale)
    stored = k_cache.view(-1, HKV, D)[: len(values), 0, 0].tolist()
    assert stored == [2, 4, -2, 1, 127, -127, 0, 127]


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16, torch.int8])
def test_triton_writes_the_same_bits_as_the_reference(cache_dtype, triton_device):
    k, v = new_tokens(t=7, seed=1)
    k = k * 4  # with scale 0.03 some values clip
    slots = torch.tensor([3, -1, 0, 17, 8, 9, 10])
    expected_k, expected_v = empty_caches(cache_dtype)
    write_kv_ref(k, v, expected_k, expected_v, slots, k_scale=0.03, v_scale=0.02)
    k_cache, v_cache = (c.to(triton_device) for c in empty_caches(cache_dtype))
    write_kv_triton(k.to(triton_device), v.to(triton_device), k_cache, v_cache, slots.to(triton_device),
                    k_scale=0.03, v_scale=0.02)
    assert torch.equal(k_cache.cpu().view(torch.uint8), expected_k.view(torch.uint8))
    assert torch.equal(v_cache.cpu().view(torch.uint8), expected_v.view(torch.uint8))


def test_triton_rounds_exact_halves_like_torch(triton_device):
    # Every multiple of 0.25 from -130 to 133.75: all the ties and both clip
    # edges, HKV * D of them per token to keep the interpreter quick.
    values = torch.arange(-520, 520 + 1 + 15, dtype=torch.float32) / 4
    k = values[: len(values) // (HKV * D) * HKV * D].view(-1, HKV, D)
    num_blocks = -(-k.shape[0] // BLOCK_SIZE)
    slots = torch.arange(k.shape[0])
    expected, _ = empty_caches(torch.int8, num_blocks)
    write_kv_ref(k, k, expected, expected.clone(), slots)
    k_cache, v_cache = (c.to(triton_device) for c in empty_caches(torch.int8, num_blocks))
    write_kv_triton(k.to(triton_device), k.to(triton_device), k_cache, v_cache, slots.to(triton_device))
    assert torch.equal(k_cache.cpu(), expected)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_dispatcher_runs_the_chosen_backend(backend, triton_device):
    device = "cpu" if backend == "torch" else triton_device
    k, v = new_tokens(t=3)
    k_cache, v_cache = (c.to(device) for c in empty_caches(torch.float32))
    write_kv(k.to(device), v.to(device), k_cache, v_cache, torch.tensor([4, 5, 6]).to(device),
             backend=backend)
    assert torch.equal(k_cache[1, :3].cpu(), k)


@pytest.mark.parametrize("bad", ["slot_dtype", "head_mismatch", "float_k_int_v_cache"])
def test_bad_inputs_are_rejected(bad):
    k, v = new_tokens(t=2)
    k_cache, v_cache = empty_caches(torch.float32)
    slots = torch.tensor([0, 1])
    if bad == "slot_dtype":
        slots = slots.int()
    elif bad == "head_mismatch":
        k, v = k[:, :1], v[:, :1]
    else:
        v_cache = v_cache.to(torch.int8)
    with pytest.raises(ValueError):
        write_kv_ref(k, v, k_cache, v_cache, slots)
