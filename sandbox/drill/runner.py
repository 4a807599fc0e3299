"""One drill, start to finish: stack, traffic, canaries, the timeline, the page, the record, the clean-up.

Invariants, whatever happens (an error, Ctrl-C, SIGTERM):
  * every fault injected is reverted before the drill returns;
  * every process the drill started (traffic, canaries, and the stack if it started it) is stopped;
  * the run directory holds complete files: run.json says how the drill ended.
Faults are built and validated before anything starts, so a bad incident file changes nothing.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from faults.base import FaultContext, revert_all
from sandbox.drill.fault_plan import build_faults, resolved_answer, setup_fault
from sandbox.drill.interrupts import DrillInterrupted, deferred_signals, raise_interrupted
from sandbox.drill.plan import DrillPlan, make_plan
from sandbox.drill.record import RunRecord, new_run_id, read_live_marker, write_atomic
from sandbox.drill.traffic_runner import TrafficRunner
from sandbox.traffic.exporter import TrafficExporter
from services.stack.alerts import active_alerts, firing
from services.stack.container_node import unrunnable
from services.stack.progress import Steps
from services.stack.prometheus import PrometheusClient, PrometheusError
from services.stack.settings import SandboxConfig
from services.stack.stack import Stack
from services.stack.state import NoStackError, StackState, stop_pid


@dataclass
class DrillResult:
    run_id: str
    run_dir: str
    status: str  # "finished" | "ended" (Ctrl-C after the page, open-ended) | "interrupted" | "failed"
    page: dict | None
    plan: DrillPlan
    stats: dict = field(default_factory=dict)
    error: str | None = None
    checks: dict | None = None  # filled by `verify` (before_teardown)


class Drill:
    def __init__(self, cfg: SandboxConfig, incident, variant: str, seed: int, *, duration_s: float | None = None,
                 steps: Steps | None = None, on_page=None, before_teardown=None, keep_up: bool = False,
                 poll_s: float = 1.0, open_ended: bool = False, mode: str = "drill"):
        self.cfg, self.incident, self.seed = cfg, incident, seed
        self.plan = make_plan(incident, variant, seed, duration_s)
        self.steps = steps or Steps()
        self.on_page = on_page  # called once with the page (dict) when the incident's alert fires
        self.before_teardown = before_teardown  # called with (drill, prom) while Prometheus still runs
        self.keep_up = keep_up
        self.poll_s = poll_s
        self._last_watch = 0.0
        # An interactive drill does not stop at the timeline's end: the incident and its traffic go on
        # while the candidate investigates, until they end it (Ctrl-C, or a diagnosis).
        self.open_ended = open_ended
        if mode not in ("drill", "interview"):
            raise ValueError(f"mode must be drill or interview, got {mode!r}")
        self.mode = mode
        self.faults = build_faults(self.plan)
        self.node = incident.variants[variant].node  # "container": one replica runs in a container node
        if self.node is not None:
            problem = unrunnable(incident.variants[variant])
            if problem:
                raise ValueError(f"variant {variant} runs a replica in a container node: {problem}")
        self.setup = setup_fault(incident)  # the incident's healthy baseline settings, deployed before traffic
        self.injected: list = []
        self.fault_log: list[dict] = []
        self.page: dict | None = None
        self.early_alerts: list[dict] = []
        self.record: RunRecord | None = None
        self.state: StackState | None = None
        self.started_stack = False
        self.traffic: TrafficRunner | None = None
        self.exporter = None
        self.canary: subprocess.Popen | None = None
        self.prom: PrometheusClient | None = None
        self.t0_wall: float | None = None
        self.ctx = None  # faults.base.FaultContext, one for the whole drill

    # -- the whole drill ---------------------------------------------------------
    def run(self) -> DrillResult:
        status, error, checks = "failed", None, None
        previous = signal.signal(signal.SIGTERM, raise_interrupted)
        try:
            self._start()
            self._follow_timeline()
            status = "finished"
            if self.before_teardown:
                checks = self.before_teardown(self, self.prom)
        except (KeyboardInterrupt, DrillInterrupted):
            if self.open_ended and self.page is not None:
                status = "ended"  # the candidate was paged and ended the drill: its normal end
            else:
                status, error = "interrupted", "interrupted"
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            with deferred_signals():
                self._teardown(status, error)
            signal.signal(signal.SIGTERM, previous)
        return DrillResult(self.record.dir.name, str(self.record.dir), status, self.page, self.plan,
                           self.traffic.stats.summary() if self.traffic else {}, error, checks)

    # -- start ---------------------------------------------------------------------
    def _start(self) -> None:
        self.state = self._stack(Stack)
        run_id = new_run_id(self.incident.id)
        self.record = RunRecord.create(self.cfg.runs, self.cfg.keys_dir, run_id, {
            "incident": self.incident.id, "seed": self.seed, "status": "running", "started": time.time(),
            "api_url": self.state.api_url, "prometheus_url": self.state.prometheus_url, "page": None})
        self._seal()
        # Which drill is running, for `sandbox diagnose` and `sandbox ask` from another terminal.
        write_atomic(self.cfg.home / DRILL_FILE, json.dumps({"pid": os.getpid(), "run_dir": str(self.record.dir),
                                                            "mode": self.mode, "started": time.time()}))
        self.prom = PrometheusClient(self.state.prometheus_url)
        self._fault_context()
        if self.setup is not None:
            with self.steps.step("deploying this incident's baseline settings"):
                self._apply(*self.setup, "setup")
            self.state = StackState.load(self.cfg.state_file)
            self.record.event("deploy", None, version=self.state.version)
        with self.steps.step("starting canary probers"):
            self.canary = _start_canary(self.state, self.record.dir / "canary.log")
        self.exporter = TrafficExporter("drill", self.cfg.host, self.cfg.traffic_port, self.state.targets_dir,
                                        linger_s=2 * self.cfg.scrape_interval_s)
        self.traffic = TrafficRunner(self.state.api_url, self.state.model_name, self.plan, self.seed,
                                     self.exporter, open_ended=self.open_ended).start()
        self.t0_wall = time.time()
        self.record.update_public(traffic_started=self.t0_wall)
        self.record.event("traffic started", 0.0)

    def _stack(self, Stack) -> StackState:
        try:
            state = StackState.load(self.cfg.state_file)
            if state.prometheus_pid and PrometheusClient(state.prometheus_url).ready():
                if self.node == "container" and not state.container_nodes:
                    raise RuntimeError("this variant runs one replica in a container node and the running "
                                       "sandbox has none: `sandbox down` first, the drill starts its own")
                self.steps.note(f"reusing the running sandbox (run {state.run_id})")
                self._wait_quiet(state)
                return state
        except NoStackError:
            pass
        self.started_stack = True
        return Stack(self.cfg, self.steps).up(container_nodes=1 if self.node == "container" else 0)

    def _wait_quiet(self, state: StackState, timeout_s: float = 150.0) -> None:
        """A reused stack may still be paging about an earlier drill: the baseline starts after it stops."""
        prom = PrometheusClient(state.prometheus_url)
        try:
            with self.steps.step("waiting until no alert is firing"):
                deadline = time.monotonic() + timeout_s
                while active := active_alerts(prom):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"alerts still firing after {timeout_s:.0f}s on the reused stack: "
                                           f"{[a.name for a in active if a.state == 'firing']}")
                    time.sleep(2)
        finally:
            prom.close()

    # -- the timeline ----------------------------------------------------------------
    def _follow_timeline(self) -> None:
        pending = list(zip(self.plan.events, self.faults))
        next_note = 30.0
        said_so = False
        while True:
            t = self.traffic.elapsed()
            if t >= next_note:
                self._note_progress(t)
                next_note += 30.0
            while pending and pending[0][0].at_s <= t:
                event, faults = pending.pop(0)
                self._inject(event, faults)
            self._poll_alerts(self.traffic.elapsed())
            if self.traffic.error is not None:
                raise RuntimeError(f"the traffic generator failed: {self.traffic.error!r}")
            if t >= self.plan.duration_s:
                if not self.open_ended:
                    return
                if not said_so:
                    said_so = True
                    self.steps.note("the timeline has run its course; the incident and its traffic go on "
                                    "until you end the drill with Ctrl-C")
            time.sleep(self.poll_s)

    def _fault_context(self) -> None:
        rng = random.Random(f"faults/{self.plan.incident_id}/{self.plan.variant}/{self.seed}")
        self.ctx = FaultContext(self.cfg, self.state, rng, tick=self._watch_alerts)
        if any(fault.needs_ray for faults in self.faults for _, fault in faults):
            self.ctx.connect_ray()  # before traffic: a driver joining later would show in Ray's job list

    def _apply(self, spec: dict, fault, kind: str) -> None:
        self.ctx.state = StackState.load(self.cfg.state_file)  # versions change with every deploy
        at = self.traffic.elapsed() if self.traffic else None
        self.injected.append(fault)
        location = fault.inject(self.ctx)
        done = self.traffic.elapsed() if self.traffic else None  # a rolling deploy takes a while
        self.fault_log.append({"at_s": None if at is None else round(at, 1),
                               "done_s": None if done is None else round(done, 1), "event": kind, "spec": spec,
                               "location": location.to_dict()})

    def _inject(self, event, faults) -> None:
        if event.kind == "inject" and self.incident.page.alert is None:
            self._show_report(self.traffic.elapsed())
        for spec, fault in faults:
            self._apply(spec, fault, event.kind)
        self._seal()
        state = StackState.load(self.cfg.state_file)
        if self.state and state.version != self.state.version:  # deploys are public, as in any deploy log
            self.record.event("deploy", self.traffic.elapsed(), version=state.version)
            self.steps.note(f"deploy: version {state.version} rolled out")
        self.state = state

    def _watch_alerts(self) -> None:
        """While an injection waits on a rollout (a minute or more under load): the page, when it fires."""
        now = time.monotonic()
        if self.traffic is not None and now - self._last_watch >= self.poll_s:
            self._last_watch = now
            self._poll_alerts(self.traffic.elapsed())

    def _note_progress(self, t: float) -> None:
        s = self.traffic.stats.summary()
        errors = sum(n for status, n in s["statuses"].items() if status not in ("200", "499"))
        self.steps.note(f"[dim]{t:5.0f}s  sent {s['sent']}  ok {s['ok']}  errors {errors}  "
                        f"TTFT p50 {s['ttft_ms']['p50']} ms  version {self.state.version}[/dim]")

    def _show_report(self, t: float) -> None:
        """A control drill pages by a person's report, not an alert."""
        self.page = {"alert": None, "summary": self.incident.page.report, "description": "",
                     "active_at": None, "paged_at": time.time(), "at_s": round(t, 1)}
        self.record.update_public(page=self.page)
        self.record.event("page", t, report=True)
        if self.on_page:
            self.on_page(self.page)

    def _poll_alerts(self, t: float) -> None:
        try:
            now_firing = firing(self.prom)
        except PrometheusError:
            return
        for alert in now_firing:
            name = alert.name
            if t < self.plan.inject_at_s:
                self.early_alerts.append({"at_s": round(t, 1), "alert": name})
            if (self.page is None and self.incident.page.alert and name == self.incident.page.alert
                    and t >= self.plan.inject_at_s):
                self.page = {"alert": name, "summary": alert.annotations.get("summary", ""),
                             "description": alert.annotations.get("description", ""),
                             "active_at": alert.active_since, "paged_at": time.time(), "at_s": round(t, 1)}
                self.record.update_public(page=self.page)
                self.record.event("page", t, alert=name)
                self._seal()
                if self.on_page:
                    self.on_page(self.page)

    # -- the end -----------------------------------------------------------------
    def _teardown(self, status: str, error: str | None) -> None:
        errors = []
        (self.cfg.home / DRILL_FILE).unlink(missing_ok=True)
        if self.record is not None:  # the incident ends here: what follows is the clean-up
            self.record.update_public(stopped=time.time())
        if self.injected:
            with self.steps.step("reverting the injected changes"):
                self.ctx.state = StackState.load(self.cfg.state_file)
                errors += [f"revert: {e}" for e in revert_all(self.injected, self.ctx)]
        if self.ctx is not None:
            self.ctx.close()
        if self.traffic is not None:
            with self.steps.step("stopping traffic"):
                self.traffic.stop()
        if self.canary is not None:
            stop_pid(self.canary.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.canary.wait(5)
        if self.exporter is not None:
            self.exporter.close()
        if self.record is not None:
            self._keep_prometheus_data(errors)
            self._seal(status=status)
            self.record.event("drill ended", self.traffic.elapsed() if self.traffic else None, status=status)
            self.record.update_public(status=status, ended=time.time(), error=error if status == "failed" else None)
        if self.prom is not None:
            self.prom.close()
        if self.started_stack and not self.keep_up:
            try:
                Stack(self.cfg, self.steps).down()
            except RuntimeError as e:
                errors.append(str(e))
        if errors:
            raise RuntimeError("drill clean-up incomplete: " + "; ".join(errors))

    def _keep_prometheus_data(self, errors: list) -> None:
        try:
            with self.steps.step("keeping the run's Prometheus data"):
                name = self.prom.snapshot()
                data_dir = Path(self.state.run_dir) / "prometheus-data" / "snapshots" / name
                self.record.keep_prometheus_snapshot(data_dir)
        except (PrometheusError, OSError) as e:
            errors.append(f"prometheus snapshot: {e}")

    def sealed_answer(self) -> dict:
        return resolved_answer(self.incident.variants[self.plan.variant].answer, self.fault_log, self.state)

    def _seal(self, status: str = "running") -> None:
        variant = self.incident.variants[self.plan.variant]
        self.record.seal({"variant": self.plan.variant, "plan": self.plan.to_dict(), "status": status,
                          "answer": resolved_answer(variant.answer, self.fault_log, self.state),
                          "faults": self.fault_log, "early_alerts": self.early_alerts, "page": self.page,
                          "traffic_started": self.t0_wall, "stack_run_dir": self.state.run_dir if self.state else None})


DRILL_FILE = "drill.json"  # in the sandbox home while a drill runs: its pid, run directory and mode


def running_drill(cfg: SandboxConfig) -> dict | None:
    """The drill now running on this machine ({pid, run_dir, mode, started}), or None."""
    return read_live_marker(cfg.home / DRILL_FILE)


def _start_canary(state: StackState, log_file: Path) -> subprocess.Popen:
    log = open(log_file, "ab")  # noqa: SIM115 - the child keeps it; closed when we exit
    return subprocess.Popen([sys.executable, "-m", "sandbox.canary", "--api", state.api_url, "--model",
                             state.model_name, "--targets-dir", str(state.targets_dir)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)



