"""A node goes down: the container holding one replica is killed (SIGKILL), and started again.

Its raylet dies with it, so the head marks the node dead and Serve loses the
replica; with no node slot free elsewhere, the replacement waits until the node
is back. With `restart_after_s` the container is started again after that long
(a machine that reboots); without it the node stays down until revert. Revert
starts it if it is down and waits until its node has rejoined the cluster.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar

from faults.base import Fault, FaultContext, Location, check_number, check_replica
from faults.container_target import ContainerTarget, pick, rejoin

MAX_SECONDS = 3600.0


@dataclass
class ContainerKill(Fault):
    """`replica: random | <index>` (among replicas in containers), `restart_after_s` (optional)."""
    type: ClassVar[str] = "container-kill"
    component: ClassVar[str] = "node"
    node: ClassVar[str | None] = "container"
    replica: str | int = "random"
    restart_after_s: float | None = None
    _target: ContainerTarget | None = field(default=None, init=False, repr=False)
    _timer: threading.Timer | None = field(default=None, init=False, repr=False)

    def validate(self) -> None:
        check_replica(self.replica)
        if self.restart_after_s is not None:
            check_number("restart_after_s", self.restart_after_s, 0.0, MAX_SECONDS)

    def _inject(self, ctx: FaultContext) -> None:
        target = pick(ctx, self.replica)
        self._location = Location(replica=target.replica_id, version=ctx.state.version, component=self.component)
        self._target = target
        target.container().kill()
        target.container().wait(timeout=30)  # exited: its processes are gone
        if self.restart_after_s is not None:
            self._timer = threading.Timer(self.restart_after_s, self._start)
            self._timer.daemon = True
            self._timer.start()
        ctx.log(f"container-kill: {target.name} (replica {target.replica_id}) killed")

    def _start(self) -> None:
        container = self._target.container() if self._target is not None else None
        if container is not None and container.status not in ("running", "paused"):
            container.start()

    def _revert(self, ctx: FaultContext) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._target is None:
            return
        restarted = rejoin(ctx, self._target)
        ctx.log(f"container-kill (revert): {self._target.name} back in the cluster" + " (restarted)" * restarted)
        self._target = self._timer = None
