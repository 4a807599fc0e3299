"""The container holding one replica is frozen (`docker pause`: the cgroup freezer) for `seconds`.

Every process of the node stops: the replica, its raylet and the node's metrics
agent. Ray's GCS declares a node dead once it has missed its health checks for
about 30 s; a node that comes back after that learns it was declared dead and
exits, so the unpause is followed by a restart when the container has stopped.
Revert unpauses at once and waits until the node is in the cluster again.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar

from faults.base import Fault, FaultContext, Location, check_number, check_replica
from faults.container_target import ContainerTarget, pick, rejoin
from faults.pause import MAX_SECONDS  # the same bound as a paused process


@dataclass
class ContainerPause(Fault):
    """`replica: random | <index>` (among replicas in containers), `seconds`: how long the container is frozen."""
    type: ClassVar[str] = "container-pause"
    component: ClassVar[str] = "node"
    node: ClassVar[str | None] = "container"
    seconds: float
    replica: str | int = "random"
    _target: ContainerTarget | None = field(default=None, init=False, repr=False)
    _timer: threading.Timer | None = field(default=None, init=False, repr=False)

    def validate(self) -> None:
        check_replica(self.replica)
        check_number("seconds", self.seconds, 0.0, MAX_SECONDS)

    def _inject(self, ctx: FaultContext) -> None:
        target = pick(ctx, self.replica)
        self._location = Location(replica=target.replica_id, version=ctx.state.version, component=self.component)
        self._target = target
        container = target.container()
        container.pause()
        self._timer = threading.Timer(self.seconds, self._unpause)
        self._timer.daemon = True
        self._timer.start()
        ctx.log(f"container-pause: {target.name} (replica {target.replica_id}) frozen for {self.seconds:g}s")

    def _unpause(self) -> None:
        container = self._target.container() if self._target is not None else None
        if container is not None and container.status == "paused":
            container.unpause()

    def _revert(self, ctx: FaultContext) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._target is None:
            return
        self._unpause()
        restarted = rejoin(ctx, self._target)
        ctx.log(f"container-pause (revert): {self._target.name} running" + " (restarted)" * restarted)
        self._target = self._timer = None
