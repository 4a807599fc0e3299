"""A memory limit on the container holding one replica (`docker update --memory --memory-swap`).

    docker update --memory <limit_mb>m --memory-swap <limit_mb>m <container>

Nothing changes while the node stays under the limit; when its processes need
more (a long context at peak load), the kernel's OOM killer kills one inside
the container, the largest: usually the replica, and Docker marks the
container State.OOMKilled. Revert gives the container its memory back and, if
the node itself was killed, starts it again and waits until it has rejoined.

Docker refuses to update a limit back to "none" (anything under 6 MB, -1
included), so revert records the host's memory as the container's limit (what
a restart of the container applies) and then writes the cgroup's own "no limit"
(-1) into memory.memsw.limit_in_bytes and memory.limit_in_bytes, as it was.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from faults.base import Fault, FaultContext, InvalidFault, Location, check_replica
from faults.container_target import ContainerTarget, cgroup_dir, pick, rejoin

MIN_MB = 6  # Docker's minimum memory limit
MAX_MB = 1 << 20


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass
class ContainerMemoryLimit(Fault):
    """`replica: random | <index>` (among replicas in containers), `limit_mb`: the container's memory limit."""
    type: ClassVar[str] = "container-memory-limit"
    component: ClassVar[str] = "node"
    node: ClassVar[str | None] = "container"
    limit_mb: int
    replica: str | int = "random"
    _target: ContainerTarget | None = field(default=None, init=False, repr=False)
    _original: tuple[int, int] | None = field(default=None, init=False, repr=False)  # (Memory, MemorySwap)

    def validate(self) -> None:
        check_replica(self.replica)
        if isinstance(self.limit_mb, bool) or not isinstance(self.limit_mb, int) \
                or not MIN_MB <= self.limit_mb <= MAX_MB:
            raise InvalidFault("limit_mb", f"must be a whole number of MB in [{MIN_MB}, {MAX_MB}], "
                                           f"got {self.limit_mb!r}")

    def _inject(self, ctx: FaultContext) -> None:
        target = pick(ctx, self.replica)
        self._location = Location(replica=target.replica_id, version=ctx.state.version, component=self.component)
        container = target.container()
        host = container.attrs["HostConfig"]
        self._target, self._original = target, (host.get("Memory") or 0, host.get("MemorySwap") or 0)
        limit = self.limit_mb * 2**20
        container.update(mem_limit=limit, memswap_limit=limit)  # no swap: past the limit is the OOM killer
        ctx.log(f"container-memory-limit: {target.name} (replica {target.replica_id}) limited to "
                f"{self.limit_mb} MB")

    def _revert(self, ctx: FaultContext) -> None:
        if self._target is None:
            return
        memory, swap = self._original
        container = self._target.container()
        if memory > 0:
            container.update(mem_limit=memory, memswap_limit=swap if swap else -1)
        else:
            total = host_memory_bytes()
            container.update(mem_limit=total, memswap_limit=2 * total)
            if container.status == "running":
                group = cgroup_dir(container, "memory")
                for name in ("memory.memsw.limit_in_bytes", "memory.limit_in_bytes"):  # the larger one first
                    if (group / name).exists():
                        Path(group / name).write_text("-1")
        restarted = rejoin(ctx, self._target)
        ctx.log(f"container-memory-limit (revert): {self._target.name} has its memory back"
                + " (restarted)" * restarted)
        self._target = None
