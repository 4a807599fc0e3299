"""Shared setup for kernel tests.

Without a GPU, Triton kernels run in Triton's CPU interpreter, which must be
switched on before triton is imported: triton builds its own helpers for
interpreter or compiler at import. `kernels` imports triton lazily, so setting
it here is early enough unless something else imported triton first. Small
shapes run everywhere; `@pytest.mark.gpu` tests use large shapes and need CUDA.
"""

import os
import sys
import warnings

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:
        warnings.warn("triton was imported before tests/kernels/conftest.py could set "
                      "TRITON_INTERPRET=1; set it in the environment instead")
    os.environ["TRITON_INTERPRET"] = "1"

from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402

from kernels.paged_attention import write_kv_ref  # noqa: E402

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: large-shape test that needs a CUDA GPU")


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and (INTERPRETING or not torch.cuda.is_available()):
        pytest.skip("needs a CUDA GPU (and TRITON_INTERPRET unset)")


@pytest.fixture(autouse=True)
def one_torch_thread():
    # The CI box has 2 cores shared with other jobs; OpenMP threads fighting
    # for them make tiny ops 100x slower. Results must not depend on this.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def triton_device():
    """Where Triton kernels under test run: CPU tensors for the interpreter."""
    return "cpu" if INTERPRETING else "cuda"


@dataclass
class Sequence:
    """One sequence's data: all its keys/values, and its queries for this step."""

    q: torch.Tensor  # [q_len, Hq, D]
    k: torch.Tensor  # [seq_len, Hkv, D]
    v: torch.Tensor  # [seq_len, Hkv, D]


def build_sequence(seed, seq_len, q_len, num_q_heads, num_kv_heads, head_dim, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return Sequence(
        q=torch.randn(q_len, num_q_heads, head_dim, generator=g).to(dtype),
        k=torch.randn(seq_len, num_kv_heads, head_dim, generator=g).to(dtype),
        v=torch.randn(seq_len, num_kv_heads, head_dim, generator=g).to(dtype),
    )


@dataclass
class PagedBatch:
    q: torch.Tensor  # [T, Hq, D]
    k_cache: torch.Tensor  # [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [B, max_blocks] int32
    seq_lens: torch.Tensor  # [B] int32
    query_start_loc: torch.Tensor  # [B + 1] int32

    def args(self):
        return (self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens,
                self.query_start_loc)

    def to(self, device):
        return PagedBatch(*(t.to(device) for t in self.args()))


def build_paged_batch(sequences, block_size, seed=0, cache_dtype=None, k_scale=1.0, v_scale=1.0,
               spare_blocks=3):
    """Lay sequences out in a paged cache the way an engine would, adversarially.

    Blocks are scattered in random order, every slot no sequence owns holds
    NaN (or -128 for int8), and block-table padding points far outside the
    cache: any read of memory a query must not see shows up in the output.
    """
    g = torch.Generator().manual_seed(seed)
    first = sequences[0]
    Hkv, D = first.k.shape[1:]
    cache_dtype = cache_dtype or first.k.dtype
    blocks_per_seq = [-(-s.k.shape[0] // block_size) for s in sequences]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    fill = -128 if cache_dtype == torch.int8 else float("nan")
    k_cache = torch.full((num_blocks, block_size, Hkv, D), fill, dtype=cache_dtype)
    v_cache = k_cache.clone()
    max_blocks = max(blocks_per_seq) + 2
    block_tables = torch.full((len(sequences), max_blocks), 10**6, dtype=torch.int32)
    order = torch.randperm(num_blocks, generator=g)
    used = 0
    for b, (seq, n) in enumerate(zip(sequences, blocks_per_seq)):
        block_tables[b, :n] = order[used:used + n].int()
        used += n
        pos = torch.arange(seq.k.shape[0])
        slots = block_tables[b].long()[pos // block_size] * block_size + pos % block_size
        write_kv_ref(seq.k, seq.v, k_cache, v_cache, slots, k_scale, v_scale)
    q_lens = torch.tensor([s.q.shape[0] for s in sequences])
    return PagedBatch(
        q=torch.cat([s.q for s in sequences]),
        k_cache=k_cache,
        v_cache=v_cache,
        block_tables=block_tables,
        seq_lens=torch.tensor([s.k.shape[0] for s in sequences], dtype=torch.int32),
        query_start_loc=torch.cat([torch.zeros(1, dtype=torch.long), q_lens.cumsum(0)]).int(),
    )


@pytest.fixture
def make_sequence():
    """make_sequence(seed, seq_len, q_len, Hq, Hkv, D, dtype) -> Sequence"""
    return build_sequence


@pytest.fixture
def pack_batch():
    """pack_batch(sequences, block_size, seed=0, cache_dtype=None, k_scale=1.0, v_scale=1.0) -> PagedBatch"""
    return build_paged_batch
