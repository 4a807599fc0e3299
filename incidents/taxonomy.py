"""Stable ids for diagnoses: the root causes a candidate may name, where they may locate them, the
remediations they may propose, and what each cause moves.

Data first: `ROOT_CAUSES`, `COMPONENTS` and `REMEDIATIONS` are tuples of frozen `Term`s in a fixed
order, so `sandbox taxonomy --json` and the grader read the same list. Descriptions state the
mechanism without saying which incident it belongs to, so they help a candidate choose without
giving away an answer.

`MECHANISMS` says, for every root cause, how quantities (incidents/quantities.py) move when it is
what happened: the physics of the cause, written once, so an alternative from another incident
can be set against this one's (incidents/signatures.py adds what each variant's signals showed in
`sandbox verify`, and a test checks the two never contradict). A grader credits a move only when
the recording shows it, so a move written here can make it stricter, never more generous about
the true cause.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass

from incidents.quantities import BY_ID as QUANTITY_IDS


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
    # causes added after the brief's list (a paging alert keeps at least three causes behind it)
    Term("speculation-too-deep",
         "Speculative decoding drafts more tokens per step than the draft model predicts: most are rejected, "
         "and every step still spends the time to draft and verify them."),
    Term("stop-token-misconfigured",
         "The generation config lists an end-of-sequence token id that is an ordinary token for this tokenizer, "
         "so answers stop early wherever it occurs."),
    Term("thread-oversubscription",
         "Replicas run more compute threads together than the machine has CPUs, so the threads of each step "
         "wait on one another and every step takes longer."),
    Term("cpu-limit-too-low",
         "Every replica's CPU limit (its cgroup CPU quota) is below what the load needs, so the kernel holds each "
         "replica's threads off the CPU for part of every period."),
    Term("max-num-seqs-too-low",
         "A replica's cap on concurrently running sequences is far below its share of the load: it runs a small "
         "batch while the rest of its requests wait in its queue."),
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
    # added after the brief's list, for a cause added after it
    Term("raise-cpu-limit", "Raise the replicas' CPU limit (their cgroup CPU quota)."),
    Term("shed-load", "Admit fewer requests at once at the ingress; the others are refused (429) at once."),
)

# Where a diagnosis locates its cause: a closed list, so a candidate can know the words the key uses.
# `in_stack=False`: not a part of the serving stack (what clients send, how big the fleet is); where
# the key names one of these, the component does not locate anything and null is as right.
@dataclass(frozen=True)
class Component:
    id: str
    description: str
    in_stack: bool = True


COMPONENTS: tuple[Component, ...] = (
    Component("prefix-cache", "The prefix cache: KV blocks of shared prompt prefixes kept for reuse."),
    Component("scheduler", "The engine's scheduler: the batch it runs each step, its token budget and sequence cap."),
    Component("attention-kernel", "The attention kernel and its configuration."),
    Component("kv-cache", "The KV cache: its pool of blocks, their allocation and their storage format."),
    Component("device-memory", "Device memory: what weights, the KV pool and step activations are given of it."),
    Component("numerics", "How the model computes: dtypes and reduction orders."),
    Component("sampler", "The sampler that turns logits into tokens (temperature, seeds)."),
    Component("weights", "The model's weights and how they are stored (quantization)."),
    Component("speculative-decoding", "Speculative decoding: the draft model and the verifier."),
    Component("generation-config", "The generation config: default sampling settings and the tokens that end a "
              "request."),
    Component("node", "The machine or container a replica runs on: its CPU and memory limits."),
    Component("traffic", "What clients send: how many requests, how long.", in_stack=False),
    Component("capacity", "How many replicas serve against the load offered.", in_stack=False),
)


@dataclass(frozen=True)
class Move:
    """A quantity's expected direction when a cause is what happened.

    where: fleet (every replica and task moves), replica (one replica moves, the others do not),
    task (one canary task moves); part: the slice it is about (("length", "long"),)."""
    quantity: str
    direction: str
    where: str = "fleet"
    part: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if self.quantity not in QUANTITY_IDS:
            raise ValueError(f"unknown quantity {self.quantity!r}")
        if self.direction not in ("up", "down", "flat"):
            raise ValueError(f"direction must be up, down or flat, got {self.direction!r}")
        if self.where not in ("fleet", "replica", "task"):
            raise ValueError(f"where must be fleet, replica or task, got {self.where!r}")


def _moves(where: str = "fleet", **directions: str) -> tuple[Move, ...]:
    return tuple(Move(q.replace("_", "-"), d, where) for q, d in directions.items())


_UNCHANGED_LOAD = _moves(request_rate="flat", prompt_length="flat")
_SHORT, _LONG = (("length", "short"),), (("length", "long"),)
_GREEDY, _SEEDED = (("mode", "greedy"),), (("mode", "seeded"),)

# no-fault moves nothing: every quantity stays flat (signatures.py reads it so).
MECHANISMS: dict[str, tuple[Move, ...]] = {
    "prefix-caching-disabled": _moves(prefix_cache_hit_rate="down", prefill_time="up", time_to_first_token="up")
    + _UNCHANGED_LOAD,
    "prefill-budget-too-small": _moves(iteration_tokens="down", prefill_time="up", time_to_first_token="up",
                                       prefix_cache_hit_rate="flat") + _UNCHANGED_LOAD,
    "slow-attention-kernel": _moves(prefill_time="up", decode_time="up", time_between_tokens="up",
                                    time_to_first_token="up", prefix_cache_hit_rate="flat", spec_acceptance="flat")
    + _UNCHANGED_LOAD,
    "prompt-length-shift": _moves(prompt_length="up", request_rate="flat", time_to_first_token="up"),
    "memory-headroom-too-small": _moves(device_memory_headroom="down", errors="up"),
    "kv-block-leak": _moves(kv_usage="up", device_memory_headroom="flat"),
    "max-num-seqs-too-high": _moves(running_requests="up", errors="up"),
    "batch-variant-numerics": (Move("output-mismatch", "up", part=_GREEDY),),
    "sampler-seed-ignored": (Move("output-mismatch", "up", part=_SEEDED),
                             Move("output-mismatch", "flat", part=_GREEDY)),
    "replica-numerics-mismatch": (Move("output-mismatch", "up", "replica", _GREEDY),),
    "cpu-throttled-replica": _moves("replica", cpu_throttling="up", time_between_tokens="up", time_to_first_token="up")
    + _moves(preemptions="flat"),
    "kernel-fallback": _moves("replica", time_between_tokens="up", time_to_first_token="up")
    + _moves(cpu_throttling="flat", preemptions="flat"),
    "kv-cache-too-small": _moves("replica", preemptions="up", kv_usage="up", time_to_first_token="up")
    + _moves(cpu_throttling="flat"),
    "weight-quantization-too-coarse": _moves("task", task_accuracy="down")
    + (Move("task-accuracy", "down", part=_SHORT),),
    "kv-cache-quantization": _moves("task", task_accuracy="down") + (Move("task-accuracy", "down", part=_LONG),),
    "draft-model-mismatch": _moves(spec_acceptance="down", time_between_tokens="up",
                                   drafted_tokens_per_step="flat"),
    "speculation-too-deep": _moves(drafted_tokens_per_step="up", spec_acceptance="down", time_between_tokens="up"),
    "stop-token-misconfigured": _moves("task", task_accuracy="down") + _moves(output_length="down"),
    "thread-oversubscription": _moves(time_between_tokens="up", spec_acceptance="flat", drafted_tokens_per_step="flat",
                                      cpu_throttling="flat"),
    "cpu-limit-too-low": _moves(cpu_throttling="up", time_between_tokens="up", time_to_first_token="up",
                                spec_acceptance="flat", drafted_tokens_per_step="flat"),
    "max-num-seqs-too-low": _moves("replica", waiting_requests="up", queue_time="up", time_to_first_token="up",
                                   running_requests="down") + _moves(cpu_throttling="flat", preemptions="flat"),
    "capacity-exceeded": _moves(request_rate="up", queue_time="up", time_to_first_token="up", prefill_time="flat",
                                decode_time="flat", prompt_length="flat", output_length="flat"),
    "no-fault": (),
}

_ROOT_CAUSES = {t.id: t for t in ROOT_CAUSES}
_COMPONENTS = {c.id: c for c in COMPONENTS}
assert set(MECHANISMS) == set(_ROOT_CAUSES), "every root cause says what it moves"
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


_WORD = re.compile(r"[a-z0-9]+")


def component(text: str) -> Component:
    """The component `text` names: its id, or the same words in another case or spacing ("KV cache", "the
    attention kernel"); ValueError with the closest id and the list otherwise."""
    words = _WORD.findall(str(text).lower())
    if words[:1] == ["the"]:
        words = words[1:]
    id = "-".join(words)
    if id not in _COMPONENTS:
        raise ValueError(f"unknown component {text!r}{suggestion(id, _COMPONENTS)}; "
                         f"the components are {', '.join(_COMPONENTS)}")
    return _COMPONENTS[id]


def as_dict() -> dict[str, list[dict]]:
    """The whole taxonomy as plain data (the shape `sandbox taxonomy --json` prints)."""
    return {"root_causes": [asdict(t) for t in ROOT_CAUSES],
            "components": [asdict(c) for c in COMPONENTS],
            "remediations": [asdict(t) for t in REMEDIATIONS]}
