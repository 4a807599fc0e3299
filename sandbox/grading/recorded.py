"""A finished run, read back: its public record, its sealed answer, its windows, its Prometheus data.

`RecordedPrometheus` serves a run's TSDB through a real Prometheus server, read-only: the data is
copied to a scratch directory first (Prometheus writes to whatever directory it opens), the
server scrapes nothing and evaluates no rules, and it listens on loopback only. What the drill's
rules recorded (alerts, `sandbox:*` series) is in the data already.
"""
from __future__ import annotations

import json
import math
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.drill.record import RunRecord, read_live_marker
from services.stack.prometheus import PrometheusClient, PrometheusError, find_binary, start_server
from services.stack.state import stop_pid

READY_TIMEOUT_S = 30.0
REPLAY_FILE = "replay.json"  # in the sandbox home while a replay serves: its pid, URL, Prometheus pid, scratch
SCRATCH_PREFIX = "sandbox-replay-"


@dataclass(frozen=True)
class Windows:
    """Seconds since traffic started (t0, wall clock): where the baseline and the incident are."""
    t0: float
    inject_s: float  # when the first fault went in
    settled_s: float  # when the last injection had completed (a rolling deploy takes a while)
    end_s: float  # when the record ends

    def to_dict(self) -> dict:
        return {"t0": self.t0, "inject_s": self.inject_s, "settled_s": self.settled_s, "end_s": self.end_s}


class RecordedRun:
    def __init__(self, run_dir: Path, key_file: Path, live: bool = False):
        """live: the drill still runs (its Prometheus serves the data; the record ends now)."""
        self.record = RunRecord(Path(run_dir), Path(key_file))
        self.live = live
        if not self.record.run_file.is_file():
            raise ValueError(f"{run_dir} is not a drill run (no run.json)")
        if not live and not (self.record.dir / "prometheus").is_dir():
            raise ValueError(f"{run_dir} has no Prometheus data (prometheus/): the drill ended before it was kept")
        self.public = self.record.public()
        self.sealed = self.record.unseal()

    @property
    def run_id(self) -> str:
        return self.public["run_id"]

    @property
    def incident_id(self) -> str:
        # A live run's public record names its incident only from the page on; the sealed plan always does.
        return self.public.get("incident") or self.sealed["plan"]["incident_id"]

    def windows(self) -> Windows:
        t0 = self.public.get("traffic_started") or self.sealed.get("traffic_started")
        if t0 is None:
            raise ValueError(f"run {self.run_id} never started its traffic: nothing to grade")
        plan = self.sealed["plan"]
        injected = [f for f in self.sealed.get("faults", []) if f["event"] == "inject" and f.get("at_s") is not None]
        inject_s = injected[0]["at_s"] if injected else plan["inject_at_s"]
        settled_s = max([f.get("done_s") or f["at_s"] for f in injected], default=inject_s)
        # A finished run's incident ends where the drill stopped: the clean-up after it (faults
        # reverted, a rollback deploy) is no incident. Records older than `stopped` end with the plan.
        if self.live:
            end_s = time.time() - t0
        elif self.public.get("stopped"):
            end_s = self.public["stopped"] - t0
        else:
            planned = self.sealed.get("timeline_end_s", plan["duration_s"])  # moved on by a late landing
            end_s = min(planned, (self.public.get("ended") or math.inf) - t0)
        return Windows(t0, float(inject_s), float(settled_s), float(end_s))


def free_port(host: str = "127.0.0.1", preferred: int | None = None) -> int:
    """`preferred` when nothing listens there, else a port the OS picks."""
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port on {host}")


# A pruned record (sandbox.grading.prune) keeps every sample but not Prometheus' staleness markers
# (OpenMetrics text cannot carry them), so a replica that was replaced would answer instant queries
# with its last value for the default 5-minute lookback. Live series are scraped every 1-2 s: a
# series with no sample for 20 s has ended, as its staleness marker said in the live run.
LOOKBACK_S = 20


class RecordedPrometheus:
    """`with RecordedPrometheus(data_dir) as prom:` a PrometheusClient over a copy of the data."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1", port: int | None = None):
        self.data_dir, self.host, self.port = Path(data_dir), host, port
        self.scratch: Path | None = None
        self.proc = None
        self.client: PrometheusClient | None = None

    def __enter__(self) -> PrometheusClient:
        self.scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        try:
            shutil.copytree(self.data_dir, self.scratch / "data")
            config = self.scratch / "prometheus.yml"
            config.write_text("global: {}\n")  # no scrapes, no rules: the record is all there is
            port = self.port or free_port(self.host)
            self.proc = start_server(find_binary("prometheus"), config, self.scratch / "data",
                                     f"{self.host}:{port}", self.scratch / "prometheus.log",
                                     (f"--query.lookback-delta={LOOKBACK_S}s",))
            self.client = PrometheusClient(f"http://{self.host}:{port}")
            self.client.wait_ready(READY_TIMEOUT_S)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.client

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:  # noqa: BLE001 - a Prometheus that ignores SIGTERM is killed
                self.proc.kill()
                self.proc.wait(5)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def left_replay(home: Path) -> dict | None:
    """The marker of a replay that died without its clean-up (SIGKILL): its process is gone, while its Prometheus
    (a session of its own) may still serve the scratch copy on the sandbox's port. None when there is none."""
    marker = Path(home) / REPLAY_FILE
    if not marker.is_file() or read_live_marker(marker) is not None:
        return None
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        info = {}
    return info if isinstance(info, dict) else {}


def stop_left_replay(home: Path) -> str | None:
    """Stop what a killed replay left: its Prometheus (only the process serving its scratch copy: a pid reused
    since is left alone), the scratch copy and the marker. Returns what was stopped, or None when nothing was."""
    info = left_replay(home)
    if info is None:
        return None
    stopped = "a killed replay's marker"
    pid, scratch = info.get("prometheus_pid"), str(info.get("scratch") or "")
    if isinstance(pid, int) and scratch and scratch in _cmdline(pid):
        stop_pid(pid)
        stopped = f"a killed replay's Prometheus (pid {pid})"
    if scratch and Path(scratch).name.startswith(SCRATCH_PREFIX):
        shutil.rmtree(scratch, ignore_errors=True)
    (Path(home) / REPLAY_FILE).unlink(missing_ok=True)
    return stopped


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


__all__ = [
    "PrometheusError",
    "RecordedPrometheus",
    "RecordedRun",
    "Windows",
    "free_port",
    "left_replay",
    "stop_left_replay",
]
