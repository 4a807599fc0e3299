"""Where a process's CPU cgroup is, and what its `cpu.stat` says (the counters cAdvisor exports).

cgroup v1 (a hierarchy with the `cpu` controller) and v2 (the unified hierarchy,
`cpu` in its controllers) both keep CFS bandwidth statistics per group:

    v1 cpu.stat:  nr_periods  nr_throttled  throttled_time   (nanoseconds)
    v2 cpu.stat:  nr_periods  nr_throttled  throttled_usec   (microseconds)

A group's counters start at zero when it is created and only count while a
quota is set. `CpuStatCounter` turns them into per-process totals that never go
back, even when the process is moved from one group to another.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CgroupMount:
    version: int  # 1 or 2
    path: Path  # where the hierarchy is mounted
    root: str  # which cgroup of the hierarchy is mounted there ("/" unless inside a cgroup namespace)


@dataclass(frozen=True)
class CpuStat:
    periods: int = 0
    throttled_periods: int = 0
    throttled_seconds: float = 0.0


def cpu_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[CgroupMount]:
    """cgroup v1 hierarchies that carry the cpu controller, then cgroup v2 ones."""
    found: list[CgroupMount] = []
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        pre, _, post = line.partition(" - ")
        pre_f, post_f = pre.split(), post.split()
        if len(pre_f) < 5 or len(post_f) < 3:
            continue
        fstype, super_opts = post_f[0], post_f[2].split(",")
        if fstype == "cgroup" and "cpu" in super_opts:
            found.append(CgroupMount(1, Path(pre_f[4]), pre_f[3]))
        elif fstype == "cgroup2":
            controllers = Path(pre_f[4]) / "cgroup.controllers"
            try:
                if "cpu" in controllers.read_text().split():
                    found.append(CgroupMount(2, Path(pre_f[4]), pre_f[3]))
            except OSError:
                continue
    found.sort(key=lambda m: m.version)
    return found


def cpu_mount() -> CgroupMount | None:
    """The hierarchy that controls CPU bandwidth here: v1's `cpu` if mounted, else v2 with `cpu`."""
    mounts = cpu_mounts()
    return mounts[0] if mounts else None


def cgroup_of(pid: int | str, mount: CgroupMount) -> Path | None:
    """The directory of the cgroup that `pid` (a process or thread id, or "self") is in, in `mount`."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (mount.version == 1 and "cpu" in controllers.split(",")) or (mount.version == 2 and controllers == ""):
            rel = path
            if mount.root != "/" and (rel == mount.root or rel.startswith(mount.root + "/")):
                rel = rel[len(mount.root):]
            return mount.path / rel.lstrip("/")
    return None


def read_cpu_stat(group: Path) -> CpuStat:
    """The group's CFS bandwidth counters; zeros when there is no such file."""
    try:
        text = (group / "cpu.stat").read_text()
    except OSError:
        return CpuStat()
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    if "throttled_usec" in values:
        seconds = values["throttled_usec"] / 1e6
    else:
        seconds = values.get("throttled_time", 0) / 1e9
    return CpuStat(values.get("nr_periods", 0), values.get("nr_throttled", 0), seconds)


class CpuStatCounter:
    """This process's share of CFS throttling, as counters that only grow.

    A group's counters belong to the group, not the process: on first sight of
    the group the process starts in, its past is not ours (baseline = now); a
    group the process is moved into later is counted from its creation (it was
    made for us); a group we come back to continues where we left it.
    """

    def __init__(self, pid: int | str = "self"):
        self.pid = pid
        self.mount = cpu_mount()
        self._last: dict[Path, CpuStat] = {}
        self._total = CpuStat()
        group = self._group()
        if group is not None:
            self._last[group] = read_cpu_stat(group)

    def _group(self) -> Path | None:
        return cgroup_of(self.pid, self.mount) if self.mount is not None else None

    def read(self) -> CpuStat:
        group = self._group()
        if group is None:
            return self._total
        now = read_cpu_stat(group)
        last = self._last.get(group, CpuStat())
        if now.periods >= last.periods:  # a group re-created under the same name starts again at zero
            t = self._total
            self._total = CpuStat(t.periods + now.periods - last.periods,
                                  t.throttled_periods + now.throttled_periods - last.throttled_periods,
                                  t.throttled_seconds + now.throttled_seconds - last.throttled_seconds)
        self._last[group] = now
        return self._total

