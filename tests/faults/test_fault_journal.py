"""A drill SIGKILLed with its faults injected: the journal it wrote lets the next `sandbox down` undo them.

The injector is a real process that injects a real fault (a SIGSTOP, a CPU quota group) into a busy child
standing in for a replica and is then SIGKILLed, as the OOM killer or `kill -9` would end a drill; only
replica discovery (Serve's REST API) is replaced by a list naming the child, as in test_process_faults.py.
"""
import json
import os
import random
import stat
import subprocess
import sys
import time
from pathlib import Path

from faults import FaultContext, build
from faults.journal import SUFFIX, FaultJournal, orphans, recover
from faults.replicas import Replica
from services.serve.cgroup_cpu import cgroup_of, cpu_mount
from services.stack.settings import SandboxConfig
from services.stack.state import StackState
from tests.faults.test_process_faults import child, needs_cgroup  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]

INJECTOR = """
import json, os, random, signal, sys
from pathlib import Path
import faults.cpu_throttle, faults.pause
from faults import FaultContext, build
from faults.journal import FaultJournal
from faults.replicas import Replica
from services.stack.settings import SandboxConfig
from services.stack.state import StackState

pid, home, spec = int(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
faults.pause.list_replicas = faults.cpu_throttle.list_replicas = lambda ctx: [Replica("replica-under-test", pid)]
cfg = SandboxConfig(home=home)
journal = FaultJournal(cfg.keys_dir / "20261204-000000-abcdef.faults.json")
ctx = FaultContext(cfg, StackState("run", str(home), version="v1"), random.Random(0), journal=journal)
build(spec).inject(ctx)
os.kill(os.getpid(), signal.SIGKILL)  # the drill is killed before its revert
"""


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def wait_for_state(pid: int, states: str, timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    while state_of(pid) not in states and time.monotonic() < deadline:
        time.sleep(0.01)
    return state_of(pid)


def kill_injector_after(spec: dict, pid: int, home: Path) -> None:
    done = subprocess.run([sys.executable, "-c", INJECTOR, str(pid), str(home), json.dumps(spec)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -9, done.stderr


def test_a_killed_drills_pause_is_resumed_and_its_journal_removed(tmp_path, child):  # noqa: F811
    kill_injector_after({"type": "pause", "replica": 0, "seconds": 600}, child.pid, tmp_path)
    keys = SandboxConfig(home=tmp_path).keys_dir
    (journal,) = keys.glob(f"*{SUFFIX}")
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600  # it names the fault: for the sandbox's user alone
    assert json.loads(journal.read_text())["entries"][0]["type"] == "pause"
    assert wait_for_state(child.pid, "Tt") in "Tt"  # stopped, and nobody left to resume it
    assert orphans(keys) == [journal]
    undone, failed = recover(keys)
    assert undone == [f"resumed a stopped process (pid {child.pid})"] and failed == []
    assert wait_for_state(child.pid, "RS") in "RS"
    assert list(keys.glob(f"*{SUFFIX}")) == [] and recover(keys) == ([], [])


@needs_cgroup
def test_a_killed_drills_cpu_quota_is_undone_by_sandbox_down(tmp_path, child):  # noqa: F811
    origin = cgroup_of(child.pid, cpu_mount())
    kill_injector_after({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.2}, child.pid, tmp_path)
    group = cgroup_of(child.pid, cpu_mount())
    assert group != origin and group.name.startswith("sandbox-")
    env = {**os.environ, "SANDBOX_HOME": str(tmp_path)}
    down = subprocess.run([sys.executable, "-m", "sandbox.cli", "down", "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    report = json.loads(down.stdout)
    assert report["faults_undone"] == 1 and report["stopped"] == ["1 change(s) a killed drill's faults had left"]
    assert "cpu" not in down.stdout.replace('"faults_undone"', "")  # counted, never named: the candidate may run it
    assert cgroup_of(child.pid, cpu_mount()) == origin and not group.exists()


def test_a_live_drills_journal_is_left_alone_and_goes_with_its_revert(tmp_path, child, monkeypatch):  # noqa: F811
    monkeypatch.setattr("faults.pause.list_replicas", lambda ctx: [Replica("replica-under-test", child.pid)])
    cfg = SandboxConfig(home=tmp_path)
    journal = FaultJournal(cfg.keys_dir / f"run{SUFFIX}")
    ctx = FaultContext(cfg, StackState("run", str(tmp_path), version="v1"), random.Random(0), journal=journal)
    fault = build({"type": "pause", "replica": 0, "seconds": 600})
    fault.inject(ctx)
    assert orphans(cfg.keys_dir) == [] and recover(cfg.keys_dir) == ([], [])  # its owner (this process) lives
    assert fault.paused
    fault.revert(ctx)
    assert not journal.path.exists() and not fault.paused


def test_a_fault_living_in_the_stack_writes_no_journal(tmp_path):
    journal = FaultJournal(tmp_path / f"run{SUFFIX}")
    journal.remember(build({"type": "deploy", "set": {"enable_prefix_caching": False}}))
    assert not journal.path.exists()  # stopping the stack undoes a deploy


def test_an_unreadable_journal_is_reported_and_removed(tmp_path):
    path = tmp_path / f"run{SUFFIX}"
    path.write_text("{not json")
    undone, failed = recover(tmp_path)
    assert undone == [] and len(failed) == 1 and failed[0].startswith(f"run{SUFFIX}: unreadable")
    assert not path.exists()


def test_a_journal_whose_owner_pid_was_reused_counts_as_orphaned(tmp_path):
    path = tmp_path / f"run{SUFFIX}"
    path.write_text(json.dumps({"owner": {"pid": os.getpid(), "start_ticks": -1}, "entries": []}))
    assert orphans(tmp_path) == [path]

