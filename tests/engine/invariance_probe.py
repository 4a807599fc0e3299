"""Batch-invariance checks that must hold on whatever CPU and instruction set runs them.

Run in a fresh process (`python tests/engine/invariance_probe.py THREADS`) so that the
environment that picks BLAS and ATen code paths (`MKL_ENABLE_INSTRUCTIONS`,
`ATEN_CPU_CAPABILITY`) is read before torch loads; prints one JSON line with what was
checked, the paths that ran (ATen's capability, MKL's banner) and every failure.
The helpers are shared with tests/engine/test_batch_invariance.py.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.activation import silu_mul  # noqa: E402
from kernels.matmul import ROW_TILE, matmul_ref  # noqa: E402
from kernels.rmsnorm import rms_norm_ref  # noqa: E402
from services.engine import LLM, SamplingParams  # noqa: E402
from services.model.paths import target_path  # noqa: E402
from services.model.tasks import long_story_prompt  # noqa: E402

# 298 tokens with <bos>: decoded near 300 keys, where the fused CPU SDPA's bits
# depend on the padded key length (and float32 shows every bit).
PROBE = long_story_prompt(300, 0)
# (batch size, token budget) -> name: a whole prefill beside 15 others, and 64-token chunks
ENGINE_CASES = {(16, 2048): "16-whole-prefill", (16, 64): "16-chunked-prefill"}


def record_probe(llm) -> dict[str, dict]:
    """Spy on the engine's sampler input: per request, its logits rows and the
    (first position, token count) of every step it was scheduled in."""
    engine, seen = llm.llm_engine, {"logits": {}, "chunks": {}}
    original = engine._sample

    def recording(plan, logits, rows):
        for s, (a, b) in zip(plan.scheduled, rows):
            rid = s.request.request_id
            seen["chunks"].setdefault(rid, []).append((s.num_computed_tokens, s.num_new_tokens))
            if b > a:
                seen["logits"].setdefault(rid, []).append(logits[a].clone())
        return original(plan, logits, rows)

    engine._sample = recording
    return seen


def other_prompts(n: int) -> list[str]:
    """Story prompts of 20 to 319 characters, shorter and longer than the probe."""
    return [long_story_prompt(20 + (23 * i) % 320, i + 1) for i in range(n)]


def probe_alone_and_in_batch(model_path, batch_size: int, **config):
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    llm = LLM(model_path, **config)
    seen = record_probe(llm)
    alone_id = llm.generate(PROBE, params)[0].request_id
    batch = other_prompts(batch_size - 1)
    batch.insert(batch_size // 2, PROBE)  # admitted after others: its chunks start elsewhere
    batch_id = llm.generate(batch, params)[batch_size // 2].request_id
    return seen, alone_id, batch_id


def kernel_failures() -> list[str]:
    """Each op of the batch-invariant path: a row alone, in batches of 1..40, and at every place of a tile."""
    g = torch.Generator().manual_seed(0)
    failures = []
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(40, 688, generator=g).to(dtype)  # [40, 688]: the MLP's down projection
        w = torch.randn(256, 688, generator=g).to(dtype)
        ops = {"matmul": lambda t: matmul_ref(t, w), "matmul split 4": lambda t: matmul_ref(t, w, split_k=4),
               "rms_norm": lambda t: rms_norm_ref(t, torch.ones(688, dtype=dtype), 1e-5),
               "silu_mul": lambda t: silu_mul(t, t, row_invariant=True)}
        for name, op in ops.items():
            whole = op(x)
            bad = [m for m in range(1, 40) if not torch.equal(op(x[:m]), whole[:m])]
            if bad:
                failures.append(f"{name} {dtype}: batch sizes {bad} give rows other bits")
        alone = matmul_ref(x[7:8], w)[0]
        for place in range(ROW_TILE):
            batch = torch.randn(ROW_TILE, 688, generator=g).to(dtype)
            batch[place] = x[7]
            if not torch.equal(matmul_ref(batch, w)[place], alone):
                failures.append(f"matmul {dtype}: a row at place {place} of its tile gets other bits")
    return failures


def engine_failures() -> list[str]:
    failures = []
    for dtype in ("float32", "bfloat16"):
        for (batch_size, budget), name in ENGINE_CASES.items():
            seen, alone, batched = probe_alone_and_in_batch(
                str(target_path()), batch_size, batch_invariant=True, enable_prefix_caching=False,
                max_num_batched_tokens=budget, dtype=dtype)
            a, b = seen["logits"][alone], seen["logits"][batched]
            steps = [i for i, (x, y) in enumerate(zip(a, b)) if not torch.equal(x, y)]
            if len(a) != 12 or len(b) != 12 or steps:
                failures.append(f"engine {name} {dtype}: logits differ at steps {steps} ({len(a)}, {len(b)} rows)")
    return failures


def mkl_banner() -> None:
    """MKL prints the instruction set it runs on to the C stdout in verbose mode."""
    x = torch.randn(16, 32)
    with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
        x @ x.T
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    threads = int(argv[0]) if argv else 1
    torch.set_num_threads(threads)
    mkl_banner()
    failures = kernel_failures() + engine_failures()
    print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
                      "failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
