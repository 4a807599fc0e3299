"""Apply runtime knobs to a live engine, between two steps, with no restart.

The engine has no reconfigure API of its own, so this swaps the scheduler's
validated config and flips the KV cache manager's prefix-caching switch. Both
are read afresh by every `schedule()`, so the next step obeys them. Only the
engine thread may call this (the engine is single-threaded).
"""
from __future__ import annotations

from services.engine.config import EngineConfig
from services.engine.scheduler import SchedulerConfig
from services.serve.config import ReplicaKnobs


def apply_knobs(engine, knobs: ReplicaKnobs, deployed: EngineConfig) -> None:
    """Set the engine's scheduler limits and prefix caching to `knobs`; None restores `deployed`."""
    current = engine.scheduler.config
    max_num_seqs = knobs.max_num_seqs or deployed.max_num_seqs
    max_tokens = knobs.max_num_batched_tokens or deployed.max_num_batched_tokens
    if max_tokens < max_num_seqs:
        raise ValueError(f"max_num_batched_tokens={max_tokens} must be >= max_num_seqs={max_num_seqs}")
    if not current.enable_chunked_prefill and max_tokens < deployed.max_model_len:
        raise ValueError(f"max_num_batched_tokens={max_tokens} must be >= max_model_len="
                         f"{deployed.max_model_len} when enable_chunked_prefill is off")
    caching = deployed.enable_prefix_caching if knobs.enable_prefix_caching is None else knobs.enable_prefix_caching
    kv = engine.scheduler.kv_cache_manager
    if caching and not kv.block_pool.enable_caching:
        raise ValueError("enable_prefix_caching: the engine was deployed without prefix caching; "
                         "turning it on needs a deploy (engine.enable_prefix_caching=true)")
    engine.scheduler.config = SchedulerConfig(max_num_seqs, max_tokens, current.enable_chunked_prefill,
                                              current.num_spec_tokens)
    kv.enable_prefix_caching = caching
