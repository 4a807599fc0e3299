"""What a calibration found: each profile's capacity, the knee, and the SLOs derived from them.

    ProfileCapacity  one profile: its one-at-a-time, busy and ceiling points, its knee (req/s)
    Calibration      every profile of the catalogue, the reference profile's latency curve,
                     the thresholds derived from them, and the key it is valid for

The full sweep (one at a time, the ceiling, Poisson rates between) runs on one reference
profile, whose knee is found as a share of its ceiling; every other profile is measured
at its ceiling and busy (Poisson at the busy share of it), and its knee is that same share
of its own ceiling.
The latency curve's shape (where queueing takes over, as a share of what the stack can
complete) is a property of the stack; each profile's cost is measured. That keeps a
calibration of the catalogue's three base profiles within 90 s on a 2-core machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sandbox.calibration.sweep_point import SweepPoint
from sandbox.calibration.thresholds import TpotLine, tpot_slo


class CalibrationError(ValueError):
    """A calibration that cannot be trusted (a corrupt cache) or cannot be made (bad input)."""


@dataclass(frozen=True)
class ProfileCapacity:
    profile: str
    single: SweepPoint | None  # None for a profile whose knee is scaled from the reference's
    ceiling: SweepPoint
    knee_rps: float
    busy: SweepPoint | None = None  # Poisson at the busy share of the ceiling: what the latency SLOs are multiples of

    def __post_init__(self):
        if (self.single is not None and self.single.phase != "single") or self.ceiling.phase != "ceiling":
            raise CalibrationError(f"profile {self.profile}: points out of place")
        if not self.knee_rps > 0 or self.ceiling.rate <= 0:
            raise CalibrationError(f"profile {self.profile}: knee and ceiling must be positive")

    def to_dict(self) -> dict:
        return {"profile": self.profile, "knee_rps": round(self.knee_rps, 4),
                "single": None if self.single is None else self.single.to_dict(),
                "ceiling": self.ceiling.to_dict(), "busy": None if self.busy is None else self.busy.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> ProfileCapacity:
        return cls(str(d["profile"]), None if d["single"] is None else point_from_dict(d["single"]),
                   point_from_dict(d["ceiling"]),
                   float(d["knee_rps"]), None if d.get("busy") is None else point_from_dict(d["busy"]))


@dataclass(frozen=True)
class Calibration:
    key: dict  # what it is valid for: machine, serve config, catalogue (sandbox/calibration/cache.py)
    measured_at: float  # unix time
    seconds: float  # how long the sweep took
    reference: str  # the profile with the full sweep
    knee_share: float  # the reference profile's knee over its ceiling
    knee_factor: float  # the knee: TTFT p99 within this factor of the one-at-a-time median
    profiles: dict[str, ProfileCapacity]
    curve: tuple[SweepPoint, ...]  # the reference profile's Poisson points (the busy one among them)
    thresholds: dict[str, float] = field(default_factory=dict)  # sandbox:threshold:* name -> value
    warnings: tuple[str, ...] = ()  # what the sweep met (a busy machine), said wherever it is shown
    tpot_line: TpotLine | None = None  # the healthy median TPOT by load: the TPOT SLO is read off it
    # Every busy request's TTFT, pooled and sorted (s): the TTFT SLO's samples, kept so that its estimate
    # can be checked, and another estimator tried, on what a calibration actually saw.
    busy_ttft_s: tuple[float, ...] = ()

    def __post_init__(self):
        if self.reference not in self.profiles:
            raise CalibrationError(f"the reference profile {self.reference!r} has no capacity")
        if not 0 < self.knee_share <= 1:
            raise CalibrationError(f"knee_share must be in (0, 1], got {self.knee_share!r}")

    def thresholds_for(self, share: float | None = None) -> dict[str, float]:
        """Every threshold for a drill whose base traffic is `share` of the ceiling (None: the busy load, the
        heaviest a healthy drill runs at): the stack's own, and the TPOT SLO of that load."""
        if self.tpot_line is None:
            return dict(self.thresholds)
        return {**self.thresholds, **tpot_slo(self.tpot_line, self.tpot_line.busy_share if share is None else share)}

    def knees(self) -> dict[str, float]:
        """profile -> knee (req/s): what an incident's `rate: 0.6 knee` is a fraction of."""
        return {name: p.knee_rps for name, p in self.profiles.items()}

    def ceilings(self) -> dict[str, float]:
        """profile -> ceiling (req/s): what `rate: 1.3 ceiling` is a multiple of."""
        return {name: p.ceiling.rate for name, p in self.profiles.items()}

    def to_dict(self) -> dict:
        return {"key": self.key, "measured_at": self.measured_at, "seconds": round(self.seconds, 1),
                "reference": self.reference, "knee_share": round(self.knee_share, 4),
                "knee_factor": self.knee_factor,
                "profiles": {n: p.to_dict() for n, p in self.profiles.items()},
                "curve": [p.to_dict() for p in self.curve], "thresholds": self.thresholds,
                "warnings": list(self.warnings),
                "tpot_line": None if self.tpot_line is None else self.tpot_line.to_dict(),
                "busy_ttft_s": list(self.busy_ttft_s)}

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        """Raises CalibrationError for anything that is not a whole calibration (a corrupt cache)."""
        try:
            return cls(dict(d["key"]), float(d["measured_at"]), float(d["seconds"]), str(d["reference"]),
                       float(d["knee_share"]), float(d["knee_factor"]),
                       {str(n): ProfileCapacity.from_dict(p) for n, p in d["profiles"].items()},
                       tuple(point_from_dict(p) for p in d["curve"]),
                       {str(k): float(v) for k, v in d["thresholds"].items()},
                       tuple(str(w) for w in d.get("warnings", [])),
                       None if d["tpot_line"] is None else TpotLine.from_dict(d["tpot_line"]),
                       tuple(float(v) for v in d.get("busy_ttft_s", ())))
        except CalibrationError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CalibrationError(f"not a calibration: {type(e).__name__}: {e}") from None


def point_from_dict(d: dict) -> SweepPoint:
    opt = lambda k: None if d[k] is None else float(d[k])
    return SweepPoint(str(d["phase"]), float(d["offered"]), int(d["requests"]), int(d["errors"]), float(d["rate"]),
                      opt("ttft_p50_s"), opt("ttft_p99_s"), opt("itl_p50_s"), opt("itl_p99_s"),
                      float(d["output_tokens_per_s"]),
                      None if d.get("tpot_p50_s") is None else float(d["tpot_p50_s"]))
