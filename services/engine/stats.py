"""The engine's counters: `EngineStats`, kept as it steps; `EngineSnapshot`, what it looks like now.

`LLMEngine.snapshot()` builds the one snapshot type; the serving layer adds its process's CPU figures
and exports it (services/serve/metrics.py maps each field to its vLLM metric name).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EngineStats:
    """Cumulative counters a server turns into metrics (vLLM's names)."""
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    spec_decode_num_drafts_total: int = 0
    spec_decode_num_draft_tokens_total: int = 0
    spec_decode_num_accepted_tokens_total: int = 0
    num_steps_total: int = 0
    last_step_tokens: int = 0
    iteration_tokens: list[int] = field(default_factory=list)  # drained by the server


@dataclass
class EngineSnapshot:
    """What the engine looks like right now: cumulative counters and gauges."""
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    cpu_seconds: float = 0.0
    cpu_periods: int = 0  # the replica's CPU cgroup (services.serve.cgroup_cpu)
    cpu_periods_throttled: int = 0
    cpu_throttled_seconds: float = 0.0
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0
    memory_used_bytes: int = 0
    memory_capacity_bytes: int = 0
    iteration_tokens: list[int] = field(default_factory=list)  # steps since the previous snapshot


# Counters kept by the engine itself (the rest are the process's): a rebuilt engine starts them at zero.
ENGINE_COUNTERS = ("prompt_tokens", "generation_tokens", "num_preemptions", "prefix_cache_queries",
                   "prefix_cache_hits", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")
