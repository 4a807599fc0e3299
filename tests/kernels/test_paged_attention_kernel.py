import math

import pytest
import torch

from kernels.paged_attention import (naive_attention, paged_attention, paged_attention_ref,
                                     paged_attention_triton, query_positions, write_kv_ref)

D = 16
SCALE = 1 / math.sqrt(D)
# Against float64 naive attention, and Triton against the reference: only the
# summation order inside a block differs, so fp32 agrees to ~1e-6.
FP32_TOL = dict(rtol=1e-5, atol=1e-5)
BF16_TOL = dict(rtol=1.6e-2, atol=1.6e-2)

# (seq_lens, q_lens): decode, prefill with earlier context, and mixed batches,
# with block_size 4 putting most sequence ends mid-block.
SCENARIOS = {
    "decode": ([9, 1, 23], [1, 1, 1]),
    "prefill_from_scratch": ([13, 6], [13, 6]),
    "prefill_with_context": ([19, 30], [7, 3]),
    "mixed": ([17, 5, 26], [1, 5, 4]),
}


def naive_outputs(sequences):
    return torch.cat([naive_attention(s.q, s.k, s.v, SCALE) for s in sequences])


def build(make_sequence, seq_lens, q_lens, hq, hkv, dtype=torch.float32, seed=0):
    return [make_sequence(seed + i, s, q, hq, hkv, D, dtype) for i, (s, q) in enumerate(zip(seq_lens, q_lens))]


def test_query_positions_locate_each_query_in_its_sequence():
    seq, pos = query_positions(torch.tensor([5, 3, 8], dtype=torch.int32),
                               torch.tensor([0, 1, 4, 6], dtype=torch.int32), 6)
    assert seq.tolist() == [0, 1, 1, 1, 2, 2]
    assert pos.tolist() == [4, 0, 1, 2, 6, 7]


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("block_size", [4, 16])
def test_reference_matches_naive_attention(scenario, group, block_size, make_sequence, pack_batch):
    sequences = build(make_sequence, *SCENARIOS[scenario], hq=2 * group, hkv=2)
    batch = pack_batch(sequences, block_size)
    out = paged_attention_ref(*batch.args(), SCALE)
    torch.testing.assert_close(out, naive_outputs(sequences), **FP32_TOL)


@pytest.mark.parametrize("scenario, group, block_size", [
    ("decode", 1, 4), ("prefill_with_context", 4, 8), ("mixed", 2, 4), ("prefill_from_scratch", 2, 8),
])
def test_triton_matches_reference(scenario, group, block_size, make_sequence, pack_batch, triton_device):
    sequences = build(make_sequence, *SCENARIOS[scenario], hq=2 * group, hkv=2)
    batch = pack_batch(sequences, block_size)
    expected = paged_attention_ref(*batch.args(), SCALE)
    got = paged_attention_triton(*batch.to(triton_device).args(), SCALE).cpu()
    torch.testing.assert_close(got, expected, **FP32_TOL)


def test_triton_matches_reference_in_bfloat16(make_sequence, pack_batch, triton_device):
    sequences = build(make_sequence, [11, 6], [3, 1], hq=4, hkv=1, dtype=torch.bfloat16)
    batch = pack_batch(sequences, 8)
    got = paged_attention_triton(*batch.to(triton_device).args(), SCALE).cpu()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, paged_attention_ref(*batch.args(), SCALE), **BF16_TOL)


# A lone decode query is where a matmul on strided views was measured to
# change BLAS path (and bits); bmm on fixed per-item layouts does not.
@pytest.mark.parametrize("target_queries", [1, 3])
@pytest.mark.parametrize("hq, hkv, head_dim, threads", [(8, 2, 16, 1), (2, 2, 32, 2), (4, 2, 64, 1)])
def test_a_sequence_gives_the_same_bits_alone_and_in_a_batch(hq, hkv, head_dim, threads, target_queries,
                                                             make_sequence, pack_batch):
    torch.set_num_threads(threads)  # the autouse fixture restores it
    target = make_sequence(100, 29, target_queries, hq, hkv, head_dim)
    others = [make_sequence(i, n, q, hq, hkv, head_dim)
              for i, (n, q) in enumerate(zip([40, 3, 17, 64, 8, 33, 21, 50], [1, 3, 1, 6, 1, 1, 4, 1]))]
    alone = paged_attention_ref(*pack_batch([target], 4, seed=1).args(), SCALE)
    # Inside the batch the target sits in other physical blocks, mid-batch,
    # next to longer sequences and longer prefills.
    batch = pack_batch(others[:3] + [target] + others[3:], 4, seed=2)
    together = paged_attention_ref(*batch.args(), SCALE)
    start = int(batch.query_start_loc[3])
    assert torch.equal(together[start:start + target_queries], alone)


def test_triton_gives_the_same_bits_alone_and_in_a_batch(make_sequence, pack_batch, triton_device):
    target = make_sequence(100, 13, 2, 4, 2, D)
    others = build(make_sequence, [20, 3], [1, 3], hq=4, hkv=2)
    alone = paged_attention_triton(*pack_batch([target], 4, seed=1).to(triton_device).args(), SCALE)
    batch = pack_batch([others[0], target, others[1]], 4, seed=2)
    together = paged_attention_triton(*batch.to(triton_device).args(), SCALE)
    assert torch.equal(together[1:3].cpu(), alone.cpu())


def test_chunked_prefill_gives_the_same_bits_as_one_chunk(make_sequence, pack_batch):
    seq = make_sequence(7, 37, 37, 4, 2, D)
    one_chunk = paged_attention_ref(*pack_batch([seq], 4).args(), SCALE)

    # Same cache layout, filled chunk by chunk as an engine would: when chunk
    # c runs, tokens after it are not in the cache yet (NaN).
    full = pack_batch([seq], 4)
    k_cache = torch.full_like(full.k_cache, float("nan"))
    v_cache = torch.full_like(full.v_cache, float("nan"))
    block_ids = full.block_tables[0].long()
    outputs = []
    for start in range(0, 37, 10):
        end = min(start + 10, 37)
        pos = torch.arange(start, end)
        write_kv_ref(seq.k[start:end], seq.v[start:end], k_cache, v_cache,
                     block_ids[pos // 4] * 4 + pos % 4)
        outputs.append(paged_attention_ref(
            seq.q[start:end], k_cache, v_cache, full.block_tables,
            torch.tensor([end], dtype=torch.int32), torch.tensor([0, end - start], dtype=torch.int32),
            SCALE))
    assert torch.equal(torch.cat(outputs), one_chunk)


def test_int8_cache_with_a_fitting_scale_is_close_and_a_clipping_scale_is_not(make_sequence, pack_batch):
    sequences = build(make_sequence, [30, 12], [2, 1], hq=4, hkv=2)
    exact = paged_attention_ref(*pack_batch(sequences, 8).args(), SCALE)

    def int8_error(scale):
        batch = pack_batch(sequences, 8, cache_dtype=torch.int8, k_scale=scale, v_scale=scale)
        out = paged_attention_ref(*batch.args(), SCALE, k_scale=scale, v_scale=scale)
        return ((out - exact).norm() / exact.norm()).item()

    absmax = max(max(s.k.abs().max().item(), s.v.abs().max().item()) for s in sequences)
    fitting, clipping = int8_error(absmax / 127), int8_error(absmax / 127 / 8)
    # measured: fitting ~0.01, clipping (everything beyond absmax / 8 saturates) ~0.76
    assert fitting < 0.03
    assert clipping > 10 * fitting


def test_triton_dequantizes_an_int8_cache_like_the_reference(make_sequence, pack_batch, triton_device):
    sequences = build(make_sequence, [14, 5], [2, 1], hq=4, hkv=2)
    batch = pack_batch(sequences, 4, cache_dtype=torch.int8, k_scale=0.03, v_scale=0.02)
    expected = paged_attention_ref(*batch.args(), SCALE, k_scale=0.03, v_scale=0.02)
    got = paged_attention_triton(*batch.to(triton_device).args(), SCALE, k_scale=0.03, v_scale=0.02)
    torch.testing.assert_close(got.cpu(), expected, **FP32_TOL)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_dispatcher_runs_the_chosen_backend(backend, make_sequence, pack_batch, triton_device):
    sequences = build(make_sequence, [6], [1], hq=2, hkv=1)
    batch = pack_batch(sequences, 4).to("cpu" if backend == "torch" else triton_device)
    got = paged_attention(*batch.args(), SCALE, backend=backend).cpu()
    torch.testing.assert_close(got, naive_outputs(sequences), **FP32_TOL)


@pytest.mark.parametrize("bad", ["heads_not_grouped", "int64_tables", "too_many_queries", "block_out_of_range"])
def test_inconsistent_inputs_are_rejected(bad, make_sequence, pack_batch):
    batch = pack_batch(build(make_sequence, [6, 4], [2, 1], hq=4, hkv=2), 4)
    q, k_cache, v_cache, tables, seq_lens, qsl = batch.args()
    if bad == "heads_not_grouped":
        q = q[:, :3]
    elif bad == "int64_tables":
        tables = tables.long()
    elif bad == "too_many_queries":
        seq_lens = torch.tensor([1, 4], dtype=torch.int32)
    else:
        tables = tables.clone()
        tables[0, 0] = k_cache.shape[0]
    with pytest.raises(ValueError):
        paged_attention_ref(q, k_cache, v_cache, tables, seq_lens, qsl, SCALE)


@pytest.mark.gpu
def test_large_decode_batch_triton_matches_reference_on_gpu(make_sequence, pack_batch):
    lens = torch.randint(100, 2000, (64,), generator=torch.Generator().manual_seed(0)).tolist()
    sequences = [make_sequence(i, n, 1 if i % 4 else 32, 32, 8, 128) for i, n in enumerate(lens)]
    batch = pack_batch(sequences, 16).to("cuda")
    scale = 1 / math.sqrt(128)
    torch.testing.assert_close(paged_attention_triton(*batch.args(), scale),
                               paged_attention_ref(*batch.args(), scale), **FP32_TOL)


def test_dense_sdpa_path_matches_the_reference_for_decode_and_prefill():
    from kernels.dense_attention import paged_attention_dense
    from kernels.paged_attention import paged_attention_ref

    torch.manual_seed(3)
    bs, hkv, hq, d = 4, 2, 4, 8
    k_cache, v_cache = torch.randn(24, bs, hkv, d), torch.randn(24, bs, hkv, d)
    # three sequences: decode (len 9), prefill chunk of 5 with context (len 13), decode (len 3)
    block_tables = torch.tensor([[3, 7, 1, 0], [2, 5, 9, 11], [20, 0, 0, 0]], dtype=torch.int32)
    seq_lens = torch.tensor([9, 13, 3], dtype=torch.int32)
    qsl = torch.tensor([0, 1, 6, 7], dtype=torch.int32)
    q = torch.randn(7, hq, d)
    ref = paged_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, qsl, 0.3)
    dense = paged_attention_dense(q, k_cache, v_cache, block_tables, seq_lens, qsl, 0.3)
    torch.testing.assert_close(dense, ref, rtol=1e-5, atol=1e-5)
