"""Calibrating a running stack: sweep its profiles beside the canary, derive knees and thresholds.

A drill's traffic shares the stack with the canary prober (about 3 requests/s of its
own), so the sweep runs beside a real canary too: the capacity measured is what the
incident's traffic gets. The canary's own figures are not counted (its requests are not
the sweep's).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from incidents.profiles import get_profile
from sandbox.calibration import cache, thresholds
from sandbox.calibration.capacity import Calibration, CalibrationError, ProfileCapacity
from sandbox.calibration.sweep import Sweeper, knee
from sandbox.calibration.sweep_point import SweepConfig, percentile
from sandbox.canary import process as canary_process
from services.stack import threshold_rules
from services.stack.deploy_config import deployed_engine_setting
from services.stack.prometheus import PrometheusClient

DEFAULT_SWEEP = SweepConfig()
REFERENCE = "default"  # the full sweep runs on this profile when the catalogue uses it
# Poisson arrivals at half of what the stack completes in a closed loop queue little on a stack that
# batches (quiet sweeps on a 2-core AVX2 CPU: 0.54-0.85 of the ceiling). On a 2-core AVX-512 one the knee,
# a multiple of a short idle prefill, came at 0.08-0.35 in quiet sweeps too: a knee-relative rate then
# takes half the ceiling, and the warning says so without blaming the machine.
KNEE_SHARE_MIN = 0.5
# At the lightest measured rate the median TTFT stays near the idle one on a quiet machine (1.1-2.1x in
# quiet sweeps on a 2-core AVX2 CPU; 10x in one run beside a test suite). A faster CPU's idle TTFT is a
# short prefill, which batching with others' decodes multiplies at any load: 3.7-5.4x at 0.35 of the
# ceiling on a quiet 2-core AVX-512 one, while its median still rose with every heavier rate (0.10, 0.22,
# 1.19 s at 0.35, 0.55, 0.85). So the lightest rate looks disturbed only when it is past that factor and
# not lighter than the busy point measured after it: a load that fell as the offered rate rose.
LIGHT_LOAD_X = 3.0


def disturbed(points) -> str | None:
    """Why the sweep's lightest rate does not look light (something else used the machine), or None."""
    single, busy = _point(points, "single"), _point(points, "busy")
    rates = [p for p in points if p.phase == "rate" and p.ttft_p50_s is not None]
    if single is None or not rates or not single.ttft_p50_s:
        return None
    lightest = min(rates, key=lambda p: p.offered)
    x = lightest.ttft_p50_s / single.ttft_p50_s
    if x <= LIGHT_LOAD_X:
        return None
    if busy is not None and busy.ttft_p50_s is not None and busy.offered > lightest.offered \
            and lightest.ttft_p50_s < busy.ttft_p50_s:
        return None
    return (f"at {lightest.offered:.2f} req/s the median TTFT was {x:.1f}x the idle median "
            f"(a quiet stack stays within {LIGHT_LOAD_X:g}x, or under the median of a heavier load)")


def reference_for(profiles: list[str]) -> str:
    return REFERENCE if REFERENCE in profiles else min(profiles)


class Calibrator:
    """`loads`: another config's calibration of this machine, whose loads a drill keeps (its setup deployed
    the config measured now): only the SLOs' phases run, one at a time and busy at that calibration's
    ceilings (`run_slos`), and with `load_share` the drill's own load too, through which the TPOT line then
    runs: speculative decoding's median TPOT is no straight line in the load (0.057 s idle, 0.164 s at 0.55
    of the ceiling, while the drill's baseline at 0.31 read 0.06-0.07 s: the line through idle and busy put
    0.11 s there, and the draft's slowdown paged by 1.24 against 1.8x that)."""

    def __init__(self, state, key: dict, profiles: list[str], sweep: SweepConfig = DEFAULT_SWEEP,
                 progress: Callable[[float, str], None] | None = None, canary: bool = True, seed: int = 0,
                 loads: Calibration | None = None, load_share: float | None = None):
        if not profiles:
            raise CalibrationError("nothing to calibrate: no traffic profile given")
        for name in profiles:
            try:
                get_profile(name)
            except ValueError as e:
                raise CalibrationError(str(e)) from None
        self.state, self.key, self.profiles, self.sweep = state, key, sorted(profiles), sweep
        self.progress = progress or (lambda seconds, label: None)
        self.canary, self.seed, self.loads, self.load_share = canary, seed, loads, load_share
        self.load_tpot: list[float] = []
        if loads is not None and not set(self.profiles) <= set(loads.profiles):
            raise CalibrationError(f"the loads' calibration lacks {sorted(set(self.profiles) - set(loads.profiles))}")
        self.busy_ttft: list[float] = []  # pooled over every profile's busy phase
        self.busy_itl: list[float] = []
        self.busy_tpot: list[float] = []

    @contextmanager
    def beside_canary(self):
        proc = None
        if self.canary:
            # Its load is what the sweep needs, not its metrics: it announces itself where Prometheus does not
            # look. Announced among the scraped targets, it left a target behind that a later rollout's wait
            # for every target found down for 180 s (oom-at-peak's setup deploy in the suite's verify).
            proc = canary_process.spawn(self.state.api_url, self.state.model_name, self._unscraped_dir(),
                                        Path(self.state.run_dir) / "logs" / "calibration-canary.log",
                                        first_port=9470, seed=self.seed, warm_up=False)
        try:
            # The sweep measures beside the steady canary, as drills run, so this one skips the references
            # a drill's canary asks for one at a time first: that warm-up overlapped the first pass only,
            # whose lightest rate then read 3.1-5.2x the idle median against 1.8-2.9x measured again.
            if proc is not None and not canary_process.probing(proc, self._unscraped_dir()):
                raise CalibrationError("the calibration's canary did not start probing within 60 s: see "
                                       f"{Path(self.state.run_dir) / 'logs' / 'calibration-canary.log'}")
            yield
        finally:
            if proc is not None:
                canary_process.halt(proc, self._unscraped_dir())

    def run(self) -> Calibration:
        if self.loads is not None:
            return self.run_slos()
        t0 = time.monotonic()
        with self.beside_canary():
            reference = reference_for(self.profiles)
            warnings = []
            ref_points = self._measure(reference, full=True)
            if (why := disturbed(ref_points)) is not None:  # once more: a busy minute is not the stack's capacity
                warnings.append(why + "; measured again")
                self.progress(0.0, f"{reference}: disturbed, measuring again")
                self.busy_ttft.clear()  # the disturbed phases are not the stack's
                self.busy_itl.clear()
                self.busy_tpot.clear()
                ref_points = self._measure(reference, full=True)
                if (why := disturbed(ref_points)) is not None:
                    warnings.append(why + " again: the machine is busy, and drills on it will be too")
            measured = {reference: ref_points, **{name: self._measure(name, full=False)
                                                  for name in self.profiles if name != reference}}
        ref_ceiling = _point(ref_points, "ceiling")
        try:
            share = knee(ref_points, self.sweep.knee_factor) / ref_ceiling.rate
        except ValueError as e:
            raise CalibrationError(f"profile {reference}: {e}") from None
        if share < KNEE_SHARE_MIN:
            warnings.append(f"the knee came out at {share:.2f} of the ceiling (the TTFT p99 passed "
                            f"{self.sweep.knee_factor:g}x the idle median there): rates written against the knee "
                            f"take {KNEE_SHARE_MIN} of the ceiling")
        share = min(1.0, max(KNEE_SHARE_MIN, share))
        profiles = {name: ProfileCapacity(name, _point(pts, "single"), _point(pts, "ceiling"),
                                          share * _point(pts, "ceiling").rate, _point(pts, "busy"))
                    for name, pts in measured.items()}
        line = self.tpot_line(profiles[reference], warnings)
        return Calibration(self.key, time.time(), time.monotonic() - t0, reference, share, self.sweep.knee_factor,
                           profiles, tuple(p for p in ref_points if p.phase in ("rate", "busy")),
                           thresholds.derive(*self.slo_basis()), tuple(warnings), line, self.samples())

    def run_slos(self) -> Calibration:
        """The SLOs of the deployed config at the loads' ceilings: the reference one at a time, every profile
        busy (the busy share of the loads' ceiling); ceilings, knees and curve are the loads'."""
        t0, loads, warnings = time.monotonic(), self.loads, []
        reference = loads.reference if loads.reference in self.profiles else reference_for(self.profiles)
        with self.beside_canary():
            measured = {name: self._measure(name, full=name == reference, ceiling=loads.profiles[name].ceiling.rate,
                                            load_share=self.load_share if name == reference else None)
                        for name in self.profiles}
        profiles = {name: ProfileCapacity(name, _point(pts, "single"), loads.profiles[name].ceiling,
                                          loads.profiles[name].knee_rps, _point(pts, "busy"))
                    for name, pts in measured.items()}
        line = self.tpot_line(profiles[reference], warnings, _point(measured[reference], "load"))
        return Calibration(self.key, time.time(), time.monotonic() - t0, reference, loads.knee_share,
                           loads.knee_factor, profiles, loads.curve, thresholds.derive(*self.slo_basis()),
                           tuple(warnings), line, self.samples())

    def _unscraped_dir(self) -> Path:
        path = Path(self.state.run_dir) / "calibration-targets"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def samples(self) -> tuple[float, ...]:
        return tuple(sorted(round(v, 4) for v in self.busy_ttft))

    def slo_basis(self) -> tuple[float, float]:
        """The TTFT and ITL p99 of every profile's busy requests pooled."""
        ttft, itl = percentile(self.busy_ttft, 99), percentile(self.busy_itl, 99)
        if ttft is None or itl is None:
            raise CalibrationError("no busy-phase request streamed: is the stack serving?")
        return ttft, itl

    def tpot_line(self, ref: ProfileCapacity, warnings: list[str], load=None) -> thresholds.TpotLine | None:
        """The healthy median TPOT by load: the reference's one-at-a-time answers at no load, and every
        profile's busy ones pooled at the busy share of the reference's ceiling. None (the TPOT SLO keeps its
        default, and a warning says so) when a phase saw no whole answer: a short test sweep's may not.
        One request at a time is the open loop's no-load end whatever its throughput: one request in
        flight, batched with nothing. Placed at its throughput's share instead (0.28 of the ceiling on a
        fast CPU, where an answer takes a quarter second), it put a drill's healthy median at 0.29 near the
        idle 6.3 ms, where Poisson arrivals at that share batch: four in five of the baseline's answers took
        over 10 ms a token, and the suite's oom-at-peak verify paged on the TPOT SLO in its baseline)."""
        busy = percentile(self.busy_tpot, 50)
        at = ref.busy
        if load is not None:  # a drill's own load (run_slos): the line runs through it instead
            busy, at = percentile(self.load_tpot, 50), load
        try:
            if ref.single is None or ref.single.tpot_p50_s is None or busy is None or at is None:
                raise ValueError("no whole answer in the one-at-a-time or busy phase")
            return thresholds.TpotLine(0.0, ref.single.tpot_p50_s,
                                       at.offered / ref.ceiling.rate, busy)
        except ValueError as e:
            warnings.append(f"no TPOT line ({e}): the TPOT SLO keeps its default")
            return None

    def _measure(self, name: str, full: bool, ceiling: float | None = None, load_share: float | None = None):
        """ceiling: the SLO phases alone, at this known ceiling (req/s)."""
        done = {"s": 0.0}
        lengths = {"single": self.sweep.single_s, "busy": self.sweep.busy_s, "load": self.sweep.busy_s,
                   "ceiling": self.sweep.ceiling_s}

        def step(phase: str) -> None:
            done["s"] += lengths.get(phase, self.sweep.rate_s)
            self.progress(lengths.get(phase, self.sweep.rate_s), f"{name}: {phase}")

        sweeper = Sweeper(self.state.api_url, self.state.model_name, self.sweep, self.seed, step,
                          replicas=self.state.replicas or 1, batch=engine_batch(self.state))
        points = (sweeper.run(get_profile(name), full=full) if ceiling is None
                  else sweeper.run_slos(get_profile(name), ceiling, single=full, load_share=load_share))
        self.busy_ttft += sweeper.busy_ttft
        self.busy_itl += sweeper.busy_itl
        self.busy_tpot += sweeper.busy_tpot
        self.load_tpot += sweeper.load_tpot
        # A short Poisson window may draw no arrival at all: the knee reads the rates that have data.
        bad = [p for p in points if p.phase != "rate" and (p.rate <= 0 or p.requests == 0)]
        if bad:
            raise CalibrationError(f"profile {name}: nothing streamed in the {bad[0].phase} phase "
                                   f"({bad[0].errors} errors): is the stack serving?")
        return points


def engine_batch(state) -> int:
    """The deployed engines' max_num_seqs (the serve config's, 32 if it names none): the ceiling's clients."""
    return int(deployed_engine_setting(state.deployed_config, "max_num_seqs", 32))


def _point(points, phase: str):
    return next((p for p in points if p.phase == phase), None)


def ensure(cfg, state, profiles: list[str], sweep: SweepConfig = DEFAULT_SWEEP, *, force: bool = False,
           progress=None, note: Callable[[str], None] = lambda text: None,
           loads: Calibration | None = None, load_share: float | None = None) -> tuple[Calibration, bool]:
    """The cached calibration for this machine, serve config and catalogue (and `loads`, whose ceilings the SLO
    phases take: see Calibrator), or a new one (saved).

    Returns (calibration, measured now)."""
    key = cache.key(Path(state.deployed_config or cfg.serve_config), cfg.incidents, sweep, profiles)
    if loads is not None:
        key["loads"] = cache.digest(json.dumps(loads.key, sort_keys=True))
        key["load_share"] = None if load_share is None else round(load_share, 4)
    if not force:
        cal, why = cache.load(cfg.home, key)
        if cal is not None:
            return cal, False
        note(why)
    cal = Calibrator(state, key, profiles, sweep, progress, loads=loads, load_share=load_share).run()
    cache.save(cfg.home, cal)
    return cal, True


def calibrate_stack(cfg, state, profiles: list[str], steps, *, force: bool = False,
                    load_share: Callable[[Calibration], float | None] = lambda cal: None,
                    loads: Calibration | None = None, measure_at: float | None = None,
                    ) -> tuple[Calibration, dict[str, float], bool]:
    """A drill's (and `sandbox calibrate`'s) calibration of the running stack, with a progress bar, and
    its thresholds installed in the stack's Prometheus: those for the base load `load_share(cal)` (a share of
    the ceiling; None: the busy load). `loads`: the SLOs alone, at that calibration's ceilings (a drill whose
    setup deployed other settings), and with `measure_at` (its base share) the TPOT line through that load.
    Returns (calibration, the thresholds installed, measured now)."""
    sweep = SweepConfig().scaled(cfg.calibration_scale)
    if loads is None:
        label, total = f"calibrating the stack's capacity ({len(profiles)} traffic profile(s))", sweep.seconds(len(profiles))
    else:
        label = "calibrating the latency of this baseline's settings"
        total = sweep.slo_seconds(len(profiles)) + (sweep.busy_s if measure_at else 0.0)
    with steps.bar(label, total) as advance:
        cal, measured = ensure(cfg, state, profiles, sweep, force=force, progress=advance, note=steps.note,
                               loads=loads, load_share=measure_at)
    for warning in cal.warnings if measured else ():
        steps.note(f"calibration: {warning}")
    installed = cal.thresholds_for(load_share(cal))
    install_thresholds(state, cal, installed)
    return cal, installed, measured


def install_thresholds(state, cal: Calibration, values: dict[str, float], note: str | None = None) -> Path | None:
    """`values` (cal.thresholds_for a load) in the stack's Prometheus; None for a Prometheus this process cannot
    signal (the compose stack's, in its container: it keeps the default thresholds)."""
    if not state.prometheus_pid:
        return None
    note = note or (
        f"Generated from the calibration of {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(cal.measured_at))}\n"
        "(sandbox/calibration/thresholds.py says how each value is derived); edits are lost on the next drill.")
    client = PrometheusClient(state.prometheus_url)
    try:
        return threshold_rules.install(Path(state.run_dir) / "rules", state.prometheus_pid, client,
                                       values, note)
    finally:
        client.close()
