"""The scheduler's settings, validated when made (pure Python, like the scheduler)."""
from __future__ import annotations

from dataclasses import dataclass

ABORT_MODES = ("inline", "deferred")


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


@dataclass
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    # Most draft tokens a request may carry into one step.
    num_spec_tokens: int = 0

    def __post_init__(self) -> None:
        _check_int("max_num_seqs", self.max_num_seqs, 1)
        _check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        _check_int("num_spec_tokens", self.num_spec_tokens, 0)
        if not isinstance(self.enable_chunked_prefill, bool):
            raise ValueError(f"enable_chunked_prefill must be a bool, got {self.enable_chunked_prefill!r}")
