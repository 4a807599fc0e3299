"""Stable ids for diagnoses: the root causes a candidate may name and the remediations they may propose.

Data first: `ROOT_CAUSES` and `REMEDIATIONS` are tuples of frozen `Term`s in a fixed order, so
`sandbox taxonomy --json` and the grader read the same list. Descriptions state the mechanism
without saying which incident it belongs to, so they help a candidate choose without giving away
an answer.
"""
from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Term:
    id: str
    description: str


ROOT_CAUSES: tuple[Term, ...] = (
    Term("prefix-caching-disabled",
         "Prefix caching is off: prompts that share a prefix recompute it instead of reusing cached KV blocks."),
    Term("prefill-budget-too-small",
         "The chunked-prefill token budget per engine step is too small, so prompts need many steps to prefill."),
    Term("slow-attention-kernel",
         "The attention kernel runs a slower configuration on every replica (worse tiling or split choices)."),
    Term("prompt-length-shift",
         "Clients started sending longer prompts; the serving stack itself is unchanged."),
    Term("memory-headroom-too-small",
         "Memory utilization is set so high that too little device memory is left for step activations at large batches."),
    Term("kv-block-leak",
         "KV cache blocks are not returned to the pool when some requests end, so usage ratchets up over time."),
    Term("max-num-seqs-too-high",
         "The cap on concurrently running sequences is higher than the memory budget can hold at full load."),
    Term("batch-variant-numerics",
         "Kernel reductions change order with batch size, so a request's result depends on what it was batched with."),
    Term("sampler-seed-ignored",
         "The sampler ignores the per-request seed, so seeded sampling does not repeat."),
    Term("replica-numerics-mismatch",
         "One replica computes with different numerics (dtype, kernel or weights) from the others."),
    Term("cpu-throttled-replica",
         "One replica's process is held back by a CPU quota (cgroup throttling)."),
    Term("kernel-fallback",
         "One replica runs a slow fallback code path instead of its optimized kernel."),
    Term("kv-cache-too-small",
         "The KV cache pool is too small for the load, so running requests are preempted and recomputed."),
    Term("weight-quantization-too-coarse",
         "Model weights are quantized with too few bits or too large groups for the model to stay accurate."),
    Term("kv-cache-quantization",
         "The KV cache is stored quantized with poorly fitted scales."),
    Term("draft-model-mismatch",
         "The speculative-decoding draft model does not match the target model it drafts for."),
    Term("capacity-exceeded",
         "Offered load is more than the deployed replicas can serve; nothing is broken."),
    Term("no-fault",
         "Nothing is wrong: the signals stay within baseline noise."),
)

REMEDIATIONS: tuple[Term, ...] = (
    Term("rollback-deploy", "Roll back to the previously deployed version."),
    Term("enable-prefix-caching", "Turn prefix caching back on."),
    Term("raise-prefill-budget", "Raise the chunked-prefill token budget per engine step."),
    Term("lower-memory-utilization", "Lower the share of device memory the engine reserves, restoring activation headroom."),
    Term("lower-max-num-seqs", "Lower the cap on concurrently running sequences."),
    Term("restart-replica", "Restart the affected replica."),
    Term("drain-replica", "Take the affected replica out of rotation."),
    Term("enable-batch-invariance", "Switch kernels to batch-invariant mode (one fixed reduction order)."),
    Term("honor-seed", "Make the sampler use the per-request seed."),
    Term("requantize-finer", "Re-quantize with more bits or smaller groups, or serve unquantized."),
    Term("raise-kv-cache", "Give the KV cache more blocks."),
    Term("scale-out", "Add replicas."),
    Term("no-action", "Change nothing."),
)

_ROOT_CAUSES = {t.id: t for t in ROOT_CAUSES}
_REMEDIATIONS = {t.id: t for t in REMEDIATIONS}


def suggestion(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def root_cause(id: str) -> Term:
    if id not in _ROOT_CAUSES:
        raise ValueError(f"unknown root cause {id!r}{suggestion(id, _ROOT_CAUSES)}")
    return _ROOT_CAUSES[id]


def remediation(id: str) -> Term:
    if id not in _REMEDIATIONS:
        raise ValueError(f"unknown remediation {id!r}{suggestion(id, _REMEDIATIONS)}")
    return _REMEDIATIONS[id]


def as_dict() -> dict[str, list[dict[str, str]]]:
    """The whole taxonomy as plain data (the shape `sandbox taxonomy --json` prints)."""
    return {"root_causes": [asdict(t) for t in ROOT_CAUSES],
            "remediations": [asdict(t) for t in REMEDIATIONS]}
