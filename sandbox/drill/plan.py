"""A drill's schedule, fixed by the incident, the variant and the seed before anything runs.

All times are seconds from the start of traffic. The plan is pure data, so the
same (incident, seed) gives the same injection time, the same traffic and the
same events on every machine: what an interviewer needs for identical cases.

    0 ─── baseline ───┬─ inject (+ seeded jitter) ──────────────── duration
                      │ faults injected, traffic change (decoys)
    peaks: rate windows anywhere in [0, duration), or batch jobs (closed-loop
           clients on top of the base traffic)
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Segment:
    """Traffic from `start_s` on: a Poisson rate and a profile name."""
    start_s: float
    rate: float
    profile: str


@dataclass(frozen=True)
class Job:
    """`concurrency` clients from start_s to end_s, each sending its next request when its last ends."""
    start_s: float
    end_s: float
    concurrency: int
    profile: str


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

    def segment_at(self, t: float) -> Segment:
        current = self.segments[0]
        for seg in self.segments:
            if seg.start_s <= t:
                current = seg
        return current

    def to_dict(self) -> dict:
        return {"incident": self.incident_id, "variant": self.variant, "seed": self.seed,
                "inject_at_s": self.inject_at_s, "duration_s": self.duration_s, "baseline_s": self.baseline_s,
                "segments": [vars(s) for s in self.segments], "jobs": [vars(j) for j in self.jobs],
                "events": [{"at_s": e.at_s, "kind": e.kind, "faults": list(e.faults), "note": e.note}
                           for e in self.events]}


def make_plan(incident, variant_name: str, seed: int, duration_s: float | None = None) -> DrillPlan:
    """The schedule of one drill. `incident` is an incidents.schema.Incident."""
    rng = random.Random(f"{incident.id}/{variant_name}/{seed}")  # str seeds hash deterministically
    tl = incident.timeline
    inject = round(tl.inject_at_s + rng.uniform(0, tl.jitter_s), 1)
    duration = float(duration_s if duration_s is not None else tl.duration_s)
    if duration <= inject:
        raise ValueError(f"duration {duration:.0f}s must be longer than the injection time {inject:.0f}s")
    variant = incident.variants[variant_name]
    segments = _segments(incident.traffic, variant, inject, duration)
    events = [PlannedEvent(float(ev.at_s), "event", (ev.fault,) if ev.fault else (), ev.note or "")
              for ev in tl.events]
    events.append(PlannedEvent(inject, "inject", tuple(variant.faults)))
    events.sort(key=lambda e: (e.at_s, e.kind == "inject"))
    jobs = [Job(float(p.at_s), float(min(p.at_s + p.duration_s, duration)), p.concurrency,
                p.profile or incident.traffic.profile)
            for p in incident.traffic.peaks if p.concurrency is not None and p.at_s < duration]
    return DrillPlan(incident.id, variant_name, seed, inject, duration, float(tl.baseline_s), segments, events, jobs)


def _segments(traffic, variant, inject_s: float, duration_s: float) -> list[Segment]:
    """Piecewise-constant traffic: the base rate, peak windows, and the variant's change at injection."""
    change = variant.traffic
    after_profile = (change.profile if change and change.profile else traffic.profile)
    rate_factor = float(change.rate_factor) if change else 1.0
    peaks = [p for p in traffic.peaks if p.rate is not None]  # batch jobs run beside the base traffic
    cuts = {0.0, inject_s}
    for p in peaks:
        cuts |= {float(p.at_s), float(p.at_s + p.duration_s)}
    segments = []
    for start in sorted(c for c in cuts if c < duration_s):
        rate, profile = traffic.rate, after_profile if start >= inject_s else traffic.profile
        for p in peaks:
            if p.at_s <= start < p.at_s + p.duration_s:
                rate, profile = p.rate, p.profile or profile
        if start >= inject_s:
            rate *= rate_factor
        if not segments or (segments[-1].rate, segments[-1].profile) != (rate, profile):
            segments.append(Segment(start, rate, profile))
    return segments
