"""The bucketed SDPA attention: correct, and each query's bits independent of its batch."""
import math
import random

import pytest
import torch

from kernels.bucketed_attention import bucket_of, paged_attention_bucketed
from kernels.paged_attention import paged_attention_ref

D = 16
SCALE = 1 / math.sqrt(D)
FP32_TOL = dict(rtol=1e-5, atol=1e-5)

# (seq_lens, q_lens): decode, prefill with earlier context, mixed, and
# sequences spanning several buckets of 64 keys.
SCENARIOS = {
    "decode": ([9, 1, 23], [1, 1, 1]),
    "prefill_with_context": ([19, 30], [7, 3]),
    "mixed": ([17, 5, 26], [1, 5, 4]),
    "across_buckets": ([150, 70, 64, 65], [150, 1, 20, 2]),
}


def test_bucket_is_the_next_multiple_of_64_keys_past_the_position():
    assert bucket_of(torch.tensor([0, 63, 64, 127, 128, 1000])).tolist() == [64, 64, 128, 128, 192, 1024]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("group", [1, 4])
def test_bucketed_matches_the_reference_on_an_adversarial_cache(scenario, block_size, group, make_sequence,
                                                                 pack_batch):
    # pack_batch fills unowned slots with NaN and pads block tables out of range.
    sequences = [make_sequence(i, s, q, 2 * group, 2, D) for i, (s, q) in enumerate(zip(*SCENARIOS[scenario]))]
    batch = pack_batch(sequences, block_size)
    torch.testing.assert_close(paged_attention_bucketed(*batch.args(), SCALE),
                               paged_attention_ref(*batch.args(), SCALE), **FP32_TOL)


def test_a_block_size_that_does_not_divide_the_bucket_is_refused(make_sequence, pack_batch):
    batch = pack_batch([make_sequence(0, 10, 1, 4, 2, D)], 48)
    with pytest.raises(ValueError, match="block_size"):
        paged_attention_bucketed(*batch.args(), SCALE)


class Paged:
    """Sequences of bf16-valued K/V in one scattered cache; steps built from (seq, start, end)."""

    def __init__(self, lens, seed=0, block_size=16, hq=8, hkv=2, d=32):
        g = torch.Generator().manual_seed(seed)
        self.bs, self.d = block_size, d
        self.lens = lens
        num_blocks = sum(-(-n // block_size) for n in lens) + 1
        self.k = torch.randn(num_blocks, block_size, hkv, d, generator=g).bfloat16().float()
        self.v = torch.randn(num_blocks, block_size, hkv, d, generator=g).bfloat16().float()
        order = torch.randperm(num_blocks, generator=g).tolist()
        self.tables = []
        for n in lens:
            self.tables.append([order.pop() for _ in range(-(-n // block_size))])
        self.q = [torch.randn(n, hq, d, generator=g).bfloat16().float() for n in lens]

    def run(self, items):
        """items: (seq, start, end): queries start..end-1 against keys 0..end-1 -> their outputs."""
        width = max(len(self.tables[i]) for i, _, _ in items)
        tables = torch.zeros(len(items), width, dtype=torch.int32)
        qsl, lens = [0], []
        for b, (i, s, e) in enumerate(items):
            tables[b, : len(self.tables[i])] = torch.tensor(self.tables[i])
            qsl.append(qsl[-1] + e - s)
            lens.append(e)
        q = torch.cat([self.q[i][s:e] for i, s, e in items])
        out = paged_attention_bucketed(q, self.k, self.v, tables, torch.tensor(lens, dtype=torch.int32),
                                       torch.tensor(qsl, dtype=torch.int32), self.d ** -0.5)
        return [out[qsl[b]:qsl[b + 1]] for b in range(len(items))]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_query_gets_the_same_bits_alone_and_in_any_batch_or_chunking(threads):
    torch.set_num_threads(threads)  # the autouse fixture restores it
    rng = random.Random(threads)
    paged = Paged([rng.randint(1, 700) for _ in range(24)])
    for _ in range(12):
        i = rng.randrange(24)
        end = rng.randint(1, paged.lens[i])
        start = rng.randint(0, end - 1)  # a prefill chunk, a decode, or a prefix-cache tail
        others = rng.sample([j for j in range(24) if j != i], rng.choice([0, 3, 15]))
        items = [(j, n - 1, n) if rng.random() < 0.5 else (j, 0, n) for j in others for n in [paged.lens[j]]]
        place = rng.randrange(len(items) + 1)
        items.insert(place, (i, start, end))
        batched = paged.run(items)[place]
        for p in rng.sample(range(start, end), min(4, end - start)):
            alone = paged.run([(i, p, p + 1)])[0][0]  # the query decoded on its own
            assert torch.equal(alone, batched[p - start])
