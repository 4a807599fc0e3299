"""A request's lifecycle state and the tokens it has seen so far.

The engine core never sees text: a request is a prompt of token ids plus the
output token ids sampled so far. Its KV-cache progress is one number,
`num_computed_tokens`: the count of leading tokens whose keys/values are
already written into the request's blocks.

    all_token_ids:  [ p0 p1 p2 p3 p4 | o0 o1 ]        num_tokens = 7
    KV written:     [ x  x  x  x  x    x  . ]        num_computed_tokens = 6
                                          ^ sampled last step, fed next step

A request that decodes normally sits at num_computed_tokens == num_tokens - 1:
the newest token was sampled but has not been run through the model yet.
After a preemption by recompute, num_computed_tokens drops to 0 and the request
must "prefill" its prompt AND the outputs it already produced before decoding
again, which is why `is_prefill` compares against num_tokens, not the prompt.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class RequestStatus(enum.Enum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    # Evicted from the running batch by recompute; waits again for admission.
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH = enum.auto()
    FINISHED_ABORTED = enum.auto()

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        return status in _FINISHED_REASONS

    @staticmethod
    def finished_reason(status: RequestStatus) -> str | None:
        """vLLM's `finished_reason` label: "stop", "length", "abort" or None."""
        return _FINISHED_REASONS.get(status)


# Values are the label strings vLLM exports in its metrics and API responses.
_FINISHED_REASONS: dict[RequestStatus, str] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}

# The module-level spelling, for call sites that read better without the class prefix.
finished_reason = RequestStatus.finished_reason


# eq=False: requests are identities (two requests with equal fields are still
# two requests), and identity comparison keeps `list.remove` O(1) per element.
@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    eos_token_id: int | None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    # Opaque to the core: only the model runner's sampler interprets it.
    sampling_params: object = None
    arrival_time: float = 0.0

    # ---- mutable state, owned by the scheduler ----
    output_token_ids: list[int] = field(default_factory=list, init=False)
    num_computed_tokens: int = field(default=0, init=False)
    # Draft tokens proposed after the last step, to be verified in the next one.
    # They are NOT part of all_token_ids until the model accepts them.
    spec_token_ids: list[int] = field(default_factory=list, init=False)
    status: RequestStatus = field(default=RequestStatus.WAITING, init=False)
    num_preemptions: int = field(default=0, init=False)
    # Prefix-cache hit tokens at the first admission; None until then.
    num_cached_tokens: int | None = field(default=None, init=False)
    first_scheduled_time: float | None = field(default=None, init=False)
    first_token_time: float | None = field(default=None, init=False)
    last_token_time: float | None = field(default=None, init=False)
    finished_time: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise ValueError(f"request_id must be a non-empty str, got {self.request_id!r}")
        self.prompt_token_ids = list(self.prompt_token_ids)
        if not self.prompt_token_ids:
            raise ValueError(f"prompt_token_ids of request {self.request_id!r} must not be empty")
        if not all(isinstance(t, int) and t >= 0 for t in self.prompt_token_ids):
            raise ValueError(f"prompt_token_ids of request {self.request_id!r} must be ints >= 0")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        self.stop_token_ids = tuple(self.stop_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt followed by outputs (a fresh list; drafts are not included)."""
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_prefill(self) -> bool:
        """True while more than the newest token still lacks KV (see module doc)."""
        return self.num_computed_tokens < self.num_tokens - 1

    @property
    def is_finished(self) -> bool:
        return RequestStatus.is_finished(self.status)
