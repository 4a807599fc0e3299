"""y = x @ w.T with optional split-K: the engine's batch-variance mechanism.

Split-K cuts the reduction dimension into chunks, computes one partial product
per chunk in parallel and adds the partials. Real GEMM libraries pick the split
from the batch size (small batches need the extra parallelism), and since
float addition is not associative a row's bits then depend on how many other
rows were in the batch. `choose_split_k` reproduces that on purpose; with
`batch_invariant=True` it always answers 1 and results no longer depend on
the batch. Below split-K, both backends compute every row in a tile of a fixed
row count (Triton's BLOCK_M, the torch path's ROW_TILE), so the BLAS under the
torch path cannot add a batch variance of its own.

`partial_dtype` is the dtype the partials are summed in. Many split-K GEMMs
accumulate straight into the output tensor (atomic adds in bf16/fp16); with
`partial_dtype=torch.bfloat16` each partial and each running sum is rounded to
bf16, in fixed chunk order, so a changed split count moves results by whole
bf16 ulps rather than fp32 ulps. With split_k=1 the result is the same either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kernels.backend import resolve_backend
from kernels.lazy_triton import lazy_jit

if TYPE_CHECKING:
    import triton.language as tl

# Fixed tile sizes. BLOCK_M in particular must not follow the batch size: a
# different tile shape may use a different MMA instruction and so a different
# summation order, which would make rows batch-variant behind split-K's back.
BLOCK_M, BLOCK_N, BLOCK_K = 16, 64, 32
# The torch path's GEMMs go out in tiles of this many rows, for the same reason (`row_tiles`).
ROW_TILE = BLOCK_M
REDUCE_BLOCK = 1024
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@lazy_jit
def matmul_partial_kernel(
    x_ptr, w_ptr, workspace_ptr,
    M, N, K, k_per_split,
    stride_xm, stride_xk, stride_wn, stride_wk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # One program owns one [BLOCK_M, BLOCK_N] tile of one K chunk.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = pid_k * k_per_split

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Every chunk runs the same trip count; the last one (shorter when K does
    # not divide evenly) just masks the overhang.
    for k0 in range(k_start, k_start + k_per_split, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = (ks < k_start + k_per_split) & (ks < K)
        # x tile: [BLOCK_M, BLOCK_K], w tile: [BLOCK_N, BLOCK_K]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)
        w = tl.load(w_ptr + cols[:, None] * stride_wn + ks[None, :] * stride_wk,
                    mask=(cols[:, None] < N) & k_ok[None, :], other=0.0)
        # "ieee" keeps fp32 inputs out of TF32, whose 10-bit mantissa would
        # put the kernel ~1e-3 away from the fp32 reference.
        acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")

    # workspace: [split_k, M, N] fp32, contiguous; int64 because split_k * M * N
    # passes 2**31 for a large-vocabulary head over a long prefill
    out = workspace_ptr + pid_k.to(tl.int64) * M * N + rows[:, None] * N + cols[None, :]
    tl.store(out, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@lazy_jit
def split_k_reduce_kernel(workspace_ptr, out_ptr, numel, SPLIT_K: tl.constexpr,
                          BLOCK: tl.constexpr, ROUND_BF16: tl.constexpr):
    # Partials are added in chunk order 0, 1, ... so the result is
    # deterministic; atomics would add them in whatever order programs finish.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < numel
    partial_ptr = workspace_ptr + offs
    acc = tl.load(partial_ptr, mask=ok, other=0.0)
    if ROUND_BF16:
        acc = acc.to(tl.bfloat16).to(tl.float32)
    for _ in range(1, SPLIT_K):
        # Stepping the pointer (64-bit) avoids an int32 s * numel overflow.
        partial_ptr += numel
        part = tl.load(partial_ptr, mask=ok, other=0.0)
        if ROUND_BF16:
            acc = (acc + part.to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16).to(tl.float32)
        else:
            acc += part
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok)


def matmul_triton(x: torch.Tensor, w: torch.Tensor, split_k: int = 1,
                  partial_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x: [M, K], w: [N, K] (nn.Linear layout) -> [M, N] in x's dtype."""
    check_matmul_inputs(x, w, split_k)
    check_partial_dtype(partial_dtype)
    M, K = x.shape
    N = w.shape[0]
    k_per_split = k_chunk_size(K, split_k)
    # workspace: [split_k, M, N]; fp32 so partials are not rounded before the sum
    workspace = torch.empty((split_k, M, N), dtype=torch.float32, device=x.device)
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return out
    grid = (triton_cdiv(M, BLOCK_M), triton_cdiv(N, BLOCK_N), split_k)
    matmul_partial_kernel[grid](
        x, w, workspace, M, N, K, k_per_split,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    split_k_reduce_kernel[(triton_cdiv(M * N, REDUCE_BLOCK),)](
        workspace, out, M * N, SPLIT_K=split_k, BLOCK=REDUCE_BLOCK,
        ROUND_BF16=partial_dtype == torch.bfloat16,
    )
    return out


def matmul_ref(x: torch.Tensor, w: torch.Tensor, split_k: int = 1,
               partial_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Torch twin of `matmul_triton`: same chunks, same partial rounding, same sum order.

    Every BLAS call has exactly ROW_TILE rows, like the kernel's BLOCK_M tiles (see
    `row_tiles`), so split-K is the only thing that can change a row's bits.
    """
    check_matmul_inputs(x, w, split_k)
    check_partial_dtype(partial_dtype)
    rnd = (lambda t: t.to(torch.bfloat16).float()) if partial_dtype == torch.bfloat16 else (lambda t: t)
    M, K = x.shape
    x32 = row_tiles(x.float())  # [P, K], P a non-zero multiple of ROW_TILE
    w32 = w.float()
    chunk = k_chunk_size(K, split_k)
    tiles = []
    for r in range(0, x32.shape[0], ROW_TILE):
        tile = x32[r:r + ROW_TILE]  # [ROW_TILE, K]
        acc = None
        for s in range(split_k):
            lo, hi = s * chunk, min((s + 1) * chunk, K)
            partial = rnd(tile[:, lo:hi] @ w32[:, lo:hi].T)  # [ROW_TILE, N]; an empty chunk gives zeros
            acc = partial if acc is None else rnd(acc + partial)
        tiles.append(acc)
    return torch.cat(tiles)[:M].to(x.dtype)


def check_partial_dtype(partial_dtype: torch.dtype) -> None:
    if partial_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"partial_dtype must be float32 or bfloat16, got {partial_dtype}")


def matmul(x: torch.Tensor, w: torch.Tensor, split_k: int = 1,
           backend: str | None = None, partial_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x: [M, K] @ w: [N, K].T -> [M, N], by `matmul_ref` or `matmul_triton`."""
    if resolve_backend(backend) == "triton":
        return matmul_triton(x, w, split_k, partial_dtype)
    return matmul_ref(x, w, split_k, partial_dtype)


def choose_split_k(num_rows: int, k: int, batch_invariant: bool) -> int:
    """How many K chunks a GEMM with `num_rows` rows uses.

    Mimics library heuristics: few rows leave most of a GPU idle, so the
    reduction is split to create more parallel work: one row eight ways, up to
    4 rows four ways, up to 16 two ways. A serving step's row count is its
    decode batch plus any prefill chunk, so the split a sequence gets changes
    from step to step with what it shares the step with. The tiers sit where a
    replica's decode batch moves on any machine: a drill's per-replica
    concurrency is its rate times a request's latency, so a faster machine runs
    fewer sequences a step (1-9 on a 2-core machine 4x faster than the 2-14 of
    the first one). With one tier at 8 rows, nearly every step there took the
    same split: offline, a greedy story asked alone and beside 1-8 others
    differed in 2 of 48 runs; with these tiers in 39 of 48 (2026-12-02), and the
    flaky-outputs drill's canary saw no mismatch at all with the old ones. Only
    splits that divide K evenly are used, and short reductions are never split.
    """
    if num_rows < 0 or k < 0:
        raise ValueError(f"choose_split_k needs num_rows >= 0 and k >= 0, got {num_rows}, {k}")
    if batch_invariant or k < 64:
        return 1
    split = 8 if num_rows <= 1 else 4 if num_rows <= 4 else 2 if num_rows <= 16 else 1
    while split > 1 and k % split:
        split //= 2
    return split


def row_tiles(x: torch.Tensor) -> torch.Tensor:
    """x: [M, K] -> [P, K]: x's rows then zero rows, P a non-zero multiple of ROW_TILE.

    A BLAS library picks its kernel from the problem's shape (and may vectorize
    along K differently when a row's start is differently aligned), and on some
    CPUs that changes a row's bits: on an Intel Xeon, MKL's AVX-512 sgemm gave a
    row computed alone (M=1, even zero-padded to 8 rows) other bits than the same
    row in a batch of 16; on an AMD EPYC (MKL's generic path) unpadded batches of
    1..64 rows gave a row other bits in 3 of the 64 sizes (9 at two threads). So
    a row never meets a different call shape: every call takes one ROW_TILE-row
    tile, and every row starts on a 64-byte boundary (the row stride is rounded
    up to 16 floats; the allocator aligns the base), so each call is the same
    problem at the same alignment whatever the batch. What is left is a row's
    place inside its tile; GEMM kernels treat the rows of one call alike, which
    tests/kernels/test_matmul_kernel.py checks on whatever CPU runs it.
    """
    m, k = x.shape
    padded = max(ROW_TILE, -(-m // ROW_TILE) * ROW_TILE)
    stride = -(-k // 16) * 16
    tiles = x.new_zeros((padded, stride))[:, :k]  # [P, K] with row stride `stride`
    tiles[:m] = x
    return tiles


def k_chunk_size(k: int, split_k: int) -> int:
    """Chunk length shared by both backends; the last chunk may be shorter."""
    return -(-k // split_k)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check_matmul_inputs(x: torch.Tensor, w: torch.Tensor, split_k: int) -> None:
    if x.dim() != 2 or w.dim() != 2:
        raise ValueError(f"matmul wants x [M, K] and w [N, K], got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"matmul K mismatch: x {tuple(x.shape)} vs w {tuple(w.shape)}")
    if x.dtype != w.dtype or x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"matmul wants x and w of one float dtype, got {x.dtype} and {w.dtype}")
    if x.device != w.device:
        raise ValueError(f"matmul wants x and w on one device, got {x.device} and {w.device}")
    if not isinstance(split_k, int) or not 1 <= split_k <= max(1, x.shape[1]):
        raise ValueError(f"split_k must be an int in [1, K={x.shape[1]}], got {split_k!r}")
