"""Calibrating a running stack: sweep its profiles beside the canary, derive knees and thresholds.

A drill's traffic shares the stack with the canary prober (about 3 requests/s of its
own), so the sweep runs beside a real canary too: the capacity measured is what the
incident's traffic gets. The canary's own figures are not counted (its requests are not
the sweep's).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from incidents.profiles import get_profile
from sandbox.calibration import cache, thresholds
from sandbox.calibration.capacity import Calibration, CalibrationError, ProfileCapacity
from sandbox.calibration.sweep import SweepConfig, Sweeper, knee
from sandbox.canary import process as canary_process

REFERENCE = "default"  # the full sweep runs on this profile when the catalogue uses it


def reference_for(profiles: list[str]) -> str:
    return REFERENCE if REFERENCE in profiles else sorted(profiles)[0]


class Calibrator:
    def __init__(self, state, key: dict, profiles: list[str], sweep: SweepConfig = SweepConfig(),
                 progress: Callable[[float, str], None] | None = None, canary: bool = True, seed: int = 0):
        if not profiles:
            raise CalibrationError("nothing to calibrate: no traffic profile given")
        for name in profiles:
            try:
                get_profile(name)
            except ValueError as e:
                raise CalibrationError(str(e)) from None
        self.state, self.key, self.profiles, self.sweep = state, key, sorted(profiles), sweep
        self.progress = progress or (lambda seconds, label: None)
        self.canary, self.seed = canary, seed

    def run(self) -> Calibration:
        t0 = time.monotonic()
        proc = None
        if self.canary:
            proc = canary_process.spawn(self.state.api_url, self.state.model_name, Path(self.state.targets_dir),
                                        Path(self.state.run_dir) / "logs" / "calibration-canary.log",
                                        first_port=9470, seed=self.seed)
        try:
            reference = reference_for(self.profiles)
            measured = {name: self._measure(name, full=name == reference)
                        for name in [reference, *(p for p in self.profiles if p != reference)]}
        finally:
            if proc is not None:
                canary_process.halt(proc)
        ref_points = measured[reference]
        ref_ceiling = _point(ref_points, "ceiling")
        knee_rps = knee(ref_points, self.sweep.knee_factor)
        share = min(1.0, max(1e-3, knee_rps / ref_ceiling.rate))
        profiles = {name: ProfileCapacity(name, _point(pts, "single"), _point(pts, "ceiling"),
                                          knee_rps if name == reference else share * _point(pts, "ceiling").rate)
                    for name, pts in measured.items()}
        return Calibration(self.key, time.time(), time.monotonic() - t0, reference, share, self.sweep.knee_factor,
                           profiles, tuple(p for p in ref_points if p.phase == "rate"),
                           thresholds.derive(profiles))

    def _measure(self, name: str, full: bool):
        done = {"s": 0.0}
        lengths = {"single": self.sweep.single_s, "ceiling": self.sweep.ceiling_s}

        def step(phase: str) -> None:
            done["s"] += lengths.get(phase, self.sweep.rate_s)
            self.progress(lengths.get(phase, self.sweep.rate_s), f"{name}: {phase}")

        sweeper = Sweeper(self.state.api_url, self.state.model_name, self.sweep, self.seed, step,
                          replicas=self.state.replicas or 1)
        points = sweeper.run(get_profile(name), full=full)
        bad = [p for p in points if p.requests == 0]
        if bad:
            raise CalibrationError(f"profile {name}: no request finished in the {bad[0].phase} phase "
                                   f"({bad[0].errors} errors): is the stack serving?")
        return points


def _point(points, phase: str):
    return next((p for p in points if p.phase == phase), None)


def ensure(cfg, state, profiles: list[str], sweep: SweepConfig = SweepConfig(), *, force: bool = False,
           progress=None, note: Callable[[str], None] = lambda text: None) -> tuple[Calibration, bool]:
    """The cached calibration for this machine, serve config and catalogue, or a new one (saved).

    Returns (calibration, measured now)."""
    key = cache.key(Path(state.deployed_config or cfg.serve_config), cfg.incidents, sweep, profiles)
    if not force:
        cal, why = cache.load(cfg.home, key)
        if cal is not None:
            return cal, False
        note(why)
    cal = Calibrator(state, key, profiles, sweep, progress).run()
    cache.save(cfg.home, cal)
    return cal, True
