"""Typed incident scripts (see FORMAT.md): what `incidents.schema.load_incident` returns once a file is valid.

Fault specs stay raw dicts: their fields belong to `faults/`, which validates them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DIRECTIONS = ("up", "down", "flat")
INJECTED = "injected"  # location.replica / location.version: resolved when the fault is injected
NODES = ("container",)  # variant.node: where one replica runs, when not on the local head

FaultValidator = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Page:
    alert: str | None  # the alert rule whose firing pages the candidate; None: a control drill paged by `report`
    report: str | None = None  # what a person reports, shown at injection


@dataclass(frozen=True)
class Peak:
    """A window of extra load: a higher Poisson rate (`rate` replaces the base rate), or a batch job
    (`concurrency` clients, each sending its next request when its last one ends, on top of the base)."""
    at_s: float
    duration_s: float
    rate: float | None = None
    concurrency: int | None = None
    profile: str | None = None  # the peak's request mix; None keeps the traffic's


@dataclass(frozen=True)
class Traffic:
    profile: str
    rate: float  # requests/s, Poisson
    peaks: tuple[Peak, ...] = ()


@dataclass(frozen=True)
class TrafficChange:
    """A variant's change to traffic at injection (decoys, surges); None keeps the incident's."""
    profile: str | None = None
    rate_factor: float = 1.0  # multiplies the base and peak rates


@dataclass(frozen=True)
class Event:
    """Happens in every variant (a harmless deploy next to a decoy, a note on the debrief timeline)."""
    at_s: float
    fault: dict[str, Any] | None
    note: str | None = None


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
    node: str | None = None  # "container": one replica runs on a Ray worker node in a Docker container


@dataclass(frozen=True)
class Incident:
    id: str
    file: str
    page: Page
    setup: dict[str, Any]  # settings deployed before traffic (`sandbox deploy --set` keys); {} for none
    traffic: Traffic
    timeline: Timeline
    signals: dict[str, str]  # name -> PromQL
    primary: str
    variants: dict[str, Variant]  # by key, in file order
