"""A drill's schedule, fixed by the incident, the variant and the seed before anything runs.

All times are seconds from the start of traffic. The plan is pure data, so the
same (incident, seed) gives the same injection time, the same traffic and the
same events on every machine: what an interviewer needs for identical cases.

    0 ─── baseline ───┬─ inject (+ seeded jitter) ──────────────── duration
                      │ faults injected; the variant's traffic change (decoys)
                      │ once they have landed (`held`: the traffic until then)
    peaks: rate windows anywhere in [0, duration), or batch jobs (closed-loop
           clients on top of the base traffic)

Rates written in knee units (incidents/capacity.py) stay fractions until the
plan is resolved against measured knees. Where segments begin never depends on
the knees, so `make_plan(..., knees=k)` and `make_plan(...).resolved(k)` agree.
"""
from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from incidents.capacity import knee_profile
from incidents.script import KNEE, Rate


@dataclass(frozen=True)
class Segment:
    """Traffic from `start_s` on: a Poisson rate (requests/s) and a profile name (the request mix).

    A rate written in knee units keeps its fraction (`knee`, rate_factor applied) and the profile whose
    knee it takes (`knee_profile`, not always `profile`: a decoy changes the mix, not the load); `rate`
    stays None until the plan is resolved."""
    start_s: float
    rate: float | None
    profile: str
    knee: float | None = None
    knee_profile: str | None = None
    unit: str | None = None  # what `knee` is a multiple of: the profile's knee (None) or its ceiling ("ceiling")

    def __post_init__(self):
        if (self.knee is None) != (self.knee_profile is None):
            raise ValueError(f"knee and knee_profile go together, got {self.knee!r} and {self.knee_profile!r}")
        if self.rate is None and self.knee is None:
            raise ValueError(f"the segment at {self.start_s:g} s needs a rate or a knee fraction")

    def resolved(self, knees: Mapping[str, float], ceilings: Mapping[str, float] | None = None) -> Segment:
        """This segment with its rate in requests/s; ValueError naming a profile `knees` (`ceilings`) lacks."""
        if self.knee is None:
            return self
        return replace(self, rate=Rate(self.knee, self.unit or KNEE).per_second(knees, self.knee_profile, ceilings))


@dataclass(frozen=True)
class Job:
    """`concurrency` clients from start_s to end_s, each sending its next request when its last ends; a
    variant's job (`after_landing`) waits, past start_s, for the injection to land, as its other traffic
    changes do."""
    start_s: float
    end_s: float
    concurrency: int
    profile: str
    after_landing: bool = False


@dataclass(frozen=True)
class PlannedEvent:
    at_s: float
    kind: str  # "inject" | "event"
    faults: tuple[dict, ...] = ()
    note: str = ""


@dataclass
class DrillPlan:
    incident_id: str
    variant: str
    seed: int
    inject_at_s: float
    duration_s: float
    baseline_s: float
    segments: list[Segment] = field(default_factory=list)
    events: list[PlannedEvent] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    # The segments without the variant's traffic change: what runs from the injection until its faults have
    # landed. A change that ships with a release shows once the release serves: prompts that grew at the moment
    # a rollout began paged 31 s into a rollout that outlasted the page + 60 s, before the deploy it is the
    # decoy of had served a request. Empty: the same as `segments` (no change, or a plan built by hand).
    held: list[Segment] = field(default_factory=list)

    def unresolved_profiles(self) -> set[str]:
        """The profiles whose knee this plan still needs before traffic can run."""
        return {s.knee_profile for s in self.segments if s.rate is None}

    def resolved(self, knees: Mapping[str, float], ceilings: Mapping[str, float] | None = None) -> DrillPlan:
        """A new plan with every knee-unit rate in requests/s from `knees` (profile -> knee, requests/s) and
        every ceiling-unit rate from `ceilings`; ValueError naming every profile the tables lack."""
        tables = {KNEE: knees, "ceiling": ceilings or {}}
        missing = sorted({f"the {s.unit or KNEE} of {s.knee_profile!r}" for s in self.segments
                          if s.knee is not None and s.knee_profile not in tables[s.unit or KNEE]})
        if missing:
            raise ValueError(f"not calibrated: {', '.join(missing)}, which the plan's capacity-unit rates need: "
                             "run `sandbox calibrate`")
        return replace(self, segments=[s.resolved(knees, ceilings) for s in self.segments], events=list(self.events),
                       jobs=list(self.jobs), held=[s.resolved(knees, ceilings) for s in self.held])

    def base_share(self, ceilings: Mapping[str, float]) -> float | None:
        """The baseline's rate (resolved, requests/s) as a share of its profile's ceiling: the load a healthy
        run of this drill is judged at. None when the rate or that ceiling is unknown."""
        base = self.segment_at(0.0)
        ceiling = ceilings.get(base.knee_profile or base.profile)
        return base.rate / ceiling if base.rate and ceiling else None

    def quiet_until_s(self) -> float:
        """When the healthy base traffic first changes: the first event (the injection among them), peak or
        batch job. Until then the drill runs its baseline alone."""
        return min([self.inject_at_s, *(e.at_s for e in self.events), *(s.start_s for s in self.segments[1:]),
                    *(j.start_s for j in self.jobs)])

    def segment_at(self, t: float, changed: bool = True) -> Segment:
        """The traffic at `t`; changed=False: as if the variant's change had not begun (its faults not landed)."""
        segments = self.segments if changed or not self.held else self.held
        current = segments[0]
        for seg in segments:
            if seg.start_s <= t:
                current = seg
        return current

    def to_dict(self) -> dict:
        return {"incident": self.incident_id, "variant": self.variant, "seed": self.seed,
                "inject_at_s": self.inject_at_s, "duration_s": self.duration_s, "baseline_s": self.baseline_s,
                "segments": [vars(s) for s in self.segments], "held": [vars(s) for s in self.held],
                "jobs": [vars(j) for j in self.jobs],
                "events": [{"at_s": e.at_s, "kind": e.kind, "faults": list(e.faults), "note": e.note}
                           for e in self.events]}


def make_plan(incident, variant_name: str, seed: int, duration_s: float | None = None,
              knees: Mapping[str, float] | None = None, ceilings: Mapping[str, float] | None = None) -> DrillPlan:
    """The schedule of one drill. `incident` is an incidents.schema.Incident; knee-unit rates are resolved
    from `knees` (profile -> knee, requests/s) when given, else left with rate None (`DrillPlan.resolved`)."""
    rng = random.Random(f"{incident.id}/{variant_name}/{seed}")  # str seeds hash deterministically
    tl = incident.timeline
    inject = round(tl.inject_at_s + rng.uniform(0, tl.jitter_s), 1)
    duration = float(duration_s if duration_s is not None else tl.duration_s)
    if duration <= inject:
        raise ValueError(f"duration {duration:.0f}s must be longer than the injection time {inject:.0f}s")
    variant = incident.variants[variant_name]
    segments = _segments(incident.traffic, variant.traffic, inject, duration)
    held = _segments(incident.traffic, None, inject, duration) if variant.traffic else []
    events = [PlannedEvent(float(ev.at_s), "event", (ev.fault,) if ev.fault else (), ev.note or "")
              for ev in tl.events]
    events.append(PlannedEvent(inject, "inject", tuple(variant.faults)))
    events.sort(key=lambda e: (e.at_s, e.kind == "inject"))
    jobs = [Job(float(p.at_s), float(min(p.at_s + p.duration_s, duration)), p.concurrency,
                p.profile or incident.traffic.profile)
            for p in incident.traffic.peaks if p.concurrency is not None and p.at_s < duration]
    change = variant.traffic
    if change is not None and change.concurrency is not None:
        jobs.append(Job(inject, duration, change.concurrency, change.profile or incident.traffic.profile, True))
    plan = DrillPlan(incident.id, variant_name, seed, inject, duration, float(tl.baseline_s), segments, events, jobs,
                     held)
    return plan if knees is None else plan.resolved(knees, ceilings)


def _segments(traffic, change, inject_s: float, duration_s: float) -> list[Segment]:
    """Piecewise-constant traffic: the base rate, peak windows, and `change` (a variant's) from the injection."""
    after_profile = (change.profile if change and change.profile else traffic.profile)
    rate_factor = float(change.rate_factor) if change else 1.0
    peaks = [p for p in traffic.peaks if p.rate is not None]  # batch jobs run beside the base traffic
    cuts = {0.0, inject_s}
    for p in peaks:
        cuts |= {float(p.at_s), float(p.at_s + p.duration_s)}
    segments = []
    for start in sorted(c for c in cuts if c < duration_s):
        after = start >= inject_s
        rate, profile, knee_of = traffic.rate, after_profile if after else traffic.profile, knee_profile(traffic)
        for p in peaks:
            if p.at_s <= start < p.at_s + p.duration_s:
                rate, profile, knee_of = p.rate, p.profile or profile, knee_profile(traffic, p)
        segment = _segment(start, rate, rate_factor if after else 1.0, profile, knee_of)
        if not segments or replace(segments[-1], start_s=start) != segment:
            segments.append(segment)
    return segments


def _segment(start_s: float, rate: Rate, factor: float, profile: str, knee_of: str) -> Segment:
    if rate.unit is not None:
        return Segment(start_s, None, profile, rate.value * factor, knee_of, None if rate.unit == KNEE else rate.unit)
    return Segment(start_s, rate.value * factor, profile)
