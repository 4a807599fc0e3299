"""A noisy neighbour: a CFS CPU quota on the container that holds one replica (`docker update --cpus`).

    docker update --cpu-period 100000 --cpu-quota <fraction x 100000> <container>

Every process of the node (raylet, agents, the replica) shares the quota; the
kernel counts the periods it holds them off the CPU in the container's cgroup
cpu.stat, which is the replica's own group there, so the replica exports the
throttling as sandbox:replica_cpu_throttled_seconds_total as cAdvisor would.
Revert puts back the container's own quota and period (-1: no quota, what a
container started without --cpus has in its cgroup); a container that is gone
(its replica drained to a fresh machine) took its quota with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from faults.base import Fault, FaultContext, Location, check_number, check_replica
from faults.container_target import ContainerTarget, container_replicas, engine, pick
from services.stack.container_node import sandbox_containers

PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel refuses a smaller quota


@dataclass
class ContainerCpuQuota(Fault):
    """`replica: random | <index>` (among replicas in containers), `cpu_fraction`: CPUs the container may use."""
    type: ClassVar[str] = "container-cpu-quota"
    component: ClassVar[str] = "node"
    node: ClassVar[str | None] = "container"
    cpu_fraction: float
    replica: str | int = "random"
    _target: ContainerTarget | None = field(default=None, init=False, repr=False)
    _original: tuple[int, int] | None = field(default=None, init=False, repr=False)  # (quota, period) as recorded

    def validate(self) -> None:
        check_replica(self.replica)
        check_number("cpu_fraction", self.cpu_fraction, MIN_QUOTA_US / PERIOD_US, 1.0, low_open=False,
                     high_open=True)

    def _inject(self, ctx: FaultContext) -> None:
        target = pick(ctx, self.replica)
        self._location = Location(replica=target.replica_id, version=ctx.state.version, component=self.component)
        container = target.container()
        host = container.attrs["HostConfig"]
        self._target, self._original = target, (host.get("CpuQuota") or 0, host.get("CpuPeriod") or 0)
        quota = max(MIN_QUOTA_US, round(self.cpu_fraction * PERIOD_US))
        container.update(cpu_period=PERIOD_US, cpu_quota=quota)
        ctx.log(f"container-cpu-quota: {target.name} (replica {target.replica_id}) limited to "
                f"{self.cpu_fraction:g} CPU")

    def in_place(self, ctx: FaultContext) -> str | None:
        """A running sandbox node held under one CPU (the sandbox starts its nodes with no quota).

        Read from the containers, not from which replicas Serve lists RUNNING right now: a replica
        that restarts, or fails a health check under the quota, comes back on the same node, so the
        cause stays while the container does (a drain to a fresh node removes it)."""
        client = engine()
        serving = {name: replica.replica_id for replica, name in container_replicas(ctx)}
        for container in sandbox_containers(client):
            if container.status != "running":
                continue
            host = container.attrs["HostConfig"]
            quota, period = host.get("CpuQuota") or 0, host.get("CpuPeriod") or PERIOD_US
            if 0 < quota < period:
                who = (f"replica {serving[container.name]} serves from" if container.name in serving
                       else "a replica's node,")
                return f"{who} {container.name}, held to {quota / period:g} CPU"
        return None

    def _revert(self, ctx: FaultContext) -> None:
        import docker

        if self._target is None:
            return
        quota, period = self._original
        try:
            # Docker ignores 0 in an update ("leave as is"); -1 is the cgroup's own word for no quota.
            self._target.container().update(cpu_period=period or PERIOD_US, cpu_quota=quota if quota > 0 else -1)
            ctx.log(f"container-cpu-quota (revert): {self._target.name} has its own CPU quota back")
        except docker.errors.NotFound:
            ctx.log(f"container-cpu-quota (revert): {self._target.name} is gone, and its quota with it")
        self._target = None
