"""Typed incident scripts (see FORMAT.md): what `incidents.loader` returns once a file has passed validation.

Fault specs stay raw dicts: their fields belong to `faults/`, which validates them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DIRECTIONS = ("up", "down", "flat")
INJECTED = "injected"  # location.replica / location.version: resolved when the fault is injected

FaultValidator = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Page:
    alert: str  # the alert rule whose firing pages the candidate


@dataclass(frozen=True)
class Peak:
    at_s: float
    duration_s: float
    rate: float


@dataclass(frozen=True)
class Traffic:
    profile: str
    rate: float  # requests/s, Poisson
    peaks: tuple[Peak, ...] = ()


@dataclass(frozen=True)
class TrafficChange:
    """A variant's change to traffic at injection (decoys, surges); None keeps the incident's."""
    profile: str | None = None
    rate: float | None = None


@dataclass(frozen=True)
class Event:
    at_s: float
    fault: dict[str, Any]


@dataclass(frozen=True)
class Timeline:
    baseline_s: float
    inject_at_s: float
    jitter_s: float
    duration_s: float
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class Location:
    replica: str | None  # None (does not matter) or INJECTED
    version: str | None  # None (does not matter) or INJECTED
    component: str | None


@dataclass(frozen=True)
class AnswerKey:
    root_cause: str
    remediation: tuple[str, ...]  # accepted ids, best first
    location: Location
    evidence: tuple[str, ...]  # signal names that distinguish this variant


@dataclass(frozen=True)
class Variant:
    key: str
    weight: float
    faults: tuple[dict[str, Any], ...]
    traffic: TrafficChange | None
    signature: dict[str, str]  # signal name -> up | down | flat, versus baseline
    answer: AnswerKey


@dataclass(frozen=True)
class Incident:
    id: str
    file: str
    page: Page
    traffic: Traffic
    timeline: Timeline
    signals: dict[str, str]  # name -> PromQL
    primary: str
    variants: tuple[Variant, ...]

    def variant(self, key: str) -> Variant:
        for v in self.variants:
            if v.key == key:
                return v
        raise ValueError(f"incident {self.id!r} has no variant {key!r}; variants: "
                         f"{', '.join(v.key for v in self.variants)}")
