"""A drill's latency SLOs: the stack's calibration (capacity, thresholds), and the thresholds its own baseline sets.

    slos = DrillSlos(cfg, steps)
    plan = slos.calibrate(state, plan)                 # knee/ceiling rates resolved (a cached calibration
                                                       # checked against the stack now); thresholds unset
    closers.push(lambda: slos.restore("the drill ended first"))  # the calibration's back if need be
    slos.calibrate_baseline(state, plan)               # a setup deploy changed the config: its own SLOs
    slos.wait_quiet()                                  # the sweep's load out of the alerts' windows
    slos.unset_until_baseline(state, plan)             # the baseline's window, from the traffic's start
    ... traffic; once slos.due(t): slos.from_baseline(prom, state, t0_wall) ...

Invariant: while a drill runs, the latency thresholds are unset (+Inf) from its calibration until the end of
its baseline window, then this drill's baseline's (or the calibration's, where the baseline cannot be read).
The drill's own measuring load before its traffic (the capacity check's whole batch, a setup's SLO phases)
never meets a latency threshold: on one CPU the check's load paged TimeToFirstTokenHigh and
InterTokenLatencyHigh against the calibration's thresholds, and the alerts were still firing when the traffic
began (2026-12-05, `taskset -c 0 sandbox verify`). A drill that ends in that gap puts the calibration's back,
so a stack kept up never stays without latency alerts.
"""
from __future__ import annotations

import time

from incidents.schema import IncidentError, knee_profiles, load_catalogue
from sandbox.calibration import baseline_slos, drift
from sandbox.calibration.calibrator import calibrate_stack, install_thresholds
from sandbox.calibration.sweep_point import SweepConfig
from services.stack.alerts import longest_window_s
from services.stack.progress import Steps
from services.stack.prometheus import PrometheusError
from services.stack.settings import SandboxConfig
from services.stack.state import StackState


class DrillSlos:
    def __init__(self, cfg: SandboxConfig, steps: Steps):
        self.cfg, self.steps = cfg, steps
        self.calibration = None  # sandbox.calibration.capacity.Calibration, when the plan's rates need one
        self.thresholds: dict[str, float] = {}  # what the calibration installed for this drill's base load
        self.state: StackState | None = None  # the stack whose Prometheus holds the thresholds
        self._quiet_until = 0.0  # monotonic time before which traffic would start in a calibration's wake
        self._window: tuple[float, float] | None = None  # traffic seconds whose readings set the thresholds
        self._unset = False  # the latency thresholds are unset (+Inf) until the baseline sets them
        self.drift = None  # sandbox.calibration.drift.Drift: a cached calibration checked against the stack now

    def calibrate(self, state: StackState, plan):
        """Rates in knee units need this stack's capacity: the cached calibration, or a new one (saved for
        the next drill), for every profile of the catalogue; its thresholds go into Prometheus. Returns the
        plan with its rates resolved."""
        self.state = state
        profiles = set(plan.unresolved_profiles())
        try:
            profiles |= set(knee_profiles(load_catalogue(self.cfg.incidents).values()))
        except IncidentError:
            pass  # the drill's own incident is valid; its profiles are enough
        cal, self.thresholds, measured = calibrate_stack(
            self.cfg, state, sorted(profiles), self.steps,
            load_share=lambda c: plan.resolved(c.knees(), c.ceilings()).base_share(c.ceilings()))
        self._hold_unset(cal)
        if measured:  # the sweep's load is in every rate window the alerts read, until it has aged out
            self._quiet_until = time.monotonic() + longest_window_s()
        else:  # a cached one: the machine may have sped up or slowed down since (sandbox/calibration/drift.py)
            # Its 20 s of load needs no wait: the latency thresholds stay unset until the baseline, whose
            # windows start after the traffic's warm-up.
            cal, self.drift = drift.recheck(state, cal, SweepConfig().scaled(self.cfg.calibration_scale),
                                            self.steps)
        self.calibration = cal
        return plan.resolved(cal.knees(), cal.ceilings())

    def calibrate_baseline(self, state: StackState, plan) -> None:
        """The SLOs of the settings this incident's baseline runs (its setup deploy changed them), measured on
        that config at the machine calibration's loads (one at a time, busy; cached like any calibration): a
        healthy baseline is judged by its own latency, and the plan's rates stay the machine's. On one CPU, speculative
        decoding (tpot-regression's baseline) costs more than it saves: its healthy median TPOT read 1.45x the
        SLO measured on the default config, where on two CPUs the two are alike. Only a latency page's drill
        does this: the SLOs are what its page is judged against, while an error page's baseline (oom-at-peak's
        memory budget) has stayed quiet under the machine's SLOs in every run, and the measurement and the wait
        for its load to leave the alerts' windows cost it 80 s (the suite's verify subset 321 -> 397 s)."""
        self.state = state
        _, self.thresholds, measured = calibrate_stack(
            self.cfg, state, sorted(self.calibration.profiles), self.steps,
            load_share=lambda c: plan.base_share(c.ceilings()), loads=self.calibration,
            measure_at=plan.base_share(self.calibration.ceilings()))
        self._hold_unset(self.calibration)
        if measured:
            self._quiet_until = time.monotonic() + longest_window_s()

    def wait_quiet(self) -> None:
        """A baseline read through windows that still hold the sweep's ceiling is not a healthy baseline (one
        replica's 1m TTFT p99 read 2.2 s against 0.7 s a minute later, right after a calibration)."""
        if (wait := self._quiet_until - time.monotonic()) <= 0:
            return
        with self.steps.step(f"letting the calibration's load leave the alerts' windows ({wait:.0f}s)"):
            while (wait := self._quiet_until - time.monotonic()) > 0:
                time.sleep(min(wait, 0.5))

    def _hold_unset(self, cal) -> None:
        """The latency thresholds unset from now until the baseline sets them (calibrate_stack has just put the
        calibration's in): what the drill measures before its traffic must not page against them."""
        install_thresholds(self.state, cal, baseline_slos.unset(self.thresholds),
                           "latency thresholds unset until this drill's baseline sets them "
                           "(sandbox/calibration/baseline_slos.py)")
        self._unset = True

    def unset_until_baseline(self, state: StackState, plan) -> None:
        """A calibrated drill's latency thresholds come from its own healthy baseline, read before anything
        changes; until then they stay unset (baseline_slos.unset), so the calibration's cannot page a slower
        day's baseline. Opens the baseline's window at the traffic's start."""
        if self.calibration is None:
            return
        self.state = state
        self._window = baseline_slos.window(plan.quiet_until_s())
        if not self._unset:  # a restore came between: unset again
            self._hold_unset(self.calibration)

    def due(self, t: float) -> bool:
        """The baseline window has ended at traffic second `t` and its thresholds are still to be set."""
        return self._window is not None and t >= self._window[1]

    def from_baseline(self, prom, t0_wall: float) -> bool:
        """Sets the thresholds from the baseline window's readings; False (the calibration's put back) when
        they cannot be read: a drill, not a failure."""
        seconds, self._window = self._window, None
        try:
            self.thresholds = baseline_slos.install_from_baseline(prom, self.state, self.calibration,
                                                                  self.thresholds, t0_wall, seconds)
        except (PrometheusError, RuntimeError) as e:
            self.restore(f"the baseline could not be read ({e})")
            return False
        self._unset = False
        return True

    def restore(self, why: str) -> list[str]:
        """The calibration's thresholds back in place of unset ones."""
        if not self._unset:
            return []
        try:
            install_thresholds(self.state, self.calibration, self.thresholds, f"the calibration's thresholds: {why}")
        except (PrometheusError, RuntimeError, OSError) as e:
            return [f"the latency thresholds stay unset: {e}"]
        self._unset = False
        self.steps.note(f"the thresholds are the calibration's: {why}")
        return []

    def capacity_check(self) -> dict | None:
        """What a cached calibration's check measured against the stack now; None where none was made."""
        return None if self.drift is None else self.drift.to_dict()

    def summary(self) -> dict | None:
        """What run.json says of the calibration this drill ran on."""
        if self.calibration is None:
            return None
        return {"measured_at": self.calibration.measured_at, "knees_rps": self.calibration.knees(),
                "ceilings_rps": self.calibration.ceilings(), "thresholds": self.thresholds,
                "capacity_check": self.capacity_check()}
