"""The ingress's admission limit: how many generations it lets in at once; the rest get a 429 at the door.

    limit = AdmissionLimit()                    # no limit: everything is admitted
    limit.configure(IngressSettings.from_dict({"max_inflight_requests": 8}))
    if not limit.try_enter(): -> 429, OpenAI's error JSON (code "rate_limit_exceeded")
    ... the generation, streamed or not ...
    limit.leave()                               # when its response has ended, however it ended

This is load shedding as a gateway does it: admitted requests keep their latency because the queue in
front of the engines stays short; the shed ones fail fast with a status every OpenAI client knows to back
off from. A limit is a runtime setting (the ingress deployment's user_config): applied in place, no new
version. Pure Python; the ingress (services/serve/ingress.py) holds one per replica.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from services.serve import protocol as p


@dataclass(frozen=True)
class IngressSettings:
    """The ingress deployment's user_config. `max_inflight_requests`: None (no limit) or at least 1."""
    max_inflight_requests: int | None = None

    def __post_init__(self):
        limit = self.max_inflight_requests
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"max_inflight_requests: a whole number >= 1 or null (no limit), got {limit!r}")

    @classmethod
    def from_dict(cls, data: dict | None) -> IngressSettings:
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(data) - known):
            raise ValueError(f"unknown ingress setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


class AdmissionLimit:
    """Counts the generations in flight; admits one more only under the limit. The ingress runs on one event
    loop, so enter and leave never race."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.inflight = 0

    def configure(self, settings: IngressSettings) -> None:
        """A new limit applies to the next arrival; requests already in flight finish as they are."""
        self.limit = settings.max_inflight_requests

    def try_enter(self) -> bool:
        if self.limit is not None and self.inflight >= self.limit:
            return False
        self.inflight += 1
        return True

    def leave(self) -> None:
        assert self.inflight > 0, "leave() without a matching try_enter()"
        self.inflight -= 1


def shed_error() -> p.APIError:
    """What a shed request gets: a 429 in OpenAI's shape, so clients back off (the `openai` client raises
    RateLimitError)."""
    return p.APIError(429, "The server is shedding load: too many requests in flight; retry with backoff.",
                      type="requests", code="rate_limit_exceeded")
