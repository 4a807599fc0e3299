# Over 300 lines (about 370): start and end are one ledger, each step that acquires something pushes its
# closer right there; split across files, the pairs would no longer read together. The SLO steps (calibration,
# the baseline's thresholds) are their own class in slos.py, which hands its closer back to push here.
"""One drill, start to finish: stack, traffic, canaries, the timeline, the page, the record, the clean-up.

Invariants, whatever happens (an error, Ctrl-C, SIGTERM, SIGHUP, a closed output; only a signal during
the clean-up that was already asked to wait stops it, and then run.json names what was left):
  * every fault injected is reverted before the drill returns;
  * every process the drill started (traffic, canaries, and the stack if it started it) is stopped;
  * the run directory holds complete files: run.json says how the drill ended.
Faults are built and validated before anything starts, so a bad incident file changes nothing.
Each resource pushes its closer on `self.closers` as it is acquired; the teardown runs them newest
first, every one whatever the others did (sandbox/drill/closers.py).
"""
from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

from faults.base import FaultContext, revert_all
from faults.journal import SUFFIX as JOURNAL_SUFFIX
from faults.journal import FaultJournal
from sandbox.canary import process as canary_process
from sandbox.drill.closers import Closers
from sandbox.drill.fault_plan import build_faults, resolved_answer, setup_fault
from sandbox.drill.interrupts import DrillInterrupted, TeardownForced, deferred_signals, raise_interrupted
from sandbox.drill.leftovers import stop_killed_drill
from sandbox.drill.pager import Pager
from sandbox.drill.plan import make_plan
from sandbox.drill.record import DRILL_FILE, RunRecord, new_run_id, write_atomic
from sandbox.drill.settings import DrillResult, DrillSettings
from sandbox.drill.slos import DrillSlos
from sandbox.drill.traffic_runner import TrafficRunner
from sandbox.drill.verify import family
from sandbox.mitigation.load import excess_load
from sandbox.mitigation.oracle import RecoveryOracle
from sandbox.mitigation.watch import MitigationWatch
from sandbox.traffic.exporter import TrafficExporter
from services.stack.alerts import active_alerts
from services.stack.container_node import unrunnable
from services.stack.deploy_config import DeployConfig
from services.stack.deployer import deploy_config
from services.stack.progress import Steps
from services.stack.prometheus import PrometheusClient
from services.stack.settings import SandboxConfig
from services.stack.stack import Stack
from services.stack.state import NoStackError, StackState


class Drill:
    def __init__(self, cfg: SandboxConfig, incident, variant: str, seed: int,
                 settings: DrillSettings = DrillSettings(), *, steps: Steps | None = None, on_page=None,
                 before_teardown=None):
        self.cfg, self.incident, self.seed, self.settings = cfg, incident, seed, settings
        self.plan = make_plan(incident, variant, seed, settings.duration_s)
        self.steps = steps or Steps()
        self.on_page = on_page  # called once with the page (dict) when the incident's alert fires
        self.before_teardown = before_teardown  # called with (drill, prom) while Prometheus still runs
        self._last_watch = 0.0
        self.faults = build_faults(self.plan)
        self.node = incident.variants[variant].node  # "container": one replica runs in a container node
        if self.node is not None:
            problem = unrunnable(incident.variants[variant])
            if problem:
                raise ValueError(f"variant {variant} runs a replica in a container node: {problem}")
        self.setup = setup_fault(incident)  # the incident's healthy baseline settings, deployed before traffic
        self.closers = Closers()
        # Faults injected so far, by phase: the baseline settings before traffic, then the timeline's.
        self.injected: dict[str, list] = {"setup": [], "timeline": []}
        self.fault_log: list[dict] = []
        self.pager: Pager | None = None
        self.mitigation: MitigationWatch | None = None  # the candidate's actions (`sandbox mitigate`) and verdicts
        self._ending: tuple[str, str | None] = ("failed", None)  # how the drill ended: (status, error)
        self.record: RunRecord | None = None
        self.state: StackState | None = None
        self.traffic: TrafficRunner | None = None
        self.prom: PrometheusClient | None = None
        self.t0_wall: float | None = None
        self.ctx = None  # faults.base.FaultContext, one for the whole drill
        self.slos = DrillSlos(cfg, self.steps)  # the calibration, and the thresholds the baseline sets
        # The timeline's end: the plan's, moved on by as long as the injection took to land, so a fault that
        # waits on a rollout (a deploy under load on one CPU took past the plan's end) gets its whole window.
        self.end_s = self.plan.duration_s
        self._stops_stack = False  # whether the drill stops the stack it ends on (it started it, no --keep-up)

    # -- the whole drill ---------------------------------------------------------
    def run(self) -> DrillResult:
        status, error, checks = "failed", None, None
        previous = {s: signal.signal(s, raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            self._start()
            self._follow_timeline()
            status = "finished"
            if self.before_teardown:
                checks = self.before_teardown(self, self.prom)
        except (KeyboardInterrupt, DrillInterrupted):
            if self.settings.open_ended and self.page is not None:
                status = "ended"  # the candidate was paged and ended the drill: its normal end
            else:
                status, error = "interrupted", "interrupted"
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            with deferred_signals(self.steps.note):
                try:
                    self._teardown(status, error)
                except TeardownForced as forced:
                    status, error = "forced", f"clean-up stopped by a signal; left: {', '.join(forced.left)}"
                    self._forced(forced.left)
            for s, handler in previous.items():
                signal.signal(s, handler)
        # a drill ended before its run began (a signal while the stack started) recorded nothing: no run to name
        run_id, run_dir = (self.record.dir.name, str(self.record.dir)) if self.record else (None, None)
        return DrillResult(run_id, run_dir, status, self.page, self.plan,
                           self.traffic.stats.summary() if self.traffic else {}, error, checks,
                           self.mitigation_summary, self.slos.capacity_check())

    # -- start ---------------------------------------------------------------------
    def _start(self) -> None:
        self.state = self._stack()
        self.prom = PrometheusClient(self.state.prometheus_url)
        self.closers.push("prometheus client", self.prom.close)
        if self.plan.unresolved_profiles():
            # the latency thresholds are unset from here to the baseline: the closer puts the calibration's back
            self.closers.push("the latency thresholds", lambda: self.slos.restore("the drill ended first"))
            self.plan = self.slos.calibrate(self.state, self.plan)
        self.pager = Pager(self.prom, self.incident.page.alert, self.incident.page.report, self.plan.inject_at_s,
                           self._paged)
        # run.json names the incident from the page on (the page names its symptom): not before.
        self.record = RunRecord.create(self.cfg.runs, self.cfg.keys_dir, new_run_id(), {
            "seed": self.seed, "status": "running", "started": time.time(),
            "api_url": self.state.api_url, "prometheus_url": self.state.prometheus_url, "page": None})
        self.closers.push("the record", self._finish_record)
        self.mitigation = MitigationWatch(self.record, self._oracle)
        self._seal()
        # Which drill is running, for `sandbox diagnose` and `sandbox ask` from another terminal.
        marker = self.cfg.home / DRILL_FILE
        self._marker_started = time.time()
        self._write_marker(marker)
        self.closers.push("the drill marker", lambda: marker.unlink(missing_ok=True))
        self._fault_context()
        if not self._stops_stack:  # a stack that outlives the drill is handed back as the drill found it
            self.closers.push("the changes made during the drill", self._as_found(self.state))
        if self.setup is not None:
            self._revert_phase_on_close("setup")
            with self.steps.step("deploying this incident's baseline settings"):
                self._apply(*self.setup, "setup")
            self.state = StackState.load(self.cfg.state_file)
            self.record.event("deploy", None, version=self.state.version)
            self._write_marker(marker)  # the incident's baseline is what a setting change returns to
            if self.slos.calibration is not None and family(self.incident) == "latency":
                self.slos.calibrate_baseline(self.state, self.plan)
        with self.steps.step("starting canary probers"):
            canary = canary_process.launch(self.state.api_url, self.state.model_name, self.state.targets_dir,
                                           self.record.dir / "canary.log")
        self.closers.push("canary probers", lambda: canary_process.halt(canary, self.state.targets_dir))
        exporter = TrafficExporter("drill", self.cfg.host, self.cfg.traffic_port, self.state.targets_dir,
                                   linger_s=2 * self.cfg.scrape_interval_s)
        self.closers.push("traffic exporter", exporter.close)
        # Pushed before traffic, so traffic stops first: a revert under load (a replica rebuilt, a rollback
        # deploy) took minutes on a busy 2-core machine, and once the drill ends nobody is served anyway.
        self._revert_phase_on_close("timeline")
        self.slos.wait_quiet()
        self.slos.unset_until_baseline(self.state, self.plan)
        self.traffic = TrafficRunner(self.state.api_url, self.state.model_name, self.plan, self.seed,
                                     exporter, open_ended=self.settings.open_ended, wait_for_landing=True).start()
        self.closers.push("traffic", self._stop_traffic)
        self.t0_wall = time.time()
        self.record.update_public(traffic_started=self.t0_wall, calibration=self.slos.summary())
        self.record.event("traffic started", 0.0)

    def _stack(self) -> StackState:
        # A drill killed mid-fault (SIGKILL) left its faults in this stack (a deploy, an override, a throttled
        # replica): a drill on it would start from that, not from a healthy baseline.
        if (report := stop_killed_drill(self.cfg, self.steps)) is not None:
            self.steps.note(f"an earlier drill ended without its clean-up (its record: {report.get('killed_drill')});"
                            f" stopped what it left ({', '.join(report['stopped']) or 'nothing running'}), "
                            "starting a fresh stack")
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
        if not self.settings.keep_up:  # before `up`: a stack that came up halfway is stopped too
            self.closers.push("the stack", self._stop_stack)
            self._stops_stack = True
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

    def _follow_timeline(self) -> None:
        pending = list(zip(self.plan.events, self.faults))
        next_note = 30.0
        said_so = False
        while True:
            t = self.traffic.elapsed()
            if t >= next_note:
                self.steps.note(f"[dim]{self.traffic.progress(t)}  version {self.state.version}[/dim]")
                next_note += 30.0
            if self.slos.due(t) and self.slos.from_baseline(self.prom, self.t0_wall):
                self.record.update_public(baseline_thresholds=self.slos.thresholds)
                self.record.event("thresholds set from the baseline", self.traffic.elapsed())
            while pending and pending[0][0].at_s <= t:
                event, faults = pending.pop(0)
                self._inject(event, faults)
            self.pager.poll(self.traffic.elapsed())
            verdict = self.mitigation.verdict
            self.mitigation.poll(self.page)
            if self.mitigation.verdict != verdict:  # the sealed record keeps the oracle's latest word, for whoever
                self._seal()                        # holds the key (bench/mitigation_drill.py ends a settled case)
            if self.traffic.error is not None:
                raise RuntimeError(f"the traffic generator failed: {self.traffic.error!r}")
            if t >= self.end_s:
                if not self.settings.open_ended:
                    return
                if not said_so:
                    said_so = True
                    self.steps.note("the timeline has run its course; the incident and its traffic go on "
                                    "until you end the drill with Ctrl-C")
            time.sleep(self.settings.poll_s)

    def _fault_context(self) -> None:
        rng = random.Random(f"faults/{self.plan.incident_id}/{self.plan.variant}/{self.seed}")
        journal = FaultJournal(self.cfg.keys_dir / f"{self.record.dir.name}{JOURNAL_SUFFIX}")
        self.ctx = FaultContext(self.cfg, self.state, rng, tick=self._watch_alerts, journal=journal)
        self.closers.push("fault context", self.ctx.close)
        if any(fault.needs_ray for faults in self.faults for _, fault in faults):
            self.ctx.connect_ray()  # before traffic: a driver joining later would show in Ray's job list

    def _apply(self, spec: dict, fault, kind: str) -> None:
        self.ctx.state = StackState.load(self.cfg.state_file)  # versions change with every deploy
        at = self.traffic.elapsed() if self.traffic else None
        self.injected["setup" if kind == "setup" else "timeline"].append(fault)
        location = fault.inject(self.ctx)
        done = self.traffic.elapsed() if self.traffic else None  # a rolling deploy takes a while
        self.fault_log.append({"at_s": None if at is None else round(at, 1),
                               "done_s": None if done is None else round(done, 1), "event": kind, "spec": spec,
                               "location": location.to_dict()})

    def _inject(self, event, faults) -> None:
        if event.kind == "inject" and self.incident.page.alert is None:
            self.pager.show_report(self.traffic.elapsed())
        for spec, fault in faults:
            self._apply(spec, fault, event.kind)
        if event.kind == "inject":
            self.traffic.landed()  # the fault log's done_s says when
            self.end_s = self.plan.duration_s + max(0.0, self.traffic.elapsed() - event.at_s)
            self.traffic.extend(self.end_s)
        self._seal()
        state = StackState.load(self.cfg.state_file)
        if self.state and state.version != self.state.version:  # deploys are public, as in any deploy log
            self.record.event("deploy", self.traffic.elapsed(), version=state.version)
            self.steps.note(f"deploy: version {state.version} rolled out")
        self.state = state

    def _watch_alerts(self) -> None:
        """While an injection waits on a rollout (a minute or more under load): the page, when it fires."""
        now = time.monotonic()
        if self.traffic is not None and now - self._last_watch >= self.settings.poll_s:
            self._last_watch = now
            self.pager.poll(self.traffic.elapsed())

    def _paged(self, page: dict, t: float) -> None:
        self.record.update_public(page=page, incident=self.incident.id)
        if page["alert"] is None:
            self.record.event("page", t, report=True)
        else:
            self.record.event("page", t, alert=page["alert"])
            self._seal()
        if self.on_page:
            self.on_page(page)

    def _write_marker(self, marker: Path) -> None:
        """The drill marker: this process, its run, and the config the fleet served its healthy baseline on (the
        incident's setup deployed, else the stack's config), which a setting change (`sandbox mitigate
        lower-memory-utilization`) puts its settings back to, as a team returns to its tuned values."""
        write_atomic(marker, json.dumps({"pid": os.getpid(), "run_dir": str(self.record.dir),
                                         "mode": self.settings.mode, "started": self._marker_started,
                                         "baseline_config": self.state.deployed_config}))

    def _oracle(self, page: dict) -> RecoveryOracle | None:
        if page.get("alert") is None:  # the control's report: there is nothing to recover from
            return None
        return RecoveryOracle(self.prom, page["alert"], page["paged_at"], invariant=self._cause_in_place)

    def _cause_in_place(self) -> str | None:
        """Why the injected mechanism is still in the stack, as the stack shows it now; None once it is gone."""
        if self.incident.variants[self.plan.variant].traffic is not None:
            # the cause is the clients' traffic, which no action takes away (its faults, a harmless deploy, are
            # decoys): in place while the fleet does not keep up with it (sandbox/mitigation/load.py)
            return excess_load(self.prom)
        self.ctx.state = StackState.load(self.cfg.state_file)
        for fault in self.injected["timeline"]:
            try:
                still = fault.in_place(self.ctx)
            except Exception as e:  # noqa: BLE001 - unreadable is not gone: no recovery is claimed on it
                still = f"could not be read ({type(e).__name__}: {e})"
            if still:
                return still
        return None

    # -- the end -----------------------------------------------------------------
    def _teardown(self, status: str, error: str | None) -> None:
        if self.record is not None:  # the incident ends here: what follows is the clean-up
            self.record.update_public(stopped=time.time())
        self._ending = (status, error)
        problems = self.closers.close_all()
        if problems:
            raise RuntimeError("drill clean-up incomplete: " + "; ".join(problems))

    def _forced(self, left: list[str]) -> None:
        """The clean-up was stopped by a signal: run.json says so and what was left; so does the drill."""
        if self.record is not None:
            self.record.update_public(status="forced", ended=time.time(), left=left)
        self.steps.note(f"clean-up stopped: left {', '.join(left)}; `sandbox down` stops what is still running "
                        "(the faults live in the stack's processes and go with them)")

    def _revert_phase_on_close(self, phase: str) -> None:
        def revert() -> list[str]:
            if not self.injected[phase]:
                return []
            with self.steps.step("reverting the injected changes"):
                self.ctx.state = StackState.load(self.cfg.state_file)
                return [f"revert: {e}" for e in revert_all(self.injected[phase], self.ctx)]
        self.closers.push(f"{phase} faults", revert)

    def _stop_traffic(self) -> None:
        with self.steps.step("stopping traffic"):
            self.traffic.stop()

    def _finish_record(self) -> list[str]:
        status, error = self._ending
        problems = self._keep_prometheus_data()
        self._seal(status=status)
        self.record.event("drill ended", self.traffic.elapsed() if self.traffic else None, status=status)
        self.record.update_public(status=status, ended=time.time(), error=error if status == "failed" else None,
                                  incident=self.incident.id, mitigation=self.mitigation_summary)
        return problems

    def _as_found(self, state: StackState):
        """The closer that puts back the deployed config as it was before the drill, where the candidate's
        actions left it changed once the faults are reverted (an admission limit, a replica added, a setting put
        back under a new version): the next drill on this stack starts from what the stack ran."""
        found = DeployConfig.load(Path(state.deployed_config))

        def put_back() -> list[str]:
            if self.mitigation is None or not self.mitigation.actions:
                return []
            now = StackState.load(self.cfg.state_file)
            if DeployConfig.load(Path(now.deployed_config)).data == found.data:
                return []
            try:
                with self.steps.step("putting back the deployed config the drill began with"):
                    deploy_config(self.cfg, now, found, self.ctx.timeout_s, what="as before the drill")
            except (RuntimeError, ValueError, OSError) as e:
                return [f"the deployed config as the drill found it: {e}"]
            return []
        return put_back

    def _stop_stack(self) -> list[str]:
        try:
            Stack(self.cfg, self.steps).down()
        except RuntimeError as e:
            return [str(e)]
        return []

    def _keep_prometheus_data(self) -> list[str]:
        try:
            with self.steps.step("keeping the run's Prometheus data"):
                self.record.keep_prometheus_data(Path(self.state.run_dir) / "prometheus-data")
        except OSError as e:
            return [f"prometheus data: {e}"]
        return []

    @property
    def mitigation_summary(self) -> dict | None:
        return self.mitigation.summary(self.page) if self.mitigation else None

    @property
    def page(self) -> dict | None:
        return self.pager.page if self.pager else None

    def sealed_answer(self) -> dict:
        return resolved_answer(self.incident.variants[self.plan.variant].answer, self.fault_log, self.state)

    def _seal(self, status: str = "running") -> None:
        variant = self.incident.variants[self.plan.variant]
        self.record.seal({"variant": self.plan.variant, "plan": self.plan.to_dict(), "status": status,
                          "answer": resolved_answer(variant.answer, self.fault_log, self.state),
                          "faults": self.fault_log, "timeline_end_s": round(self.end_s, 1),
                          "early_alerts": self.pager.early_alerts if self.pager else [],
                          "page": self.page, "traffic_started": self.t0_wall,
                          "stack_run_dir": self.state.run_dir if self.state else None,
                          "mitigation": self.mitigation.summary(self.page, sealed=True) if self.mitigation else None})
