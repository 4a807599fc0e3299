"""Typed incident scripts (see FORMAT.md): what `incidents.schema.load_incident` returns once a file is valid.

Fault specs stay raw dicts: their fields belong to `faults/`, which validates them.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DIRECTIONS = ("up", "down", "flat")
INJECTED = "injected"  # location.replica / location.version: resolved when the fault is injected
NODES = ("container",)  # variant.node: where one replica runs, when not on the local head
KNEE = "knee"  # Rate.unit: a fraction of the profile's calibrated knee (`sandbox calibrate`)
# Rate.unit: a multiple of the profile's calibrated ceiling (the most it completes): for loads meant to
# exceed it (a surge), which a fraction of the knee cannot promise, the knee's share of the ceiling
# being the stack's own (0.5-0.85 in sweeps here)
CEILING = "ceiling"
RATE_UNITS = (None, KNEE, CEILING)  # None: requests/s

FaultValidator = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Page:
    alert: str | None  # the alert rule whose firing pages the candidate; None: a control drill paged by `report`
    report: str | None = None  # what a person reports, shown at injection


@dataclass(frozen=True)
class Rate:
    """A Poisson rate as the file writes it: `value` requests/s (unit None), or `value` times the knee (unit
    "knee") or the ceiling (unit "ceiling") of a traffic profile, so that one incident loads a fast machine
    and a slow one alike."""
    value: float
    unit: str | None = None

    def __post_init__(self):
        if self.unit not in RATE_UNITS:
            raise ValueError(f"unit: must be None (requests/s), {KNEE!r} or {CEILING!r}, got {self.unit!r}")
        if isinstance(self.value, bool) or not isinstance(self.value, int | float) \
                or not math.isfinite(self.value) or not self.value > 0:
            raise ValueError(f"value: must be a finite number > 0, got {self.value!r}")

    def per_second(self, knees: Mapping[str, float], profile: str,
                   ceilings: Mapping[str, float] | None = None) -> float:
        """Requests/s; a knee (ceiling) rate takes `profile`'s knee (ceiling), in req/s, from `knees` (`ceilings`)."""
        if self.unit is None:
            return float(self.value)
        table = knees if self.unit == KNEE else (ceilings or {})
        if profile not in table:
            raise ValueError(f"no calibrated {self.unit} for traffic profile {profile!r} (rate {self}): "
                             "run `sandbox calibrate` for it")
        value = table[profile]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not value > 0:
            raise ValueError(f"the {self.unit} of traffic profile {profile!r} must be a finite number of "
                             f"requests/s > 0, got {value!r}")
        return self.value * value

    def __str__(self) -> str:
        return str(self.value) if self.unit is None else f"{self.value} {self.unit}"


@dataclass(frozen=True)
class Peak:
    """A window of extra load: a higher Poisson rate (`rate` replaces the base rate), or a batch job
    (`concurrency` clients, each sending its next request when its last one ends, on top of the base)."""
    at_s: float
    duration_s: float
    rate: Rate | None = None
    concurrency: int | None = None  # absolute, never in knee units: see FORMAT.md
    profile: str | None = None  # the peak's request mix; None keeps the traffic's


@dataclass(frozen=True)
class Traffic:
    profile: str
    rate: Rate  # Poisson; a knee rate takes `profile`'s knee, even after a variant changes the profile
    peaks: tuple[Peak, ...] = ()


@dataclass(frozen=True)
class TrafficChange:
    """A variant's change to traffic at injection (decoys, surges); None keeps the incident's."""
    profile: str | None = None
    rate_factor: float = 1.0  # multiplies the base and peak rates, in whichever unit they are written
    # a batch job of this many clients from the landing to the end, beside the base traffic (each client
    # sends its next request when its last one ends): a load that outgrows any machine's capacity by a
    # number of requests, not by a share of a measured rate
    concurrency: int | None = None

    def __post_init__(self):
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or self.concurrency < 1):
            raise ValueError(f"concurrency must be a whole number of clients >= 1, got {self.concurrency!r}")


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
    weight: float  # of the seeded choice among the incident's variants; 0: never drawn, run by name only
    faults: tuple[dict[str, Any], ...]
    traffic: TrafficChange | None
    signature: dict[str, str]  # signal name -> up | down | flat, versus baseline
    answer: AnswerKey
    node: str | None = None  # "container": one replica runs on a Ray worker node in a Docker container

    @property
    def drawn(self) -> bool:
        """Whether a seeded choice can draw it (`--variant` runs any)."""
        return self.weight > 0


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
