"""Which LLMServer replicas are running, and the process behind each one.

Serve's REST API (on the Ray dashboard) lists every replica with its id — the
`replica` label of its metrics — its pid and its node. A fault picks one by
index into the running replicas sorted by id, or at random with the drill's RNG.
A process is named by pid and start time together, so a pid that was reused
after a replica restart is never signalled or moved by mistake.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from faults.base import FaultContext, InjectionFailed
from services.stack.deploy_config import SERVER


@dataclass(frozen=True)
class Replica:
    replica_id: str
    pid: int
    node_id: str | None = None
    node_ip: str | None = None


def list_replicas(ctx: FaultContext) -> list[Replica]:
    """The RUNNING LLMServer replicas, sorted by replica id."""
    found = [Replica(r["replica_id"], int(r["pid"]), r.get("node_id"), r.get("node_ip"))
             for r in ctx.serve().replicas(ctx.state.app_name, SERVER)
             if r.get("state") == "RUNNING" and r.get("pid")]
    return sorted(found, key=lambda r: r.replica_id)


def select(replicas: list[Replica], selector: str | int, rng: random.Random) -> Replica:
    if not replicas:
        raise InjectionFailed("no LLMServer replica is running")
    if selector == "random":
        return rng.choice(replicas)
    if selector >= len(replicas):
        raise InjectionFailed(f"replica: index {selector}, but only {len(replicas)} replica(s) are running")
    return replicas[selector]


def is_running(ctx: FaultContext, replica_id: str) -> bool:
    return any(r.replica_id == replica_id for r in list_replicas(ctx))


@dataclass(frozen=True)
class Process:
    pid: int
    start_ticks: int

    @classmethod
    def of(cls, replica: Replica) -> Process:
        """The replica's process on this machine; InjectionFailed if it is not here."""
        ticks = start_ticks(replica.pid)
        if ticks is None or "ServeReplica" not in _cmdline(replica.pid):
            raise InjectionFailed(f"replica {replica.replica_id} (pid {replica.pid}, node {replica.node_ip}) "
                                  "is not a process on this machine: run the fault on the replica's node")
        return cls(replica.pid, ticks)

    def alive(self) -> bool:
        """Still the same process (not exited, pid not reused)."""
        return start_ticks(self.pid) == self.start_ticks


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields_after_name = stat.rpartition(")")[2].split()
    if fields_after_name[0] in ("Z", "X"):  # exited, not yet reaped
        return None
    return int(fields_after_name[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
