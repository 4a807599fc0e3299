"""A real CPU quota on a replica's process (or on every replica's): a cgroup of its own with a CFS bandwidth limit.

    cgroup v1:  mkdir <cpu mount>/sandbox-<n>; cpu.cfs_period_us = 100000; cpu.cfs_quota_us = fraction x period
    cgroup v2:  mkdir <unified mount>/sandbox-<n>; cpu.max = "<quota> <period>"
    then the pid goes into the group's cgroup.procs (every thread moves with it).

The kernel then holds the replica's threads off the CPU for the rest of each
period once they have used their quota, and counts it in the group's cpu.stat
(which the replica exports as sandbox:replica_cpu_throttled_seconds_total).
Revert moves the process back to the group it came from and removes ours.

The quota is `cpu_fraction` of what the replica gets on a fair machine (`fair_cpus`): its compute
threads, or its share of the CPUs it may run on when replicas outnumber them. A fraction of one CPU
is a different fault on another machine: 0.15 CPU left a replica of this 2-core machine (which runs on
one CPU of its own) 15% of its speed, but one whose stack shares a single CPU (about 0.5 each) 30%,
and that drill's slow replica never paged (0.45 of the page's floor).
"""
from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from faults.base import Fault, FaultContext, InjectionFailed, InvalidFault, Location, check_number, check_replica
from faults.replicas import Process, list_replicas, select
from services.serve.cgroup_cpu import CgroupMount, cgroup_of, cpu_mounts
from services.serve.config import torch_threads
from services.stack.deploy_config import deployed_engine_setting

PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel refuses a smaller quota


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


@dataclass(frozen=True)
class QuotaGroup:
    mount: CgroupMount
    path: Path

    @classmethod
    def create(cls, cpu_fraction: float) -> QuotaGroup:
        """A new group under the first writable CPU hierarchy (v1 `cpu`, then v2), with the quota set."""
        mounts = cpu_mounts()
        tried = []
        for mount in mounts:
            try:
                path = _new_dir(mount.path)
            except OSError as e:
                tried.append(f"{mount.path} (cgroup v{mount.version}): {e.strerror or e}")
                continue
            group = cls(mount, path)
            try:
                group._set_quota(cpu_fraction)
            except OSError:
                group.remove()
                raise
            return group
        where = "; ".join(tried) or "no cgroup hierarchy with the cpu controller is mounted"
        raise InjectionFailed("cpu-throttle needs a writable cgroup CPU controller (cgroup v1 `cpu`, e.g. "
                              f"/sys/fs/cgroup/cpu, or cgroup v2 with `cpu` enabled) and root: {where}")

    def _set_quota(self, cpu_fraction: float) -> None:
        quota = max(MIN_QUOTA_US, round(cpu_fraction * PERIOD_US))
        if self.mount.version == 1:
            _write(self.path / "cpu.cfs_period_us", str(PERIOD_US))
            _write(self.path / "cpu.cfs_quota_us", str(quota))
        else:
            subtree = self.path.parent / "cgroup.subtree_control"
            if "cpu" not in subtree.read_text().split():
                _write(subtree, "+cpu")
            _write(self.path / "cpu.max", f"{quota} {PERIOD_US}")

    def add(self, pid: int) -> None:
        move(pid, self.path)

    def remove(self, timeout_s: float = 5.0) -> None:
        """rmdir the group once it is empty (a process that just exited may take a moment to leave)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)


def remove_left_groups() -> list[str]:
    """Remove the sandbox's quota groups that no process is in any more, and say which.

    A drill killed before its revert (SIGKILL) leaves its group behind; once its stack is stopped the
    replica that was in it is gone, so `sandbox down` clears it from any state. A group that still
    holds a live process is a fault at work (another sandbox's, or this one's still running) and stays.
    """
    removed = []
    for mount in cpu_mounts():
        for path in sorted(mount.path.glob("sandbox-*")):
            if not path.is_dir() or _pids(path):
                continue
            try:
                QuotaGroup(mount, path).remove(timeout_s=2.0)
            except OSError:
                continue  # a process moved in meanwhile: not ours to take
            removed.append(str(path))
    return removed


def _new_dir(parent: Path) -> Path:
    for n in range(1, 1000):
        path = parent / f"sandbox-{n}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no free sandbox-<n> group name under {parent}")


def move(pid: int, group: Path) -> None:
    """Every thread of `pid` into `group`."""
    try:
        _write(group / "cgroup.procs", str(pid))
    except OSError:
        if not (group / "tasks").exists():
            raise
        for tid in _thread_ids(pid):  # v1: thread by thread
            try:
                _write(group / "tasks", str(tid))
            except ProcessLookupError:
                continue  # the thread ended meanwhile


def _thread_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in Path(f"/proc/{pid}/task").iterdir() if t.name.isdigit())
    except OSError:
        return []


def fair_cpus(affinity: int, replicas: int, threads: int) -> float:
    """The CPUs a replica uses on a fair machine: its compute threads, or its share of the `affinity` CPUs
    its process may run on, shared by `replicas` (the fewer)."""
    if affinity < 1 or replicas < 1 or threads < 1:
        raise ValueError(f"fair_cpus needs positive counts, got {affinity}, {replicas}, {threads}")
    return min(float(threads), affinity / replicas)


@dataclass
class _Held:
    """One process in a quota group of ours, and the group it came from."""
    process: Process
    group: QuotaGroup
    origin: Path


@dataclass
class CpuThrottle(Fault):
    """`replica: random | <index> | all`, `cpu_fraction`: the replica's process (every replica's, each in a group
    of its own, as a container runtime applies a pod's CPU limit) may use this share of the CPUs it uses on a fair
    machine (`fair_cpus`)."""
    type: ClassVar[str] = "cpu-throttle"
    component: ClassVar[str] = "cpu"
    cpu_fraction: float
    replica: str | int = "random"
    _held: list[_Held] = field(default_factory=list, init=False, repr=False)

    def validate(self) -> None:
        if self.replica != "all":
            try:
                check_replica(self.replica)
            except InvalidFault:
                raise InvalidFault("replica", f"must be 'random', 'all' or a replica index 0, 1, ..., "
                                              f"got {self.replica!r}") from None
        check_number("cpu_fraction", self.cpu_fraction, MIN_QUOTA_US / PERIOD_US, 1.0, low_open=False,
                     high_open=True)

    def _inject(self, ctx: FaultContext) -> None:
        replicas = list_replicas(ctx)
        every = self.replica == "all"
        # select() also says so when no replica runs at all
        targets = replicas if every and replicas else [select(replicas, self.replica, ctx.rng)]
        self._location = Location(replica=None if every else targets[0].replica_id, version=ctx.state.version,
                                  component=self.component)
        # the engines' torch threads: 1 unless the serve config names more
        threads = max(1, torch_threads(deployed_engine_setting(ctx.state.deployed_config, "torch_threads", 1)) or 1)
        for target in targets:
            process = Process.of(target)
            fair = fair_cpus(len(os.sched_getaffinity(process.pid)), len(replicas), threads)
            cpus = max(MIN_QUOTA_US / PERIOD_US, self.cpu_fraction * fair)
            group = QuotaGroup.create(cpus)
            origin = cgroup_of(process.pid, group.mount)
            if origin is None:
                group.remove()
                raise InjectionFailed(f"cpu-throttle: cannot tell which cgroup pid {process.pid} is in")
            self._held.append(_Held(process, group, origin))  # before the move: a revert undoes a half-done one
            ctx.remember(self)  # and so does the next `sandbox down`, should this drill be killed
            group.add(process.pid)
            if cgroup_of(process.pid, group.mount) != group.path or not process.alive():
                raise InjectionFailed(f"cpu-throttle: pid {process.pid} did not move into {group.path}")
            ctx.log(f"cpu-throttle: replica {target.replica_id} (pid {process.pid}) limited to {cpus:.3g} CPU "
                    f"({self.cpu_fraction:.0%} of its fair {fair:.2g}) in {group.path}")

    def undo_record(self) -> dict | None:
        if not self._held:
            return None
        return {"held": [{"pid": h.process.pid, "start_ticks": h.process.start_ticks, "version": h.group.mount.version,
                          "mount": str(h.group.mount.path), "root": h.group.mount.root, "group": str(h.group.path),
                          "origin": str(h.origin)} for h in self._held]}

    @classmethod
    def restore(cls, record: dict) -> list[str]:
        done = []
        for h in reversed(record["held"]):
            held = _Held(Process(int(h["pid"]), int(h["start_ticks"])),
                         QuotaGroup(CgroupMount(int(h["version"]), Path(h["mount"]), h["root"]), Path(h["group"])),
                         Path(h["origin"]))
            if not held.group.path.is_dir():
                continue  # reverted already, or removed with its last process
            moved = held.process.alive() and cgroup_of(held.process.pid, held.group.mount) == held.group.path
            _release(held)
            done.append(f"removed a CPU quota group ({held.group.path})"
                        + (f" and moved pid {held.process.pid} back to {held.origin}" if moved else ""))
        return done

    def in_place(self, ctx: FaultContext) -> str | None:
        """In place while some running replica's process sits under one of our CPU quotas."""
        for replica in list_replicas(ctx):
            held = quota_of(replica.pid)
            if held is not None:
                return f"replica {replica.replica_id} runs under a CPU quota of {held[1]:.2g} CPU"
        return None

    def _revert(self, ctx: FaultContext) -> None:
        while self._held:
            held = self._held.pop()
            _release(held)
            ctx.log(f"cpu-throttle (revert): pid {held.process.pid} back in {held.origin}")


def quota_of(pid: int) -> tuple[Path, float] | None:
    """(group, CPUs) where `pid` sits in a CPU quota group of this sandbox's (a `sandbox-<n>` group, what a pod's
    limit is here) with a quota set; None otherwise. Read from the cgroup files, as any process here can."""
    for mount in cpu_mounts():
        group = cgroup_of(pid, mount)
        if group is None or not group.name.startswith("sandbox-"):
            continue
        try:
            if mount.version == 2:
                quota, period = (group / "cpu.max").read_text().split()[:2]
                if quota != "max":
                    return group, int(quota) / int(period)
            else:
                quota = int((group / "cpu.cfs_quota_us").read_text())
                if quota >= 0:
                    return group, quota / int((group / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
    return None


def lift_quota(group: Path) -> None:
    """No quota for `group` (v1 or v2: whichever file it has), as raising a limit past any use does."""
    if (group / "cpu.max").exists():
        _write(group / "cpu.max", "max")
    else:
        _write(group / "cpu.cfs_quota_us", "-1")


def _release(held: _Held) -> None:
    """The process (and anything else in our group) back to where it came from; the group removed."""
    if held.process.alive():
        move(held.process.pid, held.origin)
    for pid in _pids(held.group.path):  # anything else that ended up in our group goes back too
        move(pid, held.origin)
    held.group.remove()
