"""cpu-throttle and pause on a real local process (a busy child standing in for a replica; no Ray).

The cgroup and the signals are real; only replica discovery (Serve's REST API)
is replaced by a list naming the child. tests/serving/test_faults_*.py run the
same faults against real replicas.
"""
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faults import FaultContext, InjectionFailed, build
from faults.replicas import Process, Replica
from services.serve.cgroup_cpu import CpuStatCounter, cgroup_of, cpu_mount, read_cpu_stat
from services.stack.settings import SandboxConfig
from services.stack.state import StackState

BUSY = "import sys\nwhile True: pass"


def _writable_cpu_cgroup() -> bool:
    mount = cpu_mount()
    if mount is None:
        return False
    probe = mount.path / "sandbox-probe-test"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


needs_cgroup = pytest.mark.skipif(not _writable_cpu_cgroup(), reason="needs a writable cgroup cpu controller (root)")


@pytest.fixture
def child():
    # The argument makes the command line look like a Serve replica's process title.
    proc = subprocess.Popen([sys.executable, "-c", BUSY, "ray::ServeReplica:test"])
    # Popen returns once forked: until the exec, /proc shows pytest's command line, and a fault injected then
    # finds no replica there (the suite on a busy machine did, once)
    deadline = time.monotonic() + 10
    while b"ServeReplica" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def ctx(tmp_path, child, monkeypatch):
    replica = Replica("replica-under-test", child.pid)
    for module in ("faults.cpu_throttle", "faults.pause"):
        monkeypatch.setattr(f"{module}.list_replicas", lambda ctx: [replica])
    return FaultContext(SandboxConfig(home=tmp_path), StackState("run", str(tmp_path), version="v1"),
                        random.Random(0))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in USER_HZ (100 on Linux)


def cpu_share(pid: int, seconds: float) -> float:
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - t0)


@needs_cgroup
def test_cpu_throttle_limits_the_process_and_cpu_stat_counts_it(ctx, child):
    counter = CpuStatCounter(child.pid)
    origin = cgroup_of(child.pid, cpu_mount())
    fault = build({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.2})
    where = fault.inject(ctx)
    assert where.replica == "replica-under-test" and where.version == "v1" and where.component == "cpu"
    group = cgroup_of(child.pid, cpu_mount())
    assert group != origin and group.name.startswith("sandbox-")
    share = cpu_share(child.pid, 1.5)
    stat = read_cpu_stat(group)
    assert share < 0.3, share
    assert stat.throttled_periods > 5 and stat.throttled_seconds > 0.5
    throttled = counter.read()
    assert throttled.throttled_periods >= stat.throttled_periods - 1
    fault.revert(ctx)
    fault.revert(ctx)
    assert cgroup_of(child.pid, cpu_mount()) == origin and not group.exists()
    assert counter.read() == throttled  # back in its own group: the totals stop growing, and never go back


@needs_cgroup
def test_cpu_throttle_of_all_replicas_limits_each_in_a_group_of_its_own(ctx, child, monkeypatch):
    other = subprocess.Popen([sys.executable, "-c", BUSY, "ray::ServeReplica:other"])
    try:
        replicas = [Replica("replica-a", child.pid), Replica("replica-b", other.pid)]
        monkeypatch.setattr("faults.cpu_throttle.list_replicas", lambda ctx: replicas)
        origins = [cgroup_of(pid, cpu_mount()) for pid in (child.pid, other.pid)]
        fault = build({"type": "cpu-throttle", "replica": "all", "cpu_fraction": 0.2})
        where = fault.inject(ctx)
        assert where.replica is None and where.component == "cpu"
        groups = [cgroup_of(pid, cpu_mount()) for pid in (child.pid, other.pid)]
        assert len(set(groups)) == 2 and all(g.name.startswith("sandbox-") for g in groups)
        # two replicas on a fair machine of this many CPUs: each may use 0.2 of its share, alone in its group
        fair = min(1.0, len(os.sched_getaffinity(child.pid)) / 2)
        for group in groups:
            assert read_quota(group) == pytest.approx(0.2 * fair, abs=0.01)
        fault.revert(ctx)
        assert [cgroup_of(pid, cpu_mount()) for pid in (child.pid, other.pid)] == origins
        assert not any(g.exists() for g in groups)
    finally:
        other.kill()
        other.wait()


def read_quota(group: Path) -> float:
    """CPUs the group's CFS bandwidth limit allows (v2 cpu.max, v1 cfs_quota_us / cfs_period_us)."""
    if (group / "cpu.max").exists():
        quota, period = (group / "cpu.max").read_text().split()
    else:
        quota, period = (group / "cpu.cfs_quota_us").read_text(), (group / "cpu.cfs_period_us").read_text()
    return int(quota) / int(period)


@needs_cgroup
def test_cpu_throttle_revert_after_the_process_died_removes_the_group(ctx, child):
    fault = build({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.5})
    fault.inject(ctx)
    group = cgroup_of(child.pid, cpu_mount())
    child.kill()
    child.wait()
    fault.revert(ctx)
    assert not group.exists()


@needs_cgroup
def test_down_removes_the_group_a_killed_drill_left_and_keeps_one_at_work(ctx, child):
    from faults.cpu_throttle import QuotaGroup, remove_left_groups

    # A drill SIGKILLed after its injection: no revert ran, and the stack stopped its replica since.
    build({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.5}).inject(ctx)
    left = cgroup_of(child.pid, cpu_mount())
    child.kill()
    child.wait()
    other = subprocess.Popen(["sleep", "60"])  # a quota still at work on a live process
    working = QuotaGroup.create(0.5)
    try:
        working.add(other.pid)
        assert str(left) in remove_left_groups()
        assert not left.exists() and working.path.exists()
    finally:
        other.kill()
        other.wait()
        working.remove()


def test_pause_stops_the_process_and_resumes_it_when_its_time_is_up(ctx, child):
    fault = build({"type": "pause", "replica": 0, "seconds": 1.0})
    fault.inject(ctx)
    assert fault.paused
    assert cpu_share(child.pid, 0.5) < 0.05
    time.sleep(0.8)
    assert not fault.paused and cpu_share(child.pid, 0.5) > 0.1  # running again (other work shares the cores)
    fault.revert(ctx)


def test_pause_revert_resumes_at_once(ctx, child):
    fault = build({"type": "pause", "replica": 0, "seconds": 600})
    fault.inject(ctx)
    assert fault.paused
    fault.revert(ctx)
    assert not fault.paused and fault._timer is None
    fault.revert(ctx)


def test_a_process_that_is_not_a_replica_here_is_refused(tmp_path):
    with pytest.raises(InjectionFailed, match="not a process on this machine"):
        Process.of(Replica("r", 1, node_ip="10.0.0.9"))  # pid 1 is not a Serve replica


def test_a_pid_reused_by_another_process_is_not_the_same_process(child):
    process = Process.of(Replica("r", child.pid))
    assert process.alive()
    child.kill()
    child.wait()
    assert not process.alive()


def test_a_replicas_fair_cpus_are_its_threads_or_its_share_of_the_cpus_it_may_run_on():
    from faults.cpu_throttle import fair_cpus

    assert fair_cpus(2, 2, 1) == 1.0  # this machine: two replicas on two CPUs, one compute thread each
    assert fair_cpus(1, 2, 1) == 0.5  # the whole stack on one CPU
    assert fair_cpus(16, 2, 1) == 1.0  # a big box: the replica's one thread is all it uses
    assert fair_cpus(16, 2, 4) == 4.0
    with pytest.raises(ValueError, match="positive counts"):
        fair_cpus(0, 2, 1)


@needs_cgroup
def test_cpu_throttle_takes_its_fraction_of_the_replicas_fair_share_not_of_one_cpu(ctx, child, monkeypatch):
    import os

    other = Replica("another-replica", child.pid)  # two replicas share the child's one CPU
    monkeypatch.setattr("faults.cpu_throttle.list_replicas",
                        lambda ctx: [Replica("replica-under-test", child.pid), other])
    os.sched_setaffinity(child.pid, {min(os.sched_getaffinity(0))})
    fault = build({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.2})
    fault.inject(ctx)
    try:
        group = cgroup_of(child.pid, cpu_mount())
        v2 = group / "cpu.max"
        quota = int((v2.read_text().split()[0]) if v2.exists() else (group / "cpu.cfs_quota_us").read_text())
        assert quota == 10_000  # 0.2 of half a CPU, per 100 ms period
    finally:
        fault.revert(ctx)


@needs_cgroup
def test_cpu_throttle_is_in_place_while_the_quota_holds_and_gone_once_it_is_lifted(ctx, child):
    from faults.cpu_throttle import lift_quota, quota_of

    fault = build({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.2})
    assert fault.in_place(ctx) is None and quota_of(child.pid) is None
    fault.inject(ctx)
    try:
        group, cpus = quota_of(child.pid)
        assert fault.in_place(ctx) == f"replica replica-under-test runs under a CPU quota of {cpus:.2g} CPU"
        lift_quota(group)  # what `sandbox mitigate raise-cpu-limit` does to each replica's group
        assert quota_of(child.pid) is None and fault.in_place(ctx) is None
        assert cpu_share(child.pid, 1.0) > 1.3 * cpus  # no longer held to it
    finally:
        fault.revert(ctx)
    assert quota_of(child.pid) is None
