"""Whether a cached calibration still fits the machine as it runs now: the reference profile's ceiling again.

    cal, drift = recheck(state, cal, sweep, steps)   # cal scaled for this drill where the machine moved

A calibration is cached per machine, serve config and catalogue, but a shared host's speed moves under
it. On 2026-12-05 the default profile's ceiling read 24.4 req/s at 05:19; a prefix-off verify run at
07:00, whose load was 0.55 of the shared-prefix ceiling cached then, ran a saturated baseline (its TTFT
p99 in the 2.5-5 s bucket, a baseline margin of 0.913), and earlier sittings saw the same machine's
ceilings move 28-40 % within an hour (bench/results/verify-2026-12-03.md). A rate written in capacity
units is only that share of today's capacity if the capacity is today's.

So a drill that found its calibration in the cache measures the reference profile's ceiling once more:
the calibration's own closed loop (the engines' whole batch) beside the same unscraped canary, over
CHECK_WINDOWS of its windows, about 20 s. The reference profile is the same whatever the incident, so the
step says nothing about the drill.
Where the ceiling moved by more than TOLERANCE, every profile's ceiling and knee are scaled by the ratio,
for this drill only (the cache keeps what the full sweep measured: one 7 s phase is not a calibration).
The latency thresholds need no scaling: a calibrated drill sets them from its own baseline.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import httpx

from incidents.profiles import get_profile
from sandbox.calibration.calibrator import Calibrator, engine_batch
from sandbox.calibration.capacity import Calibration, CalibrationError
from sandbox.calibration.sweep import Sweeper
from sandbox.calibration.sweep_point import SweepConfig

# How far the check's ceiling may sit from the cached one before the drill's load follows it: twice the noise
# of that ratio. Twelve 7 s probes of the default ceiling, four back to back on each of three fresh stacks
# (2026-12-05, bench/ceiling_probes.py), spread 5.5 % (relative SD) about their stack's mean; so the ratio
# of one cached window to the check's two windows has an SD of sqrt(5.5^2 + 5.5^2 / 2) = 6.7 %. At the 10 %
# tolerance of before, one probe against the cache moved a drill's load on noise alone about one time in five
# (one of two checks on 2026-12-05 applied 0.851). The moves it guards against were 28-40 % within an hour.
TOLERANCE = 0.15
# The check's closed loop runs this many ceiling windows in one: a window's noise falls as its square root.
# The first probe on a fresh stack read 0.88, 1.00 and 0.92 of the next three (no warm-up, 3 s and 7 s of
# the same loop dropped first): a cold bias, if there is one, is within the noise, and a window counted
# costs no more than one dropped.
CHECK_WINDOWS = 2


@dataclass(frozen=True)
class Drift:
    profile: str
    cached_rps: float  # the reference profile's ceiling in the calibration
    readings: tuple[float, ...]  # ... measured again before this drill: one, or two where the first moved
    applied: bool  # the drill's capacities scaled by `factor`

    def __post_init__(self):
        if not (self.cached_rps > 0 and self.readings and all(r > 0 for r in self.readings)):
            raise ValueError(f"ceilings must be positive, got {self.cached_rps!r} and {self.readings!r}")

    @property
    def now_rps(self) -> float:
        return sum(self.readings) / len(self.readings)

    @property
    def factor(self) -> float:
        return self.now_rps / self.cached_rps

    def to_dict(self) -> dict:
        return {"profile": self.profile, "cached_ceiling_rps": round(self.cached_rps, 3),
                "ceiling_now_rps": round(self.now_rps, 3), "readings_rps": [round(r, 3) for r in self.readings],
                "factor": round(self.factor, 3), "applied": self.applied}

    def head(self) -> str:
        return (f"the stack completes {self.factor:.2f}x the requests its calibration measured "
                f"({' and '.join(f'{r:.1f}' for r in self.readings)} against {self.cached_rps:.1f} req/s)")

    def describe(self) -> str:
        head = self.head()
        if self.applied:
            return head + ": this drill's load is scaled to it"
        if len(self.readings) > 1:
            return head + ": a second reading did not confirm the first, the calibration stands"
        return head + f": within {TOLERANCE:.0%}, the calibration stands"


def _moved(cached_rps: float, now_rps: float) -> int:
    """+1 or -1 where `now_rps` is past TOLERANCE above or below `cached_rps`, else 0."""
    ratio = now_rps / cached_rps
    return 1 if ratio > 1 + TOLERANCE else -1 if ratio < 1 - TOLERANCE else 0


def drifted(profile: str, cached_rps: float, *readings: float) -> Drift:
    """Applied only where every reading moved past TOLERANCE the same way: a stack that really sped up or
    slowed down stays so for the next 20 s, while four tpot-regression drills within 40 minutes read 0.94, 1.11,
    0.69 and 0.91 of one cached ceiling (2026-12-05): the 0.69, scaled to, left its drill's load at 0.21 of the
    ceiling where 0.31 was written, and its page margin at 1.41."""
    moves = {_moved(cached_rps, r) for r in readings} if readings and cached_rps > 0 else {0}
    return Drift(profile, cached_rps, tuple(readings), len(moves) == 1 and 0 not in moves)


def scaled(cal: Calibration, factor: float) -> Calibration:
    """`cal` with every profile's ceiling and knee `factor` times what was measured (shares stay the same)."""
    if not factor > 0:
        raise ValueError(f"a scale factor must be > 0, got {factor!r}")
    profiles = {name: replace(p, ceiling=replace(p.ceiling, rate=p.ceiling.rate * factor),
                              knee_rps=p.knee_rps * factor)
                for name, p in cal.profiles.items()}
    return replace(cal, profiles=profiles)


def measure_ceiling(state, cal: Calibration, sweep: SweepConfig, seed: int = 0) -> float:
    """The reference profile's ceiling now, measured as the calibration measured it (req/s)."""
    calibrator = Calibrator(state, cal.key, [cal.reference], sweep, seed=seed)
    sweeper = Sweeper(state.api_url, state.model_name, sweep, seed, replicas=state.replicas or 1,
                      batch=engine_batch(state))
    with calibrator.beside_canary():
        point = sweeper.ceiling(get_profile(cal.reference), window_s=CHECK_WINDOWS * sweep.ceiling_s)
    if not point.rate > 0:
        raise CalibrationError(f"nothing streamed in {sweep.ceiling_s:g} s ({sweeper.last_closed})")
    return point.rate


def recheck(state, cal: Calibration, sweep: SweepConfig, steps, seed: int = 0) -> tuple[Calibration, Drift | None]:
    """`cal`, scaled to the stack's capacity now where it moved past TOLERANCE in two readings, and what was
    measured (None: the check could not measure, and the calibration stands, said so)."""
    cached = cal.profiles[cal.reference].ceiling.rate
    try:
        with steps.step("checking the stack's capacity against its calibration"):
            now = measure_ceiling(state, cal, sweep, seed)
    except (CalibrationError, RuntimeError, httpx.HTTPError, OSError) as e:
        steps.note(f"the capacity check measured nothing ({e}): the calibration's figures stand")
        return cal, None
    drift = drifted(cal.reference, cached, now)
    if drift.applied:  # one reading past the tolerance: a second one says whether the stack or the host moved
        steps.note(drift.head() + ": measuring once more")
        try:
            with steps.step("confirming the stack's capacity"):
                drift = drifted(cal.reference, cached, now, measure_ceiling(state, cal, sweep, seed + 1))
        except (CalibrationError, RuntimeError, httpx.HTTPError, OSError) as e:
            steps.note(f"the second reading measured nothing ({e}): the calibration's figures stand")
            return cal, replace(drift, applied=False)
    steps.note(drift.describe())
    return (scaled(cal, drift.factor) if drift.applied else cal), drift
