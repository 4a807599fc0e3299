"""One replica's process stops for a while: SIGSTOP now, SIGCONT after `seconds`.

Every thread stops, so the replica neither steps, answers, exports metrics nor
passes health checks. Serve's health check (every 2 s, 10 s timeout in
services/serve_config.yaml) gives up on a replica paused for longer than that
and replaces it, as it would a hung machine; the resume then finds the old
process gone, which is fine. Revert resumes at once (always safe: SIGCONT to a
running process does nothing, and a process that is gone is left alone).
"""
from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar

from faults.base import Fault, FaultContext, Location, check_number, check_replica
from faults.replicas import Process, list_replicas, select

MAX_SECONDS = 3600.0


@dataclass
class Pause(Fault):
    """`replica: random | <index>`, `seconds`: the replica's process is stopped for this long."""
    type: ClassVar[str] = "pause"
    component: ClassVar[str] = "process"
    seconds: float
    replica: str | int = "random"
    _process: Process | None = field(default=None, init=False, repr=False)
    _timer: threading.Timer | None = field(default=None, init=False, repr=False)

    def validate(self) -> None:
        check_replica(self.replica)
        check_number("seconds", self.seconds, 0.0, MAX_SECONDS)

    def _inject(self, ctx: FaultContext) -> None:
        target = select(list_replicas(ctx), self.replica, ctx.rng)
        process = Process.of(target)
        self._location = Location(replica=target.replica_id, version=ctx.state.version, component=self.component)
        self._process = process
        ctx.remember(self)  # a drill killed while this process is stopped would leave it stopped for good
        self._timer = threading.Timer(self.seconds, self._resume)
        self._timer.daemon = True
        os.kill(process.pid, signal.SIGSTOP)
        self._timer.start()
        self._wait_until_stopped(process)
        ctx.log(f"pause: replica {target.replica_id} (pid {process.pid}) stopped for {self.seconds:g}s")

    def _wait_until_stopped(self, process: Process, timeout_s: float = 2.0) -> None:
        """A signal is delivered asynchronously: return once the process shows as stopped."""
        deadline = time.monotonic() + timeout_s
        while not self.paused and process.alive() and time.monotonic() < deadline and self._timer.is_alive():
            time.sleep(0.01)

    @property
    def paused(self) -> bool:
        """The process is stopped right now (state T in /proc/<pid>/stat)."""
        if self._process is None or not self._process.alive():
            return False
        try:
            with open(f"/proc/{self._process.pid}/stat") as f:
                return f.read().rpartition(")")[2].split()[0] in ("T", "t")
        except OSError:
            return False

    def _resume(self) -> None:
        process = self._process
        if process is not None and process.alive():
            try:
                os.kill(process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def undo_record(self) -> dict | None:
        if self._process is None:
            return None
        return {"pid": self._process.pid, "start_ticks": self._process.start_ticks}

    @classmethod
    def restore(cls, record: dict) -> list[str]:
        process = Process(int(record["pid"]), int(record["start_ticks"]))
        if not process.alive():
            return []
        try:
            os.kill(process.pid, signal.SIGCONT)
        except ProcessLookupError:
            return []
        return [f"resumed a stopped process (pid {process.pid})"]

    def _revert(self, ctx: FaultContext) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._resume()
        if self._process is not None:
            ctx.log(f"pause (revert): pid {self._process.pid} resumed")
        self._timer = self._process = None
